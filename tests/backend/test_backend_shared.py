"""Shared memory in the GPU backend: the planner (`plan_shared_memory`), the lowering of
shared loads/stores and `copy_async` to PTX (CPU), and the kernels against the interpreter
(GPU, marked `gpu`)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import PROGRAMS, compile_once, load_module, ptxas_report, run_both
from program_strategies import ci_examples, valid_programs

from tilevm.backend.analysis.shared_memory import (
    MAX_BASE_ALIGN,
    MIN_ALIGN,
    default_shared_layout,
    shared_plan,
)
from tilevm.backend.passes.plan_shared_memory import plan_shared_memory
from tilevm.backend.pipeline import PASS_NAMES, compile_program, run_passes
from tilevm.dtypes import parse
from tilevm.ir import instructions as ins
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import Const, Var
from tilevm.ir.stmt import For, If, Program, Seq
from tilevm.ir.transform import instructions
from tilevm.ir.types import MemorySpace, Tensor, TensorType
from tilevm.layouts.shared_layout import SharedLayout, row_major, swizzled
from tilevm.layouts.swizzle import Swizzle

KERNELS = PROGRAMS / "shared_kernels.py"
ARCHES = ("sm_80", "sm_90")
I32 = parse("int32")




k = load_module(KERNELS)


# ---- building planner inputs ----------------------------------------------------------------

def _c(v: int) -> Const:
    return Const(v, I32)


def _shared(name: str, shape, dtype="f16", layout=None) -> Tensor:
    return Tensor(name, TensorType(MemorySpace.SHARED, parse(dtype), tuple(shape), layout))


def _alloc(t: Tensor) -> ins.AllocShared:
    return ins.AllocShared(out=t)


def _free(t: Tensor) -> ins.FreeShared:
    return ins.FreeShared(tensor=t)


_uses = iter(range(10**9))


def _use(t: Tensor) -> ins.LoadShared:
    """An access of `t` (the planner only looks at which tensors an instruction touches)."""
    out = Tensor(f"r{next(_uses)}", TensorType(MemorySpace.REGISTER, t.dtype, (1,) * t.type.ndim))
    return ins.LoadShared(out=out, src=t, offsets=tuple(_c(0) for _ in t.type.shape))


def _program(*body) -> Program:
    return Program("p", (), (_c(1),), 4, Seq(body=tuple(body)))


def _loop(*body) -> For:
    return For(var=Var(f"i{next(_uses)}", I32), start=_c(0), stop=_c(2), step=_c(1),
               body=Seq(body=tuple(body)))


SYNC = ins.Sync()


def _plan(*body):
    return shared_plan(plan_shared_memory(_program(*body)))


def _overlap(a, b) -> bool:
    return a.offset < b.offset + b.size and b.offset < a.offset + a.size


# ---- the planner: unit tests ----------------------------------------------------------------

def test_live_tensors_get_disjoint_aligned_bytes():
    a, b = _shared("a", (64, 64)), _shared("b", (16, 24), "uint8")
    c = _shared("c", (100,), "f32")
    plan = _plan(_alloc(a), _alloc(b), _alloc(c), _use(a), _use(b), _use(c))
    allocs = plan.allocations
    assert allocs["a"].offset == 0 and allocs["a"].size == 64 * 64 * 2
    # a is swizzled (128-byte rows): its period is 1024 bytes; the others need 16.
    assert allocs["a"].align == 1024 and allocs["b"].align == allocs["c"].align == MIN_ALIGN
    for x in allocs.values():
        assert x.offset % x.align == 0
    for x in allocs.values():
        for y in allocs.values():
            assert x is y or not _overlap(x, y)
    assert allocs["c"].offset == 8192 + 16 * 24 and plan.total_bytes == 8576 + 400
    assert plan.total_bytes % MIN_ALIGN == 0 and plan.base_align == 1024


def test_the_buffer_is_declared_aligned_to_at_most_1024_bytes():
    """A swizzle of 256-byte rows has a period of 2048 bytes: its tile is placed at a
    multiple of 2048 inside the buffer, but the buffer's start is declared (and LLVM
    assumes it) 1024-aligned only, what the GPU gives."""
    wide = _shared("wide", (32, 128))  # f16: 256-byte rows
    assert default_shared_layout(wide).swizzle.period == 2048
    small = _shared("small", (4, 8))
    plan = _plan(_alloc(small), _alloc(wide), _use(small), _use(wide))
    assert plan.allocations["wide"].align == 2048 and plan.offset("wide") % 2048 == 0
    assert plan.base_align == MAX_BASE_ALIGN == 1024


def test_freed_bytes_are_reused_after_a_barrier():
    a, b = _shared("a", (32, 32)), _shared("b", (16, 32))
    plan = _plan(_alloc(a), _use(a), SYNC, _free(a), _alloc(b), _use(b))
    assert plan.offset("b") == plan.offset("a") == 0
    assert plan.total_bytes == 32 * 32 * 2
    # A barrier after the free (and before b) serves as well.
    plan = _plan(_alloc(a), _use(a), _free(a), SYNC, _alloc(b), _use(b))
    assert plan.offset("b") == 0


def test_freed_bytes_are_not_reused_without_a_barrier():
    a, b = _shared("a", (32, 32)), _shared("b", (16, 32))
    plan = _plan(_alloc(a), _use(a), _free(a), _alloc(b), _use(b))
    assert not _overlap(plan.allocations["a"], plan.allocations["b"])
    # A barrier inside a branch may not run: it does not count.
    plan = _plan(_alloc(a), _use(a), If(cond=Const(True, parse("uint1")), then_body=Seq(
        body=(SYNC,))), _free(a), _alloc(b), _use(b))
    assert not _overlap(plan.allocations["a"], plan.allocations["b"])
    # Nor does one in a later loop (it may run zero times).
    plan = _plan(_alloc(a), _use(a), _free(a), _loop(SYNC), _alloc(b), _use(b))
    assert not _overlap(plan.allocations["a"], plan.allocations["b"])


def test_a_tensor_allocated_in_a_loop_is_live_for_the_whole_loop():
    a, b, c = _shared("a", (64,), "f32"), _shared("b", (64,), "f32"), _shared("c", (64,), "f32")
    # a is freed early in the body, but the next iteration's a would meet this one's b.
    plan = _plan(_loop(_alloc(a), _use(a), SYNC, _free(a), _alloc(b), _use(b), SYNC,
                       _free(b)), SYNC, _alloc(c), _use(c))
    allocs = plan.allocations
    assert not _overlap(allocs["a"], allocs["b"])
    assert allocs["c"].offset == 0  # after the loop and a barrier: reused
    assert plan.total_bytes == 512


def test_default_layouts():
    two_d = _shared("s", (32, 64))  # 128-byte rows
    assert default_shared_layout(two_d) == swizzled((32, 64), parse("f16"))
    assert default_shared_layout(two_d).swizzle == Swizzle(3, 4, 3)
    assert default_shared_layout(_shared("s", (32, 4))) == row_major((32, 4), parse("f16"))
    assert default_shared_layout(_shared("s", (256,))) == row_major((256,), parse("f16"))
    assert default_shared_layout(_shared("s", (4, 8, 64))).swizzle is None  # 3-D: row-major
    # 24-byte rows: not whole 16-byte chunks, swizzled() keeps them unswizzled.
    assert default_shared_layout(_shared("s", (8, 24), "uint8")).swizzle is None
    # Given layouts are kept.
    given_layout = SharedLayout((8, 8), (1, 8), 16)
    program = plan_shared_memory(_program(_alloc(_shared("g", (8, 8), layout=given_layout))))
    assert instructions(program.body)[0].out.layout == given_layout


def test_the_pass_runs_after_layout_inference_and_lays_out_every_use():
    # After layout inference and the conversions it may insert (which allocate shared
    # memory themselves), and before the lowering decisions that read its layouts.
    assert PASS_NAMES.index("convert_layouts") < PASS_NAMES.index("plan_shared_memory")
    assert PASS_NAMES.index("plan_shared_memory") < PASS_NAMES.index("vectorize_memory")
    program = run_passes(k.roundtrip_f16.specialize())
    for inst in instructions(program.body):
        for t in [inst.output, *inst.input_tensors()]:
            if t is not None and t.space is MemorySpace.SHARED:
                assert isinstance(t.layout, SharedLayout)


def test_empty_program_needs_no_shared_memory():
    assert _plan(SYNC).total_bytes == 0
    tile_add = load_module(KERNELS.parent / "backend_kernels.py").tile_add_2d
    assert compile_once(tile_add.specialize(), "sm_80").shared_bytes == 0


# ---- the planner: properties ----------------------------------------------------------------

_DTYPES = ("int8", "f16", "f32", "uint8")


@st.composite
def _bodies(draw, depth=0, counter=None):
    """Random statements: allocations (of random shapes), accesses, frees of tensors made in
    this block, barriers, and loops holding more of the same."""
    counter = counter if counter is not None else [0]
    body, mine = [], []
    for _ in range(draw(st.integers(0, 8))):
        choice = draw(st.sampled_from(["alloc", "use", "free", "sync", "loop"]))
        if choice == "alloc":
            counter[0] += 1
            shape = draw(st.sampled_from([(16,), (100,), (8, 8), (16, 64), (32, 32), (3, 40)]))
            t = _shared(f"t{counter[0]}", shape, draw(st.sampled_from(_DTYPES)))
            body.append(_alloc(t))
            mine.append(t)
        elif choice == "use" and mine:
            body.append(_use(draw(st.sampled_from(mine))))
        elif choice == "free" and mine:
            t = draw(st.sampled_from(mine))
            mine.remove(t)
            body.append(_free(t))
        elif choice == "sync":
            body.append(SYNC)
        elif choice == "loop" and depth < 2:
            body.append(_loop(*draw(_bodies(depth + 1, counter))))
    return body


def _trace(seq: Seq, trips: int, out: list) -> None:
    """The instructions in execution order, every loop running `trips` times."""
    for s in seq.body:
        if isinstance(s, For):
            for _ in range(trips):
                _trace(s.body, trips, out)
        elif isinstance(s, ins.Instruction):
            out.append(s)


def _occupied(trace: list) -> list[set[str]]:
    """At each step, the tensors whose bytes are taken: allocated and not yet both freed
    and past a barrier that follows their last access."""
    live: dict[str, dict] = {}
    steps = []
    for inst in trace:
        if isinstance(inst, ins.AllocShared):
            live[inst.out.name] = {"freed": False, "barrier": False}
        elif isinstance(inst, ins.FreeShared):
            live[inst.tensor.name]["freed"] = True
        elif isinstance(inst, ins.Sync):
            for state in live.values():
                state["barrier"] = True
        else:
            for t in inst.input_tensors():
                if t.name in live:
                    live[t.name]["barrier"] = False
        for name in [n for n, s in live.items() if s["freed"] and s["barrier"]]:
            del live[name]
        steps.append(set(live))
    return steps


@given(_bodies())
def test_planned_tensors_never_overlap_while_occupied(body):
    program = plan_shared_memory(_program(*body))
    plan = shared_plan(program)
    allocs = plan.allocations
    for a in allocs.values():
        assert a.offset % a.align == 0 and a.align % MIN_ALIGN == 0
        assert a.offset + a.size <= plan.total_bytes
        assert a.size == a.layout.size_bytes
    assert plan.total_bytes % MIN_ALIGN == 0
    for trips in (0, 1, 2):
        trace: list = []
        _trace(program.body, trips, trace)
        for names in _occupied(trace):
            for x in names:
                for y in names:
                    assert x == y or not _overlap(allocs[x], allocs[y]), (x, y, trips)


@settings(max_examples=ci_examples(50))
@given(valid_programs())
def test_every_valid_program_is_planned(program):
    planned = plan_shared_memory(program)
    plan = shared_plan(planned)
    for inst in instructions(planned.body):
        if isinstance(inst, ins.AllocShared):
            a = plan.allocations[inst.out.name]
            assert isinstance(inst.out.layout, SharedLayout)
            assert a.offset % a.align == 0 and a.offset + a.size <= plan.total_bytes


# ---- kernels to PTX ---------------------------------------------------------------------------

COMPILED = [
    (k.transpose, {}), (k.async_copy_f16, {}), (k.async_copy_f32, {}), (k.async_copy_int8, {}),
    (k.async_copy_f16, {"aligned": False}), (k.async_copy_f32, {"aligned": False}),
    (k.async_copy_f16, {"bm": 128, "bn": 128}),
    (k.roundtrip_f16, {}), (k.roundtrip_f32, {}), (k.roundtrip_int8, {}),
    (k.transposed_stage, {}), (k.transposed_stage, {"swizzle": False}),
    (k.transposed_stage, {"aligned": False}),
]


def _ops(ptx: str) -> set[str]:
    return set(re.findall(r"(?:ld|st)\.shared[.\w]*|cp\.async[.\w]*", ptx))


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel, constants", COMPILED,
                         ids=lambda v: getattr(v, "name", None) or str(v))
def test_shared_kernels_compile_without_spills(kernel, constants, arch):
    program = kernel.specialize(**constants)
    compiled = compile_once(program, arch)
    report = ptxas_report(compiled.ptx, arch)[kernel.name]
    assert report.spill_bytes == 0
    assert compiled.ptx.count(".extern .shared") == 1
    assert compiled.shared_bytes == shared_plan(compiled.lowered).total_bytes > 0


def _ptx(kernel, **constants) -> str:
    return compile_once(kernel.specialize(**constants), "sm_90").ptx


def test_transpose_reads_swizzled_rows_as_16_byte_vectors():
    ops = _ops(_ptx(k.transpose))
    assert "ld.shared.v4.b32" in ops  # rows of 8 f16, not split by the 16-byte swizzle unit
    assert "st.shared.b16" in ops  # columns: one element at a time
    # The swizzle is XORed into the address at run time.
    assert "xor.b32" in _ptx(k.transpose)


def test_roundtrip_uses_vector_shared_accesses():
    for kernel in (k.roundtrip_f16, k.roundtrip_f32, k.roundtrip_int8):
        ops = _ops(_ptx(kernel))
        assert {"ld.shared.v4.b32", "st.shared.v4.b32"} <= ops, kernel.name


def test_copy_async_chunks():
    # Rows provably 16-byte aligned (stride ld8 * 8): 16-byte cp.async.cg, with zero fill.
    for kernel in (k.async_copy_f16, k.async_copy_f32):
        ops = _ops(_ptx(kernel))
        assert {"cp.async.cg.shared.global", "cp.async.commit_group",
                "cp.async.wait_group"} <= ops and "ld.shared.v4.b32" in ops
    # int8 rows are only 8-byte aligned (8 elements): 8-byte cp.async.ca.
    ptx = _ptx(k.async_copy_int8)
    assert "cp.async.ca.shared.global" in ptx and ", 8, " in ptx
    # Rows of any stride: f32 elements are 4-byte cp.async.ca, f16 ones plain ld/st.
    ptx = _ptx(k.async_copy_f32, aligned=False)
    assert "cp.async.ca.shared.global" in ptx and ", 4, " in ptx
    ptx = _ptx(k.async_copy_f16, aligned=False)
    assert "cp.async.ca" not in ptx and "cp.async.cg" not in ptx and "st.shared.b16" in ptx


def test_transposed_copy_async_is_16_byte_chunks_along_dimension_0():
    """x[M, K] seen transposed into a tile whose dimension 0 is contiguous (the transpose
    of the swizzled [bm, bk] tile, or of the row-major one): every copy is a 16-byte
    `cp.async.cg` (8 f16 of one row of x), with zero fill past M."""
    for swizzle in (True, False):
        ptx = _ptx(k.transposed_stage, swizzle=swizzle)
        copies = re.findall(r"cp\.async\.\w+\.shared\.global(?:\.\w+)* \[[^]]+\], \[[^]]+\], (\d+)",
                            ptx)
        assert copies and set(copies) == {"16"}, swizzle
        assert "cp.async.ca" not in ptx
        assert ("xor.b32" in ptx) == swizzle
    # x's row stride is only K: no chunk is provable, threads copy f16 elements.
    ptx = _ptx(k.transposed_stage, aligned=False)
    assert "cp.async.cg" not in ptx and "cp.async.ca" not in ptx and "st.shared.b16" in ptx


def _transposed(x: np.ndarray, M: int, K: int, bm: int) -> np.ndarray:
    """x[:M, :K]^T with zero columns up to M rounded up to bm."""
    want = np.zeros((K, -(-M // bm) * bm), x.dtype)
    want[:, :M] = x[:M, :K].T
    return want


@pytest.mark.parametrize("constants", [{}, {"swizzle": False}, {"aligned": False}])
@pytest.mark.parametrize("M, K", [(64, 64), (70, 100), (5, 200), (130, 9)])
def test_transposed_copy_async_interprets_as_the_transpose(constants, M, K):
    """The interpreter (the reference the GPU tests compare against) on the same kernel:
    ragged M reads zeros, ragged K is cut off."""
    rng = np.random.default_rng(M * K)
    aligned = constants.get("aligned", True)
    ld8 = -(-K // 8) + 1
    x = _random(rng, (M, ld8 * 8 if aligned else K), np.float16)
    y = np.full((K, -(-M // 64) * 64), np.nan, np.float16)
    k.transposed_stage.interpret(x, y, M, K, ld8, **constants)
    assert np.array_equal(y, _transposed(x, M, K, 64))


def test_more_than_48_kib_of_shared_memory():
    compiled = compile_once(k.async_copy_f16.specialize(bm=128, bn=128), "sm_90")
    assert compiled.shared_bytes == 2 * 128 * 128 * 2


def test_sub_byte_shared_tiles_are_not_supported_yet():
    with pytest.raises(VMError, match="4-bit elements .* not supported by the GPU backend yet"):
        compile_once(k.int4_store.specialize(), "sm_80")


# ---- on the GPU -------------------------------------------------------------------------------



def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"uint{a.dtype.itemsize * 8}")


def _random(rng, shape, dtype):
    if np.dtype(dtype).kind == "i":
        return rng.integers(-128, 128, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("M, N", [(64, 64), (37, 100), (130, 5), (1, 1)])
def test_gpu_transpose_matches_interpreter(M, N):
    rng = np.random.default_rng(M * 1000 + N)
    x = _random(rng, (M, N), np.float16)
    got, expected = run_both(k.transpose, [x, np.full((N, M), np.nan, np.float16), M, N], {})
    assert np.array_equal(_bits(got[1]), _bits(expected[1]))
    assert np.array_equal(got[1], x.T)


_COPIES = {"f16": (k.async_copy_f16, np.float16), "f32": (k.async_copy_f32, np.float32),
           "int8": (k.async_copy_int8, np.int8)}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(_COPIES))
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("M, N", [(32, 64), (45, 100), (7, 333), (70, 3)])
def test_gpu_async_copy_matches_interpreter(dtype, aligned, M, N):
    kernel, np_dtype = _COPIES[dtype]
    rng = np.random.default_rng(M * N)
    ld8 = -(-N // 8) + (1 if aligned else 0)
    ld = ld8 * 8 if aligned else N
    x = _random(rng, (M, ld), np_dtype)
    y = np.full((M, ld), 77, np_dtype)  # poisoned, also outside the view
    got, expected = run_both(kernel, [x, y, M, N, ld8], {"aligned": aligned})
    assert np.array_equal(_bits(got[1]), _bits(expected[1]))
    assert np.array_equal(got[1][:, :N], x[:, :N])


@pytest.mark.gpu
def test_gpu_copy_with_more_than_48_kib_of_shared_memory():
    M, N = 300, 1000
    rng = np.random.default_rng(5)
    x = _random(rng, (M, 1000), np.float16)
    got, expected = run_both(k.async_copy_f16, [x, np.zeros_like(x), M, N, N // 8],
                              {"bm": 128, "bn": 128})
    assert np.array_equal(_bits(got[1]), _bits(expected[1]))


@pytest.mark.gpu
@pytest.mark.parametrize("constants", [{}, {"swizzle": False}, {"aligned": False},
                                       {"multiple": 8}])
@pytest.mark.parametrize("M, K", [(64, 64), (128, 256), (70, 100), (5, 200), (130, 9)])
def test_gpu_transposed_copy_async_matches_numpy(constants, M, K):
    if constants.get("multiple", 1) == 8:
        K = -(-K // 8) * 8  # the kernel assumes 8 | K: every chunk whole
    rng = np.random.default_rng(M + K)
    aligned = constants.get("aligned", True)
    ld8 = -(-K // 8) + 1
    x = _random(rng, (M, ld8 * 8 if aligned else K), np.float16)
    y = np.full((K, -(-M // 64) * 64), np.nan, np.float16)  # poisoned: zeros must be written
    got, expected = run_both(k.transposed_stage, [x, y, M, K, ld8], constants)
    assert np.array_equal(_bits(got[1]), _bits(expected[1]))
    assert np.array_equal(got[1], _transposed(x, M, K, 64))


_ROUNDTRIPS = {"f16": (k.roundtrip_f16, np.float16), "f32": (k.roundtrip_f32, np.float32),
               "int8": (k.roundtrip_int8, np.int8)}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(_ROUNDTRIPS))
@pytest.mark.parametrize("M, N", [(16, 128), (33, 70), (5, 300)])
def test_gpu_shared_roundtrip_matches_interpreter(dtype, M, N):
    kernel, np_dtype = _ROUNDTRIPS[dtype]
    rng = np.random.default_rng(M + N)
    x = _random(rng, (M, N), np_dtype)
    got, expected = run_both(kernel, [x, np.full((M, N), 99, np_dtype), M, N], {})
    assert np.array_equal(_bits(got[1]), _bits(expected[1]))
    assert np.array_equal(got[1], x)


def test_a_plan_over_the_targets_shared_memory_is_refused_at_the_largest_tensor():
    """Two 120 KiB tensors live together: each fits the verifier's 227 KiB, the plan
    (240 KiB) fits no target; one of them alone fits sm_90a but not sm_86's 99 KiB."""
    def program(count: int) -> Program:
        b = Builder("big_shared", num_warps=4)
        out = b.pointer_param("out", "f32")
        b.set_grid(1)
        tiles = []
        for i in range(count):
            b.loc = SourceLoc("big.py", 10 + i)
            tiles.append(b.alloc_shared("f32", [120 * 256]))
        b.loc = SourceLoc("big.py", 20)
        for s in tiles:
            b.store_shared(s, b.full(1.0, "f32", [128]), [0])
        b.sync()
        g = b.global_view(out, [128])
        b.store_global(g, b.load_shared(tiles[-1], [0], [128]), [0])
        return b.build()

    for arch, limit in (("sm_80", 163 * 1024), ("sm_90a", 227 * 1024)):
        with pytest.raises(VMError, match=rf"takes 245760 bytes, more than {arch} gives a "
                                          rf"block \({limit} bytes\)"):
            compile_program(program(2), arch)
    with pytest.raises(VMError, match=r"takes 122880 bytes, more than sm_86 gives a block "
                                      r"\(101376 bytes\); the largest tensor") as info:
        compile_program(program(1), "sm_86")
    assert info.value.loc == SourceLoc("big.py", 10)
