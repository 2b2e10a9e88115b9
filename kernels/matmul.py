"""`quantized_matmul(x, qw)`: `x @ dequantize(qw)` on the GPU with the VM kernel, and the
tuner that picks its schedule.

`x` is a CUDA torch tensor `[..., K]` of f16 or bf16 (the type of `qw.scales`); `qw` a
`QuantizedWeight` in the "fragments" format on the same device (`quantize(w, dtype,
group_size, format="fragments")`). The result is `[..., N]` in x's type.

Schedules (`kernels.schedule`): with `tune=False` the `default_schedule` is used; with
`tune=True` (the default) the first call for a (GPU, weight type, group size,
activation type, zero points, M bucket, N, K) compiles every candidate (at once, in
worker processes: `backend.prebuild`), times each on the GPU (median of several runs,
L2 flushed before each, the GPU kept busy by a sleep while the host submits the launch,
so that the events time the kernels and not the host's Python) and keeps the fastest
in an on-disk table (`tuning.json` in the kernel cache directory, `TILEVM_CACHE_DIR`,
written atomically); later calls, in this process or another, read it. A progress line
on stderr shows the tuning. M is bucketed (<= 16, 64, 256, 1024, 4096, larger) so one
tuning serves every M of a bucket.

Memory: split-K keeps an f32 workspace per stream (grown as needed); for many rows on
Hopper the tuner may pick the dequantize-then-multiply pair (`kernels.qmm_dequant`),
whose calls each allocate W^T in x's type, `2 * Np * K` bytes, only where that is at
most `schedule.DEQUANT_WORKSPACE_LIMIT` (1 GiB), from torch's caching allocator.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tilevm.backend.launch import compiled_kernel
from tilevm.backend.prebuild import prebuild
from tilevm.kernels.qmm import qmm_kernel, splitk_sizes
from tilevm.kernels.qmm_dequant import dequantize_kernel, wt_matmul_kernel
from tilevm.kernels.qmm_staged import qmm_staged_kernel
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.schedule import (
    SPACE_VERSION,
    Schedule,
    candidates,
    default_schedule,
    k_tile,
)
from tilevm.kernels.weight_format import FRAGMENTS
from tilevm.kernels.weights import QuantizedWeight

M_BUCKETS = (8, 16, 64, 256, 1024, 4096)  # one row tile serves each of M <= 8, M <= 16
_lock = threading.Lock()
_memory: dict[str, Schedule] = {}  # tuned schedules of this process


def quantized_matmul(x: Any, qw: QuantizedWeight, *, schedule: Schedule | None = None,
                     tune: bool = True, out: Any = None) -> Any:
    """`x @ dequantize(qw)` (see the module docstring); `out` (optional) receives it."""
    import torch

    K, N = qw.shape
    _check(x, qw, K)
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, K)
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    M = x2.shape[0]
    if out is None:
        out = torch.empty(*lead, N, dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    if schedule is None:
        schedule = tuned_schedule(x2, qw) if tune else default_schedule(
            M, N, K, qw.group_size, hopper=is_hopper(x2.device), bits=qw.dtype.bits)
    _launch(x2, qw, out.view(M, N), schedule)
    return out


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


def _launch(x: Any, qw: QuantizedWeight, y: Any, s: Schedule) -> None:
    K, N = qw.shape
    M = x.shape[0]
    zeros = qw.zeros if qw.zeros is not None else qw.scales  # unread without zero points
    if s.dequant:
        import torch

        # W^T, dequantized: a workspace of the call (torch's caching allocator keeps the
        # memory for the next one).
        wt = torch.empty(qw.scales.shape[1], K, dtype=x.dtype, device=x.device)
        _dequantizer(qw)(qw.packed, qw.scales, zeros, wt, N, K)
        _qmm(qw, s, N)(x, wt, y, M, N, K)
        return
    qmm = _qmm(qw, s, N)
    if s.staged or s.shared_weights:
        qmm(x, qw.packed, qw.scales, zeros, y, M, N, K)
        return
    ws, counters = _splitk_buffers(x.device, M, N, s)  # (the kernels that split K)
    qmm(x, qw.packed, qw.scales, zeros, y, ws, counters, M, N, K)


# The loaded kernels of this process, by what selects them (cheap keys: every call looks).
_kernels: dict[tuple[Any, ...], Any] = {}


def _qmm(qw: QuantizedWeight, s: Schedule, N: int) -> Any:
    """The loaded kernel that schedule `s` runs for these weights and N (for the
    dequantize-then-multiply pair, its matmul)."""
    wide = tuple(_wide_stores(s, N).items())
    key = (qw.scale_dtype.name, s, wide) if s.dequant else \
        (qw.scale_dtype.name, qw.dtype, qw.group_size, qw.zeros is not None, s, wide)
    loaded = _kernels.get(key)
    if loaded is None:
        loaded = _kernels[key] = _compiled(_program(qw, s, N))
    return loaded


def _program(qw: QuantizedWeight, s: Schedule, N: int) -> Any:
    """The program of `_qmm(qw, s, N)`."""
    wide = _wide_stores(s, N)
    kernel = schedule_kernel(s, qw.scale_dtype.name)
    if s.dequant:  # the matmul of the dequantized weights: by activation type only
        return kernel.specialize(**s.constants(), **wide)
    return kernel.specialize(wdtype=qw.dtype, group_size=qw.group_size,
                             has_zeros=qw.zeros is not None, **s.constants(), **wide)


def _wide_stores(s: Schedule, N: int) -> dict[str, bool]:
    """The Hopper kernels' `wide_stores` constant: y goes through shared memory, 16 bytes
    a thread, where its rows are 16-byte aligned (`qmm_wgmma.store_transposed`)."""
    return {"wide_stores": N % 8 == 0} if s.wgmma else {}


def _dequantizer(qw: QuantizedWeight) -> Any:
    """The loaded `kernels.qmm_dequant.dequantize_kernel` for these weights."""
    key = ("dequantize", qw.scale_dtype.name, qw.dtype, qw.group_size, qw.zeros is not None)
    if key not in _kernels:
        _kernels[key] = _compiled(_dequantizer_program(qw))
    return _kernels[key]


def _dequantizer_program(qw: QuantizedWeight) -> Any:
    return dequantize_kernel(qw.scale_dtype.name).specialize(
        wdtype=qw.dtype, group_size=qw.group_size, has_zeros=qw.zeros is not None,
        bk=k_tile(qw.group_size))


def schedule_kernel(s: Schedule, act: str = "f16") -> Any:
    """The kernel factory's kernel that schedule `s` selects, for activations `act`."""
    if s.staged:
        return qmm_staged_kernel(act)
    if s.dequant:
        return wt_matmul_kernel(act)  # (after `dequantize_kernel`: `_launch`)
    if s.wgmma:
        return qmm_wgmma_shared_kernel(act) if s.shared_weights else qmm_wgmma_kernel(act)
    return qmm_kernel(act)


