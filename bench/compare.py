"""tilevm against a peer over several runs of the quantized-matmul benchmark:
`python -m tilevm.bench.compare RUN.json [RUN.json ...] [--peer humming] [--method graph]
[-o OUT.md]` (issue 48's acceptance, reported cell by cell).

Each RUN.json is a `python -m tilevm.bench.qmm` report (its "results" rows). A cell is
(shape, M, weight type, activation type); per cell and backend the times of the runs
that measured it with `--method` (rows whose check passed). For each cell the table gives
tilevm's and the peer's median time over the runs, the run-to-run spread (max / min - 1
of each backend's times, the larger of the two), our speed over the peer's (the peer's
median over ours), and the verdict: "ok" where tilevm's median is at most the peer's
times (1 + spread), i.e. no slower than the run-to-run spread; "slower" otherwise. Below
the table: the cells of each verdict, and the geometric mean of our speed over the cells.

A cell that only one backend measured, or measured in fewer runs than the others, is
listed as such; it is not left out silently.

Then the issue's other figures, from the same rows: the cells by batch size (passing,
geometric mean, range); in decode (M = 1 and 16, `DECODE_LAYERS`, `DECODE_TYPES`) each
backend's cells at `COPY_FRACTION` of the copy bandwidth its run measured (a cell's
bytes over its time, the median over the runs) and where int2 ends; and at M = 4096
each backend's cells under cuBLAS f16 (the rows' `speedup_vs_cublas`, the median over
the runs); and where the runs timed tilevm by both methods, its cells whose graph time
is at most its isolated time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Cell = tuple[str, int, str, str]  # shape, M, weight type, activation type

# Issue 48's decode criterion: these layers and types at M = 1 and 16, at this fraction
# of the copy bandwidth; int2 reported apart (where it ends).
DECODE_LAYERS = ("70b.qkv", "70b.o", "70b.gate_up", "70b.down", "8b.gate_up", "8b.down")
DECODE_TYPES = ("int4", "uint4", "int3", "f6e3m2", "int8")
COPY_FRACTION = 0.92


@dataclass(frozen=True)
class Compared:
    """One cell of the comparison (module docstring)."""

    cell: Cell
    ours: tuple[float, ...]  # tilevm's times (us), one a run
    peers: tuple[float, ...]  # the peer's

    @property
    def spread(self) -> float:
        return max(max(t) / min(t) - 1 for t in (self.ours, self.peers))

    @property
    def speed(self) -> float:
        """Our speed over the peer's: its median time over ours."""
        return statistics.median(self.peers) / statistics.median(self.ours)

    @property
    def ok(self) -> bool:
        return statistics.median(self.ours) <= statistics.median(self.peers) \
            * (1 + self.spread)


def read_run(path: Path) -> dict[str, Any]:
    """One bench report (its "results" rows, its "ceilings")."""
    try:
        report = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise ValueError(f"{path} is not a `tilevm.bench.qmm` report (no \"results\" list)")
    return report


def times(runs: Sequence[list[dict[str, Any]]], backend: str, method: str,
          value: Callable[[dict[str, Any], int], float] | None = None
          ) -> dict[Cell, list[float]]:
    """Per cell, `value(row, run index)` of `backend`'s passing rows with `method` (their
    times in us by default), one a run that has it."""
    found: dict[Cell, list[float]] = {}
    for i, rows in enumerate(runs):
        for r in rows:
            if r.get("backend") != backend or r.get("method", "isolated") != method \
                    or not r.get("check_passed") or r.get("us") is None:
                continue
            cell = (r["shape"], int(r["M"]), r["wdtype"], r["act"])
            found.setdefault(cell, []).append(float(r["us"]) if value is None else value(r, i))
    return found


