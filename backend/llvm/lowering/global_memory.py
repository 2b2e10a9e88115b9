"""Lowering of global memory: `global_view`, `load_global`, `store_global`.

A view is its base pointer, offset, shape and strides as i64 values. Loads and stores
are bounds-checked per element (ragged edges); groups of registers that hold
consecutive elements of a unit-stride last dimension at provably aligned addresses are
accessed as one vector of up to 16 bytes (`ld.global.v4`; the width is pass
`vectorize_memory`'s), with a scalar fallback taken only by a vector that straddles the
edge; a vector wholly outside loads nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import llvmlite.ir as ir

from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.types import I1, I32, I64, PTR, build_vector, llvm_type, ty_bytes
from tilevm.dtypes import DataType
from tilevm.ir import instructions as ins
from tilevm.ir.expr import Expr
from tilevm.ir.types import Tensor


def loads_words(width: int, dtype: DataType) -> bool:
    """Whether a vector of `width` elements of a packed (low-bit) tile is loaded and
    stored as whole 32-bit words of the tile's packed registers."""
    return dtype.bits <= 8 and width > 1 and (width * dtype.bits) % 32 == 0


def vector_registers(cg: KernelContext, vec: ir.Value, width: int,
                     dtype: DataType) -> list[ir.Value]:
    """The registers of a loaded vector: its words when `loads_words`, else one value
    per element."""
    if width == 1:
        return [vec]
    count, ty = (width * dtype.bits // 32, I32) if loads_words(width, dtype) else \
        (width, None)
    if ty is not None:
        vec = cg.b.bitcast(vec, ir.VectorType(ty, count))
    return [cg.b.extract_element(vec, ir.Constant(I32, i)) for i in range(count)]


def define_loaded(cg: KernelContext, tile: Tensor, registers: list[ir.Value],
                  width: int) -> None:
    """Define a loaded tile from `vector_registers`' results."""
    if loads_words(width, tile.dtype):
        cg.define_words(tile, registers)
    else:
        cg.define(tile, registers)


@dataclass
class GlobalViewValue:
    base: ir.Value  # the pointer parameter
    offset: ir.Value  # i64, in elements
    shape: list[ir.Value]  # i64
    strides: list[ir.Value]  # i64
    dtype: DataType


def lower_global_view(cg: KernelContext, inst: ins.GlobalView) -> None:
    cg.tensors[inst.out.name] = GlobalViewValue(
        base=cg.pointers[inst.ptr.name],
        offset=cg.i64(inst.offset),
        shape=[cg.i64(s) for s in inst.out.shape],
        strides=[cg.i64(s) for s in inst.strides],
        dtype=inst.out.dtype)

def vector_elements(cg: KernelContext, inst: ins.Instruction) -> int:
    """Registers per vector access, as pass `vectorize_memory` chose."""
    if inst.lowering is None or inst.lowering.name != "vector":
        raise cg.fail(f"{inst.opname} has no vector width (run the vectorize_memory pass)")
    return int(inst.lowering["elements"])


def _element_addresses(cg: KernelContext, view: GlobalViewValue, tile: Tensor,
                       offsets: tuple[Expr, ...], width: int
                       ) -> list[tuple[ir.Value, ir.Value, ir.Value]]:
    """For each group of `width` registers: (every element in bounds, the first
    element's index, and per element in-bounds predicates)."""
    if view.dtype.bits < 8:
        raise cg.fail("sub-byte global tensors are not supported by the GPU backend yet")
    layout = cg.layout_of(tile)
    base = [cg.b.add(t, cg.i64(o)) for t, o in zip(cg.thread_part(layout), offsets)]
    groups = []
    locals_ = cg.local_parts(layout)
    for start in range(0, layout.local_size, width):
        preds, index = [], view.offset
        for i in range(width):
            inside = ir.Constant(I1, 1)
            for d, c in enumerate(locals_[start + i]):
                coord = cg.b.add(base[d], ir.Constant(I64, c))
                ok = cg.b.and_(cg.b.icmp_signed(">=", coord, ir.Constant(I64, 0)),
                                 cg.b.icmp_signed("<", coord, view.shape[d]))
                inside = cg.b.and_(inside, ok)
                if i == 0:
                    index = cg.b.add(index, cg.b.mul(coord, view.strides[d]))
            preds.append(inside)
        whole = preds[0]
        for p in preds[1:]:
            whole = cg.b.and_(whole, p)
        groups.append((whole, index, preds))
    return groups

def lower_load_global(cg: KernelContext, inst: ins.LoadGlobal) -> None:
    view = cg.tensors[inst.src.name]
    ty = llvm_type(inst.out.dtype)
    other = cg.constant(inst.other, inst.out.dtype)
    width = vector_elements(cg, inst)
    vec_ty = ir.VectorType(ty, width)
    values: list[ir.Value] = []
    for whole, index, preds in _element_addresses(cg, view, inst.out, inst.offsets, width):
        if width == 1:
            values.append(masked_scalar_load(cg, whole, cg.b.gep(
                view.base, [index], source_etype=ty), other))
            continue
        # The fast path: the whole vector is inside the view (one ld.global.vN). A vector
        # wholly outside (rows past M, say) loads nothing; one straddling a ragged edge
        # loads element by element.
        with cg.b.if_else(whole) as (then, otherwise):
            with then:
                ptr = cg.b.gep(view.base, [index], source_etype=ty)
                if width > 1:
                    vec = cg.b.load(ptr, typ=vec_ty, align=width * max(ty_bytes(ty), 1))
                else:
                    vec = cg.b.load(ptr, typ=ty)
                fast = cg.b.block
            with otherwise:
                if width == 1:  # not inside: nothing to load
                    slow_vec = other
                else:
                    slow_vec = _load_straddling(cg, view, index, preds, other, vec_ty)
                slow = cg.b.block
        phi = cg.b.phi(vec_ty if width > 1 else ty)
        phi.add_incoming(vec, fast)
        phi.add_incoming(slow_vec, slow)
        values += vector_registers(cg, phi, width, inst.out.dtype)
    define_loaded(cg, inst.out, values, width)

ZERO_WORD = "tilevm_zero_word"


def masked_scalar_load(cg: KernelContext, inside: ir.Value, ptr: ir.Value,
                       other: ir.Value) -> ir.Value:
    """One element: `*ptr` where `inside`, else `other`, with no branch: a masked-out
    element reads 16 zero bytes the module owns (`zero_word`) instead, and `other`
    replaces it only when it is not zero. Why not a branch around the load: LLVM moves
    the value's first use (a conversion, say) into the branch, and ptxas then waits for
    the load right there, once per load, in a row (seen on the decode kernel's scale
    loads: four global round trips per scale group). Why not a predicated PTX load:
    each load's predicate then lives until its load issues, and a tile of 16 scalar
    loads per thread ran out of predicate registers (spills)."""
    loaded = cg.b.load(cg.b.select(inside, ptr, zero_word(cg)), typ=other.type)
    value = other.constant if isinstance(other, ir.Constant) else None
    zero = isinstance(value, int | float) and value == 0 and math.copysign(1, value) > 0
    return loaded if zero else cg.b.select(inside, loaded, other)


def zero_word(cg: KernelContext) -> ir.Value:
    """A generic pointer to 16 zero bytes in global memory, owned by the module."""
    gv = cg.module.globals.get(ZERO_WORD)
    if gv is None:
        gv = ir.GlobalVariable(cg.module, ir.ArrayType(ir.IntType(8), 16), ZERO_WORD,
                               addrspace=1)
        gv.global_constant = True
        gv.linkage = "internal"
        gv.align = 16
        gv.initializer = ir.Constant(gv.value_type, None)
    return cg.b.addrspacecast(gv, PTR)


def _load_straddling(cg: KernelContext, view: GlobalViewValue, index: ir.Value,
                     preds: list[ir.Value], other: ir.Value, vec_ty: ir.VectorType
                     ) -> ir.Value:
    """A vector some of whose elements may be inside: element loads (clamped addresses,
    values replaced by `other` outside) when any is inside, else `other` everywhere."""
    ty = vec_ty.element
    any_inside = preds[0]
    for p in preds[1:]:
        any_inside = cg.b.or_(any_inside, p)
    with cg.b.if_else(any_inside) as (then, otherwise):
        with then:
            parts = []
            for i, inside in enumerate(preds):
                safe = cg.b.select(inside, cg.b.add(index, ir.Constant(I64, i)), view.offset)
                loaded = cg.b.load(cg.b.gep(view.base, [safe], source_etype=ty), typ=ty)
                parts.append(cg.b.select(inside, loaded, other))
            some = build_vector(cg.b, parts, vec_ty)
            some_block = cg.b.block
        with otherwise:
            none = build_vector(cg.b, [other] * len(preds), vec_ty)
            none_block = cg.b.block
    phi = cg.b.phi(vec_ty)
    phi.add_incoming(some, some_block)
    phi.add_incoming(none, none_block)
    return phi


def lower_store_global(cg: KernelContext, inst: ins.StoreGlobal) -> None:
    view = cg.tensors[inst.dst.name]
    ty = llvm_type(view.dtype)
    if inst.src.dtype != view.dtype:
        raise cg.fail("store_global of a tile of another dtype; cast it first")
    values = cg.register_values(inst.src)
    width = vector_elements(cg, inst)
    groups = _element_addresses(cg, view, inst.src, inst.offsets, width)
    for g, (whole, index, preds) in enumerate(groups):
        chunk = values[g * width:(g + 1) * width]
        with cg.b.if_else(whole) as (then, otherwise):
            with then:
                ptr = cg.b.gep(view.base, [index], source_etype=ty)
                if width > 1:
                    vec = build_vector(cg.b, chunk, ir.VectorType(ty, width))
                    cg.b.store(vec, ptr, align=width * max(ty_bytes(ty), 1))
                else:
                    cg.b.store(chunk[0], ptr)
            with otherwise:
                for i, (inside, value) in enumerate(zip(preds, chunk)):
                    with cg.b.if_then(inside):
                        elem = cg.b.add(index, ir.Constant(I64, i))
                        cg.b.store(value, cg.b.gep(view.base, [elem], source_etype=ty))
