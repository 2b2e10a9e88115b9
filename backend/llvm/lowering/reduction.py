"""Lowering of reductions: `reduce` (sum, max, min over one dimension).

The result's layout is the source's reduced over `dim` (`RegisterLayout.reduce`: the
reduced dimension's local modes are dropped, its spatial modes become replication), so
every thread ends with the full result of each out element it holds, and every replica
holds the same bits. Three steps, each on a *compute* value:

1. in-thread: the thread's locals with the same out coordinate (they differ only in the
   reduced dimension's local digits) are combined as a balanced tree;
2. in-warp: every spatial mode of the reduced dimension is a digit of the thread index
   (radix `r`, size `n`). A power-of-two digit that lies among the lane bits (`r * n <=
   32`) is reduced with a butterfly `shfl.sync.bfly` over exactly its bits (lane masks
   `r, 2r, ..., r*n/2`): after the butterfly every lane of the group holds the same
   value (`a + b` and `b + a` are the same float), as the replicated out layout needs.
   A power-of-two digit straddling the warp boundary is split into its lane part and
   its warp part;
3. across warps: the other digits (warp bits, or digits that are not powers of two) go
   through a shared-memory scratch of the instruction's own (a static `addrspace(3)`
   array `[out locals x threads]` of compute values): every thread stores its partial
   values, a barrier, every thread combines the partials of all values of those digits
   (the same tree in every replica), a barrier (so a loop may reuse the scratch).
   The barriers are block-wide: a reduction across warps must be reached by every
   thread of the block (not inside a branch that only some threads take).

Compute values: floats (f16, bf16, f32) in f32 (a sum rounds once to the out dtype at
the end, as the interpreter specifies; max/min are exact in f32 and propagate NaN with
`llvm.maximum`/`llvm.minimum` like numpy); integers of 8..64 bits in i32 (i64 when
wider), sums wrapping like the interpreter's cast of the exact sum to the out dtype.
Sub-byte and 8-bit float tiles (held as codes) must be cast before reducing.
"""

from __future__ import annotations

import itertools
import math

import llvmlite.ir as ir

from tilevm.backend.llvm.arith import F32, convert_value
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering.barrier import emit_barrier
from tilevm.backend.llvm.types import I32, I64, intrinsic, llvm_type
from tilevm.dtypes import DataType, parse
from tilevm.ir import instructions as ins

WARP = 32
_FULL_MASK = ir.Constant(I32, 0xFFFFFFFF)
_SCRATCH_LIMIT = 32 * 1024  # bytes of static shared memory one reduction may take


def lower_reduce(cg: KernelContext, inst: ins.Reduce) -> None:
    src, out = inst.src, inst.out
    layout = cg.layout_of(src)
    out_layout = cg.layout_of(out)
    dim = inst.dim % len(layout.shape)
    expected = layout.reduce(dim, keepdims=inst.keepdim)
    if out_layout != expected:
        raise cg.fail(f"the result of reduce has layout {out_layout}, but reducing {src.name}'s "
                      f"layout {layout} gives {expected}; layout conversion is not supported "
                      "by the GPU backend yet")
    if inst.op not in ins.REDUCE_OPS:
        raise cg.fail(f"unknown reduction {inst.op!r}")
    acc = _compute_dtype(cg, src.dtype, out.dtype)
    values = [convert_value(cg.b, v, src.dtype, acc) if src.dtype.is_float else
              _widen_int(cg, v, src.dtype, acc) for v in cg.register_values(src)]

    # 1. in-thread: group the locals by their out local index.
    groups: list[list[int]] = [[] for _ in range(out_layout.local_size)]
    for l in range(layout.local_size):
        coord = list(layout.global_index(0, l))
        coord[dim] = 0
        if not inst.keepdim:
            del coord[dim]
        groups[out_layout.local_index(coord)].append(l)
    partial = [_tree(cg, inst.op, [values[l] for l in members], acc) for members in groups]

    # 2./3. across threads: the reduced dimension's thread digits.
    lane_masks, cross = _thread_digits(layout, dim)
    for mask in lane_masks:
        partial = [_combine(cg, inst.op, v, _shuffle_xor(cg, v, mask), acc) for v in partial]
    if cross:
        partial = _reduce_through_shared(cg, inst, partial, cross, layout.num_threads, acc)

    cg.define(out, [_finish(cg, v, acc, src.dtype, out.dtype) for v in partial])


