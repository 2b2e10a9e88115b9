"""On-disk cache of compiled kernels (PTX text plus metadata).

    from tilevm.backend.cache import Artifact, CacheKey, get_or_build
    key = CacheKey(ir_text=format_program(program), arch="sm_90", options={"opt": 3})
    artifact = get_or_build(key, lambda: compile_to_artifact(program))

Where: `$TILEVM_CACHE_DIR`, else `~/.cache/tilevm` (`$XDG_CACHE_HOME/tilevm` when that is
set). Entries live in `<dir>/v<FORMAT>/<key[:2]>/<key>.ptx`.

Key: the sha256 of a canonical JSON document of the IR text, `COMPILER_VERSION`, the
target architecture and the options (a mapping of JSON-able values; key order does
not matter). `COMPILER_VERSION` is computed, not written by hand: a digest of the
source of every module that turns IR into PTX (backend/, ir/, layouts/, dtypes/) and
of llvmlite's version. So any change that could change the PTX for the same IR
(passes, codegen, the conversion rules, calling conventions) gives new keys, and old
entries are simply never hit again (a hand-bumped version had stayed unchanged through
many such changes). `clear()` removes them.

Entry format: one file, which is itself valid PTX: its first line is a PTX comment
`// tilevm-cache {json}` holding the metadata (kernel name, shared memory bytes, number
of threads, parameter list, free-form `extra`) and the sha256 of the PTX body; the rest
of the file is the PTX text. So `ptxas <entry>.ptx` works on an entry as is.

Writes are atomic: the entry is written to a uniquely named temporary file in the same
folder, flushed, then `os.replace`d onto its name; readers never see a partial entry.
Two processes that build the same key both succeed (each returns what it built; the last
rename wins, and both entries are complete). An entry that cannot be read, does not
parse or whose checksum does not match is treated as missing: it is rebuilt and
rewritten, with a `CacheWarning`. A cache folder that cannot be written costs only the
caching (a warning); the built artifact is still returned.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "COMPILER_VERSION", "CACHE_FORMAT", "Artifact", "CacheKey", "CacheStats", "CacheWarning",
    "KernelCache", "cache_dir", "compiler_version", "default_cache", "get_or_build", "clear",
    "stats",
]

# The packages whose source decides the PTX for a given IR (see above).
_CODEGEN_PACKAGES = ("backend", "ir", "layouts", "dtypes")


def compiler_version(root: Path | None = None) -> str:
    """`0.1.0-<digest>`: the sha256 (16 hex digits) of the `_CODEGEN_PACKAGES`' Python
    sources (paths and contents, in path order) under `root` (default: this tilevm
    package) and of llvmlite's version."""
    import llvmlite

    root = Path(__file__).resolve().parent.parent if root is None else root
    digest = hashlib.sha256(f"llvmlite {llvmlite.__version__}\0".encode())
    for package in _CODEGEN_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return f"0.1.0-{digest.hexdigest()[:16]}"


COMPILER_VERSION = compiler_version()
# The on-disk entry format; bumping it moves the cache to a new subfolder.
CACHE_FORMAT = 1

_HEADER = "// tilevm-cache "
_TMP_PREFIX = ".tmp-"


