"""The kernel signature: what a launch needs to know of a Program, computed from its IR.

    from tilevm.backend.analysis.signature import signature_from_program
    sig = signature_from_program(program)   # params, grid, block size, views, assumptions

A `Signature` lists the kernel's parameters in order (`ParamSpec`: a pointer to
elements of a dtype, with the alignment the compiled code assumes, or a scalar), the
launch grid and cluster as expressions over the scalar parameters, the block size, the
global views whose extent depends only on scalar parameters (`ViewSpec`: what the
launch checks buffer sizes against), the top-level `assume`s over scalar parameters
(`AssumeSpec`), the TMA tensor maps the kernel takes after its own parameters
(`TensorMapSpec`), and whether it opts in to programmatic dependent launch
(`dependent_launch`). It travels as JSON in the on-disk cache (`to_json`, `from_json`).
Binding arguments to it and checking them is `tilevm.backend.cuda.validate`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tilevm.dtypes import DataType, parse
from tilevm.ir.errors import VMError
from tilevm.ir.expr import (
    Binary,
    Const,
    Expr,
    ScalarCast,
    Select,
    Unary,
    Var,
    format_expr,
    free_vars,
)
from tilevm.ir.expr_parser import parse_expr
from tilevm.ir.instructions import Assume, GlobalView, TileWait, WaitPrerequisites
from tilevm.ir.stmt import AssignVar, For, If, Let, Seq
from tilevm.ir.transform import instructions
from tilevm.ir.types import Pointer

__all__ = ["ParamSpec", "ViewSpec", "TensorMapSpec", "AssumeSpec", "Signature",
           "signature_from_program"]


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter: a pointer to elements of `dtype`, or a scalar of `dtype`.

    `align` (pointers) is the byte alignment the compiled code assumes of the address;
    0 means the element size (1 for sub-byte types)."""

    name: str
    kind: str  # "pointer" | "scalar"
    dtype: DataType
    readonly: bool = False
    align: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("pointer", "scalar"):
            raise ValueError(f"a parameter's kind is 'pointer' or 'scalar', not {self.kind!r}")
        object.__setattr__(self, "dtype", parse(self.dtype))

    @property
    def is_pointer(self) -> bool:
        return self.kind == "pointer"

    @property
    def element_bytes(self) -> int:
        return max(1, self.dtype.bits // 8)

    @property
    def required_align(self) -> int:
        return max(self.align, self.element_bytes) if self.is_pointer else 1

    def __str__(self) -> str:
        if self.is_pointer:
            return f"{self.name}: {'const ' if self.readonly else ''}ptr<{self.dtype}>"
        return f"{self.name}: {self.dtype}"

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind, "dtype": self.dtype.name}
        if self.is_pointer:
            d.update(readonly=self.readonly, align=self.align)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ParamSpec:
        return cls(str(d["name"]), str(d["kind"]), parse(d["dtype"]),
                   bool(d.get("readonly", False)), int(d.get("align", 0)))


@dataclass(frozen=True)
class ViewSpec:
    """A global view of pointer `param` (element `offset + sum(c[i] * strides[i])`, at
    bit `element * dtype.bits`), whose extent depends only on scalar parameters."""

    param: str
    dtype: DataType
    offset: Expr
    shape: tuple[Expr, ...]
    strides: tuple[Expr, ...]
    name: str = ""  # the view's tensor in the program (what a `tma` copy names)


@dataclass(frozen=True)
class TensorMapSpec:
    """A TMA tensor-map parameter of a kernel (after its own parameters, in order): the
    view it describes (`ViewSpec.name`), that view's dimensions in the map's order
    (innermost, unit stride, first), the box (elements per dimension, same order) and
    the swizzle (0, 32, 64 or 128 bytes). Encoded at each launch (`encode_tensor_maps`)."""

    view: str
    dims: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int


@dataclass(frozen=True)
class AssumeSpec:
    """A condition over scalar parameters that the compiled kernel relies on (a
    top-level `assume`); `text` is the condition as written in the program, `where`
    the user's source line ("" if unknown)."""

    cond: Expr
    text: str
    where: str = ""


