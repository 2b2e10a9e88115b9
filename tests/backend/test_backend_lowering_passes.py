"""The lowering passes (`vectorize_memory`, `select_instructions`, `lower_bit_packing`)
record each instruction's machine form in the IR, codegen emits exactly that form, and
low-bit register tiles live in packed 32-bit words (a `view` between them is free)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kernel_harness import PROGRAMS, ROOT, load_module

import tilevm as tv
from tilevm.backend.analysis.divisibility import ProgramPoint
from tilevm.backend.analysis.vectors import copy_chunk
from tilevm.backend.llvm import codegen
from tilevm.backend.passes.lower_bit_packing import view_form
from tilevm.backend.passes.select_instructions import select_instructions
from tilevm.backend.pipeline import PASS_NAMES, PASSES, compile_program, run_passes
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.expr import Binary, Const, Var
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.transform import instructions, map_instructions
from tilevm.ir.types import MemorySpace, Pointer, PointerType, Tensor, TensorType
from tilevm.kernels.qmm import qmm_kernel
from tilevm.layouts import local
from tilevm.layouts.shared_layout import SharedLayout, row_major, swizzled
from tilevm.layouts.swizzle import Swizzle

EXAMPLES = ROOT / "examples"
INT32 = tv.int32


def _qmm(wdtype: str = "int4"):
    module = load_module(EXAMPLES / "quantized_matmul.py")
    return module.quantized_matmul.specialize(wdtype=tv.dtypes.parse(wdtype), group_size=128)


def _by_out(program) -> dict[str, ins.Instruction]:
    return {i.out.name: i for i in instructions(program.body) if i.output is not None}


def test_the_pipeline_order():
    assert PASS_NAMES == ("verify", "infer_layouts", "convert_layouts", "plan_shared_memory",
                          "vectorize_memory", "select_instructions", "lower_bit_packing",
                          "split_producer_warp")


@pytest.mark.parametrize("wdtype", ["int4", "int3", "f6e3m2"])
def test_every_machine_decision_of_the_quantized_matmul_is_in_the_ir(wdtype):
    program = run_passes(_qmm(wdtype))
    forms: dict[str, set[str]] = {}
    for inst in instructions(program.body):
        if inst.opname in ("load_global", "store_global", "load_shared", "store_shared",
                           "copy_async", "dot", "view"):
            assert inst.lowering is not None, inst
        if inst.lowering is not None:
            forms.setdefault(inst.opname, set()).add(inst.lowering.name)
    assert forms["dot"] == {"mma_sync"}
    assert forms["view"] == {"free"}
    assert forms["cast"] == {"paired_rule"}
    assert "ldmatrix" in forms["load_shared"]
    out = _by_out(program)
    assert out["xa"].lowering == ins.lowering("ldmatrix", num=4, trans=False, row_dim=0,
                                              col_dim=1)
    assert out["acc.1"].lowering == ins.lowering("mma_sync", shape="m16n8k16", acc="f32")
    copies = [i for i in instructions(program.body) if isinstance(i, ins.CopyAsync)]
    x_copy = next(i for i in copies if i.src.name == "gx")
    # whole: K % group_size == 0 and k0 % 32 == 0, so no chunk straddles the edge K
    assert x_copy.lowering == ins.lowering("cp_async", cache="cg", elements=8, bytes=16,
                                           whole=True, dim=1)
    # N % 8 == 0 (the example's assume) makes a row of weights N*b/8 bytes, a multiple of
    # 4 bytes for b = 4 (cp.async of 4-byte chunks) but only of 3 for b = 3: no chunk of
    # 4+ bytes is provably aligned, so threads copy bytes (the dump shows which).
    w_copy = next(i for i in copies if i.src.name == "gw")
    if wdtype == "int4":
        assert w_copy.lowering == ins.lowering("cp_async", cache="ca", elements=4, bytes=4,
                                               whole=True, dim=1)
    elif wdtype == "int3":
        assert w_copy.lowering == ins.lowering("load_store")


def test_the_lowered_program_prints_and_parses_back():
    program = run_passes(_qmm("int3"))
    text = format_program(program)
    assert "lowering=ldmatrix(num=4, trans=False, row_dim=0, col_dim=1)" in text
    assert "lowering=mma_sync(shape='m16n8k16', acc='f32')" in text
    again = parse_program(text)
    assert format_program(again) == text
    assert [i.lowering for i in instructions(again.body)] == \
        [i.lowering for i in instructions(program.body)]


def test_a_malformed_lowering_is_a_parse_error():
    text = format_program(run_passes(_qmm()))
    bad = text.replace("lowering=free", "lowering=free(1, 2)", 1)
    with pytest.raises(Exception, match="lowering"):
        parse_program(bad)


@pytest.mark.parametrize("missing", ["vectorize_memory", "select_instructions",
                                     "lower_bit_packing"])
def test_codegen_refuses_a_program_a_lowering_pass_has_not_seen(missing):
    program = _qmm()
    with pytest.raises(VMError, match=f"run the {missing} pass"):
        for name, run in PASSES:
            if name != missing:
                program = run(program)
        codegen.generate(program)


# ---- packed low-bit tiles ------------------------------------------------------------------

@tv.kernel(num_warps=1)
def view_codes(w: tv.ptr(tv.uint8, const=True), out: tv.ptr(tv.f16), R: tv.int32):
    tv.grid(1)
    gw = tv.global_view(w, [32, 16])
    go = tv.global_view(out, [32, 32])
    packed = tv.load_global(gw, [0, 0], [32, 16], layout=local(1, 1).spatial(32, 1).local(1, 16))
    codes = tv.view(packed, tv.int4, [32, 32], local(1, 1).spatial(32, 1).local(1, 32))
    tv.store_global(go, tv.cast(codes, tv.f16), [0, 0])


def test_a_view_between_packed_tiles_is_the_same_registers():
    program = run_passes(view_codes.specialize())
    cg = codegen.KernelCodegen(program)
    cg.generate()
    packed, codes = cg.tensors["packed"], cg.tensors["codes"]
    # 16 bytes = 32 int4 codes per thread: four i32 words, shared by both tiles
    assert len(packed) == 4 and all(str(w.type) == "i32" for w in packed)
    assert codes is packed
    ptx = compile_program(view_codes.specialize(), "sm_90").ptx
    assert "ld.global.v4.u32" in ptx or "ld.global.v4.b32" in ptx or "ld.global.nc.v4" in ptx


def test_view_forms():
    p = tv.dtypes.parse
    assert view_form(p("uint8"), p("int4")) == "free"
    assert view_form(p("f16"), p("uint8")) == "pack"
    assert view_form(p("int3"), p("int16")) == "unpack"
    assert view_form(p("f16"), p("int16")) == "bitcast"
    assert view_form(p("f32"), p("f16")) == "repack"


# ---- divisibility -------------------------------------------------------------------------

def test_divisors_follow_the_arithmetic():
    n, k = Var("n", INT32), Var("k", INT32)
    point = ProgramPoint(divisors={"n": 8, "k": 32})
    four = Const(4, INT32)
    assert point.divisor(Binary("*", n, four)) == 32
    assert point.divisor(Binary("//", Binary("*", n, four), Const(8, INT32))) == 4
    assert point.divisor(Binary("//", n, Const(3, INT32))) == 1  # not exact: nothing known
    assert point.divisor(Binary("+", k, Binary("*", n, four))) == 32
    assert point.divisor(Binary("-", k, Const(8, INT32))) == 8
    assert point.divisor(Binary("<<", n, Const(2, INT32))) == 32
    assert point.divisor(Var("m", INT32)) == 1


@tv.kernel(num_warps=1)
def copy_rows(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f16), M: tv.int32, N: tv.int32,
              *, aligned: bool = False):
    if aligned:
        tv.assume(N % 8 == 0)
    tv.grid(tv.cdiv(M, 32))
    gx = tv.global_view(x, [M, N])
    gy = tv.global_view(y, [M, N])
    for n0 in tv.range(0, N, 64):
        tile = tv.load_global(gx, [tv.block_idx(0) * 32, n0], [32, 64],
                              layout=local(1, 1).spatial(32, 1).local(1, 64))
        tv.store_global(gy, tile, [tv.block_idx(0) * 32, n0])


@pytest.mark.parametrize("aligned, width", [(False, 1), (True, 8)])
def test_vector_width_needs_a_proof_of_alignment(aligned, width):
    program = run_passes(copy_rows.specialize(aligned=aligned))
    forms = {i.opname: i.lowering for i in instructions(program.body)
             if i.opname in ("load_global", "store_global")}
    assert forms["load_global"] == ins.lowering("vector", elements=width, bytes=2 * width)
    assert forms["store_global"] == forms["load_global"]


@tv.kernel(num_warps=1)
def stage_rows(x: tv.ptr(tv.f16), y: tv.ptr(tv.f16), N: tv.int32, row: tv.int32, *,
               multiple: int = 1):
    tv.assume(row % 8 == 0)  # rows 16-byte aligned: 16-byte chunks whatever N is
    tv.assume(N % multiple == 0)
    gx = tv.global_view(x, [32, N], strides=[row, 1])
    gy = tv.global_view(y, [32, N])
    s = tv.alloc_shared(tv.f16, [32, 64])
    for n0 in tv.range(0, N, 64):
        tv.copy_async(s, gx, [0, n0])
        tv.copy_async_commit()
        tv.copy_async_wait(0)
        tv.store_global(gy, tv.load_shared(s, [0, 0], [32, 64]), [0, n0])


@pytest.mark.parametrize("multiple, whole", [(1, False), (4, False), (8, True), (64, True)])
def test_a_chunk_the_edge_cannot_cut_is_whole(multiple, whole):
    """16-byte chunks (8 f16) at offsets that are multiples of 64: the edge N cuts none of
    them exactly when 8 divides N; otherwise the lowering counts the elements left."""
    program = run_passes(stage_rows.specialize(multiple=multiple))
    copy = next(i for i in instructions(program.body) if isinstance(i, ins.CopyAsync))
    assert copy.lowering == ins.lowering("cp_async", cache="cg", elements=8, bytes=16,
                                         whole=whole, dim=1)
    ptx = compile_program(program, "sm_80").ptx
    assert ("min.s64" in ptx) != whole  # the count of elements left, only when cut


# ---- copy_async along another dimension than the last -----------------------------------

SHARED_KERNELS = load_module(PROGRAMS / "shared_kernels.py")


def _copy_lowering(program, after: str) -> ins.Lowering:
    for name, run in PASSES:
        program = run(program)
        if name == after:
            break
    return next(i for i in instructions(program.body) if isinstance(i, ins.CopyAsync)).lowering


@pytest.mark.parametrize("constants, chunk, selected", [
    # x[M, K] seen transposed (strides [1, ld], ld % 8 == 0) into a [bk, bm] tile with
    # shared strides (1, bk): 16-byte chunks along dimension 0, with and without the
    # swizzle of the transposed 128-byte-row tile; the edge K may cut them unless 8 | K.
    ({}, ins.lowering("chunk", elements=8, bytes=16, dim=0),
     ins.lowering("cp_async", cache="cg", elements=8, bytes=16, whole=False, dim=0)),
    ({"swizzle": False}, ins.lowering("chunk", elements=8, bytes=16, dim=0),
     ins.lowering("cp_async", cache="cg", elements=8, bytes=16, whole=False, dim=0)),
    ({"multiple": 8}, ins.lowering("chunk", elements=8, bytes=16, dim=0),
     ins.lowering("cp_async", cache="cg", elements=8, bytes=16, whole=True, dim=0)),
    # x's row stride K, of unknown alignment: no chunk is provable in any dimension.
    ({"aligned": False}, ins.lowering("elementwise"), ins.lowering("load_store")),
])
def test_a_transposed_copy_is_chunked_along_dimension_0(constants, chunk, selected):
    program = SHARED_KERNELS.transposed_stage.specialize(**constants)
    assert _copy_lowering(program, "vectorize_memory") == chunk
    assert _copy_lowering(program, "select_instructions") == selected


def _view(*strides: int | str) -> ins.GlobalView:
    """A global view of f16 with these strides (ints, or names of runtime values)."""
    exprs = tuple(Const(s, INT32) if isinstance(s, int) else Var(s, INT32) for s in strides)
    out = Tensor("g", TensorType(MemorySpace.GLOBAL, tv.f16, tuple(Var(f"n{i}", INT32)
                                                                    for i in range(len(strides)))))
    return ins.GlobalView(out=out, ptr=Pointer("p", PointerType(tv.f16)),
                          offset=Const(0, INT32), strides=exprs)


COLS = swizzled((64, 64), "f16").permute((1, 0))  # dim 0 contiguous, 16-byte swizzle unit


@pytest.mark.parametrize("layout, strides, offsets, divisors, expected", [
    (COLS, (1, "K"), (0, 0), {"K": 8}, (8, 0)),
    (COLS, (1, "K"), (0, 0), {"K": 2}, (2, 0)),  # rows of x only 4-byte aligned
    (COLS, (1, "K"), ("k0", 0), {"K": 8, "k0": 4}, (4, 0)),  # tile offset along dim 0
    (COLS, (1, "K"), (0, 0), {}, None),
    (COLS, ("K", 1), (0, 0), {"K": 8}, None),  # contiguous in different dimensions
    (COLS.with_swizzle(Swizzle(3, 3, 3)), (1, "K"), (0, 0), {"K": 8}, (4, 0)),  # 8-byte unit
    (SharedLayout((4, 64), (1, 8), 16), (1, "K"), (0, 0), {"K": 8}, (4, 0)),  # extent 4
    (row_major((32, 64), "f16"), ("N", 1), (0, 0), {"N": 8}, (8, 1)),  # the last dim first
    # a middle dimension: contiguous in both memories while the last one is not
    (SharedLayout((2, 16, 8), (128, 1, 16), 16), ("S", 1, "T"), (0, 0, 0),
     {"S": 8, "T": 8}, (8, 1)),
])
def test_copy_chunk_picks_the_dimension_contiguous_in_both_memories(
        layout, strides, offsets, divisors, expected):

    offs = tuple(Const(o, INT32) if isinstance(o, int) else Var(o, INT32) for o in offsets)
    assert copy_chunk(ProgramPoint(divisors=divisors), layout, _view(*strides), offs) == expected


def test_a_chunk_dimension_prints_parses_back_and_defaults_to_the_last():
    program = run_passes(SHARED_KERNELS.transposed_stage.specialize())
    text = format_program(program)
    assert "cp_async(cache='cg', elements=8, bytes=16, whole=False, dim=0)" in text
    again = parse_program(text)
    assert [i.lowering for i in instructions(again.body)] == \
        [i.lowering for i in instructions(program.body)]
    # IR printed before chunks had a dimension: the last one, as then.
    rows = format_program(run_passes(stage_rows.specialize(multiple=8)))
    assert rows.count(", dim=1)") == 1
    old = parse_program(rows.replace(", dim=1)", ")"))
    assert str(codegen.generate(old)) == str(codegen.generate(parse_program(rows)))


def test_a_dot_on_unsupported_inputs_fails_at_its_line():
    program = run_passes(_qmm(), dump_after=None)
    dot = next(i for i in instructions(program.body) if isinstance(i, ins.Dot))
    f32 = tv.dtypes.parse("f32")
    a = replace(dot.a, type=replace(dot.a.type, dtype=f32))
    broken = map_instructions(program, lambda i: replace(i, a=a, lowering=None)
                              if isinstance(i, ins.Dot) else i)
    with pytest.raises(VMError, match="dot on f32 inputs") as info:
        select_instructions(broken)
    assert info.value.loc is not None and info.value.loc.line == dot.loc.line


def test_a_copy_of_a_packed_tile_is_its_words():
    """The frontend copies a tile a loop rebinds (`packed = ahead; ahead = load(...)`): a
    cast to the same type and layout, which moves no bits."""

    program = run_passes(qmm_kernel("f16").specialize(wdtype=tv.int4, group_size=128))
    casts = [i for i in instructions(program.body) if isinstance(i, ins.Cast)]
    copies = [i for i in casts if i.src.type == i.out.type]
    assert copies and all(i.lowering == ins.lowering("free") for i in copies)
    assert all(i.lowering.name != "free" for i in casts if i not in copies
               and i.lowering is not None)