def medians(runs: Sequence[list[dict[str, Any]]], backend: str, method: str,
            value: Callable[[dict[str, Any], int], float] | None = None
            ) -> dict[Cell, float]:
    """Per cell, the median over the runs of `times`' values; cells whose rows lack the
    value (NaN) left out."""
    found = {cell: statistics.median(v)
             for cell, v in times(runs, backend, method, value).items()}
    return {cell: v for cell, v in found.items() if not math.isnan(v)}


def compare(runs: Sequence[list[dict[str, Any]]], peer: str, method: str
            ) -> tuple[list[Compared], list[str]]:
    """The cells both backends measured in every run, and notes on the others."""
    ours, peers = times(runs, "tilevm", method), times(runs, peer, method)
    compared, notes = [], []
    for cell in sorted(set(ours) | set(peers)):
        a, b = ours.get(cell, []), peers.get(cell, [])
        name = f"{cell[0]} M={cell[1]} {cell[2]} {cell[3]}"
        if not a or not b:
            notes.append(f"{name}: only {'tilevm' if a else peer} measured it")
            continue
        if len(a) != len(runs) or len(b) != len(runs):
            notes.append(f"{name}: measured in {len(a)} (tilevm) and {len(b)} ({peer}) "
                         f"of {len(runs)} runs")
        compared.append(Compared(cell, tuple(a), tuple(b)))
    return compared, notes


def geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def by_batch(compared: Sequence[Compared]) -> list[str]:
    """The table of the cells by M: passing, geometric mean and range of our speed."""
    lines = ["| M | cells passing | geomean | range |", "|---|---|---|---|"]
    for M in sorted({c.cell[1] for c in compared}):
        cells = [c for c in compared if c.cell[1] == M]
        speeds = [c.speed for c in cells]
        lines.append(f"| {M} | {sum(c.ok for c in cells)} / {len(cells)} | "
                     f"{geomean(speeds):.3f}x | {min(speeds):.2f}-{max(speeds):.2f}x |")
    return lines


def copy_fractions(runs: Sequence[list[dict[str, Any]]], copy_bw: Sequence[float],
                   backend: str, method: str) -> dict[Cell, float]:
    """Per decode cell (M = 1, 16 on `DECODE_LAYERS`), the median over the runs of its
    bytes a second over its run's copy bandwidth (bytes/s)."""
    fractions = medians(runs, backend, method, lambda r, i: float(
        r.get("bytes") or math.nan) / (float(r["us"]) * 1e-6) / copy_bw[i])
    return {cell: f for cell, f in fractions.items()
            if cell[1] in (1, 16) and cell[0] in DECODE_LAYERS}


def decode_lines(runs: Sequence[list[dict[str, Any]]], copy_bw: Sequence[float],
                 backends: Sequence[str], method: str) -> list[str]:
    lines = []
    for backend in backends:
        fractions = copy_fractions(runs, copy_bw, backend, method)
        named = {c: f for c, f in fractions.items() if c[2] in DECODE_TYPES}
        if not named:
            continue
        low = min(named, key=named.get)
        int2 = [f for c, f in fractions.items() if c[2] == "int2"]
        lines.append(
            f"- {backend}, M = 1 and 16 on {', '.join(DECODE_LAYERS)} "
            f"({', '.join(DECODE_TYPES)}): {sum(f >= COPY_FRACTION for f in named.values())}"
            f" of {len(named)} cells at {COPY_FRACTION:.0%} of the copy bandwidth or more; "
            f"lowest {low[0]} M={low[1]} {low[2]} ({named[low]:.0%})"
            + (f"; int2 {min(int2):.0%}-{max(int2):.0%}" if int2 else "") + ".")
    return lines


def prefill_lines(runs: Sequence[list[dict[str, Any]]], backends: Sequence[str],
                  method: str) -> list[str]:
    lines = []
    for backend in backends:
        speedups = medians(runs, backend, method,
                           lambda r, i: float(r.get("speedup_vs_cublas") or math.nan))
        measured = {c: v for c, v in speedups.items() if c[1] == 4096}
        if not measured:
            continue
        under = sorted((v, c) for c, v in measured.items() if v < 1.0)
        lines.append(
            f"- {backend}, M = 4096: {len(under)} of {len(measured)} cells under cuBLAS f16"
            + (f" (lowest {under[0][1][0]} {under[0][1][2]} {under[0][0]:.2f}x)"
               if under else "") + ".")
    return lines


