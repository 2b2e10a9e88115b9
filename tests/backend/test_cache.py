"""backend/cache.py: keys, hits and misses, atomic writes, corrupt entries, concurrency."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tilevm
from tilevm.backend import cache as cache_mod
from tilevm.backend.cache import (
    COMPILER_VERSION,
    Artifact,
    CacheKey,
    CacheWarning,
    KernelCache,
    compiler_version,
    decode_entry,
    encode_entry,
)

PTX = """\
.version 8.0
.target sm_80
.address_size 64

.visible .entry k(.param .u64 p)
{
    ret;
}
"""

PARAMS = ({"name": "x", "kind": "pointer", "dtype": "f16", "readonly": True, "align": 16},
          {"name": "n", "kind": "scalar", "dtype": "int32"})


def artifact(ptx: str = PTX, **kw) -> Artifact:
    return Artifact(ptx=ptx, kernel_name="k", shared_bytes=kw.pop("shared_bytes", 4096),
                    num_threads=128, params=PARAMS, **kw)


def key(**kw) -> CacheKey:
    parts = {"ir_text": "kernel k() grid(1) warps(4) {\n}", "arch": "sm_80",
             "options": {"opt": 3}}
    parts.update(kw)
    return CacheKey(**parts)


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


class Builder:
    def __init__(self, art: Artifact | None = None) -> None:
        self.calls = 0
        self.art = art or artifact()

    def __call__(self) -> Artifact:
        self.calls += 1
        return self.art


def test_miss_then_hit(tmp_path: Path) -> None:
    c = KernelCache(tmp_path)
    build = Builder()
    first = c.get_or_build(key(), build)
    second = c.get_or_build(key(), build)
    assert build.calls == 1
    assert first == second == build.art
    s = c.stats
    assert (s.hits, s.misses, s.writes, s.corrupt) == (1, 1, 1, 0)
    assert [p.name for p in c.entries()] == [f"{key().digest()}.ptx"]
    # a second cache object (another process, say) sees the entry
    other = KernelCache(tmp_path)
    assert other.get_or_build(key(), Builder()) == build.art
    assert other.stats.hits == 1


def test_round_trip_keeps_metadata(tmp_path: Path) -> None:
    c = KernelCache(tmp_path)
    art = artifact(extra={"signature": {"grid": ["cdiv(n, 256)"]}, "registers": 40})
    c.put(key(), art)
    got = c.get(key())
    assert got == art
    assert got.params[0]["dtype"] == "f16" and got.extra["registers"] == 40


def test_entry_is_ptx_with_a_comment_header(tmp_path: Path) -> None:
    c = KernelCache(tmp_path)
    c.put(key(), artifact())
    text = c.path_for(key()).read_text()
    header, _, body = text.partition("\n")
    assert header.startswith("// tilevm-cache {") and body == PTX


@pytest.mark.parametrize("change", [
    {"ir_text": "kernel k() grid(2) warps(4) {\n}"},
    {"arch": "sm_90"},
    {"options": {"opt": 2}},
    {"options": {"opt": 3, "fast_math": True}},
    {"compiler_version": COMPILER_VERSION + "-next"},
])
def test_key_depends_on_each_part(change: dict) -> None:
    assert key(**change).digest() != key().digest()


def test_key_is_canonical() -> None:
    a = CacheKey("ir", "sm_80", {"a": 1, "b": [1, 2]})
    b = CacheKey("ir", "sm_80", {"b": [1, 2], "a": 1})
    assert a.digest() == b.digest()
    assert len(a.digest()) == 64
    assert CacheKey("ir", "sm_80").compiler_version == COMPILER_VERSION


def test_compiler_version_follows_the_codegen_sources(tmp_path: Path) -> None:
    """The version is a digest of the sources that turn IR into PTX: editing one of them
    (here a comment in a lowering) changes it, editing a kernel or the frontend does not
    (their changes reach the key through the IR text)."""
    package = Path(tilevm.__file__).parent
    for sub in ("backend", "ir", "layouts", "dtypes", "kernels"):
        shutil.copytree(package / sub, tmp_path / sub, ignore=shutil.ignore_patterns("__pycache__"))
    here = compiler_version(tmp_path)
    assert here == compiler_version(package) == COMPILER_VERSION
    (tmp_path / "kernels" / "qmm.py").write_text("# another kernel\n")
    assert compiler_version(tmp_path) == here
    lowering = tmp_path / "backend" / "llvm" / "lowering" / "global_memory.py"
    lowering.write_text(lowering.read_text() + "# a change\n")
    assert compiler_version(tmp_path) != here


def test_options_must_be_json() -> None:
    with pytest.raises(TypeError, match="JSON"):
        CacheKey("ir", "sm_80", {"f": object()}).digest()


def test_string_keys_must_be_digests(tmp_path: Path) -> None:
    c = KernelCache(tmp_path)
    c.put(key().digest(), artifact())
    assert c.get(key()) == artifact()
    with pytest.raises(ValueError, match="sha256"):
        c.get("../../etc/passwd")


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    c = KernelCache(tmp_path)
    for i in range(5):
        c.put(key(), artifact(shared_bytes=i))
    assert files(tmp_path) == [c.path_for(key())]
    assert c.get(key()).shared_bytes == 4


def test_failed_write_cleans_up_and_still_returns(tmp_path: Path, monkeypatch) -> None:
    c = KernelCache(tmp_path)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_mod.os, "replace", broken_replace)
    build = Builder()
    with pytest.warns(CacheWarning, match="could not write"):
        assert c.get_or_build(key(), build) == build.art
    assert files(tmp_path) == []  # the temporary file is gone, no entry
    assert c.stats.write_errors == 1


def test_unwritable_directory_still_builds(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    c = KernelCache(blocker / "cache")
    with pytest.warns(CacheWarning):
        assert c.get_or_build(key(), Builder()) == artifact()


@pytest.mark.parametrize("damage", ["garbage", "truncate", "flip_ptx", "bad_json", "empty",
                                    "other_key", "binary"])
def test_corrupt_entry_is_rebuilt(tmp_path: Path, damage: str) -> None:
    c = KernelCache(tmp_path)
    c.put(key(), artifact())
    path = c.path_for(key())
    text = path.read_text()
    if damage == "garbage":
        path.write_text("hello")
    elif damage == "truncate":
        path.write_text(text[: len(text) // 2])
    elif damage == "flip_ptx":
        path.write_text(text.replace("ret;", "ret ;"))
    elif damage == "bad_json":
        path.write_text(text.replace('"kernel_name"', '"kernel_name', 1))
    elif damage == "empty":
        path.write_text("")
    elif damage == "other_key":
        path.write_text(encode_entry("0" * 64, artifact()))
    else:
        path.write_bytes(b"\xff\xfe\x00" * 10)
    build = Builder(artifact(shared_bytes=7))
    with pytest.warns(CacheWarning, match="corrupt"):
        got = c.get_or_build(key(), build)
    assert build.calls == 1 and got.shared_bytes == 7
    assert c.stats.corrupt == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.get(key()).shared_bytes == 7  # rewritten, valid again


def test_decode_rejects_missing_fields() -> None:
    text = encode_entry("a" * 64, artifact())
    assert decode_entry(text, "a" * 64) == artifact()
    with pytest.raises(ValueError):
        decode_entry(text.replace('"num_threads"', '"threads"'), "a" * 64)


def test_clear_and_module_level_api(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TILEVM_CACHE_DIR", str(tmp_path / "c"))
    assert cache_mod.cache_dir() == tmp_path / "c"
    build = Builder()
    cache_mod.get_or_build(key(), build)
    cache_mod.get_or_build(key(), build)
    cache_mod.get_or_build(key(arch="sm_90"), build)
    assert build.calls == 2
    assert cache_mod.stats().hits == 1 and cache_mod.stats().misses == 2
    stale = cache_mod.default_cache().path_for(key()).parent / ".tmp-stale.ptx"
    stale.write_text("partial")
    os.utime(stale, (0, 0))  # old: a crashed writer's leftover
    assert cache_mod.clear() == 2
    assert files(tmp_path) == []
    assert cache_mod.stats().hits == 0
    cache_mod.get_or_build(key(), build)
    assert build.calls == 3


def test_default_directory(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TILEVM_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_mod.cache_dir() == tmp_path / ".cache" / "tilevm"


def test_build_must_return_an_artifact(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="Artifact"):
        KernelCache(tmp_path).get_or_build(key(), lambda: "ptx")  # type: ignore[arg-type]


# ---- several processes at once ------------------------------------------------------------------

WORKER = """
import json, sys, warnings
from tilevm.backend.cache import Artifact, CacheKey, CacheWarning, KernelCache