# ---- compute values ----------------------------------------------------------------------

def _compute_dtype(cg: KernelContext, src: DataType, out: DataType) -> DataType:
    if src.is_float and src.bits in (16, 32) and out.is_float and out.bits in (16, 32):
        return F32
    if src.is_integer and src.bits >= 8 and (out.is_integer and out.bits >= 8 or
                                             out.is_float and out.bits >= 16):
        # Wide enough that the widened source values compare correctly as signed
        # integers (but for 64-bit unsigned ones, compared unsigned).
        wide = src.bits > 32 or out.bits > 32 or (src.bits == 32 and not src.is_signed)
        return parse("int64") if wide else parse("int32")
    raise cg.fail(f"reduce of {src} to {out} is not supported by the GPU backend: reduce "
                  "f16/bf16/f32 or 8..64-bit integer tiles (cast sub-byte and 8-bit float "
                  "codes first)")


def _widen_int(cg: KernelContext, value: ir.Value, src: DataType, acc: DataType) -> ir.Value:
    ty = llvm_type(acc)
    if value.type.width == ty.width:
        return value
    return cg.b.sext(value, ty) if src.is_signed else cg.b.zext(value, ty)


def _combine(cg: KernelContext, op: str, x: ir.Value, y: ir.Value, acc: DataType) -> ir.Value:
    b = cg.b
    if acc.is_float:
        if op == "sum":
            return b.fadd(x, y)
        name = "llvm.maximum" if op == "max" else "llvm.minimum"  # NaN propagates
        return b.call(intrinsic(b, name, x.type, [x.type], [x.type, x.type]), [x, y])
    if op == "sum":
        return b.add(x, y)
    # Integers were widened by their signedness into a wider type (`_compute_dtype`):
    # they compare as signed integers, but for 64-bit unsigned ones.
    src = cg.inst.src.dtype
    unsigned = src.bits == 64 and not src.is_signed
    compare = b.icmp_unsigned if unsigned else b.icmp_signed
    return b.select(compare(">" if op == "max" else "<", x, y), x, y)


def _tree(cg: KernelContext, op: str, values: list[ir.Value], acc: DataType) -> ir.Value:
    """`op` over `values` as a balanced tree (independent operations, and a sum's rounding
    error grows with the depth, log2 of the count, not with the count)."""
    while len(values) > 1:
        pairs = [_combine(cg, op, x, y, acc) for x, y in zip(values[::2], values[1::2])]
        values = pairs + values[len(pairs) * 2:]
    return values[0]


def _finish(cg: KernelContext, value: ir.Value, acc: DataType, src: DataType,
            out: DataType) -> ir.Value:
    if acc.is_float:
        return convert_value(cg.b, value, acc, out)
    if out.is_float:  # an integer sum as a float: the exact value, rounded once
        exact = src if src.bits == 64 and not src.is_signed else acc
        return convert_value(cg.b, value, exact, out)
    ty = llvm_type(out)
    return cg.b.trunc(value, ty) if ty.width < value.type.width else value  # wraps


# ---- across threads ------------------------------------------------------------------------

