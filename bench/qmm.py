"""Quantized matmul benchmark: `python -m tilevm.bench.qmm OUT_DIR [options]` (or
`vmc bench qmm OUT_DIR [options]`).

Times `y[M, N] = x[M, K] @ dequant(W)[K, N]` for every weight type of the benchmark
protocol on Llama-3 layer shapes, against
cuBLAS fp16/bf16 (`torch.matmul`) and, where they import, the quantized peers: the
Triton low-bit matmul `gemlite` and Humming (`humming`). Per the protocol:

- each kernel's output buffer is poisoned with NaN, the kernel is run on fresh random
  inputs and checked against a float64 reference `x @ dequantize(W)` computed on the GPU;
  a failed check is reported and not timed;
- each kernel is timed by the methods of `--methods` (../shared/BENCHMARKS.md), one row
  each (`method`): "graph", the headline, R copies of its weights (together at least 3x
  L2, at most 64) called round robin about 60 times from one CUDA graph, the median of 5
  replays per call; and "isolated":
- the isolated time is the median of >= 100 CUDA-event-timed runs, each behind a GPU sleep and a
  256 MB L2 flush (no weight is served from L2), every kernel of a run alike: the sleep
  outlasts the host's submission, so a launch's host time (tilevm's Python launch path
  checks its arguments) is not counted (see `bench.timing.Timer`; `triton.testing.do_bench` only
  where torch has no GPU sleep). Each row records its method and the host time per
  launch. `--l2-flush read` reads the flush buffer instead of writing
  it (every run timed with events): the write flush leaves L2 dirty, and a kernel that
  reads B bytes then also waits for up to min(B, L2 size) bytes of write-back;
- the two ceilings are measured in the same run: device-to-device copy bandwidth
  (bytes read + written per second) and cuBLAS fp16 TFLOP/s at 8192^3. Each result is
  reported as us, TB/s, TFLOP/s, speedup over cuBLAS on the same shape and activation
  type timed the same way, and fraction of its roofline
  `t_roof = max(bytes / copy_bw, flops / peak)`
  with `bytes = N*K*b/8 + (N*K/g)*scale_bytes + 2*M*K + 2*M*N`, `flops = 2*M*N*K`;
- compile time of each tilevm variant is reported cold (fresh kernel cache) and cached
  (a fresh specialization served from the on-disk cache), separately from the timings;
- with `--read-floor`, each memory-bound cell also gets the read floor of its bytes
  (`bench.read_floor`: a kernel that only reads that many bytes, timed the same way):
  `floor_fraction = t_floor / t` (how close the kernel is to reading its bytes and
  nothing else) and `attainable_roofline = t_roof / t_floor` (the roofline fraction of
  that read-only kernel: what the timer and flush leave reachable).

The tilevm kernel is reached through one adapter, `bench.tilevm_adapter`: it uses
`tilevm.kernels.quantize`/`quantized_matmul` where that package provides them, else the
example kernel examples/quantized_matmul.py through `tilevm.compile`.

This module is the command line and the run; the pieces live beside it:
`bench.protocol` (the matrix, presets, options, configurations), `bench.timing` (the
timer), `bench.roofline` (traffic, ceilings, derived metrics), `bench.weights` (random
quantized weights), `bench.measure` (check and time one configuration),
`bench.tilevm_adapter` and `bench.baselines` (cuBLAS, gemlite, Humming), `bench.output` (tables,
JSON, plot).

Writes OUT_DIR/qmm.json (everything), OUT_DIR/qmm.md (tables) and OUT_DIR/qmm.png (roofline
fraction against M, one line per weight type; skipped, and said so in the JSON, without
matplotlib) and prints a short table last. Without torch or a CUDA device it writes a
JSON that says why it was skipped and exits 0.

    python -m tilevm.bench.qmm out --quick            # smoke test
    python -m tilevm.bench.qmm out                    # Llama-3-8B shapes, f16
    python -m tilevm.bench.qmm out --full             # everything (70B, bf16): long
    python -m tilevm.bench.qmm out --shapes 8b.qkv --m 1,16 --dtypes int4,int3 --act f16,bf16
    python -m tilevm.bench.qmm out --full --budget-s 500 --resume   # in parts

With `--resume` a run adds to OUT_DIR/qmm.json: its measured rows stay, only what it
lacks or skipped is timed, each part recorded (`bench.resume`): the whole matrix takes
longer than one GPU session.

gemlite and Humming: `bench/wheels/` holds their wheels and what the GPU machine lacks of
their requirements (it has no network; bench/wheels/README.md); `--install-wheels`
installs them with `pip install --no-deps --no-index` before the run.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tilevm import __version__
from tilevm.backend.gpu_run import cold_l2_copies
from tilevm.bench.baselines import (
    cublas_factory,
    gemlite_factory,
    humming_factory,
    peer_status,
)
from tilevm.bench.measure import Prepared, Unsupported, run_prepared
from tilevm.bench.output import format_summary, write_outputs
from tilevm.bench.protocol import (
    BACKEND_TOLERANCE_FACTOR,
    PEERS,
    TOLERANCE,
    Config,
    Options,
    parse_options,
    plan,
    tolerance,
    torch_dtype,
)
from tilevm.bench.read_floor import read_floor_seconds
from tilevm.bench.resume import (
    NotResumable,
    check_resumable,
    load_previous,
    measured_rows,
    part_of,
    pending,
)
from tilevm.bench.roofline import add_read_floor, finish_row, measure_ceilings
from tilevm.bench.tilevm_adapter import kernels_package, tilevm_matmul_factory
from tilevm.bench.timing import Timer, gpu_unavailable_reason, graph_per_call
from tilevm.bench.weights import Weights, make_weights

ROOT = Path(__file__).resolve().parent.parent



def environment() -> dict[str, Any]:
    """GPU, driver, library versions."""
    import torch

    props = torch.cuda.get_device_properties(0)
    env: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0), "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "python": sys.version.split()[0],
        "host": platform.node(), "driver": None, "triton": None}
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        env["driver"] = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # no NVML: ask nvidia-smi
        with contextlib.suppress(Exception):
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    with contextlib.suppress(Exception):
        import triton

        env["triton"] = triton.__version__
    env["tilevm"] = __version__
    # TILEVM_COMMIT names the measured commit where the tree's .git may be stale (a
    # copied working tree); else git's HEAD, marked "-dirty" when the tree differs.
    env["tilevm_commit"] = os.environ.get("TILEVM_COMMIT")
    with contextlib.suppress(Exception):
        if env["tilevm_commit"] is None:
            head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                  capture_output=True, text=True, timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD"],
                                   capture_output=True, timeout=10).returncode != 0
            env["tilevm_commit"] = (head + ("-dirty" if dirty else "")) or None
    return env


def _base_row(c: Config) -> dict[str, Any]:
    row = asdict(c)  # ("dtype": the weight type again, under the name issue 48's rows use)
    row.update(dtype=c.wdtype, bits=c.bits, method="isolated", status="skip", reason=None,
               check_passed=None)
    return row


def _prepare(c: Config, weights: Weights | None, generator: Any) -> tuple[Prepared, Any]:
    """A launchable of `c`'s backend on `weights` (cuBLAS makes its own), and the float64
    weights its output is checked against. Called again, it makes another copy."""
    if c.backend == "cublas":
        return cublas_factory(c.act, c.M, c.N, c.K, generator)
    assert weights is not None
    if c.backend == "tilevm":
        prep = tilevm_matmul_factory(c.wdtype, c.group_size, c.act, c.M, c.N, c.K, weights)
    else:
        prep = {"gemlite": gemlite_factory, "humming": humming_factory}[c.backend](
            weights, c.act, c.M)
    return prep, prep.dequantized if prep.dequantized is not None else weights.dequantized


def _graph_row(row: dict[str, Any], c: Config, prep: Prepared, weights: Weights | None,
               generator: Any, l2: int) -> dict[str, Any]:
    """The graph method's row of a checked configuration: R copies of its weights (the
    first `prep`'s), together at least 3x L2 (`gpu_run.cold_l2_copies`, the runner's
    rule: at most 64 copies, a layer that small stays in L2 whatever we do), called
    round robin from one CUDA graph (`bench.timing.graph_per_call`)."""
    import torch

    graph = {**row, "method": "graph", "seconds": None, "timing": "graph", "reps": None,
             "host_us_per_launch": None}  # (those two are the isolated timing's)
    try:
        copies = cold_l2_copies(prep.weight_bytes, l2)
        preps = [prep] + [_prepare(c, weights, generator)[0] for _ in range(copies - 1)]
        x = (torch.rand((c.M, c.K), device="cuda", generator=generator) * 2 - 1).to(
            torch_dtype(c.act))
        graph["seconds"] = graph_per_call([lambda p=p: p.fn(x) for p in preps], torch)
        graph["copies"] = copies
    except Exception as err:  # a backend whose calls cannot be captured
        graph.update(status="error", reason=f"graph: {type(err).__name__}: "
                                            f"{str(err).strip()[:300]}")
    return graph


def run_benchmark(options: Options, log: Callable[[str], None] = print,
                  previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure everything `options` selects; the report (see the module docstring).
    With `previous` (a report of the same GPU and timing options: `bench.resume`), its
    measured rows are kept and only the configurations it lacks are timed."""
    import torch

    start = time.perf_counter()
    generator = torch.Generator(device="cuda")
    generator.manual_seed(options.seed)
    env = environment()
    if previous is not None:
        check_resumable(previous, env["gpu"], options)
    log(f"qmm: {env['gpu']}, torch {env['torch']}, triton {env['triton']}")
    timer = Timer(options.min_reps, options.l2_flush)
    ceilings = measure_ceilings(timer)
    log(f"ceilings: copy {ceilings['copy_bw_bytes_per_s'] / 1e12:.2f} TB/s, cuBLAS f16 "
        f"{ceilings['cublas_f16_tflops']:.0f} / bf16 {ceilings['cublas_bf16_tflops']:.0f} "
        "TFLOP/s")
    peers = {name: peer_status(name, options.install_wheels) if name in options.backends
             else {"available": False, "reason": "not selected"} for name in PEERS}
    kernels = kernels_package()
    report: dict[str, Any] = {
        "benchmark": "qmm", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "environment": env, "ceilings": ceilings,
        "timing": {"method": timer.method, "min_reps": options.min_reps,
                   "check": "max |y - x @ dequantize(W)| / rms(ref), float64 reference on "
                            "the GPU, output poisoned with NaN first",
                   "tolerance": TOLERANCE,
                   "tolerance_factor": BACKEND_TOLERANCE_FACTOR},
        "roofline": "t_roof = max(bytes / copy_bw, flops / cublas_f16_peak); bytes = N*K*b/8 "
                    "+ (N*K/g)*2 + 2*M*K + 2*M*N (b = 16 and no scales for cuBLAS); "
                    "flops = 2*M*N*K",
        "tilevm_via": "tilevm.kernels" if kernels is not None else
                      "examples/quantized_matmul.py (tilevm.kernels has no quantize/"
                      "quantized_matmul yet)",
        **peers,
        "options": {k: v for k, v in asdict(options).items()},
        "results": [], "compile": []}
    kept = measured_rows(previous["results"]) if previous is not None else []
    configs = pending(plan(options), kept)
    if previous is not None:
        log(f"resuming: {len(kept)} rows kept, {len(configs)} configurations to time")
    cublas_times: dict[tuple[str, int, str, str], float] = {
        (r["shape"], r["M"], r["act"], r["method"]): r["seconds"] for r in kept
        if r["backend"] == "cublas" and r["status"] == "ok" and r.get("seconds")}
    rows: list[dict] = []
    weights: Weights | None = None
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))
    for i, c in enumerate(configs):
        row = _base_row(c)
        rows.append(row)
        elapsed = time.perf_counter() - start
        if options.budget_s and elapsed > options.budget_s:
            row["reason"] = f"time budget of {options.budget_s:.0f} s spent (--budget-s)"
            continue
        try:
            if c.backend != "cublas" and (weights is None or (
                    weights.wdtype, weights.N, weights.K) != (c.wdtype, c.N, c.K)):
                weights = None
                torch.cuda.empty_cache()
                weights = make_weights(c.wdtype, c.group_size, c.N, c.K, generator)
            prep, w64 = _prepare(c, weights, generator)
            row["note"] = prep.note
            row["weight_bytes"] = prep.weight_bytes
            if prep.compile:
                row["compile"] = prep.compile
                if prep.compile not in report["compile"]:
                    report["compile"].append(prep.compile)
            row.update(run_prepared(prep, c.M, c.K, c.act, w64, timer, generator,
                                    tolerance(c.backend, c.act),
                                    time_it="isolated" in options.methods))
            if row["check_passed"]:
                row["status"] = "ok"
                if "graph" in options.methods:
                    graph = _graph_row(row, c, prep, weights, generator, l2)
                    rows.append(graph)
                    if c.backend == "cublas" and graph["status"] == "ok":
                        cublas_times[(c.shape, c.M, c.act, "graph")] = graph["seconds"]
                if "isolated" not in options.methods:
                    rows.remove(row)  # (it checked the kernel, the graph row times it)
                elif c.backend == "cublas":
                    cublas_times[(c.shape, c.M, c.act, "isolated")] = row["seconds"]
            else:
                row["status"] = "fail"
                row["reason"] = f"wrong result: max err {row['max_rel_err']:.3g} x rms > " \
                                f"{row['tolerance']:.3g}" + \
                                ("" if row["output_finite"] else " (non-finite output)")
            del prep, w64
        except Unsupported as err:
            row["reason"] = str(err)
        except Exception as err:
            row["status"] = "error"
            row["reason"] = f"{type(err).__name__}: {str(err).strip()[:300]}"
        if row["status"] != "skip" or i % 50 == 0:
            log(_progress(i, len(configs), rows[-1], time.perf_counter() - start))
    for row in rows:
        finish_row(row, ceilings, cublas_times)
    if options.read_floor:
        measure_read_floors(rows, timer, report, log)
    report["results"] = [*kept, *rows]
    report["elapsed_s"] = time.perf_counter() - start
    earlier = [] if previous is None else previous.get("parts") or [part_of(previous, kept)]
    report["parts"] = [*earlier, part_of(report, rows)]
    return report


