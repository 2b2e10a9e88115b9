"""The meaning of the register-tile instructions in the reference interpreter: `full`,
`arange`, `assign`, `view`, `cast`, `elementwise`, `where`, `reduce`, `dot`,
`annotate_layout`, `print` and `assume` (`exec_<opname>` methods; `vm.interpreter`'s
docstring states the rounding rules).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import numpy as np

from tilevm.dtypes import decode
from tilevm.ir import instructions as ins
from tilevm.ir.expr import Expr, Var, free_vars
from tilevm.ir.types import MemorySpace, Tensor
from tilevm.layouts.register_bits import check_view
from tilevm.layouts.register_layout import RegisterLayout
from tilevm.vm.interp_memory import read_codes
from tilevm.vm.interp_state import InterpreterState
from tilevm.vm.interp_values import (
    check_register_dtype,
    decode_codes,
    elementwise,
    plain_nan,
    round_to,
    to_codes,
)


@functools.lru_cache(maxsize=512)
def _table(layout: RegisterLayout) -> np.ndarray:
    return layout.table()


class TileSemantics(InterpreterState):
    """`exec_<opname>` for the register-tile instructions."""

    def exec_full(self, inst: ins.Full) -> None:
        """Every element = `value` converted to `out`'s dtype."""
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        value = round_to(float(self._eval(inst.value)), out.dtype)
        self._set(out, np.full(out.type.static_shape, float(value)))

    def exec_arange(self, inst: ins.Arange) -> None:
        """Every element = its index along `dim` (the verifier checks that out's integer
        dtype holds every index)."""
        out = inst.out
        shape = out.type.static_shape
        if not 0 <= inst.dim < len(shape):
            self._fail(f"arange: dim {inst.dim} is out of range for {out} of shape {shape}")
        index = np.arange(shape[inst.dim], dtype=np.float64)
        axes = [1] * len(shape)
        axes[inst.dim] = shape[inst.dim]
        self._set(out, round_to(np.broadcast_to(index.reshape(axes), shape), out.dtype))

    def exec_assign(self, inst: ins.Assign) -> None:
        """Overwrite `dst` with `src` (same shape and dtype)."""
        src = self._reg(inst.src)
        dst = inst.dst
        if dst.type.static_shape != inst.src.type.static_shape or dst.dtype != inst.src.dtype:
            self._fail(f"assign needs one type on both sides: {dst} is {dst.type}, "
                       f"{inst.src} is {inst.src.type}")
        if dst.layout is not None and inst.src.layout is not None and \
                dst.layout != inst.src.layout:
            self._fail(f"assign between different layouts: {dst.layout} and "
                       f"{inst.src.layout}")
        self._set(dst, src)

    def exec_view(self, inst: ins.View) -> None:
        """Each thread's bits of `src` (local element l at bits [l*b, (l+1)*b)) read back
        as `out`'s elements under `out`'s layout."""
        src, out = inst.src, inst.out
        values = self._reg(src)
        check_register_dtype(out.dtype, str(out))
        src_layout, out_layout = self._register_layout(src), self._register_layout(out)
        if src_layout is None or out_layout is None:
            missing = " and ".join(str(t) for t, lay in ((src, src_layout), (out, out_layout))
                                   if lay is None)
            self._fail(f"view needs both layouts; {missing} has none")
        check_view(src_layout, src.dtype.bits, out_layout, out.dtype.bits)
        sb, ob = src.dtype.bits, out.dtype.bits
        src_table = _table(src_layout)
        nthreads, nlocal = src_table.shape[:2]
        flat = _flat_index(src_table, src_layout.shape)
        codes = to_codes(values.reshape(-1), src.dtype).astype(np.uint64)[flat]  # [T, L]
        shifts = np.arange(sb, dtype=np.uint64)
        bits = ((codes[..., None] >> shifts) & np.uint64(1)).reshape(nthreads, nlocal * sb)
        out_table = _table(out_layout)
        out_local = out_table.shape[1]
        grouped = bits.reshape(nthreads, out_local, ob)
        out_codes = (grouped << np.arange(ob, dtype=np.uint64)).sum(axis=-1, dtype=np.uint64)
        out_flat = _flat_index(out_table, out_layout.shape)
        result = np.zeros(math.prod(out_layout.shape), dtype=np.uint64)
        result[out_flat.reshape(-1)] = out_codes.reshape(-1)
        clash = result[out_flat] != out_codes
        if clash.any():
            t, l = (int(x[0]) for x in np.nonzero(clash))
            coord = tuple(int(c) for c in out_table[t, l])
            self._fail(f"view: the replicas of {out}{list(coord)} hold different bits (thread "
                       f"{t} holds {int(out_codes[t, l]):#x}); the source layout does not "
                       "replicate the data the target layout replicates")
        self._set(out, decode_codes(result, out.dtype).reshape(out_layout.shape))

    def exec_cast(self, inst: ins.Cast) -> None:
        """`out[i] = convert(src[i] * 2^exponent)` (RNE, saturation as `dtypes.encode`;
        the product is exact in float64 for the low-bit sources an exponent takes)."""
        src = self._reg(inst.src)
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        if src.shape != out.type.static_shape:
            self._fail(f"cast keeps the shape: {inst.src} has {src.shape}, {out} has "
                       f"{out.type.static_shape}")
        self._set(out, round_to(np.ldexp(src, inst.exponent) if inst.exponent else src,
                                out.dtype))

    def _broadcast(self, arrays: list[np.ndarray], out: Tensor, op: str) -> list[np.ndarray]:
        shape = out.type.static_shape
        try:
            full = np.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError:
            self._fail(f"{op}: operand shapes {[a.shape for a in arrays]} do not broadcast")
        if full != shape:
            self._fail(f"{op}: operands broadcast to shape {full}, but {out} has shape {shape}")
        return [np.broadcast_to(a, shape) for a in arrays]

    def exec_elementwise(self, inst: ins.Elementwise) -> None:
        """`out[i] = op(x[i], ...)`, broadcasting (see `interp_values.elementwise`)."""
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        if inst.op not in ins.UNARY_TENSOR_OPS + ins.BINARY_TENSOR_OPS + ins.TERNARY_TENSOR_OPS:
            self._fail(f"unknown elementwise operation {inst.op!r}")
        if not any(isinstance(a, Tensor) for a in inst.args):
            self._fail("elementwise needs at least one tensor operand")
        operands = [self._operand(a) for a in inst.args]
        arrays = self._broadcast([a for a, _ in operands], out, f"elementwise {inst.op}")
        args = [(a, t) for a, (_, t) in zip(arrays, operands)]
        self._set(out, elementwise(inst.op, args, out.dtype))

    def exec_where(self, inst: ins.Where) -> None:
        """`out[i] = x[i] if cond[i] else y[i]`, converted to `out`'s dtype."""
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        cond = self._reg(inst.cond)
        (x, _), (y, _) = self._operand(inst.x), self._operand(inst.y)
        cond, x, y = self._broadcast([cond, x, y], out, "where")
        self._set(out, round_to(np.where(cond != 0, x, y), out.dtype))

    def exec_reduce(self, inst: ins.Reduce) -> None:
        """`op` over dimension `dim` (float sums in float64, rounded once to `out`)."""
        src = self._reg(inst.src)
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        if not -src.ndim <= inst.dim < src.ndim:
            self._fail(f"reduce dim {inst.dim} is out of range for {inst.src} of rank "
                       f"{src.ndim}")
        if inst.op not in ins.REDUCE_OPS:
            self._fail(f"unknown reduction {inst.op!r} (known: {', '.join(ins.REDUCE_OPS)})")
        dim, keep = inst.dim, inst.keepdim
        if inst.op == "max":
            r = np.max(src, axis=dim, keepdims=keep)
        elif inst.op == "min":
            r = np.min(src, axis=dim, keepdims=keep)
        elif inst.src.dtype.is_integer and out.dtype.is_integer:
            r = elementwise("add", [(np.sum(src.astype(np.int64), axis=dim, keepdims=keep),
                                     out.dtype), (np.zeros(()), out.dtype)], out.dtype)
        else:
            r = np.sum(src, axis=dim, keepdims=keep)
        self._set(out, round_to(plain_nan(r), out.dtype))

    def exec_dot(self, inst: ins.Dot) -> None:
        """`out = a @ b + c` with float32 accumulation (see the module docstring)."""
        a, b = (self._reg(t) if t.space is MemorySpace.REGISTER else
                self._read_whole_shared(t) for t in (inst.a, inst.b))
        c = self._reg(inst.c)
        out = inst.out
        check_register_dtype(out.dtype, str(out))
        if b.ndim == 3 and b.shape[0] and a.ndim == 2 and c.ndim == 2 \
                and a.shape[0] % b.shape[0] == 0:
            # g matrices: row block i of a (and c) times b[i] (`ins.Dot`), a batched product
            a = a.reshape(b.shape[0], -1, a.shape[1])
            c = c.reshape(b.shape[0], -1, c.shape[1])
        elif a.ndim != 2 or b.ndim != 2 or c.ndim != 2 or a.shape[1] != b.shape[0] or \
                c.shape != (a.shape[0], b.shape[1]):
            self._fail(f"dot needs a[m, k], b[k, n] (or a shared [g, k, n]), c[m, n]; got "
                       f"{a.shape}, {b.shape}, {c.shape}")
        tensors = (inst.a, inst.b, inst.c)
        if out.dtype.is_integer and all(t.dtype.is_integer for t in tensors):
            acc = (a.astype(np.int64) @ b.astype(np.int64) + c.astype(np.int64)).reshape(
                out.type.static_shape)
            self._set(out, elementwise("add", [(acc, out.dtype), (np.zeros(()), out.dtype)],
                                       out.dtype))
            return
        for t, v in ((inst.a, a), (inst.b, b)):
            if not np.array_equal(v.astype(np.float32).astype(np.float64), v, equal_nan=True):
                self._fail(f"dot input {t} ({t.dtype}) holds values that are not exact in "
                           "float32")
        with np.errstate(all="ignore"):
            acc = np.matmul(a.astype(np.float32), b.astype(np.float32)) + c.astype(np.float32)
        acc = acc.reshape(out.type.static_shape)  # (a batched product: [g, m / g, n])
        self._set(out, round_to(plain_nan(acc.astype(np.float64)), out.dtype))

    def exec_annotate_layout(self, inst: ins.AnnotateLayout) -> None:
        """No-op at run time; the layout must agree with the tensor's type."""
        t, layout = inst.tensor, inst.layout
        if t.layout is not None and layout is not None and t.layout != layout:
            self._fail(f"annotate_layout asks {t} for {layout}, but its type has {t.layout}")
        shape = getattr(layout, "shape", None)
        if shape is not None and t.space is not MemorySpace.GLOBAL and \
                tuple(shape) != t.type.static_shape:
            self._fail(f"annotate_layout: {layout} has shape {tuple(shape)}, {t} has shape "
                       f"{t.type.static_shape}")

    def exec_print(self, inst: ins.Print) -> None:
        """Print a tensor or scalar (block (0, 0, 0) only) to stdout."""
        if self.block != (0, 0, 0):
            return
        value = inst.value
        if isinstance(value, Tensor):
            if value.space is MemorySpace.REGISTER:
                arr = self._reg(value)
                text = np.array2string(arr.astype(np.int64) if value.dtype.is_integer else arr,
                                       threshold=1 << 16, max_line_width=100)
            elif value.space is MemorySpace.SHARED:
                alloc = self._shared(value)
                vals = decode(read_codes(alloc.mem, alloc.offset_bits.reshape(-1), alloc.bits),
                              value.dtype).reshape(alloc.layout.shape)
                text = np.array2string(vals, threshold=1 << 16, max_line_width=100)
            else:
                view = self._global(value)
                text = f"global view {value} shape={view.shape} strides={view.strides} " \
                       f"offset={view.offset}"
        else:
            text = repr(self._eval(value))
        prefix = f"{inst.message} " if inst.message else ""
        print(f"{prefix}{text}", flush=True)


    def exec_assume(self, inst: ins.Assume) -> None:
        """Check the promised condition; a false one is the program's error."""
        if not self._eval(inst.cond):
            self._fail(f"assume: the condition {inst.cond} does not hold (block "
                       f"{self.block}){_scalar_values(inst.cond, self.scalars)}")


def _scalar_values(cond: Expr, scalars: Mapping[Var, int | float]) -> str:
    """`: N = 17, M = 4` for the scalars a condition reads (those defined here)."""
    known = [f"{v.name} = {scalars[v]}" for v in sorted(free_vars(cond), key=lambda v: v.name)
             if v in scalars]
    return f": {', '.join(known)}" if known else ""


def _flat_index(table: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Row-major flat element index of every (thread, local) entry of a layout table."""
    if not shape:
        return np.zeros(table.shape[:2], dtype=np.int64)
    return np.ravel_multi_index(tuple(table[..., d] for d in range(len(shape))), shape)
