"""Lowering of shared memory: `alloc_shared`, `free_shared`, `load_shared`,
`store_shared`, `copy_async`, `copy_async_commit`, `copy_async_wait`.

The block's shared tensors live in one dynamic shared-memory buffer, the external
`addrspace(3)` array `tilevm_smem` (`extern __shared__`, declared once per module,
aligned to the plan's largest alignment: `shared_buffer`); `shared_plan` (analysis)
gives each tensor its byte offset. `alloc_shared` and `free_shared` emit nothing.

Addresses are 32-bit byte offsets into the buffer. Element `c` of a tensor at `offset`
with layout `L` is at `swizzle(offset + bytes * sum(c[d] * L.strides[d]))`, the XOR
emitted as integer ops on the runtime offset, `a ^ (((a >> (base + shift)) & mask) <<
base)` (the same as `offset + L.offset_bytes(c)`: offsets are multiples of the swizzle
period). Only elements of whole bytes are supported for now.

`load_shared` / `store_shared`: each register element at `offsets + coord`; a run of `w`
consecutive registers that are consecutive elements of a unit-stride dimension, at a
provably `w`-aligned coordinate (thread part, offsets, local part, other strides), and
not split by the swizzle's unit, is one vector access of up to 16 bytes
(`ld.shared.v4.b32`).

`load_shared(..., peer=r)` reads block r's buffer of the cluster: the same addresses,
from `mapa.shared::cluster` of the buffer's start (once an instruction), loaded with
`ld.shared::cluster` (LLVM's address space 7), vectors as above.

`load_shared` of 16-bit elements whose register layout is made of `ldmatrix` fragments
(and whose rows are 16-byte aligned runs) is `ldmatrix.sync.aligned.m8n8.x{1,2,4}
[.trans].shared.b16` instead, as inline PTX: the selection rule is in `analysis.ldmatrix`;
lane `i` supplies the address of row `i % 8` of matrix `i // 8`, computed like every
other access (thread part of the address layout + a constant per instruction, then the
swizzle), and each returned 32-bit register is split into its two 16-bit halves.
`store_shared` by the same rule on sm_90 (`lowering=stmatrix(...)`) is its mirror,
`stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`: the same row addresses, each
register built from two 16-bit elements.

`copy_async`: the tile is cut into chunks of `C` consecutive elements along the
lowering's `dim` (contiguous in both memories: the last dimension, or e.g. dimension 0
of a transposed staging copy; 16 bytes when alignment is provable in shared and global
memory, else 8 or 4), numbered with `dim` varying fastest (so a warp's chunks are
contiguous in global memory) and distributed round-robin over the block's threads
(chunk `tid + k * threads`). A 16-byte chunk is `cp.async.cg.shared.global [dst],
[src], 16, src_bytes`, 8/4-byte chunks `cp.async.ca` (NVVM intrinsics
`llvm.nvvm.cp.async.{cg,ca}.shared.global.N.s`); `src_bytes` is 0 for a chunk outside
the global tensor (zero fill: its address, outside the tensor, is not read) and the
number of bytes inside at a ragged edge of `dim`.
When no chunk of 4+ bytes can be proven aligned, each thread copies elements with plain
loads and stores (done at once), in row-major order.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from tilevm.backend.analysis.ldmatrix import ROW_ELEMENTS, LdmatrixChoice, ldmatrix_form
from tilevm.backend.analysis.tma import is_release
from tilevm.backend.analysis.vectors import chunk_dim
from tilevm.backend.llvm.arith import convert_value
from tilevm.backend.llvm.bits import extract_bits, from_bits
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering.global_memory import (
    define_loaded,
    loads_words,
    vector_elements,
    vector_registers,
)
from tilevm.backend.llvm.lowering.tma import (
    emit_tma_commit,
    emit_tma_copy,
    emit_tma_release,
    emit_tma_wait,
    producer_store,
)
from tilevm.backend.llvm.shared_buffer import SMEM_PTR, allocation, shared_base
from tilevm.backend.llvm.types import I8, I32, I64, build_vector, llvm_type
from tilevm.ir import instructions as ins
from tilevm.ir.expr import Expr
from tilevm.ir.types import Tensor
from tilevm.layouts.shared_layout import SharedLayout

GLOBAL_PTR = ir.PointerType(addrspace=1)
CLUSTER_PTR = ir.PointerType(addrspace=7)  # NVPTX's shared::cluster window


def _i32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


def _swizzled_ptr(cg: KernelContext, layout: SharedLayout, byte: ir.Value,
                  base: ir.Value | None = None) -> ir.Value:
    """The shared pointer of buffer byte offset `byte` (i32), swizzled by `layout`, in
    the block's buffer or, given its `base` (`_peer_base`), a peer's."""
    b, sw = cg.b, layout.swizzle
    if sw is not None:
        field = b.and_(b.lshr(byte, _i32(sw.base + sw.shift)), _i32(sw.mask))
        byte = b.xor(byte, b.shl(field, _i32(sw.base)))
    return b.gep(shared_base(cg) if base is None else base, [byte], source_etype=I8)


def _peer_base(cg: KernelContext, peer: Expr) -> ir.Value:
    """The start of block `peer`'s buffer, in the cluster's shared window
    (`mapa.shared::cluster`): loads through it are `ld.shared::cluster`."""
    name = "llvm.nvvm.mapa.shared.cluster"
    fn = cg.module.globals.get(name) or ir.Function(
        cg.module, ir.FunctionType(CLUSTER_PTR, [SMEM_PTR, I32]), name)
    return cg.b.call(fn, [shared_base(cg), _to_i32(cg, cg.i64(peer))])


def _to_i32(cg: KernelContext, value: ir.Value) -> ir.Value:
    return cg.b.trunc(value, I32) if value.type != I32 else value


# ---- alloc / free -----------------------------------------------------------------------------

def lower_alloc_shared(cg: KernelContext, inst: ins.AllocShared) -> None:
    allocation(cg, inst.out)  # the plan placed it; nothing happens at run time


def lower_free_shared(cg: KernelContext, inst: ins.FreeShared) -> None:
    pass  # the plan reuses the bytes


# ---- register <-> shared ----------------------------------------------------------------------

def _register_access(cg: KernelContext, inst: ins.LoadShared | ins.StoreShared,
                     shared: Tensor, tile: Tensor, offsets: tuple[Expr, ...],
                     base: ir.Value | None = None
                     ) -> tuple[SharedLayout, int, list[ir.Value]]:
    """(layout, vector width, the shared pointer of each group of `width` registers;
    into a peer's buffer given its `base`)."""
    alloc, layout = allocation(cg, shared)
    reg = cg.layout_of(tile)
    width = vector_elements(cg, inst)
    elem = layout.element_bits // 8
    b = cg.b
    # The runtime part of the byte offset, once: offset + elem * sum((thread + off) * stride)
    offset = _i32(alloc.offset)
    for t, o, s in zip(cg.thread_part(reg), offsets, layout.strides):
        if s:
            coord = b.add(_to_i32(cg, t), _to_i32(cg, cg.i64(o)))
            offset = b.add(offset, b.mul(coord, _i32(s * elem)))
    ptrs = []
    for coord in cg.local_parts(reg)[::width]:
        const = elem * sum(c * s for c, s in zip(coord, layout.strides))
        ptrs.append(_swizzled_ptr(cg, layout, b.add(offset, _i32(const)), base))
    return layout, width, ptrs


def _ldmatrix_asm(choice: LdmatrixChoice) -> ir.InlineAsm:
    n = choice.num
    regs = ", ".join(f"${i}" for i in range(n))
    text = f"{choice.ptx} {{{regs}}}, [${n}];"
    constraints = ",".join(["=r"] * n + ["r", "~{memory}"])
    ret = ir.LiteralStructType([I32] * n) if n > 1 else I32
    # side effects: it reads shared memory, so it must stay between the barriers
    return ir.InlineAsm(ir.FunctionType(ret, [I32]), text, constraints, side_effect=True)


def _stmatrix_asm(choice: LdmatrixChoice) -> ir.InlineAsm:
    n = choice.num
    regs = ", ".join(f"${i + 1}" for i in range(n))
    text = f"{choice.mnemonic('stmatrix')} [$0], {{{regs}}};"
    constraints = ",".join(["r"] * (n + 1) + ["~{memory}"])
    return ir.InlineAsm(ir.FunctionType(ir.VoidType(), [I32] * (n + 1)), text, constraints,
                        side_effect=True)


def _matrix_rows(cg: KernelContext, shared: Tensor, offsets: tuple[Expr, ...],
                 choice: LdmatrixChoice) -> list[ir.Value]:
    """Per `ldmatrix`/`stmatrix` instruction of `choice`, the shared address (i32) of the
    16-byte row this thread supplies (see `analysis.ldmatrix`)."""
    alloc, layout = allocation(cg, shared)
    b, elem, addresses = cg.b, layout.element_bits // 8, choice.addresses
    scale = [ROW_ELEMENTS if d == choice.col_dim else 1 for d in range(layout.rank)]
    base = _i32(alloc.offset)
    for t, o, s, u in zip(cg.thread_part(addresses), offsets, layout.strides, scale):
        if s:
            coord = b.add(b.mul(_to_i32(cg, t), _i32(u)), _to_i32(cg, cg.i64(o)))
            base = b.add(base, b.mul(coord, _i32(s * elem)))
    rows = []
    for coord in cg.local_parts(addresses):
        const = elem * sum(c * u * s for c, u, s in zip(coord, scale, layout.strides))
        rows.append(b.ptrtoint(_swizzled_ptr(cg, layout, b.add(base, _i32(const))), I32))
    return rows


def _load_ldmatrix(cg: KernelContext, inst: ins.LoadShared,
                   choice: LdmatrixChoice) -> list[ir.Value]:
    """The tile's registers through `ldmatrix` (see `analysis.ldmatrix`)."""
    b = cg.b
    asm = _ldmatrix_asm(choice)
    half2 = ir.VectorType(llvm_type(inst.src.dtype), 2)
    values: list[ir.Value] = [None] * cg.layout_of(inst.out).local_size  # type: ignore
    for k, row in enumerate(_matrix_rows(cg, inst.src, inst.offsets, choice)):
        res = b.call(asm, [row])
        for m in range(choice.num):
            reg = b.extract_value(res, m) if choice.num > 1 else res
            pair = b.bitcast(reg, half2)
            for j in range(2):
                values[2 * (choice.num * k + m) + j] = b.extract_element(pair, _i32(j))
    return values


def _store_stmatrix(cg: KernelContext, inst: ins.StoreShared, choice: LdmatrixChoice,
                    values: list[ir.Value]) -> None:
    """Store the tile's `values` (one per local) through `stmatrix`: register `m` of
    instruction `k` holds locals `2 (n k + m)` (low half) and `2 (n k + m) + 1`."""
    b, n = cg.b, choice.num
    asm = _stmatrix_asm(choice)
    half2 = ir.VectorType(llvm_type(inst.dst.dtype), 2)
    for k, row in enumerate(_matrix_rows(cg, inst.dst, inst.offsets, choice)):
        regs = [b.bitcast(build_vector(b, values[2 * (n * k + m):2 * (n * k + m) + 2], half2),
                          I32) for m in range(n)]
        b.call(asm, [row, *regs])


def lower_load_shared(cg: KernelContext, inst: ins.LoadShared) -> None:
    form = inst.lowering
    if form is not None and form.name == "ldmatrix":
        choice = ldmatrix_form(cg.layout_of(inst.out), form["num"], form["trans"],
                               form["row_dim"], form["col_dim"])
        values = _load_ldmatrix(cg, inst, choice)
        if inst.out.dtype != inst.src.dtype:
            values = [convert_value(cg.b, v, inst.src.dtype, inst.out.dtype) for v in values]
        cg.define(inst.out, values)
        return
    base = None if inst.peer is None else _peer_base(cg, inst.peer)
    layout, width, ptrs = _register_access(cg, inst, inst.src, inst.out, inst.offsets, base)
    ty = llvm_type(inst.src.dtype)
    elem = layout.element_bits // 8
    registers: list[ir.Value] = []
    for ptr in ptrs:
        vec = cg.b.load(ptr, typ=ir.VectorType(ty, width) if width > 1 else ty,
                        align=width * elem)
        registers += vector_registers(cg, vec, width, inst.src.dtype)
    if inst.out.dtype == inst.src.dtype:
        define_loaded(cg, inst.out, registers, width)
        return
    if loads_words(width, inst.src.dtype):  # a converting load: one value per element
        registers = [from_bits(cg.b, extract_bits(cg.b, registers, l * layout.element_bits,
                                                  layout.element_bits), inst.src.dtype)
                     for l in range(len(registers) * 32 // layout.element_bits)]
    cg.define(inst.out, [convert_value(cg.b, v, inst.src.dtype, inst.out.dtype)
                         for v in registers])


def lower_store_shared(cg: KernelContext, inst: ins.StoreShared) -> None:
    if is_release(inst):  # the converting producer stores; these warps release the tile
        emit_tma_release(cg, inst)
        return
    with producer_store(cg, inst):
        _store_values(cg, inst)


def _store_values(cg: KernelContext, inst: ins.StoreShared) -> None:
    values = cg.register_values(inst.src)
    if inst.src.dtype != inst.dst.dtype:
        values = [convert_value(cg.b, v, inst.src.dtype, inst.dst.dtype) for v in values]
    form = inst.lowering
    if form is not None and form.name == "stmatrix":
        choice = ldmatrix_form(cg.layout_of(inst.src), form["num"], form["trans"],
                               form["row_dim"], form["col_dim"])
        _store_stmatrix(cg, inst, choice, values)
        return
    layout, width, ptrs = _register_access(cg, inst, inst.dst, inst.src, inst.offsets)
    ty = llvm_type(inst.dst.dtype)
    elem = layout.element_bits // 8
    for g, ptr in enumerate(ptrs):
        chunk = values[g * width:(g + 1) * width]
        if width > 1:
            vec = build_vector(cg.b, chunk, ir.VectorType(ty, width))
            cg.b.store(vec, ptr, align=width * elem)
        else:
            cg.b.store(chunk[0], ptr, align=elem)


# ---- global -> shared -------------------------------------------------------------------------

def _intrinsic(cg: KernelContext, name: str, args: list[ir.Type]) -> ir.Function:
    fn = cg.module.globals.get(name)
    if fn is None:
        fn = ir.Function(cg.module, ir.FunctionType(ir.VoidType(), args), name)
    return fn


def _unravel(cg: KernelContext, index: ir.Value, shape: tuple[int, ...]) -> list[ir.Value]:
    """Row-major coordinates (i32) of a flat i32 index over `shape`."""
    coords: list[ir.Value] = []
    for n in reversed(shape):
        coords.append(cg.b.urem(index, _i32(n)) if n > 1 else _i32(0))
        index = cg.b.udiv(index, _i32(n)) if n > 1 else index
    return coords[::-1]


def _each_item(cg: KernelContext, count: int, body) -> None:
    """`body(index)` for every flat index < count, round-robin over the block's threads."""
    threads = cg.program.num_threads
    for k in range(math.ceil(count / threads)):
        index = cg.b.add(cg.tid, _i32(k * threads))
        if (k + 1) * threads > count:
            with cg.b.if_then(cg.b.icmp_unsigned("<", index, _i32(count))):
                body(index)
        else:
            body(index)


def lower_copy_async(cg: KernelContext, inst: ins.CopyAsync) -> None:
    alloc, layout = allocation(cg, inst.dst)
    view = cg.tensors[inst.src.name]
    ty = llvm_type(inst.dst.dtype)
    elem = layout.element_bits // 8
    shape = layout.shape
    form = inst.lowering
    if form is not None and form.name == "tma":  # the whole tile, by thread 0
        emit_tma_copy(cg, inst, cg.b.gep(shared_base(cg), [_i32(alloc.offset)],
                                          source_etype=I8))
        return
    if form is None or form.name not in ("cp_async", "load_store"):
        raise cg.fail("copy_async has no chosen instruction (run the select_instructions "
                      "pass)")
    n = form["elements"] if form.name == "cp_async" else 0
    whole = form.name == "cp_async" and form["whole"]
    per = n or 1  # elements per item: a chunk, or one element for the plain fallback
    dim = chunk_dim(form, len(shape))
    # Items are numbered with `dim` varying fastest, so consecutive threads take
    # consecutive chunks of one run along `dim`: a warp's copies read contiguous global
    # bytes (coalesced) whichever dimension the chunks run along.
    order = [d for d in range(len(shape)) if d != dim] + [dim]
    grid = tuple(shape[d] // per if d == dim else shape[d] for d in order)
    b = cg.b
    gofs = [cg.i64(o) for o in inst.offsets]

    def item(index: ir.Value) -> None:
        by_dim = dict(zip(order, _unravel(cg, index, grid), strict=True))
        coords = [by_dim[d] for d in range(len(shape))]
        coords[dim] = b.mul(coords[dim], _i32(per))
        # destination: the swizzled buffer offset of the item's first element
        byte = _i32(alloc.offset)
        for c, s in zip(coords, layout.strides):
            if s:
                byte = b.add(byte, b.mul(c, _i32(s * elem)))
        dst = _swizzled_ptr(cg, layout, byte)
        # source: global coordinates, the other dimensions in bounds, elements left
        # along the chunk's dimension
        inside, gindex = ir.Constant(ir.IntType(1), 1), view.offset
        left = ir.Constant(I64, per)
        for d, (c, o) in enumerate(zip(coords, gofs)):
            g = b.add(o, b.zext(c, I64))
            low = b.icmp_signed(">=", g, ir.Constant(I64, 0))
            if d != dim:
                inside = b.and_(inside, b.and_(low, b.icmp_signed("<", g, view.shape[d])))
            else:
                rest = b.sub(view.shape[d], g)
                if not whole:  # (whole: the edge never cuts a chunk)
                    left = b.select(b.icmp_signed("<", rest, ir.Constant(I64, per)), rest,
                                    ir.Constant(I64, per))
                inside = b.and_(inside, b.and_(low, b.icmp_signed(">", rest,
                                                                  ir.Constant(I64, 0))))
            gindex = b.add(gindex, b.mul(g, view.strides[d]))
        # Outside, the address is formed but never read (`src_bytes` 0, or the branch
        # below): no select, so the address stays a loop-invariant part plus the offset.
        src = b.gep(view.base, [gindex], source_etype=ty)
        if n:
            size = n * elem
            src_bytes = b.select(inside, b.mul(b.trunc(left, I32), _i32(elem)), _i32(0))
            kind = form["cache"]
            fn = _intrinsic(cg, f"llvm.nvvm.cp.async.{kind}.shared.global.{size}.s",
                            [SMEM_PTR, GLOBAL_PTR, I32])
            b.call(fn, [dst, b.addrspacecast(src, GLOBAL_PTR), src_bytes])
        else:
            with b.if_else(inside) as (then, otherwise):
                with then:
                    loaded = b.load(src, typ=ty)
                    got = b.block
                with otherwise:
                    missing = b.block
            value = b.phi(ty)
            value.add_incoming(loaded, got)
            value.add_incoming(cg.constant(0, inst.dst.dtype), missing)
            b.store(value, dst, align=elem)

    _each_item(cg, math.prod(grid), item)


def lower_copy_async_commit(cg: KernelContext, inst: ins.CopyAsyncCommit) -> None:
    if cg.tma is not None:
        emit_tma_commit(cg)
    if cg.tma is None or cg.tma.cp_async:
        cg.b.call(_intrinsic(cg, "llvm.nvvm.cp.async.commit.group", []), [])


def lower_copy_async_wait(cg: KernelContext, inst: ins.CopyAsyncWait) -> None:
    if cg.tma is not None:
        emit_tma_wait(cg, inst.n)
    if cg.tma is None or cg.tma.cp_async:
        cg.b.call(_intrinsic(cg, "llvm.nvvm.cp.async.wait.group", [I32]), [_i32(inst.n)])
