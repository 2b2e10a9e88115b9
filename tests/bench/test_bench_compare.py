"""`tilevm.bench.compare`: per cell the medians over runs, the run-to-run spread, the
verdict against the peer, the geometric mean, and the cells it cannot compare."""

from __future__ import annotations

import json
import math

import pytest

from tilevm.bench import compare


def _row(backend, shape, M, us, method="graph", passed=True, wdtype="int4"):
    return {"backend": backend, "shape": shape, "M": M, "wdtype": wdtype, "act": "f16",
            "method": method, "check_passed": passed, "us": us}


def _write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text(json.dumps({"benchmark": "qmm", "results": rows}))
    return path


def test_cells_get_medians_spreads_and_verdicts(tmp_path, capsys):
    runs = [
        [_row("tilevm", "8b.qkv", 1, 10.0), _row("humming", "8b.qkv", 1, 12.0),
         _row("tilevm", "8b.o", 64, 20.6), _row("humming", "8b.o", 64, 20.0),
         _row("tilevm", "8b.down", 64, 30.0), _row("humming", "8b.down", 64, 25.0),
         _row("cublas", "8b.qkv", 1, 36.0, wdtype="f16"),
         _row("tilevm", "8b.qkv", 1, 1.0, method="isolated")],  # (other method)
        [_row("tilevm", "8b.qkv", 1, 10.4), _row("humming", "8b.qkv", 1, 12.2),
         _row("tilevm", "8b.o", 64, 20.2), _row("humming", "8b.o", 64, 20.1),
         _row("tilevm", "8b.down", 64, 30.3), _row("humming", "8b.down", 64, 25.1)],
        [_row("tilevm", "8b.qkv", 1, 10.2), _row("humming", "8b.qkv", 1, 11.9),
         _row("tilevm", "8b.o", 64, 20.4), _row("humming", "8b.o", 64, 20.9),
         _row("tilevm", "8b.down", 64, 29.9), _row("humming", "8b.down", 64, 25.2)],
    ]
    paths = [_write(tmp_path, f"run{i}.json", rows) for i, rows in enumerate(runs)]
    assert compare.main([str(p) for p in paths]) == 0
    text = capsys.readouterr().out
    # 8B o: ours 20.4 against 20.1 (median), the peer's spread 20.9 / 20.0 - 1 = 4.5%
    assert "| 8b.o | 64 | int4 | f16 | 20.4 | 20.1 | 4.5% | 0.99x | ok |" in text
    assert "| 8b.qkv | 1 | int4 | f16 | 10.2 | 12.0 | 4.0% | 1.18x | ok |" in text
    assert "| 8b.down | 64 | int4 | f16 | 30.0 | 25.1 | 1.3% | 0.84x | slower |" in text
    assert "2 of 3 cells at least humming's time" in text and "8b.down M=64 int4 (0.84x)" \
        in text
    geomean = math.exp((math.log(12.0 / 10.2) + math.log(20.1 / 20.4)
                        + math.log(25.1 / 30.0)) / 3)
    assert f"geometric mean over the cells: {geomean:.3f}x" in text


def test_cells_one_backend_or_some_runs_lack_are_named(tmp_path):
    runs = [[_row("tilevm", "8b.qkv", 1, 10.0), _row("humming", "8b.qkv", 1, 12.0),
             _row("tilevm", "70b.o", 16, 9.0),
             _row("tilevm", "8b.o", 1, 5.0), _row("humming", "8b.o", 1, 6.0, passed=False)],
            [_row("tilevm", "8b.qkv", 1, 10.0)]]
    compared, notes = compare.compare(runs, "humming", "graph")
    assert [c.cell for c in compared] == [("8b.qkv", 1, "int4", "f16")]
    assert "70b.o M=16 int4 f16: only tilevm measured it" in notes
    assert "8b.o M=1 int4 f16: only tilevm measured it" in notes  # (its check failed)
    assert "8b.qkv M=1 int4 f16: measured in 2 (tilevm) and 1 (humming) of 2 runs" in notes


def test_a_file_that_is_not_a_report_is_an_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert compare.main([str(bad)]) == 2
    assert "not a `tilevm.bench.qmm` report" in capsys.readouterr().err
    assert compare.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main([str(bad), "--method", "fast"])


