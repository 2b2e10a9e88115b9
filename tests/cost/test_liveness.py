"""Live bytes per level (cost/liveness.py), against ranges worked out by hand from the
rules of its docstring: a staged copy through shared memory (with and without a
`free_shared`), a loop that carries a tile and reads one defined before it, the matmul
example's register peak as a closed form in its tile sizes, and the attention
example's shared peak against the shared-memory plan."""

from __future__ import annotations

import importlib
import math

import pytest

from tilevm.backend.analysis.shared_memory import shared_plan
from tilevm.cost.liveness import LEVELS, analyze_liveness
from tilevm.ir.instructions import AllocShared, FreeShared
from tilevm.ir.transform import instructions
from tilevm.vm import lang as tv

matmul = importlib.import_module("tilevm.examples.matmul").matmul
attention = importlib.import_module("tilevm.examples.attention").attention


@tv.kernel(num_warps=2)
def staged(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f16), n: tv.int32, *,
           free: bool = True):
    tv.grid(1)
    gx = tv.global_view(x, [64, 32])
    gy = tv.global_view(y, [64, 32])
    a = tv.alloc_shared(tv.f16, [64, 32])
    tv.copy_async(a, gx, [0, 0])
    tv.copy_async_commit()
    tv.copy_async_wait(0)
    tv.sync()
    t = tv.load_shared(a, [0, 0], [64, 32])
    if free:
        tv.free_shared(a)
    tv.sync()
    b = tv.alloc_shared(tv.f16, [64, 32])
    tv.store_shared(b, t, [0, 0])
    tv.sync()
    u = tv.load_shared(b, [0, 0], [64, 32])
    tv.store_global(gy, u, [0, 0])


@tv.kernel(num_warps=1)
def carried(x: tv.ptr(tv.f32, const=True), y: tv.ptr(tv.f32), n: tv.int32):
    tv.grid(1)
    gx = tv.global_view(x, [n])
    gy = tv.global_view(y, [32])
    w = tv.load_global(gx, [0], [32])
    acc = tv.zeros([32], tv.f32)
    for i in tv.range(0, n, 32):
        t = tv.load_global(gx, [i], [32])
        acc = acc + t * w
    tv.store_global(gy, acc, [0])


def live(liveness, level):
    return [s.live[level] for s in liveness.steps]


def test_staged_copy_frees_shared_memory_after_the_barrier():
    program = staged.specialize()
    L = analyze_liveness(program, {"n": 0})
    assert [s.label for s in L.steps] == [
        "global_view %gx", "global_view %gy", "alloc_shared %a", "copy_async %a",
        "copy_async_commit", "copy_async_wait", "sync", "load_shared %t", "free_shared %a",
        "sync", "alloc_shared %b", "store_shared %b", "sync", "load_shared %u",
        "store_global %gy"]
    tile = 64 * 32 * 2  # bytes of every tensor here
    # a: alloc (2) to the barrier after its free (9); b: alloc (10) to the end (14)
    assert live(L, "shared") == [0, 0] + [tile] * 13
    # t: load (7) to its store (11); u: load (13) to its store (14)
    assert live(L, "register") == [0] * 7 + [tile] * 5 + [0] + [tile] * 2
    # gx: view (0) to the copy (3); gy: view (1) to the store (14)
    assert live(L, "global") == [tile] + [2 * tile] * 3 + [tile] * 11
    assert L.peak == {"global": 2 * tile, "shared": tile, "register": tile}
    assert L.peak_step == {"global": 1, "shared": 2, "register": 7}
    assert L.tensors["a"].start == 2 and L.tensors["a"].end == 9
    # the plan reuses a's bytes for b: it places exactly the peak
    assert shared_plan(program).total_bytes == L.peak["shared"]


def test_unfreed_shared_memory_stays_live_to_the_end():
    program = staged.specialize(free=False)
    L = analyze_liveness(program, {"n": 0})
    tile = 64 * 32 * 2
    # a from its alloc (2) to the end (13: one step fewer without the free)
    assert live(L, "shared") == [0, 0] + [tile] * 7 + [2 * tile] * 5
    assert shared_plan(program).total_bytes == L.peak["shared"] == 2 * tile


