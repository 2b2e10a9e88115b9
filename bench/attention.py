"""The attention example against PyTorch's FlashAttention: `python -m tilevm.bench.attention
OUT_DIR [options]` (issue 45: the example's time beside
`torch.nn.functional.scaled_dot_product_attention` with the flash backend).

For each sequence length S and masking (`--causal`): q, k, v `[BH, S, d]` of f16 random
in [-1, 1); examples/attention.py's kernel (compiled with `--block-q`, `--block-kv`,
`--num-warps`) and SDPA (the same tensors viewed `[1, BH, S, d]`, only the flash backend
allowed) each run once and compared with float32 SDPA (math backend) on the first slice:
max |o - ref| must stay within `TOLERANCE`. Then both are timed with the graph method of
../shared/BENCHMARKS.md (`CALLS` calls captured in one CUDA graph, the median of 5
replays, per call; q, k, v stay in L2 only as far as they fit it: 32 heads of 16k x 128
f16 are 4 x 128 MB). Reported per cell: microseconds, TFLOP/s (4 BH S^2 d, half of it
causal), tilevm's speed over SDPA's, and the cost model's prediction for the launch
(`cost.model.estimate` with the compiled kernel's registers and shared bytes) beside
the measured time.

Writes OUT_DIR/attention.json and OUT_DIR/attention.md. Without torch or a CUDA device
it writes a JSON that says why it was skipped and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tilevm.backend.launch import compiled_kernel
from tilevm.bench.examples import load_example
from tilevm.bench.protocol import parse_ints
from tilevm.bench.timing import gpu_unavailable_reason, graph_seconds
from tilevm.cost.hardware import gpu_for_device
from tilevm.cost.model import Resources, estimate

CALLS = 20  # calls a graph holds
TOLERANCE = 2e-2  # max |o - ref| (f16 output, softmax rows summing to 1)
CHECKED_SLICES = 1


def flops(BH: int, S: int, d: int, causal: bool) -> float:
    """Two matmuls of S x S x d per slice (q k^T and p v), 2 FLOPs a product; causal:
    the half below the diagonal."""
    total = 4.0 * BH * S * S * d
    return total / 2 if causal else total


def measure(S: int, BH: int, d: int, causal: bool, args: argparse.Namespace,
            torch: Any) -> dict[str, Any]:
    """One cell: check both against float32 SDPA, time both (module docstring)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel  # (torch: optional)

    example = load_example("attention")
    constants = dict(d=d, causal=causal, block_q=args.block_q, block_kv=args.block_kv,
                     num_warps=args.num_warps)
    program = example.attention.specialize(**constants)
    kernel = compiled_kernel(program)
    q, k, v = (torch.rand(BH, S, d, device="cuda", dtype=torch.float16) * 2 - 1
               for _ in range(3))
    o = torch.empty_like(q)
    stream = int(torch.cuda.current_stream().cuda_stream)
    launch = kernel.prepare(q, k, v, o, S, BH)
    pointers = [int(t.data_ptr()) for t in (q, k, v, o)]

    def tilevm_call() -> None:
        launch.launch(int(torch.cuda.current_stream().cuda_stream), *pointers)

    def sdpa_call() -> Any:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(
                q.view(1, BH, S, d), k.view(1, BH, S, d), v.view(1, BH, S, d),
                is_causal=causal)

    row: dict[str, Any] = {"S": S, "BH": BH, "d": d, "causal": causal, **constants}
    o.fill_(float("nan"))
    launch.launch(stream, *pointers)
    flash = sdpa_call()
    torch.cuda.synchronize()
    with sdpa_kernel(SDPBackend.MATH):
        ref = torch.nn.functional.scaled_dot_product_attention(
            *(t[:CHECKED_SLICES].float().view(1, CHECKED_SLICES, S, d) for t in (q, k, v)),
            is_causal=causal).view(CHECKED_SLICES, S, d)
    row["tilevm_max_err"] = float((o[:CHECKED_SLICES].float() - ref).abs().max())
    row["sdpa_max_err"] = float((flash.view(BH, S, d)[:CHECKED_SLICES].float()
                                 - ref).abs().max())
    row["check_passed"] = row["tilevm_max_err"] <= TOLERANCE  # (NaN fails)
    work = flops(BH, S, d, causal)
    for name, call in (("tilevm", tilevm_call), ("sdpa", sdpa_call)):
        def enqueue(call=call) -> None:
            for _ in range(CALLS):
                call()
        seconds = graph_seconds(enqueue, torch) / CALLS
        row[f"{name}_us"] = seconds * 1e6
        row[f"{name}_tflops"] = work / seconds / 1e12
    row["speed_over_sdpa"] = row["sdpa_us"] / row["tilevm_us"]
    gpu = gpu_for_device(torch.cuda.get_device_name())
    if gpu is not None:
        e = estimate(program, {"S": S, "BH": BH}, gpu, Resources.of(kernel))
        row.update(predicted_us=e.predicted_s * 1e6, bound_term=e.bound_term,
                   bound_us=e.bound_s * 1e6)
    return row


