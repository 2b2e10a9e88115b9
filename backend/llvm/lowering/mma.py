"""Lowering of `dot` to tensor cores: `mma.sync.aligned.m16n8k16` (f16, bf16) and
`m16n8k32` (int8, uint8), f32 (or s32) accumulation, as inline PTX.

Which registers feed which instruction is computed at compile time from the layouts:
`divide(layout, fragment)` writes each operand as `X * F`, F the instruction's fragment
over a warp's 32 lanes, X the arrangement of fragments over the warps. Thread
`32 * w + lane` holds, at local index `x * F.local_size + i`, register `i` of the
fragment at mma-tile coordinate `X.global_index(w, x)`. For each C fragment `(i, j)` a
warp holds, the warp needs the A fragments `(i, kk)` and the B fragments `(kk, j)` for
every `kk`; the local indices of those must be the same in every warp (registers are
indexed at compile time), else the layouts are reported as needing a conversion.

A and B registers are packed into 32-bit registers as the PTX ISA wants them (2 x 16-bit
or 4 x 8-bit, the lower-numbered element in the low bits); C is 4 f32 (s32) registers.
An f16 accumulator is widened to f32 before and rounded once after (the interpreter's
semantics: f32 sums, one rounding).
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilevm.backend.analysis.fragments import MMA_INSTRUCTIONS, dot_layouts
from tilevm.backend.llvm.arith import convert_value
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering import wgmma
from tilevm.backend.llvm.mma_operands import (
    operand_registers,
    same_in_every_warp,
    split_fragments,
)
from tilevm.backend.llvm.types import I32
from tilevm.dtypes import DataType, parse
from tilevm.ir import instructions as ins
from tilevm.layouts import RegisterLayout

_F32, _I32 = parse("f32"), parse("int32")
_PTX_TYPE = {"f16": "f16", "bf16": "bf16", "int8": "s8", "uint8": "u8"}


def _plan(cg: KernelContext, xa: RegisterLayout, xb: RegisterLayout, xc: RegisterLayout,
          k_tiles: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """For each C fragment (its local index in X_c), the (A, B) fragment local indices
    of every k step; the same in every warp."""
    tables = {name: x.table() for name, x in (("a", xa), ("b", xb), ("c", xc))}

    def plan_of(w: int) -> list[tuple[int, list[tuple[int, int]]]]:
        where = {name: {tuple(int(v) for v in coord): l for l, coord in
                        enumerate(tables[name][w])} for name in ("a", "b")}
        mine = []
        for f, (i, j) in enumerate(tables["c"][w].tolist()):
            steps = []
            for kk in range(k_tiles):
                la, lb = where["a"].get((i, kk)), where["b"].get((kk, j))
                if la is None or lb is None:
                    what = f"a's fragment ({i}, {kk})" if la is None else \
                        f"b's fragment ({kk}, {j})"
                    raise cg.fail(f"dot: warp {w} holds c's mma fragment ({i}, {j}) but not "
                                  f"{what}; layout conversion not supported yet")
                steps.append((la, lb))
            mine.append((f, steps))
        return mine

    return same_in_every_warp(cg, xc.num_threads, plan_of)


def _mma_asm(shape: tuple[int, int, int], dtype: DataType, n_a: int, n_b: int,
             integer: bool) -> ir.InlineAsm:
    m, n, k = shape
    acc, acc_ty = ("s32", I32) if integer else ("f32", ir.FloatType())
    src = _PTX_TYPE[dtype.name]
    regs = iter(f"${i}" for i in range(4 + n_a + n_b + 4))
    groups = [", ".join(next(regs) for _ in range(count)) for count in (4, n_a, n_b, 4)]
    text = (f"mma.sync.aligned.m{m}n{n}k{k}.row.col.{acc}.{src}.{src}.{acc} "
            + ", ".join(f"{{{g}}}" for g in groups) + ";")
    c = "r" if integer else "f"
    constraints = ",".join([f"={c}"] * 4 + ["r"] * (n_a + n_b) + [c] * 4)
    fn_ty = ir.FunctionType(ir.LiteralStructType([acc_ty] * 4),
                            [I32] * (n_a + n_b) + [acc_ty] * 4)
    return ir.InlineAsm(fn_ty, text, constraints, side_effect=False)


def lower_dot(cg: KernelContext, inst: ins.Dot) -> None:
    """`dot` as its chosen instruction: `mma_sync` here, `wgmma` (b in shared memory) in
    wgmma.py."""
    if inst.lowering is not None and inst.lowering.name == "wgmma":
        return wgmma.lower_wgmma_dot(cg, inst)
    if inst.lowering is None or inst.lowering.name != "mma_sync":
        raise cg.fail("dot has no chosen instruction (run the select_instructions pass)")
    a, b, c, out = inst.a, inst.b, inst.c, inst.out
    dtype = a.dtype
    (fm, fn, fk), frag_a, frag_b, frag_c = MMA_INSTRUCTIONS[dtype]
    m, n, k = inst.mnk
    if m % fm or n % fn or k % fk:
        raise cg.fail(f"dot on tensor cores (mma.m{fm}n{fn}k{fk}) needs M a multiple of {fm}, "
                      f"N of {fn} and K of {fk}; got M={m}, N={n}, K={k}")
    if cg.program.num_threads % 32:
        raise cg.fail("dot on tensor cores needs whole warps (a multiple of 32 threads)")
    la, lb, lc = cg.layout_of(a), cg.layout_of(b), cg.layout_of(c)
    if cg.layout_of(out) != lc:
        raise cg.fail(f"dot: out has layout {cg.layout_of(out)} but c has {lc}; layout "
                      "conversion not supported yet")
    wanted = dot_layouts(m, n, k, dtype, cg.program.num_threads) or (None, None, None)
    fa, fb, fc = frag_a(), frag_b(), frag_c()
    xa = split_fragments(cg, f"a %{a.name}", la, fa, wanted[0])
    xb = split_fragments(cg, f"b %{b.name}", lb, fb, wanted[1])
    xc = split_fragments(cg, f"c %{c.name}", lc, fc, wanted[2])
    plan = _plan(cg, xa, xb, xc, k // fk)

    integer = not dtype.is_float
    acc_dtype = _I32 if integer else _F32
    n_a = fa.local_size * dtype.bits // 32
    n_b = fb.local_size * dtype.bits // 32
    a_words = operand_registers(cg, a)
    b_words = operand_registers(cg, b)
    mma = _mma_asm((fm, fn, fk), dtype, n_a, n_b, integer)
    c_vals = [convert_value(cg.b, v, c.dtype, acc_dtype) for v in cg.register_values(c)]
    result: list[ir.Value] = list(c_vals)
    nc = fc.local_size
    for f, steps in plan:
        d = c_vals[f * nc:(f + 1) * nc]
        for xa_l, xb_l in steps:
            res = cg.b.call(mma, [*a_words[xa_l * n_a:(xa_l + 1) * n_a],
                                  *b_words[xb_l * n_b:(xb_l + 1) * n_b], *d])
            d = [cg.b.extract_value(res, i) for i in range(nc)]
        result[f * nc:(f + 1) * nc] = d
    cg.define(out, [convert_value(cg.b, v, acc_dtype, out.dtype) for v in result])