def measure_read_floors(rows: list[dict], timer: Timer, report: dict,
                        log: Callable[[str], None]) -> None:
    """`add_read_floor` to every timed memory-bound row, one floor per byte count."""
    floors: dict[int, dict] = {}
    for row in rows:
        if row.get("seconds") is None or row.get("bound") != "memory":
            continue
        nbytes = int(row["bytes"])
        if nbytes not in floors:
            floors[nbytes] = read_floor_seconds(timer, nbytes)
            log(f"read floor of {nbytes / 1e6:.1f} MB: "
                f"{floors[nbytes]['seconds'] * 1e6:.1f} us")
        add_read_floor(row, floors[nbytes]["seconds"])
    report["read_floor"] = {
        "method": "bench/read_floor.py: stream_read (256 threads, 16-byte loads), the "
                  "fastest of its chunk sizes and loads in flight (CONFIGS), timed by this "
                  "run's timer", "floors": [{"bytes": b, **f} for b, f in floors.items()]}


def _progress(i: int, n: int, row: dict, elapsed: float) -> str:
    what = f"[{i + 1}/{n} {elapsed:5.0f}s] {row['backend']} {row['shape']} M={row['M']} " \
           f"{row['wdtype']} {row['act']}: "
    if row["status"] == "ok":
        return what + f"{row['seconds'] * 1e6:.1f} us (max err {row['max_rel_err']:.2g})"
    return what + f"{row['status']} {row.get('reason') or ''}"



