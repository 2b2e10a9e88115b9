"""`tilevm.bench.attention`: its FLOP count, its report, its errors and the skip without a
GPU; on the GPU one small run checks the example against SDPA and writes its report."""

from __future__ import annotations

import json

import pytest

from tilevm.bench import attention


def test_flops_are_two_s_by_s_by_d_matmuls_a_slice_half_of_them_causal():
    assert attention.flops(32, 1024, 128, causal=False) == 4 * 32 * 1024 ** 2 * 128
    assert attention.flops(32, 1024, 128, causal=True) == 2 * 32 * 1024 ** 2 * 128


def test_the_report_has_a_line_a_cell_and_marks_a_failed_check():
    row = dict(S=4096, BH=32, d=128, causal=True, tilevm_us=2000.0, sdpa_us=1500.0,
               tilevm_tflops=137.4, sdpa_tflops=183.2, speed_over_sdpa=0.75,
               predicted_us=1800.0, bound_term="tensor_core", tilevm_max_err=1e-3,
               check_passed=True)
    text = attention.report([row, {**row, "causal": False, "check_passed": False}], "H100")
    assert "| 4096 | True | 32 x 128 | 2000.0 | 1500.0 | 137 | 183 | 0.75x | " \
           "1800.0 (tensor_core) | 1.0e-03 |" in text
    assert text.count("FAILED") == 1


def test_bad_options_are_errors(tmp_path, capsys):
    assert attention.main([str(tmp_path), "--seq", "1024,x"]) == 2
    assert "error:" in capsys.readouterr().err
    assert attention.main([str(tmp_path), "--heads", "0"]) == 2
    with pytest.raises(SystemExit):
        attention.main([str(tmp_path), "--d", "96"])  # argparse: not a choice


def test_without_a_gpu_it_writes_why_it_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(attention, "gpu_unavailable_reason", lambda: "no CUDA device")
    assert attention.main([str(tmp_path)]) == 0
    report = json.loads((tmp_path / "attention.json").read_text())
    assert report == {"benchmark": "attention", "status": "skipped",
                      "reason": "no CUDA device"}


@pytest.mark.gpu
def test_gpu_a_small_run_matches_sdpa(tmp_path):
    pytest.importorskip("torch")
    assert attention.main([str(tmp_path), "--seq", "256,300", "--heads", "2",
                           "--d", "64"]) == 0
    report = json.loads((tmp_path / "attention.json").read_text())
    assert report["status"] == "ok" and len(report["results"]) == 4
    for row in report["results"]:
        assert row["check_passed"] and row["sdpa_max_err"] <= attention.TOLERANCE
        assert row["tilevm_us"] > 0 and row["sdpa_us"] > 0
    assert (tmp_path / "attention.md").read_text().count("\n| ") == 5  # header + 4
