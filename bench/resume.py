"""Resuming a quantized-matmul benchmark run (`python -m tilevm.bench.qmm OUT --resume`):
which configurations OUT/qmm.json already holds, and whether the run may add to it.

The whole protocol matrix (eight layers, five batch sizes, six weight types, three
backends, the graph method) takes longer than one GPU session allows, so a run can stop
at its `--budget-s` and a later one finish it. A resumed run keeps every row of the
previous one whose configuration was measured (its kernel checked: "ok", "fail" or
"error"), times the configurations it lacks or skipped (out of budget, a peer not
installed), and records each part's date, commit, ceilings and configurations under
"parts". It refuses to mix what must not be mixed: another GPU, or other timing options
(methods, L2 flush, group size, seed, runs per median).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from tilevm.bench.protocol import Config, Options

# Options a resumed run must share with the run it adds to: they change what a row's
# time means.
SHARED_OPTIONS = ("methods", "l2_flush", "group_size", "seed", "min_reps")
MEASURED = ("ok", "fail", "error")  # a row whose configuration needs no second run


class NotResumable(ValueError):
    """OUT/qmm.json cannot take this run's results (what differs, in the message)."""


def load_previous(out: str) -> dict[str, Any] | None:
    """OUT/qmm.json when it holds a run that ran (None when there is none, or it was
    skipped for want of a GPU); a file that is not a benchmark report is an error."""
    path = os.path.join(out, "qmm.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as err:
        raise NotResumable(f"cannot resume from {path}: {err}") from err
    if not isinstance(report, dict) or report.get("benchmark") != "qmm":
        raise NotResumable(f"cannot resume from {path}: not a qmm benchmark report")
    return report if report.get("status") == "ran" else None


def check_resumable(previous: Mapping[str, Any], gpu: str, options: Options) -> None:
    """Raise `NotResumable` naming the first thing that differs between `previous` and this
    run (on `gpu` with `options`) and keeps the two from being one run."""
    was = previous.get("environment", {}).get("gpu")
    if was != gpu:
        raise NotResumable(f"the previous run was on {was!r}, this GPU is {gpu!r}")
    before = previous.get("options", {})
    for name in SHARED_OPTIONS:
        now = getattr(options, name)
        if before.get(name) != now:
            raise NotResumable(f"the previous run had {name}={before.get(name)!r}, this "
                               f"one {now!r}: resume with the same value or a new OUT_DIR")


def config_key(item: Config | Mapping[str, Any]) -> tuple:
    """What identifies a configuration, of a `Config` or of a result row (whose fields
    are the `Config`'s: `bench.qmm`)."""
    values = item if isinstance(item, Mapping) else asdict(item)
    return tuple(values[k] for k in ("backend", "shape", "N", "K", "M", "wdtype", "act",
                                     "group_size"))


def measured_keys(rows: Iterable[Mapping[str, Any]]) -> set[tuple]:
    """The configurations (`config_key`) that `rows` measured."""
    return {config_key(r) for r in rows if r.get("status") in MEASURED}


def measured_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of `rows` whose configuration was measured (every row of it: the graph
    row beside the isolated one); the others (skipped) are run again."""
    rows = list(rows)
    done = measured_keys(rows)
    return [r for r in rows if config_key(r) in done]


def pending(configs: Sequence[Config], rows: Iterable[Mapping[str, Any]]) -> list[Config]:
    """The configurations of `configs` that `rows` did not measure, in order."""
    done = measured_keys(rows)
    return [c for c in configs if config_key(c) not in done]


def part_of(report: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What "parts" records of one run that measured `rows`: its date, commit, time,
    ceilings and how many configurations it measured."""
    measured = len(measured_keys(rows))
    return {"date": report.get("date"),
            "tilevm_commit": report.get("environment", {}).get("tilevm_commit"),
            "elapsed_s": report.get("elapsed_s"), "ceilings": report.get("ceilings"),
            "configurations": measured}