class CacheWarning(UserWarning):
    """A cache entry was corrupt (and rebuilt), or the cache could not be written."""


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel: its PTX and what a launcher needs to know about it.

    `params` is the kernel's parameter list as JSON-able dicts, in order, e.g.
    `{"name": "x", "kind": "pointer", "dtype": "f16", "readonly": true}` or
    `{"name": "n", "kind": "scalar", "dtype": "int32"}` (what
    `Signature.to_json()` writes); `extra` holds anything else JSON-able.
    """

    ptx: str
    kernel_name: str
    shared_bytes: int = 0
    num_threads: int = 128
    params: tuple[Mapping[str, Any], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def metadata(self) -> dict[str, Any]:
        return {"kernel_name": self.kernel_name, "shared_bytes": int(self.shared_bytes),
                "num_threads": int(self.num_threads),
                "params": [dict(p) for p in self.params], "extra": dict(self.extra)}

    @classmethod
    def from_metadata(cls, ptx: str, meta: Mapping[str, Any]) -> Artifact:
        return cls(ptx=ptx, kernel_name=str(meta["kernel_name"]),
                   shared_bytes=int(meta["shared_bytes"]), num_threads=int(meta["num_threads"]),
                   params=tuple(dict(p) for p in meta["params"]),
                   extra=dict(meta.get("extra", {})))


@dataclass(frozen=True)
class CacheKey:
    """What a compiled artifact depends on. `digest()` is the cache key (sha256 hex)."""

    ir_text: str
    arch: str
    options: Mapping[str, Any] = field(default_factory=dict)
    compiler_version: str = COMPILER_VERSION

    def canonical(self) -> str:
        doc = {"format": CACHE_FORMAT, "ir": self.ir_text, "arch": self.arch,
               "compiler_version": self.compiler_version, "options": dict(self.options)}
        try:
            return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        except TypeError as exc:
            raise TypeError(f"cache key options must be JSON-able (str, int, float, bool, "
                            f"None, lists and dicts of them): {exc}") from None

    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode("utf-8")).hexdigest()


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0  # entries found unreadable and rebuilt (also counted as misses)
    writes: int = 0
    write_errors: int = 0


def cache_dir() -> Path:
    """The cache folder: `$TILEVM_CACHE_DIR`, else `$XDG_CACHE_HOME/tilevm`, else
    `~/.cache/tilevm`."""
    env = os.environ.get("TILEVM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "tilevm"
    return Path.home() / ".cache" / "tilevm"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def encode_entry(key: str, artifact: Artifact) -> str:
    """The text of a cache entry file."""
    meta = {"format": CACHE_FORMAT, "key": key, "ptx_sha256": _sha256(artifact.ptx),
            **artifact.metadata()}
    header = json.dumps(meta, sort_keys=True, ensure_ascii=True)  # one line: no raw "\n"
    return f"{_HEADER}{header}\n{artifact.ptx}"


def decode_entry(text: str, key: str | None = None) -> Artifact:
    """The artifact in an entry file's text; `ValueError` if it is not a valid entry (for
    `key`, when given)."""
    if not text.startswith(_HEADER):
        raise ValueError("missing tilevm-cache header")
    header, sep, ptx = text.partition("\n")
    if not sep:
        raise ValueError("truncated entry (no PTX body)")
    try:
        meta = json.loads(header[len(_HEADER):])
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad header: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT:
        raise ValueError("unknown entry format")
    if key is not None and meta.get("key") != key:
        raise ValueError("entry is for another key")
    if meta.get("ptx_sha256") != _sha256(ptx):
        raise ValueError("PTX checksum mismatch")
    try:
        return Artifact.from_metadata(ptx, meta)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad metadata: {exc!r}") from None


class KernelCache:
    """A cache folder. Thread- and process-safe; see the module docstring."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else cache_dir()
        self._stats = CacheStats()
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        return self.directory / f"v{CACHE_FORMAT}"

    def path_for(self, key: str | CacheKey) -> Path:
        digest = key.digest() if isinstance(key, CacheKey) else _check_digest(key)
        return self.root / digest[:2] / f"{digest}.ptx"

    @property
    def stats(self) -> CacheStats:
        """A snapshot of this cache object's counters (this process only)."""
        with self._lock:
            return CacheStats(**vars(self._stats))

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self._stats, name, getattr(self._stats, name) + 1)

    # ---- reading and writing ------------------------------------------------------------
    def get(self, key: str | CacheKey) -> Artifact | None:
        """The cached artifact, or None if absent or corrupt (a corrupt one warns)."""
        path = self.path_for(key)
        try:
            text = path.read_bytes().decode("utf-8")  # no newline translation
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            self._corrupt(path, f"unreadable: {exc}")
            return None
        try:
            return decode_entry(text, path.stem)
        except ValueError as exc:
            self._corrupt(path, str(exc))
            return None

    def _corrupt(self, path: Path, why: str) -> None:
        self._count("corrupt")
        warnings.warn(f"tilevm cache entry {path} is corrupt ({why}); rebuilding it",
                      CacheWarning, stacklevel=4)

    def put(self, key: str | CacheKey, artifact: Artifact) -> bool:
        """Write an entry atomically; False (with a warning) if it could not be written."""
        path = self.path_for(key)
        text = encode_entry(path.stem, artifact)
        tmp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".ptx", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            _replace(tmp, path)
            tmp = None
        except OSError as exc:
            self._count("write_errors")
            warnings.warn(f"tilevm cache: could not write {path}: {exc}", CacheWarning,
                          stacklevel=3)
            return False
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        self._count("writes")
        return True

    def get_or_build(self, key: str | CacheKey, build: Callable[[], Artifact]) -> Artifact:
        """The cached artifact for `key`, or `build()`'s result, which is then cached."""
        found = self.get(key)
        if found is not None:
            self._count("hits")
            return found
        self._count("misses")
        artifact = build()
        if not isinstance(artifact, Artifact):
            raise TypeError(f"the cache's build function must return an Artifact, not "
                            f"{type(artifact).__name__}")
        self.put(key, artifact)
        return artifact

    # ---- housekeeping ---------------------------------------------------------------------
    def entries(self) -> Iterator[Path]:
        """Every entry file (not temporary files)."""
        if not self.root.is_dir():
            return iter(())
        return (p for p in sorted(self.root.glob("*/*.ptx")) if not p.name.startswith(_TMP_PREFIX))

    def clear(self, *, all_formats: bool = True) -> int:
        """Remove every entry (of every format version unless `all_formats=False`) and
        leftover temporary files; return how many entry files were removed. Temporary files
        younger than a minute are left alone (another process may be writing them)."""
        removed = 0
        roots = ([p for p in self.directory.glob("v*") if p.is_dir()]
                 if all_formats and self.directory.is_dir() else [self.root])
        now = time.time()
        for root in roots:
            for path in root.glob("*/*"):
                tmp = path.name.startswith(_TMP_PREFIX)
                try:
                    if tmp and now - path.stat().st_mtime < 60:
                        continue
                    path.unlink()
                    removed += not tmp
                except OSError:
                    continue
            for sub in root.glob("*"):
                with contextlib.suppress(OSError):
                    sub.rmdir()  # only empty folders go
        with self._lock:
            self._stats = CacheStats()
        return removed