@dataclass(frozen=True)
class Signature:
    """What the runtime knows of a kernel: its parameters, the global views used to
    check buffer sizes, the grid (expressions over scalar parameters) and block size."""

    name: str
    params: tuple[ParamSpec, ...]
    views: tuple[ViewSpec, ...] = ()
    grid: tuple[Expr, ...] = ()
    num_threads: int = 0
    assumptions: tuple[AssumeSpec, ...] = ()
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    cluster: int = 1  # blocks per cluster along the grid's first dimension
    grid_where: str = ""  # the user's `tv.grid` line ("" if unknown), for launch errors
    # The kernel waits for the kernels before it (`wait_prerequisites`, at the top level,
    # before any global write: the verifier's rule; or tile by tile, `tile_wait`), so it
    # may be launched with the programmatic-stream-serialization attribute and start
    # before they end. Only then: a kernel without a wait never gets the attribute. The
    # wait is compiled in only for sm_90 and later (`Target.dependent_launch`), so a
    # build for an earlier target must clear this field.
    dependent_launch: bool = False

    def param(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(p) for p in self.params)})"

    # JSON (for the on-disk cache): expressions travel as IR text.
    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "params": [p.to_json() for p in self.params],
                "views": [{"param": v.param, "dtype": v.dtype.name, "name": v.name,
                           "offset": format_expr(v.offset),
                           "shape": [format_expr(s) for s in v.shape],
                           "strides": [format_expr(s) for s in v.strides]}
                          for v in self.views],
                "grid": [format_expr(g) for g in self.grid], "num_threads": self.num_threads,
                "assumptions": [{"cond": format_expr(a.cond), "text": a.text,
                                 "where": a.where} for a in self.assumptions],
                "tensor_maps": [{"view": m.view, "dims": list(m.dims), "box": list(m.box),
                                 "swizzle": m.swizzle} for m in self.tensor_maps],
                "cluster": self.cluster, "grid_where": self.grid_where,
                "dependent_launch": self.dependent_launch}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Signature:
        params = tuple(ParamSpec.from_json(p) for p in d["params"])
        scope = {p.name: Var(p.name, p.dtype) for p in params if not p.is_pointer}

        def ex(text: str) -> Expr:
            return parse_expr(text, scope)

        views = tuple(ViewSpec(v["param"], parse(v["dtype"]), ex(v["offset"]),
                               tuple(ex(s) for s in v["shape"]),
                               tuple(ex(s) for s in v["strides"]), str(v.get("name", "")))
                      for v in d.get("views", ()))
        assumptions = tuple(AssumeSpec(ex(a["cond"]), str(a["text"]), str(a.get("where", "")))
                            for a in d.get("assumptions", ()))
        maps = tuple(TensorMapSpec(str(m["view"]), tuple(int(x) for x in m["dims"]),
                                   tuple(int(x) for x in m["box"]), int(m["swizzle"]))
                     for m in d.get("tensor_maps", ()))
        return cls(str(d.get("name", "kernel")), params, views,
                   tuple(ex(g) for g in d.get("grid", ())), int(d.get("num_threads", 0)),
                   assumptions, maps, int(d.get("cluster", 1)), str(d.get("grid_where", "")),
                   bool(d.get("dependent_launch", False)))