# Split-K's workspace and tile counters, per (device, stream), grown as needed: the
# kernels of one stream run one after another, and each leaves its counters at zero.
_splitk: dict[tuple[Any, int], tuple[Any, Any]] = {}


def _splitk_buffers(device: Any, M: int, N: int, s: Schedule) -> tuple[Any, Any]:
    import torch

    key = (device, torch.cuda.current_stream(device).cuda_stream)
    ws, counters = _splitk.get(key, (None, None))
    if s.split_k == 1:  # the kernel reads neither: any pointers do
        return (ws, counters) if ws is not None else _splitk_grow(key, 1, 1)
    floats, tiles = splitk_sizes(M, N, s.bm, s.block_columns, s.split_k)
    if ws is None or ws.numel() < floats or counters.numel() < tiles:
        ws, counters = _splitk_grow(key, floats, tiles)
    return ws, counters


def _splitk_grow(key: tuple[Any, int], floats: int, tiles: int) -> tuple[Any, Any]:
    import torch

    old = _splitk.get(key)
    if old is not None:  # never shrink: the largest problem so far serves every smaller one
        floats, tiles = max(floats, old[0].numel()), max(tiles, old[1].numel())
    _splitk[key] = (torch.empty(floats, dtype=torch.float32, device=key[0]),
                    torch.zeros(tiles, dtype=torch.int32, device=key[0]))
    return _splitk[key]


def _compiled(program: Any) -> Any:
    """The loaded kernel of `program` (the PTX comes from the on-disk cache after the
    first process)."""
    return compiled_kernel(program)


def _prebuild(qw: QuantizedWeight, schedules: list[Schedule], N: int) -> None:
    """Build the programs of these schedules at once, in worker processes
    (`backend.prebuild`), so that loading each is a cache hit."""
    programs = [_program(qw, s, N) for s in schedules]
    if any(s.dequant for s in schedules):
        programs.append(_dequantizer_program(qw))
    prebuild(programs)


# ---- tuning ------------------------------------------------------------------------------

