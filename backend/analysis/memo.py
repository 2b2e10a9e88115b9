"""Facts computed once per program: `per_program(fact)` memoizes `fact(program)` by the
program object's identity.

A `Program` is a frozen dataclass, so a fact of one program object never changes; but
hashing or comparing programs by value would walk the whole IR, so the cache is keyed by
`id(program)` and holds a weak reference to the program, whose collection drops the
entry (an id is reused only after its object is gone). A fact that raises is not
cached: the next caller gets the same error.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from tilevm.ir.stmt import Program

T = TypeVar("T")


def per_program(fact: Callable[[Program], T]) -> Callable[[Program], T]:
    """`fact`, computed once per program object and then returned from a cache."""
    cache: dict[int, tuple[weakref.ref, Any]] = {}

    def forget(ref: weakref.ref, key: int) -> None:
        entry = cache.get(key)
        if entry is not None and entry[0] is ref:
            del cache[key]

    @functools.wraps(fact)
    def memoized(program: Program) -> T:
        key = id(program)
        entry = cache.get(key)
        if entry is not None and entry[0]() is program:
            return entry[1]
        value = fact(program)
        ref = weakref.ref(program, lambda r, key=key: forget(r, key))
        cache[key] = (ref, value)
        return value

    return memoized
