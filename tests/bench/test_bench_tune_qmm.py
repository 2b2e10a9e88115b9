"""bench.tune_qmm: the median's distribution-free interval against the binomial law, the
report's summary, resuming from the JSONL, and (on a GPU) one cell end to end."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
from kernel_harness import require_sm90

from tilevm.bench import tune_qmm


def _binomial_below(n: int, k: int) -> Fraction:
    """P(Binomial(n, 1/2) < k), exactly."""
    return Fraction(sum(math.comb(n, i) for i in range(k)), 2 ** n)


@pytest.mark.parametrize("n", [6, 7, 10, 24, 25, 60])
def test_the_interval_is_the_widest_order_statistics_the_binomial_law_allows(n):
    """x_(k), x_(n + 1 - k) for the largest k whose tails P(B < k) each stay within
    2.5%: coverage 1 - 2 P(B < k) >= 95%, and one step narrower would fall short."""
    values = [float(v) for v in range(100, 100 + n)]  # x_(i) = 99 + i
    median, low, high = tune_qmm.median_interval(values[::-1])  # (order does not matter)
    k = int(low) - 99
    assert high == 100 + n - k and median == (values[(n - 1) // 2] + values[n // 2]) / 2
    assert 1 - 2 * _binomial_below(n, k) >= Fraction(95, 100)
    assert 1 - 2 * _binomial_below(n, k + 1) < Fraction(95, 100)
    if n == 24:  # the textbook's ranks for 24 values
        assert (low, high) == (106.0, 117.0)


def test_too_few_values_give_no_interval():
    assert tune_qmm.median_interval([1.0, 1.1, 1.2, 1.3, 1.4]) is None  # 2 / 32 > 5%
    with pytest.raises(ValueError, match="confidence must be between 0 and 1"):
        tune_qmm.median_interval([1.0] * 10, confidence=1.0)


def _row(wdtype, M, speedup, times=None):
    times = times or {"start": 10.0 * speedup, "level 1": 10.0, "level 2": 10.0}
    return {"wdtype": wdtype, "shape": "8b.qkv", "M": M, "N": 12288, "K": 4096,
            "group_size": 128, "seed": 1, "grid": "bm=8 split_k=8", "grid_us": 15.0,
            "grid_wall_s": 10.0, "schedule": "bm=8 split_k=6" if speedup > 1 else
            "bm=8 split_k=8", "ptx_moved": False, "cubin_edited": False, "times_us": times,
            "speedup": speedup, "spread": 0.01, "values_checked": 10_000_000,
            "checks_passed": True, "sanitizers": {"memcheck": True, "racecheck": True},
            "search_wall_s": 90.0}


def test_the_summary_reports_the_median_interval_and_each_levels_gain():
    rows = [_row("int4", M, s) for M, s in zip(range(1, 8), (1.0, 1.0, 1.05, 1.08, 1.0,
                                                             1.02, 1.1))]
    rows.append({"wdtype": "int3", "shape": "8b.qkv", "M": 1, "group_size": 128,
                 "seed": 1, "error": "RuntimeError: the runner died"})
    text = "\n".join(tune_qmm.summary(rows))
    median, low, high = tune_qmm.median_interval([r["speedup"] for r in rows[:7]])
    assert f"Median speedup {median:.3f}x, 95% confidence interval [{low:.3f}, " \
           f"{high:.3f}]: not above 1." in text
    assert "7 cells measured (1 failed)" in text and "error: RuntimeError" in text
    assert "Never slower than the start: 7 of 7." in text
    assert "level 1: median gain 1.020x over 7 cells, best 1.100x." in text
    assert "level 2: median gain 1.000x" in text and "level 3" not in text
    assert "| the start |" in text and "| bm=8 split_k=6 |" in text


def test_a_run_skips_the_cells_its_jsonl_holds(tmp_path, monkeypatch):
    """Cells already measured (same type, shape, M, group size, seed) are not run again;
    a failed one is; the JSONL keeps one line a cell."""
    done = _row("int4", 1, 1.05)
    failed = {**_row("int4", 16, 1.0), "error": "TimeoutError"}
    del failed["speedup"]
    (tmp_path / tune_qmm.JSONL).write_text(json.dumps(done) + "\n" + json.dumps(failed)
                                           + "\n")
    ran = []

    def fake_cell(wdtype, shape, N, K, M, args, hopper):
        ran.append((wdtype, shape, M))
        return _row(wdtype, M, 1.0)

    monkeypatch.setattr(tune_qmm, "tune_cell", fake_cell)
    monkeypatch.setattr(tune_qmm, "gpu_device",
                        lambda: type("Device", (), {"name": "H100", "arch": "sm_90a"})())
    assert tune_qmm.main([str(tmp_path), "--dtypes", "int4", "--shapes", "8b.qkv",
                          "--m", "1,16,256"]) == 0
    assert ran == [("int4", "8b.qkv", 16), ("int4", "8b.qkv", 256)]
    rows = tune_qmm.read_rows(tmp_path / tune_qmm.JSONL)
    assert [(r["M"], r["speedup"]) for r in rows] == [(1, 1.05), (16, 1.0), (256, 1.0)]
    assert "3 cells measured (0 failed)" in (tmp_path / tune_qmm.REPORT).read_text()


def test_shards_share_the_cells_and_their_jsonls_make_the_report(tmp_path, monkeypatch):
    """`--shard I/N`: every N-th cell from the I-th, in the type x shape x M order; the
    shards' JSONLs concatenated are the whole run, whose report needs no GPU."""
    ran = {}

    def fake_cell(wdtype, shape, N, K, M, args, hopper):
        ran.setdefault(args.shard, []).append((wdtype, M))
        return _row(wdtype, M, 1.0 + M / 1000)

    monkeypatch.setattr(tune_qmm, "tune_cell", fake_cell)
    monkeypatch.setattr(tune_qmm, "gpu_device",
                        lambda: type("Device", (), {"name": "H200", "arch": "sm_90a"})())
    options = ["--dtypes", "int4,int3", "--shapes", "8b.qkv", "--m", "1,16,256"]
    for shard in ("0/2", "1/2"):
        assert tune_qmm.main([str(tmp_path / shard[0]), *options, "--shard", shard]) == 0
    assert ran == {"0/2": [("int4", 1), ("int4", 256), ("int3", 16)],
                   "1/2": [("int4", 16), ("int3", 1), ("int3", 256)]}
    merged = tmp_path / "all"
    merged.mkdir()
    (merged / tune_qmm.JSONL).write_text("".join(
        (tmp_path / d / tune_qmm.JSONL).read_text() for d in "01"))

    def no_gpu():
        raise AssertionError("no cell is left to time: no GPU needed")

    monkeypatch.setattr(tune_qmm, "gpu_device", no_gpu)
    assert tune_qmm.main([str(merged), *options]) == 0
    assert "6 cells measured (0 failed)" in (merged / tune_qmm.REPORT).read_text()
    for bad in ("2/2", "1", "a/b", "-1/2"):
        assert tune_qmm.main([str(merged), *options, f"--shard={bad}"]) == 2