def signature_from_program(program: Any, *, pointer_align: int = 16) -> Signature:
    """The `Signature` of a VM `Program`: its parameters in order (pointer parameters
    assume `pointer_align`-byte aligned addresses), its grid and block size, and the
    global views at the top level of its body whose offset, shape and strides depend
    only on scalar parameters (through top-level `let`s that are never reassigned),
    the top-level `assume`s whose conditions depend only on them, and whether a
    top-level `wait_prerequisites` opts in to programmatic dependent launch."""
    params: list[ParamSpec] = []
    scalars: set[Var] = set()
    for p in program.params:
        if isinstance(p, Pointer):
            params.append(ParamSpec(p.name, "pointer", p.type.dtype, p.type.readonly,
                                    pointer_align))
        elif isinstance(p, Var):
            params.append(ParamSpec(p.name, "scalar", p.dtype))
            scalars.add(p)
        else:
            raise VMError(f"kernel {program.name}: parameter {p!r} is neither a pointer nor "
                          f"a scalar")

    assigned: set[Var] = set()

    def collect(stmt: Any) -> None:
        if isinstance(stmt, AssignVar):
            assigned.add(stmt.var)
        elif isinstance(stmt, Seq):
            for s in stmt.body:
                collect(s)
        elif isinstance(stmt, For):
            collect(stmt.body)
        elif isinstance(stmt, If):
            collect(stmt.then_body)
            if stmt.else_body is not None:
                collect(stmt.else_body)

    collect(program.body)
    lets: dict[Var, Expr] = {}
    views: list[ViewSpec] = []
    assumptions: list[AssumeSpec] = []
    for stmt in program.body.body:
        if isinstance(stmt, Let) and stmt.var not in assigned:
            value = _subst(stmt.value, lets)
            if free_vars(value) <= scalars and _static(value):
                lets[stmt.var] = value
        elif isinstance(stmt, GlobalView):
            parts = [stmt.offset, *stmt.out.type.shape, *stmt.strides]
            exprs = [_subst(e if isinstance(e, Expr) else Const(int(e), _INT32), lets)
                     for e in parts]
            if all(free_vars(e) <= scalars and _static(e) for e in exprs):
                ndim = len(stmt.out.type.shape)
                views.append(ViewSpec(stmt.ptr.name, stmt.out.type.dtype, exprs[0],
                                      tuple(exprs[1:1 + ndim]), tuple(exprs[1 + ndim:]),
                                      stmt.out.name))
        elif isinstance(stmt, Assume):
            cond = _subst(stmt.cond, lets)
            if free_vars(cond) <= scalars and _static(cond):
                assumptions.append(AssumeSpec(cond, _strip_parens(format_expr(stmt.cond)),
                                              str(stmt.loc) if stmt.loc else ""))
    # A kernel that waits for the kernel before it, with `wait_prerequisites`, or tile by
    # tile on its semaphores (`tile_wait`: docs/tile-sync.md), may start before it ends.
    waits = any(isinstance(stmt, WaitPrerequisites) for stmt in program.body.body) or \
        any(isinstance(inst, TileWait) for inst in instructions(program.body))
    return Signature(program.name, tuple(params), tuple(views), tuple(program.grid),
                     program.block_threads, tuple(assumptions), cluster=program.cluster,
                     grid_where=str(program.grid_loc) if program.grid_loc else "",
                     dependent_launch=waits)


def _strip_parens(text: str) -> str:
    """`N % 8 == 0` for the printer's `((N % 8) == 0)`: one outer pair goes."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and i < len(text) - 1:
                return text  # the first "(" closes early: `(a) + (b)`
        return text[1:-1]
    return text


_INT32 = parse("int32")


def _static(e: Expr) -> bool:
    """No block index inside (the value is the same for every block)."""
    if isinstance(e, (Const, Var)):
        return True
    if isinstance(e, Binary):
        return _static(e.lhs) and _static(e.rhs)
    if isinstance(e, (Unary, ScalarCast)):
        return _static(e.operand)
    if isinstance(e, Select):
        return _static(e.cond) and _static(e.if_true) and _static(e.if_false)
    return False


def _subst(e: Expr, env: Mapping[Var, Expr]) -> Expr:
    if isinstance(e, Var):
        return env.get(e, e)
    if isinstance(e, Binary):
        return replace(e, lhs=_subst(e.lhs, env), rhs=_subst(e.rhs, env))
    if isinstance(e, (Unary, ScalarCast)):
        return replace(e, operand=_subst(e.operand, env))
    if isinstance(e, Select):
        return replace(e, cond=_subst(e.cond, env), if_true=_subst(e.if_true, env),
                       if_false=_subst(e.if_false, env))
    return e
