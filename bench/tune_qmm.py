"""The tuner's searches measured over many problems: `python -m tilevm.bench.tune_qmm
OUT_DIR [options]` (issue 46's acceptance: what the searches gain over the grid's best).

For each cell (weight type x layer shape x M), as `vmc tune --qmm` does for one problem
but without storing anything in the tuning table:

1. the grid (`kernels.tilings.candidates`, single launches) timed in the tuner's runner,
   `kernels.qmm_search.grid_schedule`: its best is the start;
2. `kernels.qmm_search.tune_problem` from it within `--budget-s` (levels 1 and 2, and 3
   with `--level3 N` on sm_90), with the final checks (10^7 values against float64,
   compute-sanitizer's memcheck and racecheck) unless `--no-verify`;
3. one JSON line appended to OUT_DIR/tune_qmm.jsonl: the grid's best and the kept
   schedule, the final head-to-head's time after each level, the speedup (start over
   kept, in that head-to-head), the start's spread, what each level ran, the checks.

A cell already in the JSONL (the same type, shape, M, group size and seed) is skipped, so
a run cut short (a session's device time) goes on where it stopped; `--again` runs every
cell anew. `--shard I/N` takes every N-th cell from the I-th (0-based) of the type x
shape x M order, so that N processes, one a GPU (`CUDA_VISIBLE_DEVICES`), share the cells,
each into its own OUT_DIR; their JSONLs concatenated into one OUT_DIR make the whole
report, which a run with no cell left to time writes without a GPU. Every run rewrites
OUT_DIR/tune_qmm.md from all the lines: the table, and the median speedup over the cells
with its 95% confidence interval (`median_interval`: distribution-free, from the order
statistics), the cells never slower than the start, and each level's median
contribution.

    python -m tilevm.bench.tune_qmm out --dtypes int4,int3,f6e3m2 \\
        --shapes 8b.qkv,70b.gate_up --m 1,16,256,4096 --budget-s 120

Needs a CUDA GPU (the runner and the checks run kernels); no torch.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tilevm.backend.analysis.target import TARGETS
from tilevm.backend.cuda.errors import NoDriverError
from tilevm.backend.gpu_run import gpu_device
from tilevm.bench.protocol import WEIGHT_TYPES, parse_choices, parse_ints, parse_shapes
from tilevm.kernels.qmm_problem import QmmProblem
from tilevm.kernels.qmm_search import grid_schedule, tune_problem

JSONL = "tune_qmm.jsonl"
REPORT = "tune_qmm.md"
CONFIDENCE = 0.95


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE
                    ) -> tuple[float, float, float] | None:
    """(median, low, high): the median of `values` and a distribution-free interval that
    holds the population's median with probability at least `confidence`: the order
    statistics x_(k) and x_(n + 1 - k) (1-based) for the largest k with
    P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2. None for too few values (n < 6 at
    95%: even the extremes cover less)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - confidence) / 2
    below, k = 0.0, 0  # below: P(B < k + 1) as k grows
    while k < n:
        below += math.comb(n, k) / 2 ** n  # now P(B <= k) = P(B < k + 1)
        if below > tail:
            break
        k += 1
    if k == 0:
        return None
    return statistics.median(ordered), ordered[k - 1], ordered[n - k]


def cell_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a cell across runs."""
    return row["wdtype"], row["shape"], row["M"], row["group_size"], row["seed"]


def cell_fields(wdtype: str, shape: str, N: int, K: int, M: int,
                args: argparse.Namespace) -> dict[str, Any]:
    """A cell's row as it begins: the problem, the group size and the seed."""
    return {"wdtype": wdtype, "shape": shape, "M": M, "N": N, "K": K,
            "group_size": args.group_size, "seed": args.seed}


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSONL's lines (none if it does not exist yet)."""
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not a JSON line ({err})") from None
    return rows