def test_loop_keeps_what_it_reads_and_carries_live_across_iterations():
    n = 96
    L = analyze_liveness(carried.specialize(), {"n": n})
    assert [s.label for s in L.steps] == [
        "global_view %gx", "global_view %gy", "load_global %w", "full %acc",
        "load_global %t", "elementwise %acc.1", "elementwise %acc.2", "assign %acc",
        "store_global %gy"]
    (loop,) = L.loops
    assert (loop.first, loop.last, loop.depth, loop.trips, loop.block_dependent) == \
        (4, 7, 0, n // 32, False)
    assert [s.loops for s in L.steps] == [()] * 4 + [(0,)] * 4 + [()]
    b = 32 * 4  # every tile: 32 f32
    # w (2..7: read in the loop, so live to its end); acc (3..8), with acc.2 in its
    # registers (its last use is the assign); t (4..5); acc.1 = t * w (5..6)
    assert live(L, "register") == [0, 0, b, 2 * b, 3 * b, 4 * b, 3 * b, 2 * b, b]
    assert L.tensors["acc.2"].storage == "acc" and L.tensors["w"].end == 7
    # gx (n f32, 0..7: read in the loop); gy (32 f32, 1..8)
    assert live(L, "global") == [4 * n] + [4 * n + b] * 7 + [b]
    assert L.peak["register"] == 4 * b and L.peak_step["register"] == 5
    assert L.register_bytes_per_thread == 4 * b // 32 and L.registers_per_thread == 4


@pytest.mark.parametrize("bm, bn, bk", [(64, 64, 32), (64, 64, 64), (32, 64, 128)])
def test_matmul_example_register_peak(bm, bn, bk):
    L = analyze_liveness(matmul.specialize(bm=bm, bn=bn, bk=bk),
                         {"M": 256, "N": 256, "K": 256})
    # in the k loop: the f32 accumulator (its dot result shares its registers) and the
    # two f16 operand tiles; after it: the accumulator and its f16 cast
    in_loop = 4 * bm * bn + 2 * bm * bk + 2 * bk * bn
    after = 4 * bm * bn + 2 * bm * bn
    assert L.peak["register"] == max(in_loop, after)
    assert L.threads == 128
    assert L.registers_per_thread == -(-max(in_loop, after) // 128 // 4)
    assert L.peak["shared"] == 0
    assert L.peak["global"] == 3 * 256 * 256 * 2  # A, B and C all live in the loop


def test_attention_shared_peak_is_the_plan():
    program = attention.specialize()
    L = analyze_liveness(program, {"S": 1000, "BH": 2})
    steps = instructions(program.body)
    tiles = [i.out for i in steps if isinstance(i, AllocShared)]
    # its shared tiles (K and V streamed through them) are never freed: all live at
    # the end, each its elements x 2 bytes (f16)
    assert tiles and not any(isinstance(i, FreeShared) for i in steps)
    assert all(t.dtype.bits == 16 for t in tiles)
    assert L.peak["shared"] == sum(2 * math.prod(t.type.static_shape) for t in tiles)
    assert L.peak["shared"] == shared_plan(program).total_bytes
    (kv,) = [loop for loop in L.loops if loop.loop.var.name == "kv0"]
    assert kv.trips == 1000 // 64 and not kv.block_dependent


def test_causal_attention_loop_counts_depend_on_the_block():
    L = analyze_liveness(attention.specialize(causal=True), {"S": 1000, "BH": 2})
    (kv,) = [loop for loop in L.loops if loop.loop.var.name == "kv0"]
    assert kv.block_dependent  # a block's keys stop at its queries


def test_errors():
    with pytest.raises(TypeError, match="specialize"):
        analyze_liveness(matmul, {})
    with pytest.raises(ValueError, match="global view %ga"):
        analyze_liveness(matmul.specialize(), {"N": 4})
    assert set(LEVELS) == {"global", "shared", "register"}
