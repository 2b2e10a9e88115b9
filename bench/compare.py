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
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Cell = tuple[str, int, str, str]  # shape, M, weight type, activation type


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


def read_run(path: Path) -> list[dict[str, Any]]:
    """The result rows of one bench report."""
    try:
        report = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise ValueError(f"{path} is not a `tilevm.bench.qmm` report (no \"results\" list)")
    return report["results"]


def times(runs: Sequence[list[dict[str, Any]]], backend: str, method: str
          ) -> dict[Cell, list[float]]:
    """Per cell, `backend`'s passing times (us) with `method`, one a run that has it."""
    found: dict[Cell, list[float]] = {}
    for rows in runs:
        for r in rows:
            if r.get("backend") != backend or r.get("method", "isolated") != method \
                    or not r.get("check_passed") or r.get("us") is None:
                continue
            cell = (r["shape"], int(r["M"]), r["wdtype"], r["act"])
            found.setdefault(cell, []).append(float(r["us"]))
    return found


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
        geomean = math.exp(statistics.fmean(math.log(c.speed) for c in compared))
        lines.append(f"- {len(compared) - len(slower)} of {len(compared)} cells at least "
                     f"{peer}'s time within the run-to-run spread; slower: "
                     + (", ".join(f"{c.cell[0]} M={c.cell[1]} {c.cell[2]} ({c.speed:.2f}x)"
                                  for c in slower) or "none") + ".")
        lines.append(f"- Our speed over {peer}'s, geometric mean over the cells: "
                     f"{geomean:.3f}x.")
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
        runs = [read_run(path) for path in args.runs]
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    compared, notes = compare(runs, args.peer, args.method)
    text = report(compared, notes, args.peer, args.method, len(runs))
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