def _thread_digits(layout, dim: int) -> tuple[list[int], list[tuple[int, int]]]:
    """The reduced dimension's thread digits: lane masks for butterfly shuffles (one per
    bit), and the (radix, size) digits that go through shared memory."""
    digits: list[tuple[int, int]] = []
    radix = 1
    dims = layout.mode_dims
    for entry in reversed(layout.spatial_modes):
        size = -entry if entry < 0 else layout.mode_shape[entry]
        if entry >= 0 and dims[entry] == dim:
            digits.append((radix, size))
        radix *= size
    masks: list[int] = []
    cross: list[tuple[int, int]] = []
    for r, n in digits:
        if not (_pow2(r) and _pow2(n)):
            cross.append((r, n))
            continue
        lane_part = min(n, max(WARP // r, 1))  # 1 when the digit is all above the lanes
        bit = r
        while bit < r * lane_part:
            masks.append(bit)
            bit *= 2
        if n > lane_part:
            cross.append((r * lane_part, n // lane_part))
    return masks, cross


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


def _shuffle_xor(cg: KernelContext, value: ir.Value, lane_mask: int) -> ir.Value:
    b = cg.b
    mask, clamp = ir.Constant(I32, lane_mask), ir.Constant(I32, 0x1F)
    if isinstance(value.type, ir.FloatType):
        fn = _function(cg, "llvm.nvvm.shfl.sync.bfly.f32", value.type)
        return b.call(fn, [_FULL_MASK, value, mask, clamp])
    fn = _function(cg, "llvm.nvvm.shfl.sync.bfly.i32", I32)
    if value.type.width == 32:
        return b.call(fn, [_FULL_MASK, value, mask, clamp])
    lo = b.call(fn, [_FULL_MASK, b.trunc(value, I32), mask, clamp])
    hi = b.call(fn, [_FULL_MASK, b.trunc(b.lshr(value, ir.Constant(I64, 32)), I32), mask,
                     clamp])
    return b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ir.Constant(I64, 32)))


def _function(cg: KernelContext, name: str, ty: ir.Type) -> ir.Function:
    fn = cg.module.globals.get(name)
    if fn is None:
        fn = ir.Function(cg.module, ir.FunctionType(ty, [I32, ty, I32, I32]), name)
    return fn


def _reduce_through_shared(cg: KernelContext, inst: ins.Reduce, partial: list[ir.Value],
                           cross: list[tuple[int, int]], num_threads: int,
                           acc: DataType) -> list[ir.Value]:
    b = cg.b
    ty = partial[0].type
    count = len(partial) * num_threads
    nbytes = count * acc.bits // 8
    if nbytes > _SCRATCH_LIMIT:
        raise cg.fail(f"this reduction across warps needs {nbytes} bytes of shared scratch "
                      f"(> {_SCRATCH_LIMIT}); reduce a smaller tile or keep the reduced "
                      "dimension inside a warp")
    name = f"__tilevm_reduce_{inst.out.name}"
    index = 0
    while name in cg.module.globals:
        index += 1
        name = f"__tilevm_reduce_{inst.out.name}_{index}"
    scratch = ir.GlobalVariable(cg.module, ir.ArrayType(ty, count), name, addrspace=3)
    scratch.linkage = "internal"
    scratch.align = 16
    zero = ir.Constant(I32, 0)

    def slot(g: int, thread: ir.Value) -> ir.Value:
        at = b.add(thread, ir.Constant(I32, g * num_threads))
        return b.gep(scratch, [zero, at], inbounds=True)

    tid = cg.tid
    for g, value in enumerate(partial):
        b.store(value, slot(g, tid))
    emit_barrier(cg)
    # The thread with every cross digit zeroed; partners add digit * radix.
    base = tid
    for r, n in cross:
        digit = b.urem(b.udiv(tid, ir.Constant(I32, r)), ir.Constant(I32, n))
        base = b.sub(base, b.mul(digit, ir.Constant(I32, r)))
    offsets = [sum(v * r for v, (r, _) in zip(choice, cross))
               for choice in itertools.product(*(range(n) for _, n in cross))]
    result = [_tree(cg, inst.op, [b.load(slot(g, b.add(base, ir.Constant(I32, off))))
                                  for off in offsets], acc)
              for g in range(len(partial))]
    emit_barrier(cg)
    assert math.prod(n for _, n in cross) == len(offsets)
    return result