def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when it ran or was skipped for want of a GPU, 1 when a kernel
    gave a wrong result or raised."""
    options = parse_options(argv)
    try:
        previous = load_previous(options.out) if options.resume else None
    except NotResumable as err:
        print(f"qmm: {err}", file=sys.stderr)
        return 2
    reason = gpu_unavailable_reason()
    if reason and previous is not None:  # (its results stay as they are)
        print(f"qmm: skipped: {reason}; {os.path.join(options.out, 'qmm.json')} unchanged")
        return 0
    if reason:
        report = {"benchmark": "qmm", "status": "skipped", "reason": reason,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                  "options": asdict(options), "results": []}
        write_outputs(report, options.out)
        print(f"qmm: skipped: {reason}; wrote {os.path.join(options.out, 'qmm.json')}")
        return 0
    # A fresh kernel cache: the first compile of each variant is cold.
    cache = tempfile.mkdtemp(prefix="tilevm-qmm-cache-")
    saved = os.environ.get("TILEVM_CACHE_DIR")
    os.environ["TILEVM_CACHE_DIR"] = cache
    try:
        report = run_benchmark(options, previous=previous)
    except NotResumable as err:  # (another GPU or other timing options)
        print(f"qmm: cannot resume {options.out}: {err}", file=sys.stderr)
        return 2
    finally:
        if saved is None:
            os.environ.pop("TILEVM_CACHE_DIR", None)
        else:
            os.environ["TILEVM_CACHE_DIR"] = saved
        shutil.rmtree(cache, ignore_errors=True)
    report["status"] = "ran"
    write_outputs(report, options.out)
    print(f"wrote {options.out}/qmm.json, qmm.md"
          + (", qmm.png" if "file" in report.get("plot", {}) else
             f" (no plot: {report.get('plot', {}).get('skipped')})")
          + f" in {report['elapsed_s']:.0f} s")
    print(format_summary(report["results"], report["ceilings"]))
    return 1 if any(r["status"] in ("fail", "error") for r in report["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
