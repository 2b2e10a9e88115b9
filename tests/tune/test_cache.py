"""tune.cache: the tuning table's keys, atomic writes, and reads that never crash."""

from __future__ import annotations

import json

from tilevm.tune import cache


def test_keys_name_the_gpu_kernel_version_and_fields_in_order():
    key = cache.cache_key(gpu="NVIDIA H100|SXM", kernel="qmm", version=11, wdtype="int4",
                          M=16, N=4096)
    assert key == "v11|NVIDIA H100/SXM|qmm|wdtype=int4|M=16|N=4096"


def test_entries_are_stored_atomically_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    assert cache.cache_file() == tmp_path / "tuning.json"
    assert cache.lookup("a") is None  # no table yet
    cache.store("a", {"schedule": {"bm": 16}, "us": 9.7})
    cache.store("b", {"schedule": {"bm": 64}, "us": 20.0})
    table = json.loads((tmp_path / "tuning.json").read_text())
    assert table == {"a": {"schedule": {"bm": 16}, "us": 9.7},
                     "b": {"schedule": {"bm": 64}, "us": 20.0}}  # the first one kept
    assert cache.lookup("b") == {"schedule": {"bm": 64}, "us": 20.0}
    assert not list(tmp_path.glob(".tuning.*"))  # no temporary file left behind


def test_an_unreadable_table_reads_as_empty(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    (tmp_path / "tuning.json").write_text("{ not json")
    assert cache.read_table() == {} and cache.lookup("a") is None
    (tmp_path / "tuning.json").write_text("[1, 2]")  # JSON, but not a table
    assert cache.read_table() == {}
    (tmp_path / "tuning.json").write_text('{"a": 3}')  # an entry that is not a record
    assert cache.lookup("a") is None
    cache.store("a", {"us": 1.0})  # and storing replaces it
    assert cache.lookup("a") == {"us": 1.0}
