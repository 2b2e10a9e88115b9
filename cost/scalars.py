"""Scalar expressions made into Python functions once, for the cost model's walks, which
evaluate the same offsets and loop bounds for many blocks and iterations.

The semantics are ir/evaluate.py's (its `scalar_binary`, `scalar_unary`,
`convert_scalar` and `evaluate` of a constant); what is done once here is the walk of
the tree: each node's type (a `Binary`'s is recomputed from its operands on every
access) and each constant's value.
"""

from __future__ import annotations

from collections.abc import Callable

from tilevm.dtypes import DataType
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import convert_scalar, evaluate, scalar_binary, scalar_unary
from tilevm.ir.expr import Binary, BlockIndex, Const, Expr, ScalarCast, Select, Unary, Var

Scalar = int | float
Lookup = Callable[[Var], Scalar]
Compiled = Callable[[Lookup, tuple[int, int, int]], Scalar]


class CompiledExprs:
    """`compiled(e)`: the function computing `e` from a variable lookup and the block
    index, made once per expression object (kept alive with it, so ids stay unique)."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[Expr, Compiled]] = {}

    def compiled(self, e: Expr) -> Compiled:
        found = self._made.get(id(e))
        if found is None:
            found = self._made[id(e)] = (e, compile_expr(e))
        return found[1]


def compile_expr(e: Expr) -> Compiled:
    """A function equal to `lambda lookup, block: evaluate(e, lookup, block)`: one
    generated Python function per expression, each node one statement in it (a node the
    tree shares computed once), so that evaluating costs no call per node. A `Select`'s
    sides are functions of their own: only the side taken is evaluated."""
    return _Writer().function(e)


class _Writer:
    """Writes the body of one generated function: a statement per node, in the order
    the recursive evaluation visits them."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[int, str] = {}  # node id -> its local
        self.space: dict[str, object] = {"scalar_binary": scalar_binary,
                                         "scalar_unary": scalar_unary,
                                         "convert_scalar": convert_scalar, "_raise": _raise}

    def function(self, e: Expr) -> Compiled:
        result = self.node(e)
        source = "def run(lookup, block):\n" + "".join(f"    {line}\n" for line in self.lines)
        source += f"    return {result}\n"
        exec(compile(source, f"<cost expression {type(e).__name__}>", "exec"), self.space)
        return self.space["run"]  # type: ignore[return-value]

    def bind(self, value: object) -> str:
        name = f"k{len(self.space)}"
        self.space[name] = value
        return name

    def node(self, e: Expr) -> str:
        found = self.names.get(id(e))
        if found is not None:
            return found
        name = self.names[id(e)] = f"t{len(self.names)}"
        self.lines.append(f"{name} = {self.value(e)}")
        return name

    def value(self, e: Expr) -> str:  # noqa: PLR0911 (one return per kind of node)
        if isinstance(e, Const):
            try:
                return self.bind(evaluate(e, _no_variable))
            except VMError as err:
                return f"_raise({self.bind(err)})"
        if isinstance(e, Var):
            return f"lookup({self.bind(e)})"
        if isinstance(e, BlockIndex):
            if not 0 <= e.axis <= 2:
                err = VMError(f"block index axis {e.axis} is not 0, 1 or 2")
                return f"_raise({self.bind(err)})"
            return f"block[{e.axis}]"
        if isinstance(e, Binary):
            lhs, rhs = self.node(e.lhs), self.node(e.rhs)
            if e.op in _COMPARE:
                return f"int({lhs} {_COMPARE[e.op]} {rhs})"
            if e.dtype.is_float or e.op not in _INTEGER:
                return f"scalar_binary({e.op!r}, {lhs}, {rhs}, {self.bind(e.dtype)})"
            return self.integer(e.op, e.dtype, lhs, rhs)
        if isinstance(e, Unary):
            return f"scalar_unary({e.op!r}, {self.node(e.operand)}, {self.bind(e.dtype)})"
        if isinstance(e, Select):
            sides = self.bind(compile_expr(e.if_true)), self.bind(compile_expr(e.if_false))
            return (f"convert_scalar(({sides[0]} if {self.node(e.cond)} else {sides[1]})"
                    f"(lookup, block), {self.bind(e.dtype)})")
        if isinstance(e, ScalarCast):
            return f"convert_scalar({self.node(e.operand)}, {self.bind(e.dtype)})"
        raise TypeError(f"not a scalar expression: {e!r}")

    def integer(self, op: str, dtype: DataType, lhs: str, rhs: str) -> str:
        """An integer operation without `scalar_binary`'s dispatch: the same value where
        the result is in the type's range (else, and for a zero divisor, `scalar_binary`
        decides: it wraps, or raises)."""
        x, y = self.node_of(f"int({lhs})"), self.node_of(f"int({rhs})")
        r = self.node_of(_INTEGER[op].format(x=x, y=y) if op not in ("//", "%", "cdiv") else
                         f"None if {y} == 0 else {_INTEGER[op].format(x=x, y=y)}")
        lo, hi = int(dtype.min_exact), int(dtype.max_exact)
        return (f"{r} if {r} is not None and {lo} <= {r} <= {hi} else "
                f"scalar_binary({op!r}, {x}, {y}, {self.bind(dtype)})")

    def node_of(self, text: str) -> str:
        """A new local holding `text`'s value."""
        name = f"u{len(self.lines)}"
        self.lines.append(f"{name} = {text}")
        return name


_COMPARE = {"<": "<", "<=": "<=", "==": "==", "!=": "!=", ">": ">", ">=": ">="}
_INTEGER = {"+": "{x} + {y}", "-": "{x} - {y}", "*": "{x} * {y}", "min": "min({x}, {y})",
            "max": "max({x}, {y})", "//": "{x} // {y}", "%": "{x} % {y}",
            "cdiv": "-(-{x} // {y})"}


def _raise(err: VMError) -> Scalar:
    raise err


def _no_variable(var: Var) -> Scalar:
    raise VMError(f"{var.name} in a constant")