def _check_digest(key: str) -> str:
    if not (isinstance(key, str) and len(key) == 64
            and all(c in "0123456789abcdef" for c in key)):
        raise ValueError(f"a cache key is a CacheKey or a sha256 hex digest, not {key!r}")
    return key


def _replace(src: str, dst: Path) -> None:
    # On Windows a reader holding dst open makes os.replace fail for a moment; retry.
    for attempt in range(5):
        try:
            os.replace(src, dst)
            return
        except PermissionError:
            if attempt == 4:
                raise
            time.sleep(0.01 * (attempt + 1))


# ---- the default cache ------------------------------------------------------------------------

_default: KernelCache | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache at `cache_dir()` (re-read if `TILEVM_CACHE_DIR` changes)."""
    global _default
    with _default_lock:
        if _default is None or _default.directory != cache_dir():
            _default = KernelCache()
        return _default


def get_or_build(key_parts: CacheKey | str, build: Callable[[], Artifact]) -> Artifact:
    """`default_cache().get_or_build(key_parts, build)`."""
    return default_cache().get_or_build(key_parts, build)


def clear() -> int:
    """Empty the default cache; the number of entries removed."""
    return default_cache().clear()


def stats() -> CacheStats:
    """The default cache's counters in this process."""
    return default_cache().stats
