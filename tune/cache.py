"""The tuning cache: what a search found, per problem, in one JSON table per machine
(`$TILEVM_CACHE_DIR/tuning.json`, by default `~/.cache/tilevm/tuning.json`).

    key = cache_key(gpu="NVIDIA H100 80GB HBM3", kernel="qmm", version=12, dtype="int4",
                    M=16, N=4096, K=4096)
    lookup(key)            # the entry a search stored, or None
    store(key, {"schedule": {...}, "us": 9.7})

A key names the GPU model, the kernel, the version of its search space and the
problem's fields (types, shape bucket), in that order. Tuning is per GPU model, and the
table is a plain file, so it can be copied between machines of one model: a fleet tunes
once. A search space that changes bumps its version, and the old entries stop matching.
Writes are atomic (a reader sees the old table or the new one, never half of one) and
serialized within a process; an unreadable table reads as empty (tune again, never a
crash).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["CACHE_ENV", "cache_file", "cache_key", "lookup", "store", "read_table",
           "write_table"]

CACHE_ENV = "TILEVM_CACHE_DIR"
_lock = threading.Lock()


def cache_file() -> Path:
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "tilevm"
    return Path(root) / "tuning.json"


def cache_key(*, gpu: str, kernel: str, version: int | str, **fields: object) -> str:
    """`v{version}|{gpu}|{kernel}|name=value|...`, the fields in the order given; `|`
    in the GPU's name (it separates the parts) becomes `/`."""
    parts = [f"v{version}", gpu.replace("|", "/"), kernel]
    return "|".join(parts + [f"{name}={value}" for name, value in fields.items()])


def read_table() -> dict[str, Any]:
    try:
        table = json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: tune again
    return table if isinstance(table, dict) else {}


def write_table(table: dict[str, Any]) -> None:
    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tuning.")
    with os.fdopen(fd, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
    os.replace(tmp, path)  # atomic: readers see the old table or the new one


def lookup(key: str) -> dict[str, Any] | None:
    entry = read_table().get(key)
    return entry if isinstance(entry, dict) else None


def store(key: str, entry: dict[str, Any]) -> None:
    """Add or replace one entry (the table read again under the lock: entries other
    searches stored meanwhile stay)."""
    with _lock:
        table = read_table()
        table[key] = entry
        write_table(table)
