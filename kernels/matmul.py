"""`quantized_matmul(x, qw)`: `x @ dequantize(qw)` on the GPU with the VM kernel, and the
tuner that picks its schedule.

`x` is a CUDA torch tensor `[..., K]` of f16 or bf16 (the type of `qw.scales`); `qw` a
`QuantizedWeight` in the "fragments" format on the same device (`quantize(w, dtype,
group_size, format="fragments")`). The result is `[..., N]` in x's type.

Schedules (`kernels.schedule`, `kernels.tilings`): with `tune=False` the
`default_schedule` is used; with `tune=True` (the default) the first call for a (GPU,
weight type, group size, activation type, zero points, M bucket, N, K) compiles every
candidate (at once, in worker processes: `backend.prebuild`), times each on the GPU
(median of several runs, L2 flushed before each, the GPU kept busy by a sleep while the
host submits the launch, so that the events time the kernels and not the host's Python)
and keeps the fastest in an on-disk table (`tuning.json` in the kernel cache directory,
`TILEVM_CACHE_DIR`, written atomically); later calls, in this process or another, read
it. A progress line on stderr shows the tuning. M is bucketed (<= 16, 64, 256, 1024,
4096, larger) so one tuning serves every M of a bucket.

A call's launches (the kernels a schedule runs, prepared once per call shape and
stream) are `kernels.matmul_launch`'s; this module holds the calls, the PyTorch
operator and the tuner.

Memory: split-K keeps an f32 workspace per stream (grown as needed); for many rows on
Hopper the tuner may pick the dequantize-then-multiply pair (`kernels.qmm_dequant`),
whose calls each allocate W^T in x's type, `2 * Np * K` bytes, only where that is at
most `tilings.DEQUANT_WORKSPACE_LIMIT` (1 GiB), from torch's caching allocator.
"""

from __future__ import annotations

import functools
import sys
import time
import weakref
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any, NamedTuple

from tilevm.cost.hardware import gpu_for_device
from tilevm.cost.model import Resources
from tilevm.kernels.matmul_launch import (
    Plan,
    gpu_name,
    is_hopper,
    plan_call,
    prebuild_schedules,
    raw_stream,
    run_plan,
    schedule_launches,
    tensor_type,
)
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.tilings import SPACE_VERSION, candidates, default_schedule
from tilevm.kernels.weight_format import FRAGMENTS
from tilevm.kernels.weights import QuantizedWeight
from tilevm.tune.cache import cache_key, lookup, store
from tilevm.tune.rank import fastest, predicted_seconds

M_BUCKETS = (8, 16, 64, 256, 1024, 4096)  # one row tile serves each of M <= 8, M <= 16
_memory: dict[str, _Tuned] = {}  # tuned schedules (and orders) of this process


def quantized_matmul(x: Any, qw: QuantizedWeight, *, schedule: Schedule | None = None,
                     tune: bool = True, out: Any = None) -> Any:
    """`x @ dequantize(qw)` (see the module docstring); `out` (optional) receives it.
    Traced by `torch.compile`, it is the custom operator `tilevm::quantized_matmul`."""
    import torch

    if torch.compiler.is_compiling():
        return torch.ops.tilevm.quantized_matmul(x, qw.packed, qw.scales, qw.zeros,
                                                 qw.dtype.name, qw.group_size, qw.shape[1])
    plans = _plans.get(id(qw))
    if plans is not None and out is None and type(x) is tensor_type():
        # a call like an earlier one (x of the same shape, dtype, device, contiguous, the
        # same current stream and arguments): its plan, nothing else to check
        device = x.get_device()
        if device >= 0 and x.is_contiguous():
            stream = raw_stream(device)
            plan = plans.get((x.shape, x.dtype, device, stream, schedule, tune))
            if plan is not None:
                x_address = x.data_ptr()
                if x_address % 16 == 0:  # (a view into a larger tensor may be misaligned)
                    return run_plan(plan, x_address, stream)
    return _quantized_matmul(x, qw, schedule, tune, out)


def warmup(qw: QuantizedWeight, rows: Iterable[int]) -> None:
    """Tune (once per machine: the tuning table) and prepare `quantized_matmul(x, qw)` for
    x of each of these row counts, on the current stream: before a CUDA graph capture or
    a `torch.compile`d region, which cannot tune."""
    import torch

    K, _ = qw.shape
    act = {"f16": torch.float16, "bf16": torch.bfloat16}[qw.scale_dtype.name]
    for M in rows:
        quantized_matmul(torch.zeros(M, K, dtype=act, device=qw.packed.device), qw)


