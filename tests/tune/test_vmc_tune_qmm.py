"""`vmc tune --qmm`: the library's quantized matmul tuned for one problem. Without a GPU:
the arguments checked with clear errors, and, with stand-ins for the grid and the
searches, the report and the tuning-cache entry under the key the library looks up
(stored only when the checks pass). On the GPU: a short real run stores a schedule the
library then uses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilevm.cli import main
from tilevm.cli import tune as cli_tune
from tilevm.kernels.matmul import problem_key
from tilevm.kernels.qmm_search import Tuned, TunedKernel
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.weights import quantize
from tilevm.tune import cache
from tilevm.tune.verify import SampleCheck, Sanitized


@pytest.mark.parametrize("argv, message", [
    (["--qmm", "int4"], "--qmm needs --shape M,N,K"),
    (["--qmm", "int9", "--shape", "1,2,3"], "--qmm: unknown data type 'int9'"),
    (["--qmm", "f16", "--shape", "1,128,128"], "weights are 1..8-bit codes"),
    (["--qmm", "int4", "--shape", "1,x,3"], "--shape takes M,N,K as three integers"),
    (["--qmm", "int4", "--shape", "0,128,128"], "must be positive"),
    (["--qmm", "int4", "--shape", "16,4096,4000"], "K = 4000 is not a multiple of the "
                                                    "group size 128"),
    (["examples/vector_add.py", "--level3", "3"], "--shape, --level3 and --no-verify go "
                                                  "with --qmm"),
    (["--qmm", "int4", "--permute", "x.ptx"], "give one of"),
])
def test_bad_arguments_are_named(capsys, argv, message):
    assert main(["tune", *argv]) == 2
    assert message in capsys.readouterr().err


class Device:
    name, arch = "NVIDIA Stand-in GPU", "sm_90a"


def stand_ins(monkeypatch, tmp_path, passes):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    grid = Schedule(bm=16, bk=64, num_warps=2, split_k=2, swap_ab=True)
    found = Schedule(bm=16, bk=64, num_warps=2, split_k=4, unroll=2)
    calls = {}

    def tune_problem(wdtype, M, N, K, *, start, **kwargs):
        calls.update(kwargs, start=start, shape=(str(wdtype), M, N, K))
        first, kept = TunedKernel(start), TunedKernel(found)
        checks = SampleCheck(10_000_000, 72, () if passes else ("outside the bound",))
        return Tuned(start, kept, {"start": first, "level 1": kept, "level 2": kept},
                     {"start": 22.4e-6, "level 1": 20.8e-6, "level 2": 20.8e-6}, 0.016,
                     None, None, None, checks,
                     (Sanitized("memcheck", True, None, 0, ""),
                      Sanitized("racecheck", True, None, 0, "")), (), 52.0)

    monkeypatch.setattr(cli_tune, "require_gpu", lambda otherwise: Device())
    monkeypatch.setattr(cli_tune, "grid_schedule", lambda *a, **k: (grid, 22.4e-6, 15))
    monkeypatch.setattr(cli_tune, "tune_problem", tune_problem)
    return grid, found, calls


def test_the_kept_schedule_is_stored_under_the_librarys_key(monkeypatch, tmp_path, capsys):
    grid, found, calls = stand_ins(monkeypatch, tmp_path, passes=True)
    assert main(["tune", "--qmm", "int4", "--shape", "16,384,512", "--seed", "3",
                 "--level3", "5"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    weights = quantize(np.ones((512, 384), np.float16), "int4", 128)
    key = problem_key(Device.name, weights, 16)  # as kernels.matmul.tuning_key makes it
    assert report["key"] == key and cache.lookup(key)["schedule"] == report["schedule"]
    assert Schedule(**report["schedule"]) == found and report["us"] == 20.8
    assert Schedule(**report["search"]["grid"]) == grid
    assert report["speedup"] == pytest.approx(22.4 / 20.8)
    assert calls["start"] == grid and calls["shape"] == ("int4", 16, 384, 512)
    assert calls["seed"] == 3 and calls["level3_steps"] == 5 and calls["verify"]
    assert "after level 1: 20.80 us" in err and "stored in" in err


def test_a_kernel_that_fails_its_checks_is_not_stored(monkeypatch, tmp_path, capsys):
    stand_ins(monkeypatch, tmp_path, passes=False)
    assert main(["tune", "--qmm", "int4", "--shape", "16,384,512"]) == 0
    err = capsys.readouterr().err
    assert "FAILED: outside the bound" in err and "not stored" in err
    assert cache.read_table() == {}


@pytest.mark.gpu
def test_gpu_vmc_tune_qmm_stores_a_schedule(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    assert main(["tune", "--qmm", "int4", "--shape", "16,512,1024", "--steps", "4",
                 "--budget", "60"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert cache.lookup(report["key"])["schedule"] == report["schedule"]
    Schedule(**report["schedule"])
