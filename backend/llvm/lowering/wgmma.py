"""Lowering of `dot` whose b operand is a shared tile: Hopper's warpgroup MMA,
`wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}` with A from registers (or from
shared memory too) and B read from shared memory through a matrix descriptor (sm_90a).

A warpgroup is 4 consecutive warps (threads `128 g .. 128 g + 127`). One `wgmma` computes
a 64 x N tile: warp `q` of the group supplies rows `16 q .. 16 q + 15` of A as an
`mma.m16n8k16` A fragment (4 registers of two 16-bit values) and receives the same rows
of D as N / 8 `m16n8` C fragments side by side (register `4 j + i` is C register `i` of
columns `8 j ..`). So the layouts are divided into mma fragments as for `mma.sync`
(`divide(layout, fragment)`), and each warp's C fragments are grouped into *rows*: the
N / 8 fragments `(i, 0..N/8-1)` of one fragment row `i`, at consecutive local indices.
The `s`-th such row of each of the 4 warps forms the `s`-th `wgmma` of the group (the
rows need not be adjacent in the tile: D row `16 q + r` is the tile row of warp q's
fragment, which is the row of the A fragment that warp supplies). Every warp must keep
its rows and their A fragments at the same local indices (registers are indexed at
compile time), which the lowering checks.

B is the whole shared tile [K, N], "K-major": `strides == (1, K)` (each of the N columns
holds its K elements contiguously, `R = 2 K` bytes) with the swizzle that
`swizzled([N, K], dtype)` gives such rows: for R = 32, 64, 128 bytes that is exactly
wgmma's 32-, 64- and 128-byte swizzle mode (16-byte chunk bits XORed with the row's low
bits). The descriptor of k-step `kk` starts at the tile's address plus `32 kk` bytes
(the hardware applies the swizzle to the absolute address, so the tile is aligned to the
swizzle's period, which `plan_shared_memory` guarantees); its stride byte offset is the
distance between groups of 8 columns, `8 R` (the leading byte offset is unused by
swizzled K-major layouts).

A b of g matrices, [g, K, N] (each as above, a whole swizzle period apart): the rows of
a and c form g blocks, block i times b[i]; each wgmma a warpgroup issues must have its
rows in one block, and its descriptors start at that block's matrix (the block may
differ between warpgroups: selected by the warpgroup index at run time,
`_matrix_starts`).

A shared a is the whole tile [M, K], K-major the other way round: `strides == (K, 1)`
(its rows of K contiguous), the swizzle of `swizzled([M, K], dtype)`; each wgmma reads
64 consecutive rows of it through its own descriptor (the tile's address plus the first
row's bytes plus `32 kk`), D row `16 q + r` being a's row `first + 16 q + r`. So warp q
of a warpgroup must hold, as its s-th row of C fragments, fragment row `i_s + q`
(`infer_layouts.wgmma_layouts(shared_a=True)` interleaves the warps' rows so); the first
rows differ between warpgroups and are selected by the warpgroup index at run time.

Order, per `dot`: `wgmma.fence` (the accumulator and A registers are passed through it,
so their definitions precede it), the `wgmma`s (each k-step of each row; the group's
`rows x K/16` instructions), `wgmma.commit_group`. A block of more than 384 threads
starts with fewer registers a thread than ptxas asks for an m64n256 wgmma (C7602: a
register target of about 154), so there each m64n256 tile is cut into two m64n128
wgmmas (`instruction_columns`): the same A operand, the first and second halves of the
warp's C fragments of the row, and b's descriptor advanced by 128 columns (`128 R`
bytes, a whole number of the swizzle's 8-column groups). The `dot` does not wait for them:
they run while the warps go on (converting the next k-tile's weights), and
`wgmma.wait_group n` is emitted (`InFlight`) only where the program needs their
results or their operands back: before an instruction reads a tensor that may hold
in-flight results (other than the next `dot`'s accumulator or an `assign`; those
values are passed through the wait, so the compiler cannot read them before it), and
where shared memory a group reads may be written: `wgmma_waits` finds, per barrier and
per shared write, how many of the newest groups read none of the bytes written before
the next barrier (so may stay in flight), comparing the shared plan's byte ranges; any
other instruction that writes or orders shared memory, and the kernel's end, wait for
all. wgmmas stay in flight round a loop's back edge (the next iteration's conversion
overlaps them).

A zero accumulator (`zeros` or `full 0.0` of a tile that wgmma `dot`s accumulate into)
gets no registers written: its registers are left undefined and a flag (an i32,
loop-carried like the tile, 0 while the tile is zero) says so; a `dot` on it passes the
flag as wgmma's scale-d (`D = A B + (scale-d ? D : 0)`), an `assign` copies it, and any
other reader sees `flag ? value : 0`. ptxas serializes every wgmma of a function where a
non-wgmma instruction defines accumulator registers while wgmmas are in flight (C7515:
zero initialization before a loop counts), so the flag is what lets wgmmas stay in
flight round the back edge. The shared tile must have been written before the `sync`
that precedes the `dot` (as for any shared read): `sync` fences the generic proxy's
writes (st.shared, cp.async) to the async proxy that wgmma reads through (barrier.py).
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.analysis.wgmma_waits import is_wgmma, program_waits
from tilevm.backend.llvm.arith import convert_value
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering.tma import wait_for_stores
from tilevm.backend.llvm.mma_operands import (
    operand_registers,
    same_in_every_warp,
    split_fragments,
)
from tilevm.backend.llvm.shared_buffer import allocation, shared_base
from tilevm.backend.llvm.types import I32, I64, llvm_type
from tilevm.dtypes import parse
from tilevm.ir import instructions as ins
from tilevm.ir.expr import Const
from tilevm.ir.stmt import Program
from tilevm.ir.transform import instructions
from tilevm.ir.types import MemorySpace, Tensor
from tilevm.layouts.fragments import mma_m16n8k16_a, mma_m16n8k16_c
from tilevm.layouts.shared_layout import SharedLayout, ldmatrix_swizzle

_F32 = parse("f32")
WARPGROUP_WARPS = 4
MAX_N = 256
# Descriptor swizzle mode by K-major row bytes (PTX ISA: 1 = 128B, 2 = 64B, 3 = 32B).
_SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}


def _rows(cg: KernelContext, table_c, n_frags: int) -> list[tuple[int, int]]:
    """One warp's C fragments grouped by fragment row, in local-index order: (base, i)
    for the `n_frags` fragments (i, 0..n_frags-1) at local indices base, base + 1, ..."""
    coords = [tuple(int(v) for v in c) for c in table_c]
    rows = []
    for base in range(0, len(coords), n_frags):
        i = coords[base][0]
        if [c for c in coords[base:base + n_frags]] != [(i, j) for j in range(n_frags)]:
            raise cg.fail(
                "dot with a shared b: each warp must hold whole rows of mma C fragments, "
                f"the {n_frags} fragments (i, 0..{n_frags - 1}) of a row at consecutive "
                f"registers; a warp holds {coords}")
        rows.append((base, i))
    return rows


def _plan(cg: KernelContext, xa, xc, n_frags: int, k_steps: int
          ) -> list[tuple[int, list[int]]]:
    """[(C base local index, [A local index of each k-step])] per wgmma of a warpgroup,
    the same in every warp."""
    tables_a, tables_c = xa.table(), xc.table()

    def plan_of(w: int) -> list[tuple[int, list[int]]]:
        where = {tuple(int(v) for v in coord): l for l, coord in enumerate(tables_a[w])}
        mine = []
        for base, i in _rows(cg, tables_c[w], n_frags):
            steps = []
            for kk in range(k_steps):
                la = where.get((i, kk))
                if la is None:
                    raise cg.fail(f"dot: warp {w} holds c's mma fragments of row {i} but not "
                                  f"a's fragment ({i}, {kk})")
                steps.append(la)
            mine.append((base, steps))
        return mine

    return same_in_every_warp(cg, xc.num_threads, plan_of)


def _descriptor_bits(cg: KernelContext, layout: SharedLayout, k: int, n: int,
                     elem_bytes: int, operand: str = "b") -> int:
    """A tile descriptor's constant bits (leading and stride byte offsets, swizzle mode);
    raises unless the layout is a K-major wgmma layout: b [k, n] with its n columns of k
    contiguous elements, a [n, k] (`operand` "a") with its n rows of them."""
    row = k * elem_bytes
    mode = _SWIZZLE_MODE.get(row)
    wanted = ldmatrix_swizzle(row, 8 * elem_bytes)
    strides, shape, asked = ((1, k), f"[{k}, {n}]", f"swizzled([{n}, K], dtype).permute((1, 0))") \
        if operand == "b" else ((k, 1), f"[{n}, {k}]", f"swizzled([{n}, K], dtype)")
    if layout.strides != strides or mode is None or layout.swizzle != wanted:
        raise cg.fail(
            f"dot with a shared {operand} {shape}: {operand}'s layout {layout} is not one "
            f"the tensor cores read; they read K-major tiles of 32, 64 or 128-byte rows "
            f"of K, the layout `{asked}` with K = {32 // elem_bytes}, {64 // elem_bytes} "
            f"or {128 // elem_bytes}")
    sbo = 8 * row  # bytes from one group of 8 columns (N) to the next
    return (1 << 16) | ((sbo >> 4) << 32) | (mode << 62)


def lower_wgmma_dot(cg: KernelContext, inst: ins.Dot) -> None:
    a, b, c, out = inst.a, inst.b, inst.c, inst.out
    m, n, k = inst.mnk
    dtype = a.dtype
    if dtype.name not in ("f16", "bf16") or c.dtype != _F32 or out.dtype != _F32:
        raise cg.fail(f"dot with a shared b takes f16 or bf16 inputs and an f32 "
                      f"accumulator, got {dtype} and {c.dtype}")
    if n % 8 or n > MAX_N or k % 16:
        raise cg.fail(f"dot with a shared b (wgmma m64nNk16) needs N a multiple of 8 up to "
                      f"{MAX_N} and K a multiple of 16; got N={n}, K={k}")
    if cg.program.num_threads % (32 * WARPGROUP_WARPS):
        raise cg.fail("dot with a shared b runs on whole warpgroups (a multiple of 128 "
                      f"threads); the block has {cg.program.num_threads}")
    lc = cg.layout_of(c)
    if cg.layout_of(out) != lc:
        raise cg.fail(f"dot: out has layout {cg.layout_of(out)} but c has {lc}; layout "
                      "conversion not supported yet")
    xc = split_fragments(cg, f"c %{c.name}", lc, mma_m16n8k16_c(), None)
    n_frags, k_steps = n // 8, k // 16
    elem = dtype.bits // 8
    bld = cg.b
    b_layout = allocation(cg, b)[1]
    b_upper = _descriptor_bits(cg, _matrix_layout(cg, b_layout), k, n, elem)
    b_start = _tile_start(cg, b)
    # (first column, width) of each wgmma of a row; b's descriptor of each, from the
    # start of the matrix the row multiplies (with g matrices the warpgroup's: per row,
    # `_matrix_starts`)
    parts = instruction_columns(cg.program, n)

    def descriptors(start: ir.Value) -> list[ir.Value]:
        return [_descriptor(cg, bld.add(start, ir.Constant(I32, first * k * elem))
                            if first else start, b_upper) for first, _ in parts]

    whole = descriptors(b_start) if inst.groups == 1 else None
    shared_a = a.space is MemorySpace.SHARED
    if shared_a:
        rows = _shared_a_rows(cg, xc, n_frags)
        a_words: list[ir.Value] = []
    else:
        xa = split_fragments(cg, f"a %{a.name}", cg.layout_of(a), mma_m16n8k16_a(), None)
        plan = _plan(cg, xa, xc, n_frags, k_steps)  # (rows held twice: computed twice)
        a_words = operand_registers(cg, a)
    acc = [convert_value(bld, v, c.dtype, _F32) for v in cg.register_values(c)]
    wait_for_stores(cg, inst)  # operands a converting producer stores
    # The fence takes every register the wgmmas read, so their writes come before it.
    pinned = _pass_through(cg, "wgmma.fence.sync.aligned;", [*a_words, *acc])
    a_words, acc = pinned[:len(a_words)], pinned[len(a_words):]
    scale_d = cg.wgmma.scale_d(cg, c)  # 0 while c is a zero tile (see InFlight)
    one = ir.Constant(I32, 1)  # (a row's later k-steps add to its first)
    if shared_a:  # each wgmma: its warpgroup's 64 rows of a, from the descriptor
        a_start = _tile_start(cg, a)
        a_upper = _descriptor_bits(cg, allocation(cg, a)[1], k, a.type.static_shape[0],
                                   elem, "a")
        row_bytes = k * elem
        plan = [(base, [_descriptor(cg, bld.add(a_start, bld.mul(row, ir.Constant(
            I32, row_bytes))), a_upper)] * k_steps) for base, row in rows]
    if whole is None:
        starts = _matrix_starts(cg, xc, n_frags, inst.groups, m, b_start,
                                b_layout.strides[0] * elem)
    for base, steps in plan:
        b_descriptors = whole or descriptors(starts[base])
        for (first, width), descriptor in zip(parts, b_descriptors, strict=True):
            at = 4 * base + first // 2  # (a thread holds 4 accumulators per 8 columns)
            d = acc[at:at + width // 2]
            for kk, step in enumerate(steps):
                a_operand = [step] if shared_a else a_words[4 * step:4 * step + 4]
                mma = _wgmma_asm(width, dtype.name, width // 2, shared_a, kk)
                res = bld.call(mma, [*a_operand, descriptor,
                                     scale_d if kk == 0 else one, *d])
                d = [bld.extract_value(res, i) for i in range(width // 2)]
            acc[at:at + width // 2] = d
    _pass_through(cg, "wgmma.commit_group.sync.aligned;", [])
    keep = cg.wgmma.waits.keep_after.get(id(inst))
    if keep is not None:  # (older groups retired: see wgmma_waits.IN_FLIGHT_AFTER_DOT)
        _pass_through(cg, _wait(keep), [])
    cg.define(out, acc)  # in flight until `InFlight` waits (out is f32, as c)


def instruction_columns(program: Program, n: int) -> list[tuple[int, int]]:
    """(first column, N) of each wgmma a dot's m64nN tile is cut into: one, or where
    ptxas refuses N > 128 for the block's registers at entry (C7602: it wants a register
    target of about 154 for N = 256, which a block of more than 384 threads does not
    have) the first 128 columns and the rest."""
    if n > 128 and program.entry_registers < 154:
        return [(0, 128), (128, n - 128)]
    return [(0, n)]


def _tile_start(cg: KernelContext, t: Tensor) -> ir.Value:
    """The shared-memory address (i32) of tile `t`."""
    bld = cg.b
    offset = allocation(cg, t)[0].offset
    return bld.add(bld.ptrtoint(shared_base(cg), I32), ir.Constant(I32, offset))


def _descriptor(cg: KernelContext, addr: ir.Value, upper: int) -> ir.Value:
    """A matrix descriptor: the start address `addr` (bytes, i32) >> 4 in bits 0-13, and
    the constant bits `upper` (`_descriptor_bits`)."""
    bld = cg.b
    field = bld.and_(bld.lshr(addr, ir.Constant(I32, 4)), ir.Constant(I32, 0x3FFF))
    return bld.or_(bld.zext(field, I64), ir.Constant(I64, upper))


def _matrix_layout(cg: KernelContext, layout: SharedLayout) -> SharedLayout:
    """The layout of one of a shared b's matrices: b's own, or for b [g, k, n] that of
    b[i], which must start a whole swizzle period after b[i - 1] (the tensor cores
    swizzle absolute addresses)."""
    if layout.rank == 2:
        return layout
    matrix = SharedLayout(layout.shape[1:], layout.strides[1:], layout.element_bits,
                          layout.swizzle)
    period = layout.swizzle.period if layout.swizzle is not None else 16
    if (layout.strides[0] * layout.element_bits // 8) % period:
        raise cg.fail(f"dot with b's {layout.shape[0]} matrices: b's layout {layout} puts "
                      f"them {layout.strides[0]} elements apart, not a multiple of its "
                      f"swizzle's {period} bytes")
    return matrix


def _matrix_starts(cg: KernelContext, xc, n_frags: int, groups: int, m: int,
                   b_start: ir.Value, matrix_bytes: int) -> dict[int, ir.Value]:
    """Per wgmma (by C base local index): the address of the b matrix its rows multiply.
    With g matrices, the rows of each wgmma a warpgroup issues must lie in one block of
    m / g rows (4 warps of 16 rows: a warpgroup's 64); the block, so the address, may
    differ between warpgroups (selected by the warpgroup index at run time)."""
    tables = xc.table()
    num_warps = xc.num_threads  # (the fragments' quotient layout: its threads are warps)
    bases = same_in_every_warp(cg, num_warps,
                               lambda w: [base for base, _ in _rows(cg, tables[w], n_frags)])
    per_block = m // groups
    blocks = []  # per warpgroup: the block of each wgmma's rows
    for g in range(num_warps // WARPGROUP_WARPS):
        rows = [dict(_rows(cg, tables[WARPGROUP_WARPS * g + q], n_frags))
                for q in range(WARPGROUP_WARPS)]
        mine = []
        for base in bases:
            held = {16 * r[base] // per_block for r in rows} | \
                {(16 * r[base] + 15) // per_block for r in rows}
            if len(held) != 1:
                raise cg.fail(f"dot with b's {groups} matrices: warpgroup {g}'s wgmma rows "
                              f"{sorted(16 * r[base] for r in rows)} (16 each) span blocks "
                              f"{sorted(held)} of {per_block} rows; each wgmma's rows must "
                              "multiply one matrix")
            mine.append(held.pop())
        blocks.append(mine)
    bld = cg.b
    return {base: bld.add(b_start, bld.mul(_by_warpgroup(cg, [mine[s] for mine in blocks]),
                                           ir.Constant(I32, matrix_bytes)))
            for s, base in enumerate(bases)}


def _by_warpgroup(cg: KernelContext, values: list[int]) -> ir.Value:
    """`values[g]` in warpgroup g (an i32): a constant where they agree, else selected by
    the warpgroup index at run time."""
    bld = cg.b
    value: ir.Value = ir.Constant(I32, values[0])
    if any(v != values[0] for v in values):
        group = bld.udiv(cg.tid, ir.Constant(I32, 32 * WARPGROUP_WARPS))
        for g in range(1, len(values)):
            if values[g] != values[0]:
                value = bld.select(bld.icmp_unsigned("==", group, ir.Constant(I32, g)),
                                   ir.Constant(I32, values[g]), value)
    return value


def _shared_a_rows(cg: KernelContext, xc, n_frags: int) -> list[tuple[int, ir.Value]]:
    """(C base local index, first row of a) per wgmma, with a in shared memory: the
    wgmma's D rows `16 q + r` are rows `row + 16 q + r` of a, so warp `q` of each
    warpgroup must hold, as its `s`-th row of C fragments, fragment row `i_s + q` (`i_s`
    that of the group's first warp). The rows differ between warpgroups: selected by the
    warpgroup index at run time."""
    tables = xc.table()
    num_warps = xc.num_threads  # (the fragments' quotient layout: its threads are warps)
    bases = same_in_every_warp(cg, num_warps,
                               lambda w: [base for base, _ in _rows(cg, tables[w], n_frags)])
    firsts = []  # per warpgroup: the first fragment row of each wgmma
    for g in range(num_warps // WARPGROUP_WARPS):
        ranks = [[i for _, i in _rows(cg, tables[WARPGROUP_WARPS * g + q], n_frags)]
                 for q in range(WARPGROUP_WARPS)]
        for s in range(len(bases)):
            if [ranks[q][s] for q in range(WARPGROUP_WARPS)] != \
                    [ranks[0][s] + q for q in range(WARPGROUP_WARPS)]:
                raise cg.fail(
                    "dot with a shared a: each wgmma reads 64 consecutive rows of a, so "
                    "the 4 warps of a warpgroup must hold consecutive 16-row blocks of c "
                    f"as their rows {s}; warpgroup {g} holds fragment rows "
                    f"{[ranks[q][s] for q in range(WARPGROUP_WARPS)]}")
        firsts.append([ranks[0][s] for s in range(len(bases))])
    return [(base, _by_warpgroup(cg, [16 * first[s] for first in firsts]))
            for s, base in enumerate(bases)]


def _wgmma_asm(n: int, src: str, regs: int, shared_a: bool, kk: int) -> ir.InlineAsm:
    """`d = A @ B + d` for k-step `kk` (scale-d from an operand: 1 adds), A in 4 registers
    or a descriptor (`shared_a`), B a descriptor. Operands: d out (0 .. regs-1), a (4
    registers or one descriptor), b's descriptor, scale-d, d in (tied). The descriptors
    passed are those of k-step 0: k-step `kk` starts `32 kk` bytes further into the rows,
    `2 kk` in the descriptor's address field, added here (one uniform add) rather than
    kept as one more 64-bit register per tile and k-step (a loop's tiles times its k-steps:
    ptxas keeps them live through the loop, 64 registers for 4 stages of a and b). The
    field holds byte addresses up to 256 KB, past any block's shared memory, so the add
    never carries out of it."""
    n_a = 1 if shared_a else 4
    d = ", ".join(f"${i}" for i in range(regs))
    a = f"${regs}" if shared_a else "{" + ", ".join(f"${regs + i}" for i in range(4)) + "}"
    b = f"${regs + n_a}"
    setup = "setp.ne.b32 p, $" + str(regs + n_a + 1) + ", 0; "
    if kk:
        setup += f".reg .b64 bk; add.s64 bk, {b}, {2 * kk}; "
        b = "bk"
        if shared_a:
            setup += f".reg .b64 ak; add.s64 ak, {a}, {2 * kk}; "
            a = "ak"
    # scale-a, scale-b 1; a (when a descriptor) and b not transposed: both K-major
    trans = "1, 1, 0, 0" if shared_a else "1, 1, 0"
    text = ("{ .reg .pred p; " + setup +
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{src}.{src} "
            f"{{{d}}}, {a}, {b}, p, {trans}; }}")
    constraints = ",".join(["=f"] * regs + (["l"] if shared_a else ["r"] * 4) + ["l", "r"]
                           + [str(i) for i in range(regs)])
    fn_ty = ir.FunctionType(ir.LiteralStructType([ir.FloatType()] * regs),
                            ([I64] if shared_a else [I32] * 4) + [I64, I32]
                            + [ir.FloatType()] * regs)
    return ir.InlineAsm(fn_ty, text, constraints, side_effect=True)


def _pass_through(cg: KernelContext, text: str, values: list[ir.Value]) -> list[ir.Value]:
    """Emit `text` as a volatile instruction that (for the compiler) reads and rewrites
    `values`: their definitions stay before it and their uses after it."""
    if not values:
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "", side_effect=True)
        cg.b.call(asm, [])
        return []
    types = [v.type for v in values]
    codes = ["f" if isinstance(t, ir.FloatType) else "r" for t in types]
    constraints = ",".join([f"={x}" for x in codes] + [str(i) for i in range(len(values))])
    asm = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType(types), types), text,
                       constraints, side_effect=True)
    res = cg.b.call(asm, values)
    return [cg.b.extract_value(res, i) for i in range(len(values))]


def _wait(keep: int) -> str:
    return f"wgmma.wait_group.sync.aligned {keep};"


class InFlight:
    """Where a program with wgmma `dot`s waits for them (`wgmma_waits`: only as far as
    shared writes and reads of their results need), and which of their accumulators are
    zero (see the module docstring).

    `results` are the tensors that may hold in-flight accumulators: the wgmma `dot`s'
    outputs and the tiles they are assigned to (loop-carried accumulators). `zeroable`
    are those of them that a `full` of 0.0 defines; `scales` holds each one's flag once
    lowered: an i32, wgmma's scale-d for it (0 while the tile is zero)."""

    def __init__(self, cg: KernelContext) -> None:
        insts = list(instructions(cg.program.body))
        self.results = {i.out.name for i in insts if is_wgmma(i)}
        grown = True
        while grown:
            grown = False
            for i in insts:
                if isinstance(i, ins.Assign) and i.src.name in self.results \
                        and i.dst.name not in self.results:
                    self.results.add(i.dst.name)
                    grown = True
        self.zeroable = {i.out.name for i in insts
                         if isinstance(i, ins.Full) and i.out.name in self.results
                         and isinstance(i.value, Const) and i.value.value == 0}
        self.scales: dict[str, ir.AllocaInstr] = {}
        self.waits = program_waits(cg.program)
        self._drained: int | None = None  # id of the instruction that waited for all

    def before(self, cg: KernelContext, inst: ins.Instruction | None) -> None:
        """The wait `inst` needs first, if any (None: the kernel ends)."""
        keep = self.waits.keep_at_end if inst is None else self.waits.keep.get(id(inst))
        if keep is not None:
            _pass_through(cg, _wait(keep), [])
        self._drained = id(inst) if keep == 0 else None

    def read(self, cg: KernelContext, tensor: Tensor, values: list[ir.Value]
             ) -> list[ir.Value]:
        """`tensor`'s values for the current instruction, after a wait if they may be in
        flight and the instruction is not the next wgmma on them or an `assign` (those
        two carry a zero tile's flag instead of its zeros)."""
        inst = cg.inst
        if tensor.name not in self.results or isinstance(inst, ins.Assign) or (
                is_wgmma(inst) and inst.c.name == tensor.name):
            return values
        if not self.waits.settled.get(id(inst), False) and self._drained != id(inst):
            values = _pass_through(cg, _wait(0), values)
            self._drained = id(inst)
        if tensor.name in self.scales:
            zero = cg.b.icmp_unsigned("==", cg.b.load(self.scales[tensor.name]), _ZERO)
            values = [cg.b.select(zero, ir.Constant(v.type, 0), v) for v in values]
        return values

    def define_zero(self, cg: KernelContext, inst: ins.Full) -> bool:
        """Lower a `full` of 0.0 into an accumulator as its flag (True when it is one)."""
        out = inst.out
        if out.name not in self.zeroable:
            return False
        if out.name not in self.scales:
            self.scales[out.name] = cg.entry_alloca(I32, f"{out.name}.scale_d")
        cg.b.store(_ZERO, self.scales[out.name])
        undefined = ir.Constant(llvm_type(out.dtype), ir.Undefined)
        cg.define(out, [undefined] * cg.layout_of(out).local_size)
        return True

    def assign(self, cg: KernelContext, inst: ins.Assign) -> None:
        """`dst = src`: dst's flag (if it has one) becomes src's (1: not a zero tile).

        The 1 is opaque to LLVM (a volatile `mov`): a flag that is known to be 1 after
        the first iteration makes LLVM peel that iteration, a copy of the loop body."""
        if inst.dst.name in self.scales:
            if inst.src.name in self.scales:
                scale = cg.b.load(self.scales[inst.src.name])
            else:
                one = ir.InlineAsm(ir.FunctionType(I32, []), "mov.b32 $0, 1;", "=r",
                                   side_effect=True)
                scale = cg.b.call(one, [])
            cg.b.store(scale, self.scales[inst.dst.name])

    def scale_d(self, cg: KernelContext, c: Tensor) -> ir.Value:
        """wgmma's scale-d for accumulator `c`: 1 (add to c), or 0 while c is zero."""
        if c.name not in self.scales:
            return ir.Constant(I32, 1)
        return cg.b.load(self.scales[c.name])


_ZERO = ir.Constant(I32, 0)