def m_bucket(M: int) -> int:
    """The tuning bucket of M: the smallest bucket >= M (larger M share the last)."""
    return next((b for b in M_BUCKETS if M <= b), M_BUCKETS[-1] * 2)


@functools.cache
def _gpu_name(device_index: int) -> str:
    import torch

    return torch.cuda.get_device_name(device_index).replace("|", "/")


@functools.cache
def _capability(device_index: int) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(device_index)


def is_hopper(device: Any) -> bool:
    """Whether the device runs sm_90a code (wgmma): compute capability 9.0, for which
    kernels are compiled as sm_90a (`backend.analysis.target.native_arch`)."""
    return _capability(device.index if device.index is not None else 0) == (9, 0)


def tuning_key(x: Any, qw: QuantizedWeight) -> str:
    K, N = qw.shape
    gpu = _gpu_name(x.device.index if x.device.index is not None else 0)
    return (f"v{SPACE_VERSION}|{gpu}|{qw.dtype}|g{qw.group_size}|{qw.scale_dtype}|"
            f"z{int(qw.zeros is not None)}|M{m_bucket(x.shape[0])}|N{N}|K{K}")


def tuning_file() -> Path:
    root = os.environ.get("TILEVM_CACHE_DIR") or Path.home() / ".cache" / "tilevm"
    return Path(root) / "tuning.json"


def tuned_schedule(x: Any, qw: QuantizedWeight) -> Schedule:
    """The fastest schedule for this problem (tuned once, then from the table)."""
    key = tuning_key(x, qw)
    if key in _memory:
        return _memory[key]
    table = _read_table()
    if key in table:
        try:
            _memory[key] = Schedule(**table[key]["schedule"])
            return _memory[key]
        except (TypeError, KeyError, ValueError):
            pass  # an entry of another version: tune again
    schedule, report = tune(x, qw)
    _memory[key] = schedule
    with _lock:
        table = _read_table()
        table[key] = {"schedule": asdict(schedule), **report}
        _write_table(table)
    return schedule


def tune(x: Any, qw: QuantizedWeight, reps: int = 20) -> tuple[Schedule, dict[str, Any]]:
    """Compile and time every candidate schedule; return the fastest and a report."""
    import torch

    K, N = qw.shape
    M = x.shape[0]
    todo = candidates(M, N, K, qw.group_size, hopper=is_hopper(x.device),
                      bits=qw.dtype.bits)
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    flush = torch.empty(64 << 20, dtype=torch.uint8, device=x.device)  # > L2 (50 MB)
    start = time.perf_counter()
    _progress(f"compiling {len(todo)} qmm variants", 0, len(todo))
    _prebuild(qw, todo, N)
    sleep = getattr(torch.cuda, "_sleep", None)
    hosts = []  # each candidate's host time to submit one call
    for i, s in enumerate(todo):
        _progress(f"tuning qmm {qw.dtype} g{qw.group_size} M={M} N={N} K={K}", i, len(todo))
        _launch(x, qw, y, s)  # loads it (built above, or here if that failed)
        torch.cuda.synchronize()
        host = time.perf_counter()
        for _ in range(3):
            _launch(x, qw, y, s)
        hosts.append((time.perf_counter() - host) / 3)
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - start  # (with the loads and the warm-up runs)
    # Timed in rounds, one run of every candidate per round: a drift of the GPU's clocks
    # (it idles while the candidates compile) weighs on all of them alike, not on the
    # first ones timed.
    times: list[list[float]] = [[] for _ in todo]
    for _ in range(reps):
        for i, s in enumerate(todo):
            flush.zero_()
            if sleep is not None:  # keep the GPU busy while the host submits the call,
                sleep(int(2 * hosts[i] * 2e9))  # so the events time the kernels alone
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            begin.record()
            _launch(x, qw, y, s)
            end.record()
            end.synchronize()
            times[i].append(begin.elapsed_time(end) * 1e3)
    timings = [(sorted(t)[len(t) // 2], s) for t, s in zip(times, todo, strict=True)]
    _progress("", len(todo), len(todo))
    best_us, best = min(timings, key=lambda t: t[0])
    return best, {"us": round(best_us, 2), "candidates": len(todo),
                  "compile_s": round(compile_s, 2),
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


def _read_table() -> dict[str, Any]:
    try:
        return json.loads(tuning_file().read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: tune again


def _write_table(table: dict[str, Any]) -> None:
    path = tuning_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tuning.")
    with os.fdopen(fd, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
    os.replace(tmp, path)  # atomic: readers see the old table or the new one