def _quantized_matmul(x: Any, qw: QuantizedWeight, schedule: Schedule | None, tune: bool,
                      out: Any) -> Any:
    """`quantized_matmul`'s first call for a key: every check, the schedule (tuned once),
    the prepared launches, kept as the key's plan when no `out` was given."""
    import torch

    register_torch_op()
    K, N = qw.shape
    _check(x, qw, K)
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, K)
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    M = x2.shape[0]
    y = out if out is not None else torch.empty(*lead, N, dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    s, order = schedule, None
    if s is None and tune:
        s, order = _tuned(x2, qw)
    elif s is None:
        s = default_schedule(M, N, K, qw.group_size, hopper=is_hopper(x2.device),
                             bits=qw.dtype.bits)
    stream = raw_stream(x.get_device())
    plan = plan_call(x2, qw, y.view(M, N), s, stream, (*lead, N), order,
                     None if _dependent_launch else False)
    if out is None and type(x) is torch.Tensor and x.is_contiguous():
        _remember(qw, (x.shape, x.dtype, x.get_device(), stream, schedule, tune), plan)
    return run_plan(plan, x2.data_ptr(), stream, y)


# ---- the PyTorch custom operator ----------------------------------------------------------

# The weights of eager calls and of QuantizedLinear layers, by packed tensor (weakly): what
# the operator's implementation, given the tensors, calls with.
_by_packed: weakref.WeakValueDictionary[int, QuantizedWeight] = weakref.WeakValueDictionary()


@functools.cache
def register_torch_op() -> None:
    """Register `tilevm::quantized_matmul(x, packed, scales, zeros, wdtype, group_size, n)`
    with `torch.library` (once; imports torch): a custom operator with a fake
    implementation (the result's shape and dtype), so that `torch.compile(fullgraph=True)`
    traces calls without a graph break. Its implementation is the eager call; tuning
    (a synchronizing loop) cannot run in a captured graph: `warmup` first."""
    import torch

    @torch.library.custom_op("tilevm::quantized_matmul", mutates_args=(), schema=(
        "(Tensor x, Tensor packed, Tensor scales, Tensor? zeros, str wdtype, int group_size, "
        "int n) -> Tensor"))
    def op(x, packed, scales, zeros, wdtype, group_size, n):  # type: ignore[no-untyped-def]
        return quantized_matmul(x, _weights_of(x, packed, scales, zeros, wdtype, group_size,
                                               n))

    @op.register_fake
    def _(x, packed, scales, zeros, wdtype, group_size, n):  # type: ignore[no-untyped-def]
        return x.new_empty((*x.shape[:-1], n))


def remember_weights(qw: QuantizedWeight) -> None:
    """Let the operator's implementation find `qw` by its packed tensor (`_weights_of`)."""
    _by_packed[id(qw.packed)] = qw


# Weights the operator met without a QuantizedWeight (checked once), by packed tensor.
_adopted: dict[int, QuantizedWeight] = {}


def _weights_of(x: Any, packed: Any, scales: Any, zeros: Any, wdtype: str,
                group_size: int, n: int) -> QuantizedWeight:
    """The `QuantizedWeight` whose tensors these are: the traced call's (`_by_packed`), or
    one built (and checked) once, while `packed` lives."""
    qw = _by_packed.get(id(packed)) or _adopted.get(id(packed))
    if qw is not None and qw.packed is packed and qw.scales is scales and qw.zeros is zeros:
        return qw
    qw = QuantizedWeight(packed, scales, zeros, wdtype, group_size, (x.shape[-1], n),
                         FRAGMENTS)
    _adopted[id(packed)] = qw
    weakref.finalize(packed, _adopted.pop, id(packed), None)
    return qw


if "torch" in sys.modules:  # (else on the first eager call, or QuantizedLinear's first use)
    register_torch_op()


_dependent_launch = False  # `set_dependent_launch`


def set_dependent_launch(enabled: bool) -> None:
    """Whether the matmul's kernels are launched as dependent launches on sm_90: a kernel
    starts while the previous one in the stream ends, and waits for it in its code (at
    entry). Off by default: measured on chains of matmuls it did not pay yet
    (docs/quantized-matmul.md). Applies to later calls."""
    global _dependent_launch
    _dependent_launch = bool(enabled)
    _plans.clear()


# The plans of each QuantizedWeight by call key, while it lives (`quantized_matmul`).
_plans: dict[int, dict[tuple[Any, ...], Plan]] = {}
_PLANS_KEPT = 256  # per weight (a key per M, dtype, device, stream and schedule argument)


def _remember(qw: QuantizedWeight, key: tuple[Any, ...], plan: Plan) -> None:
    remember_weights(qw)
    plans = _plans.get(id(qw))
    if plans is None:
        plans = _plans[id(qw)] = {}
        weakref.finalize(qw, _plans.pop, id(qw), None)
    if len(plans) >= _PLANS_KEPT:
        plans.clear()
    plans[key] = plan


def _check(x: Any, qw: QuantizedWeight, K: int) -> None:
    import torch

    if not isinstance(x, torch.Tensor) or not x.is_cuda:
        raise TypeError(f"x must be a CUDA torch tensor, got {type(x).__name__}"
                        + (f" on {x.device}" if isinstance(x, torch.Tensor) else ""))
    if qw.format != FRAGMENTS:
        raise ValueError(f"the kernel reads the 'fragments' weight format, got {qw.format!r} "
                         "(quantize(..., format='fragments'))")
    if not isinstance(qw.packed, torch.Tensor) or qw.packed.device != x.device:
        raise ValueError(f"the weights must be torch tensors on {x.device}")
    act = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(x.dtype)
    if act is None or act != qw.scale_dtype.name:
        raise TypeError(f"x must be {qw.scale_dtype} (the scales' type), got {x.dtype}")
    if x.ndim < 1 or x.shape[-1] != K:
        raise ValueError(f"x must be [..., K] with K = {K}, got {tuple(x.shape)}")


# ---- tuning ------------------------------------------------------------------------------

def m_bucket(M: int) -> int:
    """The tuning bucket of M: the smallest bucket >= M (larger M share the last)."""
    return next((b for b in M_BUCKETS if M <= b), M_BUCKETS[-1] * 2)


def tuning_key(x: Any, qw: QuantizedWeight) -> str:
    """The tuning cache's key of this problem (`tune.cache`)."""
    return problem_key(gpu_name(x.device.index if x.device.index is not None else 0), qw,
                       x.shape[0])


def problem_key(gpu: str, qw: QuantizedWeight, M: int) -> str:
    """The tuning cache's key of `qw`'s problem with `M` rows on the GPU named `gpu`
    (numpy or torch weights alike: `vmc tune --qmm` tunes without torch)."""
    K, N = qw.shape
    return cache_key(gpu=gpu, kernel="qmm", version=SPACE_VERSION, wdtype=qw.dtype,
                     group=qw.group_size, scales=qw.scale_dtype,
                     zeros=int(qw.zeros is not None), M=m_bucket(M), N=N, K=K)


def tuned_schedule(x: Any, qw: QuantizedWeight) -> Schedule:
    """The fastest schedule for this problem (tuned once, then from the table)."""
    return _tuned(x, qw).schedule


class _Tuned(NamedTuple):
    """A tuning table entry as the library runs it: the schedule, and the PTX order a
    search (`vmc tune --qmm`) stored with it (`PtxOrder.moved`'s runs and `of`, the
    digest of the compiled PTX it was found on), or None."""

    schedule: Schedule
    ptx_order: dict[str, Any] | None = None


def _tuned(x: Any, qw: QuantizedWeight) -> _Tuned:
    key = tuning_key(x, qw)
    if key in _memory:
        return _memory[key]
    entry = lookup(key)
    if entry is not None:
        try:
            order = entry.get("ptx_order")
            _memory[key] = _Tuned(Schedule(**entry["schedule"]),
                                  order if isinstance(order, dict) else None)
            return _memory[key]
        except (TypeError, KeyError, ValueError):
            pass  # an entry of another version: tune again
    import torch

    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"quantized_matmul: {key} is not tuned yet, and tuning cannot run while a CUDA "
            f"graph is being captured: call it once before the capture with this many rows "
            f"(QuantizedLinear.warmup, kernels.warmup), or pass tune=False")
    schedule, report = tune(x, qw)
    _memory[key] = _Tuned(schedule)
    store(key, {"schedule": asdict(schedule), **report})
    return _memory[key]


