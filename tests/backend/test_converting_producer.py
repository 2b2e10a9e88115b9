"""A converting producer (`tv.producer_warp(registers=R, converts=True)`, pass
`split_producer_warp`): the producer warpgroup runs the stores of the tiles `dot`s read
with what computes them, the other warps keep those stores as releases; the barriers in
the PTX; what the API, the verifier and the pass refuse. (The kernel's results: the
interpreter cases of tests/kernels/test_kernels_qmm.py and its GPU schedules.)"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from kernel_harness import compile_once

from tilevm.backend import pipeline
from tilevm.backend.analysis.tma import is_release, stored_operands, tma_ring
from tilevm.backend.passes.split_producer_warp import accesses
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.transform import instructions
from tilevm.ir.verifier import verify
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.vm import lang as tv

from .test_producer_warp import row_sums


def _compiled(**constants):
    program = qmm_wgmma_shared_kernel("f16").specialize(
        wdtype=tv.int4, prefetch=2, wide_stores=True, producer=136, **constants)
    return compile_once(program, "sm_90a")


def test_the_producer_converts_and_the_other_warps_only_multiply():
    compiled = _compiled()
    lowered = compiled.lowered
    assert lowered.producer_converts and lowered.producer_warps == 4
    assert compiled.num_threads == 384 and lowered.num_threads == 256
    stored = set(stored_operands(lowered))
    assert len(stored) == 4  # the four stages of converted weights
    producer, body = instructions(lowered.producer), instructions(lowered.body)
    # the producer stores the weights, converted from the codes it loads
    assert {i.dst.name for i in producer if isinstance(i, ins.StoreShared)} == stored
    assert any(isinstance(i, ins.Cast) for i in producer)
    assert any(isinstance(i, ins.LoadGlobal) for i in producer)
    # the other warps load, convert and store none of it: each store is a release
    assert not [i for i in body if isinstance(i, (ins.Cast, ins.LoadGlobal))
                and i.out.dtype.bits < 8]
    releases = [i for i in body if isinstance(i, ins.StoreShared) and i.dst.name in stored]
    assert releases and all(is_release(i) for i in releases)
    assert all(not accesses(i) for i in releases)  # they order nothing by a sync
    # nor do they meet at a barrier per k-tile: no sync is left in the main loop
    loop = next(s for s in lowered.body.body if hasattr(s, "var"))
    assert not [i for i in instructions(loop.body) if isinstance(i, ins.Sync)]
    # the split program prints and parses back
    text = format_program(lowered)
    assert "producer_warps(4) producer_registers(136) producer_converts(1)" in text
    assert format_program(parse_program(text)) == text


def test_the_ptx_has_a_full_and_an_empty_barrier_per_converted_tile():
    compiled = _compiled()
    ptx, lowered = compiled.ptx, compiled.lowered
    assert re.search(r"\.maxntid 384\b", ptx) and re.search(r"\.maxnreg 168\b", ptx)
    # 168 * 384 registers at entry, less 136 for each producer thread: 184 for the others
    assert lowered.body_registers == 184
    assert "setmaxnreg.dec.sync.aligned.u32 136;" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 184;" in ptx
    # the ring, an "empty" barrier per buffer the producer writes (x's 4 stages and the
    # 4 converted tiles), and a "full" one per converted tile
    plan = pipeline.shared_plan(lowered)
    assert plan.barriers == tma_ring(lowered) + 8 + 4
    assert ptx.count("mbarrier.init") == plan.barriers
    # the producer publishes its stores to the tensor cores before it arrives
    producer_part = ptx[ptx.index("setmaxnreg.dec"):ptx.index("setmaxnreg.inc")]
    assert "stmatrix" in producer_part and "fence.proxy.async.shared::cta" in producer_part
    assert "wgmma.mma_async" not in producer_part


def test_converts_needs_registers_and_the_verifier_checks_the_header():
    @tv.kernel(num_warps=8)
    def bare(y: tv.ptr(tv.f32)):
        tv.producer_warp(converts=True)

    with pytest.raises(VMError, match=r"converts=True\) needs registers=R"):
        bare.specialize()

    @tv.kernel(num_warps=8)
    def wrong(y: tv.ptr(tv.f32)):
        tv.producer_warp(40, converts=1)

    with pytest.raises(VMError, match=r"converts=\.\.\.\) takes a bool"):
        wrong.specialize()
    program = row_sums.specialize(registers=40)
    verify(replace(program, producer_converts=True))  # a warpgroup, cluster 1: fine
    for bad in (replace(program, producer_converts=True, cluster=2),
                replace(program, producer_warps=1, producer_registers=0,
                        producer_converts=True),
                replace(program, producer_converts="yes")):
        with pytest.raises(VMError, match="producer_converts is a bool, set only with"):
            verify(bad)


def test_a_converting_producer_with_nothing_to_convert_is_refused():
    program = replace(row_sums.specialize(registers=40), producer_converts=True)
    with pytest.raises(VMError, match="no store_shared writes a shared tile that a dot"):
        pipeline.compile_program(program, "sm_90a")