def test_batch_sizes_decode_bandwidth_and_prefill_against_cublas(tmp_path, capsys):
    def row(backend, shape, M, us, wdtype="int4", nbytes=None, speedup=None):
        return {**_row(backend, shape, M, us, wdtype=wdtype), "bytes": nbytes,
                "speedup_vs_cublas": speedup}

    def run(scale):  # the second run's times `scale` times the first's
        return [row("tilevm", "70b.gate_up", 1, 100 * scale, nbytes=93e6),  # 93% of 1 TB/s
                row("humming", "70b.gate_up", 1, 110 * scale, nbytes=93e6),  # 84.5%
                row("tilevm", "8b.down", 16, 50 * scale, wdtype="int2", nbytes=25e6),  # 50%
                row("humming", "8b.down", 16, 50 * scale, wdtype="int2", nbytes=20e6),
                row("tilevm", "8b.qkv", 1, 10 * scale, nbytes=9.9e6),  # not a decode layer
                row("humming", "8b.qkv", 1, 12 * scale, nbytes=9.9e6),
                row("tilevm", "8b.qkv", 4096, 700 * scale, speedup=0.95 / scale),
                row("humming", "8b.qkv", 4096, 650 * scale, speedup=1.02 / scale)]

    paths = [tmp_path / f"run{i}.json" for i in (1, 2)]
    for path, scale in zip(paths, (1.0, 1.02)):
        path.write_text(json.dumps({"results": run(scale),
                                    "ceilings": {"copy_bw_bytes_per_s": 1e12 / scale}}))
    assert compare.main([str(p) for p in paths]) == 0
    text = capsys.readouterr().out
    # by M: M=1 two cells, both ours faster; M=4096 one cell, 650/700 slower
    assert f"| 1 | 2 / 2 | {math.sqrt(1.1 * 1.2):.3f}x | 1.10-1.20x |" in text
    assert "| 4096 | 0 / 1 | 0.929x | 0.93-0.93x |" in text
    assert ("- tilevm, M = 1 and 16 on 70b.qkv, 70b.o, 70b.gate_up, 70b.down, 8b.gate_up, "
            "8b.down (int4, uint4, int3, f6e3m2, int8): 1 of 1 cells at 92% of the copy "
            "bandwidth or more; lowest 70b.gate_up M=1 int4 (93%); int2 50%-50%.") in text
    assert "- humming, M = 1 and 16" in text and "0 of 1 cells" in text \
        and "(85%); int2 40%-40%." in text
    # the median over the runs of each row's speedup: (0.95 + 0.95 / 1.02) / 2
    assert "- tilevm, M = 4096: 1 of 1 cells under cuBLAS f16 (lowest 8b.qkv int4 0.94x)." \
        in text
    assert "- humming, M = 4096: 0 of 1 cells under cuBLAS f16." in text


def test_runs_without_ceilings_leave_out_the_bandwidth_lines(tmp_path, capsys):
    path = _write(tmp_path, "run.json", [_row("tilevm", "70b.o", 1, 10.0),
                                         _row("humming", "70b.o", 1, 11.0)])
    assert compare.main([str(path)]) == 0
    text = capsys.readouterr().out
    assert "## By batch size" in text and "copy bandwidth" not in text


def test_graph_time_against_isolated_time_where_both_were_taken(tmp_path, capsys):
    rows = [_row("tilevm", "70b.o", 1, 10.0), _row("tilevm", "70b.o", 1, 9.0,
                                                   method="isolated"),
            _row("tilevm", "8b.qkv", 16, 12.0), _row("tilevm", "8b.qkv", 16, 12.5,
                                                     method="isolated"),
            _row("humming", "70b.o", 1, 11.0), _row("humming", "8b.qkv", 16, 13.0)]
    assert compare.main([str(_write(tmp_path, "run.json", rows))]) == 0
    assert ("- tilevm, graph against isolated: 1 of 2 cells at most the isolated time; "
            "the most over: 70b.o M=1 int4 (1.11x).") in capsys.readouterr().out
    assert compare.graph_against_isolated([[_row("tilevm", "70b.o", 1, 10.0)]]) == []