def tune(x: Any, qw: QuantizedWeight, reps: int = 20, *, ranked: bool = False
         ) -> tuple[Schedule, dict[str, Any]]:
    """Compile every candidate schedule and time them; return the fastest and a report.
    With `ranked`, on a GPU the cost model's table holds (`cost.hardware`), only the
    third of the candidates the model predicts fastest is timed (`tune.rank`). Off by
    default: here the model's analysis takes longer than timing every compiled
    candidate, and its third misses the best in a few problems (docs/cost-model.md,
    "The tuner with the ranking")."""
    import torch

    K, N = qw.shape
    M = x.shape[0]
    todo = candidates(M, N, K, qw.group_size, hopper=is_hopper(x.device),
                      bits=qw.dtype.bits)
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    l2 = torch.cuda.get_device_properties(x.device).L2_cache_size  # (H100 50, H200 60 MiB)
    flush = torch.empty(max(64 << 20, 2 * l2), dtype=torch.uint8, device=x.device)
    start = time.perf_counter()
    _progress(f"compiling {len(todo)} qmm variants", 0, len(todo))
    prebuild_schedules(qw, todo, N)
    considered = len(todo)
    gpu = gpu_for_device(torch.cuda.get_device_name(x.device)) if ranked else None
    analysis = time.perf_counter()
    if gpu is not None and len(todo) > 1:
        _progress(f"ranking {len(todo)} qmm variants by the cost model", 0, 1)
        launches = [[(program, {"M": M, "N": N, "K": K}, Resources.of(kernel))
                     for program, kernel in schedule_launches(qw, s, N)] for s in todo]
        todo = [todo[i] for i in fastest(predicted_seconds(launches, gpu), 1 / 3)]
    analysis_s = time.perf_counter() - analysis
    sleep = getattr(torch.cuda, "_sleep", None)
    stream, x_address = raw_stream(x.get_device()), x.data_ptr()
    plans = []  # each candidate's launches, prepared once (loaded: built above, or here)
    hosts = []  # each candidate's host time to submit one call
    for i, s in enumerate(todo):
        _progress(f"tuning qmm {qw.dtype} g{qw.group_size} M={M} N={N} K={K}", i, len(todo))
        plans.append(plan_call(x, qw, y, s, stream, (M, N),
                               dependent=None if _dependent_launch else False))
        run_plan(plans[i], x_address, stream, y)
        torch.cuda.synchronize()
        host = time.perf_counter()
        for _ in range(3):
            run_plan(plans[i], x_address, stream, y)
        hosts.append((time.perf_counter() - host) / 3)
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - start  # (with the loads and the warm-up runs)
    # Timed in rounds, one run of every candidate per round: a drift of the GPU's clocks
    # (it idles while the candidates compile) weighs on all of them alike, not on the
    # first ones timed.
    times: list[list[float]] = [[] for _ in todo]
    for _ in range(reps):
        for i in range(len(todo)):
            flush.zero_()
            if sleep is not None:  # keep the GPU busy while the host submits the call,
                sleep(int(2 * hosts[i] * 2e9))  # so the events time the kernels alone
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            begin.record()
            run_plan(plans[i], x_address, stream, y)
            end.record()
            end.synchronize()
            times[i].append(begin.elapsed_time(end) * 1e3)
    timings = [(sorted(t)[len(t) // 2], s) for t, s in zip(times, todo, strict=True)]
    _progress("", len(todo), len(todo))
    best_us, best = min(timings, key=lambda t: t[0])
    return best, {"us": round(best_us, 2), "candidates": considered, "timed": len(todo),
                  "analysis_s": round(analysis_s, 2), "compile_s": round(compile_s, 2),
                  "tuning_s": round(time.perf_counter() - start, 2)}


def _progress(what: str, done: int, total: int) -> None:
    if not sys.stderr.isatty() and done not in (0, total):
        return  # a log file gets the first and last line only
    if done == total:
        sys.stderr.write("\r\033[K" if sys.stderr.isatty() else "")
        sys.stderr.flush()
        return
    bar = "#" * (20 * done // total)
    sys.stderr.write(f"\r{what} [{bar:<20}] {done}/{total}")
    if not sys.stderr.isatty():
        sys.stderr.write("\n")
    sys.stderr.flush()
