"""`backend.prebuild`: programs built in worker processes land in the kernel cache as
the caller would build them; cached ones are not built again; a failing program is
skipped; the worker count is the user's to cap."""

from __future__ import annotations

import pickle

import pytest

from tilevm.backend import cache, launch, prebuild
from tilevm.examples.vector_add import vector_add


def _programs(*blocks: int):
    return [vector_add.specialize(block=b) for b in blocks]


def test_workers_fill_the_cache_with_what_the_caller_would_build(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(prebuild.WORKERS_ENV, "2")
    programs = _programs(128, 256, 512)
    assert prebuild.prebuild(programs + programs[:1], "sm_80") == 3  # (once each)
    store = cache.default_cache()
    for program in programs:
        built = store.get(launch.cache_key(program, "sm_80"))
        assert built is not None and built.ptx == launch.build_artifact(program, "sm_80").ptx
    assert prebuild.prebuild(programs, "sm_80") == 0  # all cached: no worker starts
    assert prebuild.prebuild(_programs(1024), "sm_80") == 0  # one program: built by the caller
    assert not store.path_for(launch.cache_key(_programs(1024)[0], "sm_80")).exists()


def test_one_worker_builds_nothing_here(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(prebuild.WORKERS_ENV, "1")
    assert prebuild.prebuild(_programs(128, 256), "sm_80") == 0
    assert not list(cache.default_cache().entries())


def test_a_worker_skips_a_program_it_cannot_build(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEVM_CACHE_DIR", str(tmp_path))
    (good,) = _programs(64)
    jobs = tmp_path / "jobs.pickle"
    jobs.write_bytes(pickle.dumps(([None, good], "sm_80")))  # None: no program at all
    prebuild._work(str(jobs))
    assert cache.default_cache().get(launch.cache_key(good, "sm_80")) is not None


def test_a_bad_worker_count_is_named(monkeypatch):
    monkeypatch.setenv(prebuild.WORKERS_ENV, "many")
    with pytest.raises(ValueError, match="TILEVM_COMPILE_WORKERS must be a whole number"):
        prebuild.worker_count()
