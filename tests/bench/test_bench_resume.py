"""`python -m tilevm.bench.qmm OUT --resume` (bench/resume.py): which configurations a
previous run measured, what may not be mixed, and that a resumed run without a GPU
leaves the previous results alone."""

import json

import pytest
from kernel_harness import cuda_torch

from tilevm.bench import qmm, resume
from tilevm.bench.protocol import Config, parse_options, plan


def _row(c: Config, method: str, status: str) -> dict:
    return {"backend": c.backend, "shape": c.shape, "N": c.N, "K": c.K, "M": c.M,
            "wdtype": c.wdtype, "act": c.act, "group_size": c.group_size,
            "method": method, "status": status}


def _report(rows, gpu="NVIDIA H200", **options) -> dict:
    base = {"methods": ["graph", "isolated"], "l2_flush": "write", "group_size": 128,
            "seed": 0, "min_reps": 100}
    return {"benchmark": "qmm", "status": "ran", "date": "2026-11-28",
            "environment": {"gpu": gpu, "tilevm_commit": "abc"}, "ceilings": {},
            "elapsed_s": 1.0, "options": {**base, **options}, "results": rows}


OPTIONS = parse_options(["out", "--shapes", "8b.qkv", "--m", "1,64", "--dtypes", "int4",
                         "--backends", "tilevm,cublas"])


def test_a_resumed_run_times_what_was_skipped_or_never_run():
    configs = plan(OPTIONS)  # cuBLAS at M = 1, 64, then tilevm at M = 1, 64
    assert [(c.backend, c.M) for c in configs] == [("cublas", 1), ("cublas", 64),
                                                   ("tilevm", 1), ("tilevm", 64)]
    rows = [_row(configs[0], "isolated", "ok"), _row(configs[0], "graph", "ok"),
            _row(configs[1], "isolated", "skip"),  # out of budget: run again
            _row(configs[2], "isolated", "fail"), _row(configs[2], "graph", "error")]
    assert resume.pending(configs, rows) == [configs[1], configs[3]]
    kept = resume.measured_rows(rows)
    assert kept == [rows[0], rows[1], rows[3], rows[4]]  # both methods' rows of a config
    assert resume.part_of(_report(rows), rows)["configurations"] == 2
    assert resume.pending(configs, []) == configs


def test_a_row_and_its_configuration_have_one_key():
    c = plan(OPTIONS)[2]
    assert resume.config_key(c) == resume.config_key(_row(c, "graph", "ok")) == \
        ("tilevm", "8b.qkv", 12288, 4096, 1, "int4", "f16", 128)


def test_resuming_needs_the_same_gpu_and_timing_options():
    resume.check_resumable(_report([]), "NVIDIA H200", OPTIONS)  # (same: no error)
    with pytest.raises(resume.NotResumable, match="'NVIDIA H100 80GB HBM3'.*'NVIDIA H200'"):
        resume.check_resumable(_report([], gpu="NVIDIA H100 80GB HBM3"), "NVIDIA H200",
                               OPTIONS)
    for name, other in (("methods", ["graph"]), ("l2_flush", "read"), ("group_size", 64),
                        ("seed", 3), ("min_reps", 200)):
        with pytest.raises(resume.NotResumable, match=f"{name}="):
            resume.check_resumable(_report([], **{name: other}), "NVIDIA H200", OPTIONS)


def test_what_there_is_to_resume_from(tmp_path):
    assert resume.load_previous(str(tmp_path)) is None  # nothing yet
    path = tmp_path / "qmm.json"
    path.write_text(json.dumps({"benchmark": "qmm", "status": "skipped"}))
    assert resume.load_previous(str(tmp_path)) is None  # a run without a GPU: start over
    path.write_text(json.dumps(_report([])))
    assert resume.load_previous(str(tmp_path))["status"] == "ran"
    path.write_text("{not json")
    with pytest.raises(resume.NotResumable, match="cannot resume from"):
        resume.load_previous(str(tmp_path))
    path.write_text(json.dumps({"benchmark": "calls"}))
    with pytest.raises(resume.NotResumable, match="not a qmm benchmark report"):
        resume.load_previous(str(tmp_path))


def test_resume_without_a_gpu_leaves_the_previous_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(qmm, "gpu_unavailable_reason", lambda: "no CUDA device (test)")
    report = _report([_row(plan(OPTIONS)[0], "graph", "ok")])
    (tmp_path / "qmm.json").write_text(json.dumps(report))
    assert qmm.main([str(tmp_path), "--quick", "--resume"]) == 0
    assert json.loads((tmp_path / "qmm.json").read_text()) == report
    assert "unchanged" in capsys.readouterr().out
    (tmp_path / "qmm.json").write_text("[]")
    assert qmm.main([str(tmp_path), "--quick", "--resume"]) == 2
    assert "not a qmm benchmark report" in capsys.readouterr().err


@pytest.mark.gpu
def test_a_run_stopped_by_its_budget_is_finished_by_a_resumed_one(tmp_path):
    cuda_torch()  # (the bench times cuBLAS through PyTorch)
    argv = [str(tmp_path), "--shapes", "256x512", "--m", "1,17", "--dtypes", "int4",
            "--backends", "tilevm,cublas", "--methods", "graph"]
    assert qmm.main([*argv, "--budget-s", "0.001"]) == 0  # the ceilings take longer
    first = json.loads((tmp_path / "qmm.json").read_text())
    assert all(r["status"] == "skip" for r in first["results"])
    assert qmm.main([*argv, "--budget-s", "0", "--resume"]) == 0
    second = json.loads((tmp_path / "qmm.json").read_text())
    assert {(r["backend"], r["M"]) for r in second["results"] if r["status"] == "ok"} == \
        {("cublas", 1), ("cublas", 17), ("tilevm", 1), ("tilevm", 17)}
    assert [p["configurations"] for p in second["parts"]] == [0, 4]
    assert qmm.main([*argv, "--resume"]) == 0  # nothing left: the rows stay
    third = json.loads((tmp_path / "qmm.json").read_text())
    assert [r["us"] for r in third["results"]] == [r["us"] for r in second["results"]]
    assert len(third["parts"]) == 3 and "Measured in 3 parts" in \
        (tmp_path / "qmm.md").read_text()
