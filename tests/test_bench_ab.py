"""`tilevm.bench.ab`'s summary of A/B rows (the timing itself needs a GPU: the archived
scripts under bench/results/ run it)."""

from __future__ import annotations

import json
import math
import os
import sys
from types import SimpleNamespace

import pytest

from tilevm.bench import ab


def _row(shape, dtype, us, inflight=None, sums=None):
    row = {} if inflight is None else {"inflight": inflight}
    return {**row, "shape": shape, "dtype": dtype, "us": us,
            "sums": sums or {label: 1.5 for label in us}}


def test_summary_is_the_best_round_over_the_baseline_and_its_geomean():
    rows = [_row("8b.qkv", "int4", {"a": 100.0, "b": 90.0}),
            _row("70b.o", "int4", {"a": 200.0, "b": 220.0}),
            _row("8b.qkv", "int4", {"a": 104.0, "b": 81.0})]  # a second round
    lines = ab.summarize(rows)
    assert lines[0] == "8b.qkv int4 100.0 us: a 1.000 (1.04), b 0.810 (1.11)"
    assert lines[1] == "70b.o int4 200.0 us: a 1.000 (1.00), b 1.100 (1.00)"
    assert lines[2] == f"int4 geomean: a 1.000, b {math.sqrt(0.81 * 1.1):.3f}"
    assert ab.summarize(rows, "b")[0] == \
        f"8b.qkv int4 81.0 us: a {100 / 81:.3f} (1.04), b 1.000 (1.11)"


def test_a_tag_names_the_variants_of_each_process():
    rows = [_row("8b.qkv", "f6e3m2", {"ss": 50.0}, inflight=1),
            _row("8b.qkv", "f6e3m2", {"ss": 45.0}, inflight=2)]
    assert ab.variant_key(rows[1], "ss") == "inflight=2:ss"
    assert ab.summarize(rows)[-1] == \
        "f6e3m2 geomean: inflight=1:ss 1.000, inflight=2:ss 0.900"


def test_variants_that_disagree_are_an_error(tmp_path, capsys):
    bad = [_row("70b.down", "int8", {"a": 1.0, "b": 1.0}, sums={"a": 1.0, "b": 2.0})]
    with pytest.raises(ValueError, match="disagree on 70b.down int8"):
        ab.summarize(bad)
    path = tmp_path / "ab.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in
                            [_row("8b.qkv", "int3", {"x": 10.0, "y": 5.0})]))
    ab.main([str(path)])
    assert capsys.readouterr().out.splitlines()[-1] == "int3 geomean: x 1.000, y 0.500"
    with pytest.raises(SystemExit, match="usage"):
        ab.main([])


def test_profile_once_warms_every_launch_then_runs_each_once_in_the_profiled_range(
        monkeypatch):
    events = []
    log = lambda name: lambda: events.append(name)  # noqa: E731
    profiler = SimpleNamespace(start=log("start"), stop=log("stop"))
    torch = SimpleNamespace(cuda=SimpleNamespace(synchronize=log("sync"), profiler=profiler))
    monkeypatch.setitem(sys.modules, "torch", torch)  # (no GPU needed: a stand-in)
    ab.profile_once(log(name) for name in "ab")
    assert events == ["a", "a", "b", "b", "sync", "start", "a", "b", "sync", "stop"]
    events.clear()
    ab.profile_once([log("c")], warmups=1)
    assert events == ["c", "sync", "start", "c", "sync", "stop"]


def test_build_renamed_with_env_sets_the_variable_only_for_programs_so_named(monkeypatch):
    from tilevm.backend import launch

    seen = []
    monkeypatch.setattr(launch, "build_artifact",
                        lambda program, arch: seen.append(
                            (program.name, os.environ.get("TILEVM_TEST_SWITCH"))))
    monkeypatch.setenv("TILEVM_TEST_SWITCH", "before")
    ab.build_renamed_with_env("_on", "TILEVM_TEST_SWITCH", "2")
    launch.build_artifact(SimpleNamespace(name="k_on"), "sm_90a")
    launch.build_artifact(SimpleNamespace(name="k"), "sm_90a")
    assert seen == [("k_on", "2"), ("k", "before")]
    assert os.environ["TILEVM_TEST_SWITCH"] == "before"  # restored after the build
