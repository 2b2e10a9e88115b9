"""Tile synchronization on the GPU: `python -m tilevm.bench.mlp_sync OUT_DIR [...]`.

Two measurements of issue 47 (docs/tile-sync.md), both with the graph method of
../shared/BENCHMARKS.md:

- **copy -> copy**: a one-wave copy kernel (exactly as many blocks as the GPU holds at
  once) followed by a second copy of its output, with tile synchronization (the first
  posts each tile, the second is a dependent launch that waits for its tile) against
  the same copies without any sync instruction, launched one after the other: the
  overhead of the mechanism where it can gain nothing.
- **the quantized MLP** (`kernels.mlp_sync`: gate_up with the silu * up epilogue, then
  down) on Llama-3 shapes: each policy's pair, with down split in `--splits` ways and
  gate_up's tiles in groups of `--group-m` row tiles (8, the library's, for L2 reuse;
  1: row after row, so that "row" can start on the first rows),
  synchronized (down a dependent launch that waits on semaphores; and so with its
  blocks capped at their even share per SM, `down_blocks_per_sm`) against the same
  pairs serialized (down launched plainly, after gate_up has finished: split-K alone),
  and which policy `choose_policy` picks.

Graph method: R copies of the weights, together at least 3x the L2, used round robin;
one CUDA graph holds about 30 calls; replayed once to warm, then 5 replays timed with
CUDA events, the median per call. A graph replays its scalar arguments as captured, so
the semaphores (never reset between calls otherwise) cannot count generations across
replays: every call in the graph has semaphores of its own, waited on for generation
1, and the graph zeroes all of them first (one memset node, in the serialized graphs
too). Before timing, every synchronized output is compared bitwise with the serialized
one, and the serialized MLP with a float64 reference on sampled rows.

Writes OUT_DIR/mlp_sync.json and mlp_sync.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tilevm import kernels
from tilevm.backend.cuda import driver
from tilevm.backend.gpu_run import cold_l2_copies
from tilevm.backend.launch import compiled_kernel
from tilevm.bench.measure import max_relative_error
from tilevm.bench.timing import graph_seconds
from tilevm.bench.weights import make_weights
from tilevm.cost.hardware import gpu_for_device
from tilevm.cost.model import Resources
from tilevm.kernels.mlp_sync import (
    POLICIES,
    choose_policy,
    down_blocks_per_sm,
    mlp_kernels,
    semaphores,
    workspace,
)
from tilevm.kernels.weight_format import code_type
from tilevm.vm import lang as tv

LAYERS = {"8b": (4096, 14336), "70b": (8192, 28672)}  # (hidden H, intermediate F)
CONFIG = dict(group_size=128, bm=128, bk=64, num_warps=4, stages=4, lead=2, prefetch=2)
PRODUCER_BN = 128  # gate_up's tile columns (32 per warp)
SPLITS = "1,2,4"  # down's split_k
GROUP_M = "8"  # gate_up's row tiles a group (`grouped_tiles`)
CHUNK = CONFIG["stages"] * CONFIG["bk"]  # columns of h a "tile" semaphore covers
GRAPH_PAIRS = 30
CHECKED_ROWS = 16
COPY_BLOCK = 4096  # f32 elements a copy block moves (128 threads)
COPY_REPLAYS = 25


def _stream() -> int:
    import torch

    return int(torch.cuda.current_stream().cuda_stream)


def _pointers(*tensors: Any) -> list[int]:
    return [int(t.data_ptr()) for t in tensors]


def _semaphore_rows(calls: int, count: int, torch: Any) -> Any:
    """`calls` rows of `count` int32 semaphores, each row 16-byte aligned (as the
    kernels' pointers must be)."""
    return torch.zeros((calls, -(-count // 4) * 4), dtype=torch.int32, device="cuda")


def _launch_pairs(launches: list[tuple[Any, list[int], Any, list[int]]]) -> None:
    """Each (producer, its pointers, consumer, its pointers) on the current stream."""
    stream = _stream()
    for first, first_args, second, second_args in launches:
        first.launch(stream, *first_args)
        second.launch(stream, *second_args)


# -- copy -> copy --------------------------------------------------------------------------

@tv.kernel(num_warps=4)
def copy_then_post(src: tv.ptr(tv.f32, const=True), dst: tv.ptr(tv.f32),
                   sem: tv.ptr(tv.int32), n: tv.int32, *, block: int, sync: bool):
    """dst = src, a tile a block; with `sync`, posts its tile and lets a dependent
    launch start at entry."""
    tv.grid(tv.cdiv(n, block))
    t = tv.block_idx(0)
    if sync:
        tv.launch_dependents()
    v = tv.load_global(tv.global_view(src, [n]), [t * block], [block])
    tv.store_global(tv.global_view(dst, [n]), v, [t * block])
    if sync:
        tv.tile_post(tv.global_view(sem, [tv.cdiv(n, block)]), [t], 1)


@tv.kernel(num_warps=4)
def wait_then_copy(src: tv.ptr(tv.f32), dst: tv.ptr(tv.f32), sem: tv.ptr(tv.int32),
                   n: tv.int32, generation: tv.int32, *, block: int, sync: bool):
    """dst = src, a tile a block; with `sync`, first waits until its tile is posted."""
    tv.grid(tv.cdiv(n, block))
    t = tv.block_idx(0)
    if sync:
        tv.tile_wait(tv.global_view(sem, [tv.cdiv(n, block)]), [t], generation)
    v = tv.load_global(tv.global_view(src, [n]), [t * block], [block])
    tv.store_global(tv.global_view(dst, [n]), v, [t * block])


def _blocks_per_sm(kernel: Any, threads: int) -> int:
    drv = driver.bindings()
    return driver.call("occupancy", drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        kernel.handle, threads, kernel.shared_bytes))


def measure_copy(torch: Any) -> dict[str, Any]:
    """The copy -> copy pair, one wave each, synchronized and plain (module docstring)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    pairs = {sync: (compiled_kernel(copy_then_post.specialize(block=COPY_BLOCK, sync=sync)),
                    compiled_kernel(wait_then_copy.specialize(block=COPY_BLOCK, sync=sync)))
             for sync in (False, True)}
    per_sm = min(_blocks_per_sm(k, 128) for pair in pairs.values() for k in pair)
    tiles = sms * per_sm
    n = tiles * COPY_BLOCK
    a = torch.randn(n, device="cuda")
    b, c = torch.empty_like(a), torch.empty_like(a)
    sems = _semaphore_rows(GRAPH_PAIRS, tiles, torch)
    row: dict[str, Any] = {"tiles": tiles, "blocks_per_sm": per_sm, "bytes": 4 * n}
    for sync, (first, second) in pairs.items():
        launches = [(first.prepare(a, b, sems[i], n), _pointers(a, b, sems[i]),
                     second.prepare(b, c, sems[i], n, 1), _pointers(b, c, sems[i]))
                    for i in range(GRAPH_PAIRS)]

        def enqueue(launches=launches) -> None:
            sems.zero_()
            _launch_pairs(launches)

        c.fill_(float("nan"))
        enqueue()
        torch.cuda.synchronize()
        row[f"{'sync' if sync else 'plain'}_correct"] = bool(torch.equal(c, a))
        # a short pair: more replays than the MLP's for a steady median
        row[f"{'sync' if sync else 'plain'}_us"] = \
            graph_seconds(enqueue, torch, replays=COPY_REPLAYS) / GRAPH_PAIRS * 1e6
    row["overhead"] = row["sync_us"] / row["plain_us"] - 1
    return row


# -- the quantized MLP ---------------------------------------------------------------------

class MlpLayer:
    """One layer's weights (R copies for the L2 rotation) in the pair's format, and
    float64 weights for the reference. gate_up's `[H, 2F]` columns are taken as
    interleaved (`interleave_gate_up`): random weights need no reordering."""

    def __init__(self, wdtype: str, H: int, F: int, l2: int, torch: Any) -> None:
        gen = torch.Generator(device="cuda").manual_seed(0)
        g = CONFIG["group_size"]
        self.H, self.F = H, F
        self.gate_up = make_weights(wdtype, g, 2 * F, H, gen)
        self.down = make_weights(wdtype, g, H, F, gen)
        packed = [(kernels.pack_weights(w.codes, wdtype, kernels.FRAGMENTS), w.scales)
                  for w in (self.gate_up, self.down)]
        nbytes = sum(p.numel() + s.numel() * 2 for p, s in packed)
        copies = cold_l2_copies(nbytes, l2)
        self.copies = [packed] + [[(p.clone(), s.clone()) for p, s in packed]
                                  for _ in range(copies - 1)]

    def reference(self, x: Any, h: Any, rows: Any) -> tuple[Any, Any]:
        """float64 h and y for `rows` of x, y from the kernel's own h (its f16 rounding
        is the pair's contract)."""
        torch = sys.modules["torch"]
        half = PRODUCER_BN // 2
        w = self.gate_up.dequantized.reshape(self.H, self.F // half, 2, half)
        xr = x[rows].double()
        gate = xr @ w[:, :, 0].reshape(self.H, self.F)
        up = xr @ w[:, :, 1].reshape(self.H, self.F)
        return torch.nn.functional.silu(gate) * up, h[rows].double() @ self.down.dequantized


def measure_mlp(layer: MlpLayer, name: str, wdtype: str, M: int, torch: Any,
                gpu_name: str, splits: Sequence[int] = (1,), group_ms: Sequence[int] = (8,)
                ) -> list[dict[str, Any]]:
    """Every policy, split of down and tile grouping of gate_up, synchronized and
    serialized, on one layer and M (module docstring)."""
    H, F = layer.H, layer.F
    make_k, use_k = mlp_kernels("f16")
    # x in [-1, 1] / sqrt(H): the random weights are O(1) where a model's are
    # O(1 / sqrt(K)), and silu(gate) * up, then y, must stay within f16
    x = ((torch.rand((M, H), device="cuda") * 2 - 1) * H ** -0.5).half()
    h = torch.empty((M, F), dtype=torch.float16, device="cuda")
    y = torch.empty((M, H), dtype=torch.float16, device="cuda")
    rows = torch.linspace(0, M - 1, min(M, CHECKED_ROWS), device="cuda").round().long()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    calls = GRAPH_PAIRS // len(layer.copies) * len(layer.copies)
    results, outputs = [], {}
    for policy, split_k, group_m in ((p, s, g) for p in POLICIES for s in splits
                                     for g in group_ms):
        constants = dict(wdtype=code_type(wdtype), policy=policy, **CONFIG)
        make = compiled_kernel(make_k.specialize(down_split_k=split_k, group_m=group_m,
                                                 **constants))
        use = compiled_kernel(use_k.specialize(producer_bn=PRODUCER_BN, split_k=split_k,
                                               **constants))
        sems = _semaphore_rows(calls, semaphores(policy, M, F, CONFIG["bm"], CHUNK,
                                                 split_k), torch)
        # (the pairs run one after another: one workspace serves every call)
        words, counters = workspace(M, H, CONFIG["bm"], PRODUCER_BN, split_k)
        ws = torch.zeros(max(words, 4), dtype=torch.float32, device="cuda")
        counts = torch.zeros(max(counters, 4), dtype=torch.int32, device="cuda")
        cap = down_blocks_per_sm(M, H, CONFIG["bm"], PRODUCER_BN, split_k, sms)
        for synced, spread in ((False, False), (True, False), (True, True)):
            launches = []
            for i in range(calls):
                (wgu, sgu), (wdn, sdn) = layer.copies[i % len(layer.copies)]
                launches.append((
                    make.prepare(x, wgu, sgu, sgu, h, sems[i], M, 2 * F, H),
                    _pointers(x, wgu, sgu, sgu, h, sems[i]),
                    use.prepare(h, wdn, sdn, sdn, y, sems[i], ws, counts, M, H, F, 1,
                                dependent=synced, max_blocks_per_sm=cap if spread else None),
                    _pointers(h, wdn, sdn, sdn, y, sems[i], ws, counts)))

            def enqueue(launches=launches, sems=sems) -> None:
                sems.zero_()
                _launch_pairs(launches)

            h.fill_(float("nan"))
            y.fill_(float("nan"))
            enqueue()
            torch.cuda.synchronize()
            outputs[policy, split_k, group_m, synced] = y.clone()
            row = {"layer": name, "wdtype": wdtype, "M": M, "H": H, "F": F,
                   "policy": policy, "split_k": split_k, "group_m": group_m,
                   "synchronized": synced,
                   "blocks_per_sm_cap": cap if spread else None,
                   "copies": len(layer.copies), "gpu": gpu_name}
            if not synced:
                want_h, want_y = layer.reference(x, h, rows)
                row["h_error"] = max_relative_error(h[rows], want_h)
                row["y_error"] = max_relative_error(y[rows], want_y)
            else:
                row["bitwise_equal"] = bool(torch.equal(
                    y, outputs[policy, split_k, group_m, False]))
            row["us"] = graph_seconds(enqueue, torch) / calls * 1e6
            results.append(row)
    gpu = gpu_for_device(gpu_name)
    if gpu is not None:
        regs = make.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")
        static = make.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        chosen = choose_policy(M, F, CONFIG["bm"], PRODUCER_BN, gpu,
                               Resources(make.num_threads, regs, make.shared_bytes + static))
        for row in results:
            row["chosen"] = row["policy"] == chosen
    return results


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell: the best serialized time over every policy and split of down (split-K
    alone), each policy's best synchronized time, its split and whether down's blocks
    were capped, the speedup of the best policy over serialized, and whether
    `choose_policy` picked the best policy."""
    cells: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        cell = cells.setdefault((r["layer"], r["wdtype"], r["M"]),
                                {"layer": r["layer"], "wdtype": r["wdtype"], "M": r["M"]})
        key = f"{r['policy']}" if r["synchronized"] else "serialized"
        if r["us"] < cell.get(f"{key}_us", float("inf")):
            cell[f"{key}_us"], cell[f"{key}_split"] = r["us"], r.get("split_k", 1)
            cell[f"{key}_group_m"] = r.get("group_m", 8)
            cell[f"{key}_capped"] = r.get("blocks_per_sm_cap") is not None
        if r["synchronized"] and r.get("chosen"):
            cell["chosen"] = r["policy"]
    for cell in cells.values():
        best = min(POLICIES, key=lambda p: cell[f"{p}_us"])
        cell["best"] = best
        cell["speedup"] = cell["serialized_us"] / cell[f"{best}_us"]
        cell["chosen_is_best"] = cell.get("chosen") == best
    return list(cells.values())


def format_markdown(report: dict[str, Any]) -> str:
    c = report["copy"]
    lines = [f"# Tile synchronization ({report['gpu']}, graph method)", "",
             f"copy -> copy, one wave ({c['tiles']} tiles, {c['bytes'] >> 20} MiB): "
             f"plain {c['plain_us']:.2f} us, synchronized {c['sync_us']:.2f} us, overhead "
             f"{100 * c['overhead']:+.1f}%", "",
             "us per MLP call; `(s)`: down's split_k, `/gN` gate_up's tiles in groups of N "
             "row tiles (8 unless said), `*` down's blocks capped at their even share per "
             "SM; serialized: the best of every variant launched one after the other", "",
             "| layer | weights | M | serialized | " +
             " | ".join(POLICIES) + " | speedup | best | chosen |",
             "|---|---|---|---|" + "---|" * len(POLICIES) + "---|---|---|"]
    for cell in report["cells"]:
        times = [f"{cell[f'{k}_us']:.1f} ({cell[f'{k}_split']}"
                 f"{'' if cell.get(f'{k}_group_m', 8) == 8 else '/g' + str(cell[f'{k}_group_m'])}"
                 f"{'*' if cell.get(f'{k}_capped') else ''})"
                 for k in ("serialized", *POLICIES)]
        lines.append(f"| {cell['layer']} | {cell['wdtype']} | {cell['M']} | " +
                     " | ".join(times) +
                     f" | {cell['speedup']:.3f} | {cell['best']} | {cell.get('chosen', '-')} |")
    return "\n".join(lines) + "\n"


def parse_options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked (argparse's exit with status 2 and the reason on a bad
    value): `layers`, `wdtypes`, `ms`, `splits`, `group_ms` as lists."""
    parser = argparse.ArgumentParser(prog="python -m tilevm.bench.mlp_sync",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output folder (mlp_sync.json, mlp_sync.md)")
    parser.add_argument("--layers", default="8b,70b",
                        help=f"comma-separated, of {', '.join(LAYERS)}")
    parser.add_argument("--wdtypes", default="int4,int3", help="comma-separated weight types")
    parser.add_argument("--m", default="128,256,512,1024,2048", help="comma-separated M")
    parser.add_argument("--splits", default=SPLITS, help="comma-separated split_k of down")
    parser.add_argument("--group-m", default=GROUP_M,
                        help="comma-separated row tiles a group of gate_up's tiles")
    args = parser.parse_args(argv)
    args.layers = [name.strip() for name in args.layers.split(",")]
    unknown = [name for name in args.layers if name not in LAYERS]
    if unknown:
        parser.error(f"unknown layer {unknown[0]!r}; choose from {', '.join(LAYERS)}")
    args.wdtypes = [name.strip() for name in args.wdtypes.split(",")]
    for name in args.wdtypes:
        try:
            code_type(name)
        except ValueError as err:  # (DTypeError is one)
            parser.error(f"--wdtypes: {err}")
    for option in ("m", "splits", "group_m"):
        text = getattr(args, option)
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < 1:
            parser.error(f"--{option.replace('_', '-')} takes positive integers separated "
                         f"by commas, got {text!r}")
        setattr(args, {"m": "ms", "group_m": "group_ms"}.get(option, option), values)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_options(argv)
    try:
        import torch
    except ImportError:
        print("bench.mlp_sync needs PyTorch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        print("bench.mlp_sync needs an sm_90 GPU (its kernels use wgmma)", file=sys.stderr)
        return 2
    layers, ms, splits, group_ms = args.layers, args.ms, args.splits, args.group_ms
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    gpu_name = torch.cuda.get_device_name()
    report: dict[str, Any] = {"gpu": gpu_name, "l2_bytes": l2, "rows": []}
    report["copy"] = measure_copy(torch)
    print(json.dumps(report["copy"]), flush=True)
    for wdtype in args.wdtypes:
        for name in layers:
            layer = MlpLayer(wdtype, *LAYERS[name], l2, torch)
            for M in ms:
                report["rows"] += measure_mlp(layer, name, wdtype, M, torch, gpu_name,
                                              splits, group_ms)
                print(json.dumps(report["rows"][-2 * len(POLICIES):]), flush=True)
            del layer
            torch.cuda.empty_cache()
    report["cells"] = summarize(report["rows"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mlp_sync.json").write_text(json.dumps(report, indent=1))
    (out / "mlp_sync.md").write_text(format_markdown(report))
    print(format_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