def graph_against_isolated(runs: Sequence[list[dict[str, Any]]]) -> list[str]:
    """Where the runs timed tilevm both ways: its cells whose graph time (back to back,
    the median over the runs) is at most its isolated time (one call after an L2 flush),
    as issue 48 asks."""
    graph, isolated = medians(runs, "tilevm", "graph"), medians(runs, "tilevm", "isolated")
    both = sorted(set(graph) & set(isolated))
    if not both:
        return []
    ratios = {c: graph[c] / isolated[c] for c in both}
    over = sorted(((r, c) for c, r in ratios.items() if r > 1.0), reverse=True)
    return [f"- tilevm, graph against isolated: {len(both) - len(over)} of {len(both)} "
            f"cells at most the isolated time" + (
                f"; the most over: {over[0][1][0]} M={over[0][1][1]} {over[0][1][2]} "
                f"({over[0][0]:.2f}x)" if over else "") + "."]


def report(compared: Sequence[Compared], notes: Sequence[str], peer: str, method: str,
           runs: int) -> str:
    lines = [f"# tilevm against {peer} ({method} method, {runs} run{'s' * (runs > 1)})", "",
             f"| layer | M | weights | act | tilevm us | {peer} us | spread | speed | "
             f"verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for c in compared:
        lines.append(f"| {c.cell[0]} | {c.cell[1]} | {c.cell[2]} | {c.cell[3]} | "
                     f"{statistics.median(c.ours):.1f} | {statistics.median(c.peers):.1f} | "
                     f"{c.spread:.1%} | {c.speed:.2f}x | {'ok' if c.ok else 'slower'} |")
    lines.append("")
    if compared:
        slower = [c for c in compared if not c.ok]
        lines.append(f"- {len(compared) - len(slower)} of {len(compared)} cells at least "
                     f"{peer}'s time within the run-to-run spread; slower: "
                     + (", ".join(f"{c.cell[0]} M={c.cell[1]} {c.cell[2]} ({c.speed:.2f}x)"
                                  for c in slower) or "none") + ".")
        lines.append(f"- Our speed over {peer}'s, geometric mean over the cells: "
                     f"{geomean([c.speed for c in compared]):.3f}x.")
    else:
        lines.append(f"- No cell that both tilevm and {peer} measured.")
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tilevm.bench.compare",
        description="Compare tilevm with a peer over runs of `python -m tilevm.bench.qmm`: "
                    "per cell the median times, the run-to-run spread and a verdict.")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN.json")
    p.add_argument("--peer", default="humming", help="the peer backend (default: humming)")
    p.add_argument("--method", default="graph", choices=("graph", "eager", "isolated"))
    p.add_argument("-o", "--output", type=Path, help="write the report here (default: stdout)")
    args = p.parse_args(argv)
    try:
        reports = [read_run(path) for path in args.runs]
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    runs = [r["results"] for r in reports]
    compared, notes = compare(runs, args.peer, args.method)
    text = report(compared, notes, args.peer, args.method, len(runs))
    if compared:
        text += "\n## By batch size\n\n" + "\n".join(by_batch(compared)) + "\n"
    backends = ("tilevm", args.peer)
    copy_bw = [float((r.get("ceilings") or {}).get("copy_bw_bytes_per_s") or math.nan)
               for r in reports]
    extra = prefill_lines(runs, backends, args.method) + graph_against_isolated(runs)
    if not any(math.isnan(bw) for bw in copy_bw):
        extra = decode_lines(runs, copy_bw, backends, args.method) + extra
    if extra:
        text += "\n## Decode and prefill\n\n" + "\n".join(extra) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