directory, worker, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ptx = sys.argv[4]
c = KernelCache(directory)
k = CacheKey(ir_text="ir", arch="sm_80", options={"opt": 3})
# ~240 KB per entry, different in every process: a torn read would fail its checksum
body = ptx + "// worker %d\\n" % worker + "// padding\\n" * 20000
art = Artifact(ptx=body, kernel_name="k", shared_bytes=worker, num_threads=128)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(rounds):
        got = c.get_or_build(k, lambda: art)
        assert got.kernel_name == "k" and got.ptx.startswith(ptx)
        c.put(k, art)
        read = c.get(k)
        assert read is not None and read.ptx.startswith(ptx)
corrupt = sum(issubclass(w.category, CacheWarning) for w in caught) + c.stats.corrupt
print(json.dumps({"worker": worker, "corrupt": corrupt, "stats": vars(c.stats)}))
"""


def test_concurrent_processes_same_key(tmp_path: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(w), "25", PTX],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["corrupt"] == 0 for r in results), results  # no torn reads
    assert sum(r["stats"]["writes"] for r in results) >= 100
    final = KernelCache(tmp_path).get(CacheKey(ir_text="ir", arch="sm_80",
                                               options={"opt": 3}))
    assert final is not None and final.shared_bytes in range(4)
    assert len(files(tmp_path)) == 1  # one entry, no temporary files
