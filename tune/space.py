"""A kernel's schedule space as knobs (level 1 of the search): each knob a name and its
ordered values, and a rule that makes a candidate of a choice of values, or refuses it.

    space = Space((Knob("bm", (8, 16, 32)), Knob("split_k", (1, 2, 4))), make)
    point = space.start({"bm": 16, "split_k": 1})      # a tuple, one value per knob
    space.neighbour(point, rng)                          # one knob moved one step
    space.candidate(point)                               # make(values), or None

A move changes one knob, picked uniformly, to the value next to its current one (up or
down, as the knob allows). A move to a point `make` refuses is tried again (at most
`TRIES` times; then the point stays): the constraints of a kernel (shared memory,
registers, instruction shapes, what divides the problem) live in `make`, which the
kernel declares with its space.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Knob", "Space", "TRIES"]

Candidate = TypeVar("Candidate")
Point = tuple[object, ...]  # one value per knob, in the space's order

TRIES = 20


@dataclass(frozen=True)
class Knob:
    """A named knob and its values, in the order a move steps through them."""

    name: str
    values: tuple[object, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"knob {self.name!r} has no values")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"knob {self.name!r} repeats a value: {self.values}")


@dataclass(frozen=True)
class Space(Generic[Candidate]):
    """Knobs, and `make`: the candidate of a choice of values (by knob name), or None
    where the kernel refuses the combination."""

    knobs: tuple[Knob, ...]
    make: Callable[[Mapping[str, object]], Candidate | None]

    def values(self, point: Point) -> dict[str, object]:
        return {knob.name: value for knob, value in zip(self.knobs, point, strict=True)}

    def candidate(self, point: Point) -> Candidate | None:
        return self.make(self.values(point))

    def start(self, values: Mapping[str, object]) -> Point:
        """The point of these values (every knob named, each value one of its own)."""
        missing = [k.name for k in self.knobs if k.name not in values]
        if missing or len(values) != len(self.knobs):
            raise ValueError(f"a start names every knob once: missing {missing}, "
                             f"unknown {sorted(set(values) - {k.name for k in self.knobs})}")
        for knob in self.knobs:
            if values[knob.name] not in knob.values:
                raise ValueError(f"{values[knob.name]!r} is not a value of knob "
                                 f"{knob.name!r} {knob.values}")
        return tuple(values[k.name] for k in self.knobs)

    def neighbour(self, point: Point, rng: random.Random) -> Point:
        """One knob one step from `point`, at a point `make` accepts (module docstring)."""
        for _ in range(TRIES):
            i = rng.randrange(len(self.knobs))
            values = self.knobs[i].values
            at = values.index(point[i])
            steps = [s for s in (-1, 1) if 0 <= at + s < len(values)]
            if not steps:
                continue
            moved = (*point[:i], values[at + rng.choice(steps)], *point[i + 1:])
            if self.candidate(moved) is not None:
                return moved
        return point

    def points(self) -> Sequence[Point]:
        """Every point `make` accepts (for small spaces and tests)."""
        found: list[Point] = [()]
        for knob in self.knobs:
            found = [(*p, v) for p in found for v in knob.values]
        return [p for p in found if self.candidate(p) is not None]
