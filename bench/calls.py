"""What a call costs: `python -m tilevm.bench.calls OUT_DIR [--layers ...] [--m ...]`.

The graph and eager methods of ../shared/BENCHMARKS.md, and the host's submit time, for
`quantized_matmul` (int4, group 128, f16) against cuBLAS f16 (`torch.nn.functional.
linear`) on Llama-3 layers, and for a `tv.compile` vector add:

- weights: R copies of each backend's weights, R copies together at least 3x the L2
  size, used round robin, so that no call finds its weights in L2;
- **graph**: `reps` rounds of the R calls (about 60 calls) captured in one CUDA graph,
  replayed once to warm, then 5 replays timed with CUDA events: the median per call;
- **eager**: the same calls issued back to back from Python, one pair of events around
  them (median of 5 runs): the time per call, which the host's cost shows through when
  it exceeds the kernel's;
- **host submit**: the host's wall time of each of 1000 calls, issued while a GPU sleep
  keeps the GPU busy (so a call never waits for the GPU): the median;
- **chain**: 8 dependent matmuls, with and without programmatic dependent launch.

Every output is checked against a float64 reference `x @ W` first (fresh random
inputs, the output poisoned with NaN). Writes OUT_DIR/calls.json and calls.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tilevm as tv
from tilevm import kernels
from tilevm.backend.gpu_run import cold_l2_copies
from tilevm.bench.examples import load_example
from tilevm.bench.measure import max_relative_error
from tilevm.bench.timing import GRAPH_CALLS, graph_per_call
from tilevm.kernels import quantize, quantized_matmul

LAYERS = {"8b_qkv": (12288, 4096), "8b_down": (4096, 14336), "70b_gate_up": (57344, 8192)}
HOST_CALLS = 1000


def _per_call_eager(calls: list[Callable[[], Any]], torch: Any) -> float:
    """Eager method: seconds per call issued back to back (median of 5 runs)."""
    rounds = max(1, GRAPH_CALLS // len(calls))
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(rounds):
            for call in calls:
                call()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e-3 / (rounds * len(calls)))
    return statistics.median(times)


def _host_submit(calls: list[Callable[[], Any]], torch: Any, batch: int = 50) -> float:
    """Median host seconds of one call, the GPU kept busy by a sleep (module docstring)."""
    seconds = []
    while len(seconds) < HOST_CALLS:
        torch.cuda._sleep(int(2e9 * 5e-3))  # about 5 ms of GPU time: longer than a batch
        for i in range(batch):
            call = calls[i % len(calls)]
            start = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - start)
        torch.cuda.synchronize()
    return statistics.median(seconds)


def measure_layer(name: str, M: int, torch: Any, l2: int) -> list[dict[str, Any]]:
    """Both backends on one layer and M: check, then every method."""
    N, K = LAYERS[name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=gen)
    rows = []
    w = torch.randn(K, N, device="cuda", dtype=torch.float16, generator=gen) * 0.02
    qw0 = quantize(w, "int4", 128, format="fragments")
    qws = [qw0] + [quantize(w + 0.001 * i, "int4", 128, format="fragments")
                   for i in range(1, cold_l2_copies(qw0.nbytes, l2))]
    reference = x.double() @ qw0.dequantize().double()
    y = quantized_matmul(x, qw0)  # tunes (once per machine) and prepares
    torch.cuda.synchronize()
    error = max_relative_error(y, reference)
    del w
    wf = torch.randn(N, K, device="cuda", dtype=torch.float16, generator=gen)
    wfs = [wf] + [wf + 0.001 * i for i in range(1, cold_l2_copies(wf.numel() * 2, l2))]
    f_reference = x.double() @ wf.double().t()
    f_error = max_relative_error(torch.nn.functional.linear(x, wf), f_reference)
    backends = {
        "tilevm": ([lambda q=q: quantized_matmul(x, q) for q in qws], error),
        "cublas_f16": ([lambda v=v: torch.nn.functional.linear(x, v) for v in wfs], f_error),
    }
    for backend, (calls, err) in backends.items():
        graph = graph_per_call(calls, torch)
        eager = _per_call_eager(calls, torch)
        host = _host_submit(calls, torch)
        rows.append({"layer": name, "M": M, "N": N, "K": K, "backend": backend,
                     "copies": len(calls), "graph_us": graph * 1e6, "eager_us": eager * 1e6,
                     "eager_over_graph": eager / graph, "host_submit_us": host * 1e6,
                     "max_error": err})
    return rows


def measure_vector_add(torch: Any) -> dict[str, Any]:
    """`tv.compile(vector_add)` called with torch tensors: host submit time per call."""
    add = tv.compile(load_example("vector_add").vector_add)
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    add(x, y, out, n)
    torch.cuda.synchronize()
    ok = bool(torch.equal(out, x + y))
    host = _host_submit([lambda: add(x, y, out, n)], torch)
    return {"kernel": "vector_add", "n": n, "correct": ok, "host_submit_us": host * 1e6}


def measure_chain(torch: Any, M: int, dependent: bool) -> dict[str, Any]:
    """8 dependent quantized matmuls (Llama-3-8B's FFN shapes, up 4096 -> 14336 and down
    14336 -> 4096, four times; int4, group 128), each reading the previous one's output,
    launched as dependent launches or not: per chain, graph and eager, and the output."""
    kernels.set_dependent_launch(dependent)
    gen = torch.Generator(device="cuda").manual_seed(1)
    weights = []
    for i in range(8):
        K, N = (4096, 14336) if i % 2 == 0 else (14336, 4096)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16, generator=gen) / K ** 0.5
        weights.append(quantize(w, "int4", 128, format="fragments"))
    x = torch.randn(M, 4096, device="cuda", dtype=torch.float16, generator=gen)
    out: list[Any] = []

    def chain() -> None:
        y = x
        for qw in weights:
            y = quantized_matmul(y, qw)
        out[:] = [y]

    chain()
    torch.cuda.synchronize()
    result = out[0].clone()
    graph = graph_per_call([chain], torch) * 1e6
    eager = _per_call_eager([chain], torch) * 1e6
    kernels.set_dependent_launch(True)
    return {"M": M, "dependent_launch": dependent, "graph_us": graph, "eager_us": eager,
            "output": result}


def format_markdown(report: dict[str, Any]) -> str:
    lines = [f"# What a call costs ({report['gpu']})", "",
             "graph / eager: us per call; host: median host us to submit one call.", "",
             "| layer | M | backend | R | graph | eager | eager/graph | host | max err |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['layer']} | {r['M']} | {r['backend']} | {r['copies']} | "
                     f"{r['graph_us']:.1f} | {r['eager_us']:.1f} | "
                     f"{r['eager_over_graph']:.2f} | {r['host_submit_us']:.1f} | "
                     f"{r['max_error']:.2g} |")
    if report.get("chains"):
        lines += ["", "8 dependent matmuls (8B FFN shapes, int4): us per chain", "",
                  "| M | dependent launch | graph | eager | bitwise equal to without |",
                  "|---|---|---|---|---|"]
        for c in report["chains"]:
            lines.append(f"| {c['M']} | {c['dependent_launch']} | {c['graph_us']:.1f} | "
                         f"{c['eager_us']:.1f} | {c['equal']} |")
    v = report["vector_add"]
    lines += ["", f"tv.compile vector_add (n = {v['n']}): host {v['host_submit_us']:.1f} us "
              f"per call, correct: {v['correct']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilevm.bench.calls",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output folder (calls.json, calls.md)")
    parser.add_argument("--layers", default="8b_qkv,70b_gate_up",
                        help=f"comma-separated, of {', '.join(LAYERS)}")
    parser.add_argument("--m", default="1,16", help="comma-separated row counts")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench.calls needs PyTorch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench.calls needs a GPU", file=sys.stderr)
        return 2
    layers = [name.strip() for name in args.layers.split(",")]
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        parser.error(f"unknown layer {unknown[0]!r}; choose from {', '.join(LAYERS)}")
    ms = [int(m) for m in args.m.split(",")]
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    report: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "l2_bytes": l2,
                              "torch": torch.__version__, "rows": []}
    report["vector_add"] = measure_vector_add(torch)
    for name in layers:
        for M in ms:
            report["rows"] += measure_layer(name, M, torch, l2)
            print(json.dumps(report["rows"][-2:]), flush=True)
    report["chains"] = []
    for M in ms:
        plain = measure_chain(torch, M, dependent=False)
        overlapped = measure_chain(torch, M, dependent=True)
        equal = bool(torch.equal(plain.pop("output"), overlapped.pop("output")))
        report["chains"] += [{**plain, "equal": equal}, {**overlapped, "equal": equal}]
        print(json.dumps(report["chains"][-2:]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calls.json").write_text(json.dumps(report, indent=1, default=float))
    (out / "calls.md").write_text(format_markdown(report))
    print(format_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
