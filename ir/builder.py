"""`Builder`: constructs a `Program` one instruction at a time.

The frontend (vm/frontend.py) drives it from the user's Python; tests and generators
use it directly. It hands out unique names, keeps a stack of open statement blocks
(`for_range`, `if_then`/`otherwise` are context managers), and stamps every
instruction and statement with the current source location (`builder.loc`).

It checks nothing beyond what it needs to build (types are derived, not verified):
`ir.verifier.verify` is the judge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from tilevm.dtypes import DataType, parse
from tilevm.ir import instructions as ins
from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import BOOL, INT32, INT64, Binary, Const, Expr, Var, as_expr
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq, Stmt
from tilevm.ir.types import (
    MemorySpace,
    Pointer,
    PointerType,
    Tensor,
    TensorType,
    broadcast_shapes,
)

ExprLike = Expr | int | float | bool


class Builder:
    def __init__(self, name: str, num_warps: int = 4) -> None:
        self.name = name
        self.num_warps = num_warps
        self.params: list[Pointer | Var] = []
        self.grid: tuple[Expr, ...] = (as_expr(1),)
        self.grid_loc: SourceLoc | None = None  # where set_grid was called
        self.producer_loc: SourceLoc | None = None  # where the producer warp was asked for
        self.cluster_loc: SourceLoc | None = None  # where the cluster size was set
        self.constants: tuple[tuple[str, str], ...] = ()
        self.producer_warps = 0
        self.producer_registers = 0
        self.producer_converts = False
        self.cluster = 1
        self.loc: SourceLoc | None = None
        # The frontend sets this to the Python variable being assigned, so the tensors of
        # `acc = tv.dot(a, b, acc)` print as %acc, %acc.1 rather than generic names.
        self.name_hint: str | None = None
        self._blocks: list[list[Stmt]] = [[]]
        self._names: dict[str, int] = {}

    # ---- names ------------------------------------------------------------------------
    def fresh_name(self, hint: str = "t") -> str:
        """`hint`, or `hint.1`, `hint.2`, ... if taken: unique within the program."""
        hint = hint or "t"
        count = self._names.get(hint, 0)
        self._names[hint] = count + 1
        return hint if count == 0 else f"{hint}.{count}"

    # ---- parameters and launch ------------------------------------------------------------
    def pointer_param(self, name: str, dtype: DataType | str, readonly: bool = False) -> Pointer:
        param = Pointer(self.fresh_name(name), PointerType(parse(dtype), readonly))
        self.params.append(param)
        return param

    def scalar_param(self, name: str, dtype: DataType | str = INT32) -> Var:
        param = Var(self.fresh_name(name), parse(dtype))
        self.params.append(param)
        return param

    def set_grid(self, *blocks: ExprLike) -> None:
        self.grid = tuple(as_expr(b) for b in blocks)
        self.grid_loc = self.loc

    # ---- statements ---------------------------------------------------------------------
    def append(self, stmt: Stmt) -> None:
        self._blocks[-1].append(stmt)

    def emit(self, inst: ins.Instruction) -> Tensor | None:
        self.append(inst)
        return inst.output

    @contextlib.contextmanager
    def _block(self) -> Iterator[list[Stmt]]:
        self._blocks.append([])
        try:
            yield self._blocks[-1]
        finally:
            self._blocks.pop()

    @contextlib.contextmanager
    def for_range(self, start: ExprLike, stop: ExprLike, step: ExprLike = 1,
                  name: str = "i", unroll: int | None = None) -> Iterator[Var]:
        """`with b.for_range(0, n) as i:` builds a `For` around what the body emits."""
        var = Var(self.fresh_name(name), INT32)
        loc = self.loc
        with self._block() as body:
            yield var
        self.append(For(var=var, start=as_expr(start), stop=as_expr(stop), step=as_expr(step),
                        body=Seq(body=tuple(body)), unroll=unroll, loc=loc))

    @contextlib.contextmanager
    def if_then(self, cond: ExprLike) -> Iterator[None]:
        loc = self.loc
        with self._block() as body:
            yield
        self.append(If(cond=as_expr(cond), then_body=Seq(body=tuple(body)), loc=loc))

    @contextlib.contextmanager
    def otherwise(self) -> Iterator[None]:
        """The else branch of the `If` just built."""
        last = self._blocks[-1][-1] if self._blocks[-1] else None
        if not isinstance(last, If) or last.else_body is not None:
            raise RuntimeError("otherwise() must follow an if_then() block")
        with self._block() as body:
            yield
        self._blocks[-1][-1] = If(cond=last.cond, then_body=last.then_body,
                                  else_body=Seq(body=tuple(body)), loc=last.loc)

    def let(self, value: ExprLike, name: str = "v", dtype: DataType | None = None) -> Var:
        value = as_expr(value)
        var = Var(self.fresh_name(name), dtype or value.dtype)
        self.append(Let(var=var, value=value, loc=self.loc))
        return var

    def assign_var(self, var: Var, value: ExprLike) -> None:
        self.append(AssignVar(var=var, value=as_expr(value), loc=self.loc))

    def build(self) -> Program:
        if len(self._blocks) != 1:
            raise RuntimeError("build() inside an open block")
        return Program(self.name, tuple(self.params), self.grid, self.num_warps,
                       Seq(body=tuple(self._blocks[0])), self.constants, self.producer_warps,
                       producer_registers=self.producer_registers, cluster=self.cluster,
                       producer_converts=self.producer_converts, grid_loc=self.grid_loc,
                       producer_loc=self.producer_loc, cluster_loc=self.cluster_loc)

    # ---- tensors --------------------------------------------------------------------------
    def tensor(self, space: MemorySpace, dtype: DataType | str, shape: Sequence[ExprLike],
               layout: Any = None, name: str = "t") -> Tensor:
        dims = tuple(s if isinstance(s, int) else as_expr(s) for s in shape)
        name = self.name_hint or name
        return Tensor(self.fresh_name(name), TensorType(space, parse(dtype), dims, layout))

    def register(self, dtype: DataType | str, shape: Sequence[int], layout: Any = None,
                 name: str = "r") -> Tensor:
        return self.tensor(MemorySpace.REGISTER, dtype, shape, layout, name)

    # ---- one method per instruction ------------------------------------------------------------
    def global_view(self, ptr: Pointer, shape: Sequence[ExprLike],
                    strides: Sequence[ExprLike] | None = None, offset: ExprLike = 0,
                    dtype: DataType | str | None = None, name: str = "g") -> Tensor:
        shape = [as_expr(s) for s in shape]
        if strides is None:  # row-major
            strides, stride = [], as_expr(1)
            for s in reversed(shape):
                strides.insert(0, stride)
                stride = _mul(stride, s)
        out = self.tensor(MemorySpace.GLOBAL, dtype or ptr.type.dtype, shape, None, name)
        return self._out(ins.GlobalView(out=out, ptr=ptr, offset=as_expr(offset),
                                        strides=tuple(as_expr(s) for s in strides),
                                        loc=self.loc))

    def load_global(self, src: Tensor, offsets: Sequence[ExprLike], shape: Sequence[int],
                    layout: Any = None, other: int | float = 0, name: str = "r") -> Tensor:
        out = self.register(src.dtype, shape, layout, name)
        return self._out(ins.LoadGlobal(out=out, src=src, offsets=_exprs(offsets), other=other,
                                        loc=self.loc))

    def store_global(self, dst: Tensor, src: Tensor, offsets: Sequence[ExprLike]) -> None:
        self.emit(ins.StoreGlobal(dst=dst, src=src, offsets=_exprs(offsets), loc=self.loc))

    def atomic_add(self, dst: Tensor, offsets: Sequence[ExprLike], value: ExprLike,
                   name: str = "old") -> Var:
        out = Var(self.fresh_name(self.name_hint or name), INT32)
        self.emit(ins.AtomicAdd(out=out, dst=dst, offsets=_exprs(offsets),
                                value=as_expr(value), loc=self.loc))
        return out

    def globaltimer(self, name: str = "t") -> Var:
        out = Var(self.fresh_name(self.name_hint or name), INT64)
        self.emit(ins.GlobalTimer(out=out, loc=self.loc))
        return out

    def tile_post(self, sem: Tensor, offsets: Sequence[ExprLike], value: ExprLike) -> None:
        self.emit(ins.TilePost(sem=sem, offsets=_exprs(offsets), value=as_expr(value),
                               loc=self.loc))

    def tile_wait(self, sem: Tensor, offsets: Sequence[ExprLike], expected: ExprLike) -> None:
        self.emit(ins.TileWait(sem=sem, offsets=_exprs(offsets), expected=as_expr(expected),
                               loc=self.loc))

    def alloc_shared(self, dtype: DataType | str, shape: Sequence[int], layout: Any = None,
                     name: str = "s") -> Tensor:
        out = self.tensor(MemorySpace.SHARED, dtype, shape, layout, name)
        return self._out(ins.AllocShared(out=out, loc=self.loc))

    def free_shared(self, tensor: Tensor) -> None:
        self.emit(ins.FreeShared(tensor=tensor, loc=self.loc))

    def load_shared(self, src: Tensor, offsets: Sequence[ExprLike], shape: Sequence[int],
                    layout: Any = None, name: str = "r", peer: ExprLike | None = None
                    ) -> Tensor:
        out = self.register(src.dtype, shape, layout, name)
        return self._out(ins.LoadShared(out=out, src=src, offsets=_exprs(offsets),
                                        peer=None if peer is None else _exprs([peer])[0],
                                        loc=self.loc))

    def store_shared(self, dst: Tensor, src: Tensor, offsets: Sequence[ExprLike]) -> None:
        self.emit(ins.StoreShared(dst=dst, src=src, offsets=_exprs(offsets), loc=self.loc))

    def copy_async(self, dst: Tensor, src: Tensor, offsets: Sequence[ExprLike],
                   multicast: bool = False) -> None:
        self.emit(ins.CopyAsync(dst=dst, src=src, offsets=_exprs(offsets),
                                multicast=multicast, loc=self.loc))

    def copy_async_commit(self) -> None:
        self.emit(ins.CopyAsyncCommit(loc=self.loc))

    def copy_async_wait(self, n: int = 0) -> None:
        self.emit(ins.CopyAsyncWait(n=n, loc=self.loc))

    def sync(self) -> None:
        self.emit(ins.Sync(loc=self.loc))

    def cluster_sync(self) -> None:
        self.emit(ins.ClusterSync(loc=self.loc))

    def launch_dependents(self) -> None:
        self.emit(ins.LaunchDependents(loc=self.loc))

    def wait_prerequisites(self) -> None:
        self.emit(ins.WaitPrerequisites(loc=self.loc))

    def full(self, value: ExprLike, dtype: DataType | str, shape: Sequence[int],
             layout: Any = None, name: str = "r") -> Tensor:
        out = self.register(dtype, shape, layout, name)
        return self._out(ins.Full(out=out, value=as_expr(value), loc=self.loc))

    def arange(self, dim: int, dtype: DataType | str, shape: Sequence[int], layout: Any = None,
               name: str = "idx") -> Tensor:
        out = self.register(dtype, shape, layout, name)
        return self._out(ins.Arange(out=out, dim=dim, loc=self.loc))

    def assign(self, dst: Tensor, src: Tensor) -> None:
        self.emit(ins.Assign(dst=dst, src=src, loc=self.loc))

    def view(self, src: Tensor, dtype: DataType | str, shape: Sequence[int], layout: Any,
             name: str = "v") -> Tensor:
        out = self.register(dtype, shape, layout, name)
        return self._out(ins.View(out=out, src=src, loc=self.loc))

    def cast(self, src: Tensor, dtype: DataType | str, layout: Any = None,
             name: str = "c", exponent: int = 0) -> Tensor:
        out = self.register(dtype, src.type.static_shape, layout or src.layout, name)
        return self._out(ins.Cast(out=out, src=src, exponent=exponent, loc=self.loc))

    def elementwise(self, op: str, *args: Tensor | ExprLike, dtype: DataType | str | None = None,
                    layout: Any = None, name: str = "e") -> Tensor:
        operands = tuple(a if isinstance(a, Tensor) else as_expr(a) for a in args)
        tensors = [a for a in operands if isinstance(a, Tensor)]
        if not tensors:
            raise ValueError(f"elementwise {op} needs at least one tensor operand")
        shape = _broadcast([t.type.static_shape for t in tensors])
        if dtype is None:
            dtype = BOOL if op in ins.COMPARISON_TENSOR_OPS else tensors[0].dtype
        if layout is None:
            layout = next((t.layout for t in tensors if t.type.static_shape == shape), None)
        out = self.register(dtype, shape, layout, name)
        return self._out(ins.Elementwise(op=op, out=out, args=operands, loc=self.loc))

    def where(self, cond: Tensor, x: Tensor | ExprLike, y: Tensor | ExprLike,
              name: str = "w") -> Tensor:
        x = x if isinstance(x, Tensor) else as_expr(x)
        y = y if isinstance(y, Tensor) else as_expr(y)
        tensors = [t for t in (cond, x, y) if isinstance(t, Tensor)]
        shape = _broadcast([t.type.static_shape for t in tensors])
        dtype = next((t.dtype for t in (x, y) if isinstance(t, Tensor)), None)
        dtype = dtype or (x.dtype if isinstance(x, Expr) else INT32)
        # (as `elementwise`: the layout of an operand of out's shape; a broadcast cond's
        # layout is of another shape)
        layout = next((t.layout for t in tensors if t.type.static_shape == shape), None)
        out = self.register(dtype, shape, layout, name)
        return self._out(ins.Where(out=out, cond=cond, x=x, y=y, loc=self.loc))

    def reduce(self, op: str, src: Tensor, dim: int, keepdim: bool = False, layout: Any = None,
               name: str = "red") -> Tensor:
        shape = list(src.type.static_shape)
        if keepdim:
            shape[dim] = 1
        else:
            del shape[dim]
        out = self.register(src.dtype, shape, layout, name)
        return self._out(ins.Reduce(op=op, out=out, src=src, dim=dim, keepdim=keepdim,
                                    loc=self.loc))

    def dot(self, a: Tensor, b: Tensor, c: Tensor, layout: Any = None, name: str = "acc") -> Tensor:
        out = self.register(c.dtype, c.type.static_shape, layout or c.layout, name)
        return self._out(ins.Dot(out=out, a=a, b=b, c=c, loc=self.loc))

    def annotate_layout(self, tensor: Tensor, layout: Any) -> None:
        self.emit(ins.AnnotateLayout(tensor=tensor, layout=layout, loc=self.loc))

    def print(self, value: Tensor | ExprLike, message: str = "") -> None:
        value = value if isinstance(value, Tensor) else as_expr(value)
        self.emit(ins.Print(value=value, message=message, loc=self.loc))

    def _out(self, inst: ins.Instruction) -> Tensor:
        out = self.emit(inst)
        assert out is not None
        return out


def _exprs(values: Sequence[ExprLike]) -> tuple[Expr, ...]:
    return tuple(as_expr(v) for v in values)


def _mul(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and a.value == 1:
        return b
    if isinstance(b, Const) and b.value == 1:
        return a
    return Binary("*", a, b)


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    shape = broadcast_shapes(shapes)
    if shape is None:
        raise ValueError(f"shapes {shapes} do not broadcast")
    return shape
