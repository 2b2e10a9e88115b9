"""Divisibility facts about scalar expressions, and the program walk the lowering passes
share (`rewrite_instructions`).

A vector access of `w` elements needs its first element at a multiple of `w`; offsets
and strides are often runtime values (`k0` of a loop, a row stride `N`), so the passes
ask `ProgramPoint.divisor(e)`: a number that provably divides the value of `e` at that
point of the program (0 divides only 0; 1 is always safe). Facts come from:

- constants (their value), and the rules `d(a * b) = d(a) * d(b)`,
  `d(a +- b) = gcd(d(a), d(b))`, `d(a << c) = d(a) * 2^c`, `d(a // c) = d(a) / c` when
  `c` divides `d(a)` (0 stays 0: the division is exact);
- loop variables: `gcd(d(start), d(step))` inside the loop;
- `assume`s at the top level of the body about scalar parameters (`assumed_divisors`):
  such an assume is reached by every thread before the kernel returns, and a parameter
  never changes, so `N % 8 == 0` there makes 8 a divisor of `N` everywhere. Facts about
  anything but scalar parameters, and assumes nested in loops or branches, are not used.

The runtime checks every assume before a launch (backend/cuda/validate.py), so a fact used
here is never a wrong promise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tilevm.dtypes import DataType
from tilevm.ir import instructions as ins
from tilevm.ir.expr import BOOL, Binary, Const, Expr, Var
from tilevm.ir.stmt import For, Program
from tilevm.ir.transform import map_instructions
from tilevm.ir.types import Tensor


@dataclass
class ProgramPoint:
    """What the passes know at one instruction: divisors of variables and the
    `global_view` instruction that defined each global tensor in scope."""

    divisors: dict[str, int] = field(default_factory=dict)
    views: dict[str, ins.GlobalView] = field(default_factory=dict)

    def divisor(self, e: Expr | int) -> int:
        """A number that provably divides the value of `e` (see the module docstring)."""
        if isinstance(e, int):
            return abs(e)
        if isinstance(e, Const):
            return abs(int(e.value)) if e.dtype.is_integer else 1
        if isinstance(e, Var):
            return self.divisors.get(e.name, 1)
        if isinstance(e, Binary) and e.op == "*":
            return self.divisor(e.lhs) * self.divisor(e.rhs)
        if isinstance(e, Binary) and e.op in ("+", "-"):
            return math.gcd(self.divisor(e.lhs), self.divisor(e.rhs))
        if isinstance(e, Binary) and e.op == "<<" and isinstance(e.rhs, Const):
            return self.divisor(e.lhs) << int(e.rhs.value)
        if isinstance(e, Binary) and e.op == "//" and isinstance(e.rhs, Const) \
                and e.dtype.is_integer and int(e.rhs.value) > 0:
            # c | a exactly: a // c = a / c, which d(a) / c divides
            d, c = self.divisor(e.lhs), int(e.rhs.value)
            return d // c if d % c == 0 else 1
        return 1

    def view(self, tensor: Tensor) -> ins.GlobalView:
        return self.views[tensor.name]

    @contextmanager
    def inside(self, loop: For) -> Iterator[None]:
        """Within `loop`'s body its variable is a multiple of gcd(start, step)."""
        name = loop.var.name
        saved = self.divisors.get(name)
        self.divisors[name] = math.gcd(self.divisor(loop.start), self.divisor(loop.step))
        try:
            yield
        finally:
            if saved is None:
                del self.divisors[name]
            else:
                self.divisors[name] = saved


def rewrite_instructions(program: Program,
                         rewrite: Callable[[ins.Instruction, ProgramPoint], ins.Instruction]
                         ) -> Program:
    """The program with every instruction `i` replaced by `rewrite(i, point)`, `point`
    being what is known where `i` runs (the same walk for every lowering pass)."""
    point = ProgramPoint(divisors=assumed_divisors(program))

    def visit(inst: ins.Instruction) -> ins.Instruction:
        if isinstance(inst, ins.GlobalView):
            point.views[inst.out.name] = inst
        return rewrite(inst, point)

    return map_instructions(program, visit, point.inside)


def assumed_divisors(program: Program) -> dict[str, int]:
    """Scalar parameter name -> a number the top-level assumes prove divides it."""
    params = {p for p in program.params if isinstance(p, Var)}
    found: dict[str, int] = {}
    for stmt in program.body.body:
        if isinstance(stmt, ins.Assume):
            for name, c in _facts(stmt.cond, params):
                found[name] = math.lcm(found.get(name, 1), c)
    return found


def _facts(cond: Expr, params: set[Var]) -> list[tuple[str, int]]:
    """(x, c) for each `x % c == 0` (or `x & (c - 1) == 0`, c a power of two) that
    `cond` implies, through `and` and bool `&`."""
    if not isinstance(cond, Binary):
        return []
    if cond.op == "and" or (cond.op == "&" and cond.dtype == BOOL):
        return _facts(cond.lhs, params) + _facts(cond.rhs, params)
    if cond.op != "==":
        return []
    lhs, rhs = cond.lhs, cond.rhs
    if _is_zero(lhs):
        lhs, rhs = rhs, lhs
    if not (_is_zero(rhs) and isinstance(lhs, Binary) and isinstance(lhs.lhs, Var)
            and lhs.lhs in params and isinstance(lhs.rhs, Const)):
        return []
    x, c, dtype = lhs.lhs, lhs.rhs, lhs.dtype
    if not (x.dtype.is_integer and c.dtype.is_integer and dtype.is_integer) \
            or isinstance(c.value, float):
        return []
    value = int(c.value)
    if not 0 < value < 1 << 31:
        return []
    if lhs.op == "&":
        value += 1  # x & (2^k - 1) == 0: 2^k divides x
        if value & (value - 1):
            return []
    elif lhs.op != "%":
        return []
    # The test is done in `dtype`; it says something of x only if x converts to it
    # exactly, or if c divides 2^bits (then wrapping keeps the remainder).
    if not (_exact(x.dtype, dtype) or (value & (value - 1) == 0 and value.bit_length()
                                       <= dtype.bits)):
        return []
    return [(x.name, value)]


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.dtype.is_integer and e.value == 0


def _exact(src: DataType, dst: DataType) -> bool:
    """Every value of the integer type `src` is a value of `dst`."""
    if src == dst:
        return True
    if src.is_signed:
        return dst.is_signed and dst.bits >= src.bits
    return dst.bits > src.bits if dst.is_signed else dst.bits >= src.bits