def test_bad_options_and_a_broken_jsonl_are_errors(tmp_path, capsys):
    assert tune_qmm.main([str(tmp_path), "--dtypes", "int9"]) == 2
    assert "unknown weight type int9" in capsys.readouterr().err
    assert tune_qmm.main([str(tmp_path), "--budget-s", "0"]) == 2
    (tmp_path / tune_qmm.JSONL).write_text("{not json\n")
    assert tune_qmm.main([str(tmp_path)]) == 2
    assert f"{tmp_path / tune_qmm.JSONL}:1: not a JSON line" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_one_cell_end_to_end(tmp_path):
    """A small decode problem: the grid, the searches within 10 s (the final checks are
    `tune_problem`'s tests'); the kept kernel is never slower than the start in the
    final head-to-head; a second run finds the cell done."""
    require_sm90("the tuner's wgmma candidates")
    argv = [str(tmp_path), "--dtypes", "int4", "--shapes", "512x1024", "--m", "16",
            "--budget-s", "10", "--no-verify"]
    assert tune_qmm.main(argv) == 0
    (row,) = tune_qmm.read_rows(tmp_path / tune_qmm.JSONL)
    assert "error" not in row, row.get("error")
    assert row["speedup"] >= 1.0 and row["values_checked"] is None
    assert list(row["times_us"])[0] == "start" and row["grid_timed"] > 1
    assert tune_qmm.main(argv) == 0
    assert tune_qmm.read_rows(tmp_path / tune_qmm.JSONL) == [row]
