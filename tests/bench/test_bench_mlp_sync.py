"""`tilevm.bench.mlp_sync`: its copy -> copy pair copies every element under any
interleaving of its blocks (interpreter), its summary picks the faster policy and
compares it with the serialized time, and on the GPU one small run checks its outputs
(bitwise, and against float64) and writes its report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilevm.bench import mlp_sync
from tilevm.bench.mlp_sync import copy_then_post, summarize, wait_then_copy
from tilevm.vm.interpreter import run_together

BLOCK = 64


@pytest.mark.parametrize("sync, seed", [(True, 0), (True, 1), (True, None), (False, None)])
def test_the_copy_pair_copies_every_element(sync, seed):
    n = 5 * BLOCK - 7  # ragged
    a = np.random.default_rng(seed or 0).standard_normal(n).astype(np.float32)
    b, c = np.zeros_like(a), np.zeros_like(a)
    sem = np.zeros(5, np.int32)
    first = copy_then_post.specialize(block=BLOCK, sync=sync)
    second = wait_then_copy.specialize(block=BLOCK, sync=sync)
    if sync:  # the consumer's blocks first: they must wait for their tile
        run_together([(second, [b, c, sem, n, 1]), (first, [a, b, sem, n])], seed=seed)
        assert (sem == 1).all()
    else:
        run_together([(first, [a, b, sem, n])])
        run_together([(second, [b, c, sem, n, 1])])
    np.testing.assert_array_equal(c, a)


def test_summary_takes_the_fastest_split_and_policy_and_the_fastest_serialized_time():
    cell = dict(layer="8b", wdtype="int4", M=128)
    rows = [dict(cell, policy=p, split_k=s, synchronized=sync, us=us, chosen=p == "row",
                 blocks_per_sm_cap=cap)
            for p, s, sync, cap, us in [
                ("row", 1, False, None, 100.0), ("row", 1, True, None, 90.0),
                ("row", 1, True, 1, 91.0), ("row", 2, False, None, 97.0),
                ("row", 2, True, None, 95.0), ("tile", 1, False, None, 98.0),
                ("tile", 1, True, None, 85.0), ("tile", 2, False, None, 99.0),
                ("tile", 2, True, 2, 80.0), ("tile", 2, True, None, 82.0)]]
    rows[-2]["group_m"] = 1
    (got,) = summarize(rows)
    assert got["serialized_us"] == 97.0 and got["serialized_split"] == 2
    assert got["row_us"] == 90.0 and got["row_split"] == 1
    assert got["tile_us"] == 80.0 and got["tile_split"] == 2 and got["tile_capped"]
    assert not got["row_capped"]
    assert got["best"] == "tile" and got["speedup"] == pytest.approx(97.0 / 80.0)
    assert got["chosen"] == "row" and not got["chosen_is_best"]
    table = mlp_sync.format_markdown({"gpu": "G", "copy": dict(
        tiles=1, bytes=1 << 20, plain_us=1.0, sync_us=1.0, overhead=0.0), "cells": [got]})
    assert "| 8b | int4 | 128 | 97.0 (2) | 90.0 (1) | 80.0 (2/g1*) | 1.212 | tile | row |" in table


@pytest.mark.gpu
def test_gpu_a_small_run_checks_its_outputs_and_writes_the_report(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs sm_90")
    assert mlp_sync.main([str(tmp_path), "--layers", "8b", "--wdtypes", "int4",
                          "--m", "200", "--splits", "1,3", "--group-m", "8,1"]) == 0
    report = json.loads((tmp_path / "mlp_sync.json").read_text())
    assert report["copy"]["sync_correct"] and report["copy"]["plain_correct"]
    assert report["copy"]["tiles"] % torch.cuda.get_device_properties(0) \
        .multi_processor_count == 0
    for row in report["rows"]:
        if row["synchronized"]:
            assert row["bitwise_equal"]
        else:
            assert row["h_error"] < 1e-2 and row["y_error"] < 1e-2
        assert row["us"] > 0
    (cell,) = report["cells"]
    assert cell["M"] == 200 and cell["best"] in ("row", "tile")
    assert "| 8b | int4 | 200 |" in (tmp_path / "mlp_sync.md").read_text()


def test_options_default_to_the_issues_shapes_and_split_their_lists():
    o = mlp_sync.parse_options(["out"])
    assert o.layers == ["8b", "70b"] and o.wdtypes == ["int4", "int3"]
    assert o.ms == [128, 256, 512, 1024, 2048] and o.splits == [1, 2, 4] and o.group_ms == [8]
    o = mlp_sync.parse_options(["out", "--m", "200", "--splits", "3", "--group-m", "1,8"])
    assert o.ms == [200] and o.splits == [3] and o.group_ms == [1, 8]


@pytest.mark.parametrize("argv, message", [
    (["--layers", "8b,13b"], "unknown layer '13b'"),
    (["--wdtypes", "int9"], "unknown data type 'int9'"),
    (["--wdtypes", "f16"], "1..8-bit codes"),
    (["--m", "0"], "--m takes positive integers"),
    (["--splits", "2,x"], "--splits takes positive integers"),
    (["--group-m", ""], "--group-m takes positive integers")])
def test_bad_options_exit_with_status_2_and_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as err:
        mlp_sync.parse_options(["out", *argv])
    assert err.value.code == 2 and message in capsys.readouterr().err