def report(rows: Sequence[dict[str, Any]], device: str) -> str:
    lines = [f"# The attention example against SDPA (flash), {device}", "",
             "| S | causal | BH x d | tilevm us | SDPA us | tilevm TFLOP/s | SDPA TFLOP/s | "
             "speed over SDPA | predicted us (bound) | max err |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        predicted = f"{r['predicted_us']:.1f} ({r['bound_term']})" if "predicted_us" in r \
            else "-"
        lines.append(f"| {r['S']} | {r['causal']} | {r['BH']} x {r['d']} | "
                     f"{r['tilevm_us']:.1f} | {r['sdpa_us']:.1f} | {r['tilevm_tflops']:.0f} | "
                     f"{r['sdpa_tflops']:.0f} | {r['speed_over_sdpa']:.2f}x | {predicted} | "
                     f"{r['tilevm_max_err']:.1e}{'' if r['check_passed'] else ' FAILED'} |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tilevm.bench.attention",
        description="Time examples/attention.py against torch's SDPA (flash backend); "
                    "write OUT_DIR/attention.json and attention.md.")
    p.add_argument("out", type=Path, metavar="OUT_DIR")
    p.add_argument("--seq", default="1024,2048,4096,8192,16384",
                   help="sequence lengths, comma-separated (default: %(default)s)")
    p.add_argument("--heads", type=int, default=32, help="BH: batch x heads (default: 32)")
    p.add_argument("--d", type=int, default=128, choices=(64, 128))
    p.add_argument("--causal", default="both", choices=("both", "false", "true"))
    # (default: the fastest tiling of the example measured at d = 128, S = 1k-16k;
    # docs/cost-model.md)
    p.add_argument("--block-q", type=int, default=128, help="(default: %(default)s)")
    p.add_argument("--block-kv", type=int, default=64, help="(default: %(default)s)")
    p.add_argument("--num-warps", type=int, default=8, help="(default: %(default)s)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        seqs = parse_ints(args.seq)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.heads < 1:
        print("error: --heads must be at least 1", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    reason = gpu_unavailable_reason()
    if reason is not None:
        (args.out / "attention.json").write_text(json.dumps(
            {"benchmark": "attention", "status": "skipped", "reason": reason}, indent=1))
        print(f"attention: skipped: {reason}")
        return 0
    import torch

    masks = {"both": (False, True), "false": (False,), "true": (True,)}[args.causal]
    rows = []
    for S in seqs:
        for causal in masks:
            print(f"S={S} causal={causal}", file=sys.stderr)
            rows.append(measure(S, args.heads, args.d, causal, args, torch))
    device = torch.cuda.get_device_name()
    (args.out / "attention.json").write_text(json.dumps(
        {"benchmark": "attention", "status": "ok", "device": device, "calls": CALLS,
         "results": rows}, indent=1))
    text = report(rows, device)
    (args.out / "attention.md").write_text(text)
    print(text)
    return 0 if all(r["check_passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