def tune_cell(wdtype: str, shape: str, N: int, K: int, M: int, args: argparse.Namespace,
              hopper: bool) -> dict[str, Any]:
    """One cell: the grid, then the searches from its best (module docstring)."""
    row = {**cell_fields(wdtype, shape, N, K, M, args), "budget_s": args.budget_s}
    began = time.perf_counter()
    problem = QmmProblem(wdtype, M, N, K, group_size=args.group_size, seed=args.seed)
    start, grid_s, timed = grid_schedule(wdtype, M, N, K, hopper=hopper,
                                         group_size=args.group_size, problem=problem)
    row.update(grid=str(start), grid_us=round(grid_s * 1e6, 3), grid_timed=timed,
               grid_wall_s=round(time.perf_counter() - began, 1))
    tuned = tune_problem(wdtype, M, N, K, start=start, hopper=hopper, seed=args.seed,
                         budget_s=args.budget_s, group_size=args.group_size,
                         level3_steps=args.level3 if hopper else 0,
                         verify=not args.no_verify, problem=problem,
                         progress=lambda line: print(f"  {line}", file=sys.stderr))
    levels = {"level 1": tuned.level1, "level 2": tuned.level2, "level 3": tuned.level3}
    row.update(
        schedule=str(tuned.schedule), kept=asdict(tuned.schedule),
        ptx_moved=tuned.kernel.ptx is not None, cubin_edited=tuned.kernel.cubin is not None,
        times_us={level: round(s * 1e6, 3) for level, s in tuned.times_s.items()},
        speedup=tuned.speedup, spread=tuned.spread, undone=list(tuned.undone),
        ran={level: {"ran": search.ran, "repeated": search.repeated,
                     "rejected": search.rejected}
             for level, search in levels.items() if search is not None},
        values_checked=tuned.samples.samples if tuned.samples else None,
        checks_passed=tuned.samples.passed if tuned.samples else None,
        sanitizers={s.tool: s.clean for s in tuned.sanitizers},
        search_wall_s=round(tuned.wall_s, 1))
    return row


def summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The report's lines: the cells' table and the summary (module docstring)."""
    done = [r for r in rows if "speedup" in r]
    lines = ["# The tuner's searches against the grid's best", "",
             "| type | layer | M | grid's best | kept | start -> after each level (us) | "
             "speedup | spread | checked | sanitizers | wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "speedup" not in r:
            lines.append(f"| {r['wdtype']} | {r['shape']} | {r['M']} | "
                         f"{r.get('grid', '-')} | error: {r.get('error', '?')[:120]} "
                         f"| | | | | | |")
            continue
        times = " -> ".join(f"{t:.2f}" for t in r["times_us"].values())
        kept = "the start" if r["schedule"] == r["grid"] and not r["ptx_moved"] \
            and not r["cubin_edited"] else r["schedule"]
        checked = "-" if r["values_checked"] is None else \
            f"{r['values_checked'] / 1e6:.1f} M {'ok' if r['checks_passed'] else 'FAILED'}"
        sanitizers = ", ".join(f"{tool} {'clean' if clean else 'NOT clean'}"
                               for tool, clean in r["sanitizers"].items()) or "-"
        lines.append(f"| {r['wdtype']} | {r['shape']} | {r['M']} | {r['grid']} | {kept} | "
                     f"{times} | {r['speedup']:.3f}x | {r['spread']:.2%} | {checked} | "
                     f"{sanitizers} | {r['grid_wall_s'] + r['search_wall_s']:.0f} s |")
    lines.append("")
    if not done:
        lines.append("No cell measured yet.")
        return lines
    speedups = [r["speedup"] for r in done]
    interval = median_interval(speedups)
    lines.append(f"- {len(done)} cells measured ({len(rows) - len(done)} failed).")
    if interval is None:
        lines.append(f"- Median speedup {statistics.median(speedups):.3f}x; too few cells "
                     f"for a {CONFIDENCE:.0%} interval.")
    else:
        median, low, high = interval
        verdict = "above" if low > 1 else "not above"
        lines.append(f"- Median speedup {median:.3f}x, {CONFIDENCE:.0%} confidence "
                     f"interval [{low:.3f}, {high:.3f}]: {verdict} 1.")
    slower = [r for r in done if r["speedup"] < 1]
    lines.append(f"- Never slower than the start: {len(done) - len(slower)} of {len(done)}.")
    for level in ("level 1", "level 2", "level 3"):
        gains = [r["times_us"][_before(r["times_us"], level)] / r["times_us"][level]
                 for r in done if level in r["times_us"]]
        if gains:
            lines.append(f"- {level}: median gain {statistics.median(gains):.3f}x over "
                         f"{len(gains)} cells, best {max(gains):.3f}x.")
    return lines


def _before(times: dict[str, float], level: str) -> str:
    """The entry of the head-to-head just before `level`'s (which ran)."""
    names = list(times)
    return names[names.index(level) - 1]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tilevm.bench.tune_qmm",
        description="Time the grid and the tuner's searches on many quantized-matmul "
                    "problems; append one JSON line per cell to OUT_DIR/tune_qmm.jsonl "
                    "(cells already there are skipped) and write OUT_DIR/tune_qmm.md.")
    p.add_argument("out", type=Path, metavar="OUT_DIR")
    p.add_argument("--dtypes", default="int4,int3,f6e3m2",
                   help="weight types, comma-separated (default: %(default)s)")
    p.add_argument("--shapes", default="8b.qkv,70b.gate_up",
                   help="layer shapes: names, groups or NxK (default: %(default)s)")
    p.add_argument("--m", default="1,16,256,4096",
                   help="rows of x, comma-separated (default: %(default)s)")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--budget-s", type=float, default=600.0,
                   help="the searches' budget per cell, seconds (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--level3", type=int, default=0, metavar="N",
                   help="on sm_90: N proposals of control-bit edits (default: none)")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the final checks (10^7 values, compute-sanitizer)")
    p.add_argument("--again", action="store_true",
                   help="run every cell, also those already in the JSONL")
    p.add_argument("--shard", default="0/1", metavar="I/N",
                   help="take every N-th cell from the I-th (0-based; default 0/1: all)")
    return p


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` -> (I, N), 0 <= I < N."""
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i, n = -1, 0
    if not sep or not 0 <= i < n:
        raise ValueError(f"--shard takes I/N with 0 <= I < N, got {text!r}")
    return i, n


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        dtypes = parse_choices(args.dtypes, WEIGHT_TYPES, "weight type")
        shapes = parse_shapes(args.shapes)
        ms = parse_ints(args.m)
        shard, shards = parse_shard(args.shard)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.budget_s <= 0 or args.group_size <= 0:
        print("error: --budget-s and --group-size must be positive", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / JSONL
    try:
        rows = read_rows(path)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    done = {cell_key(r) for r in rows if "speedup" in r}
    cells = [(wdtype, shape, N, K, M) for wdtype in dtypes for shape, N, K in shapes
             for M in ms][shard::shards]
    keys = {c: cell_key(cell_fields(*c, args)) for c in cells}
    todo = [c for c in cells if args.again or keys[c] not in done]
    device = None
    if todo:
        try:
            device = gpu_device()
        except NoDriverError as err:
            print(f"error: no GPU found ({err}); the searches time kernels on one",
                  file=sys.stderr)
            return 1
        if device.arch not in TARGETS:
            print(f"error: the GPU is {device.arch}, which tilevm does not compile for",
                  file=sys.stderr)
            return 1
    for cell in todo:
        wdtype, shape, N, K, M = cell
        print(f"{wdtype} {shape} M={M} on {device.name}", file=sys.stderr)
        try:
            row = tune_cell(wdtype, shape, N, K, M, args, device.arch == "sm_90a")
        except Exception as err:  # a cell that cannot be tuned: said, go on
            row = {**cell_fields(wdtype, shape, N, K, M, args),
                   "error": f"{type(err).__name__}: {err}"}
        rows = [r for r in rows if cell_key(r) != keys[cell]] + [row]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / REPORT).write_text("\n".join(summary(rows)) + "\n")
    lines = summary(rows)
    (args.out / REPORT).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-6:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
