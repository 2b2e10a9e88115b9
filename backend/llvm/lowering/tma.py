"""Lowering of `copy_async` through the tensor memory accelerator (sm_90a): the
`tma(dims, box, swizzle, bytes)` form `select_instructions` chose for a copy of a whole
tile from a view fixed for the launch.

- *Tensor maps.* Each distinct (view, dims, box, swizzle) of the program's TMA copies is
  one kernel parameter after the program's own, in order of first use: a 128-byte,
  64-byte aligned `.param` (LLVM: a `byval([128 x i8]) align 64` pointer with the
  `grid_constant` annotation, whose address LLVM takes with `cvta.param`). The runtime
  encodes it at launch (`cuTensorMapEncodeTiled`) from the view's expressions over the
  scalar arguments (`analysis.tma.tensor_maps` lists what each parameter describes).
- *Completion.* Commit group `j` owns mbarrier `j % R` of a ring in shared memory
  (`SharedPlan.barrier_offset`, R = `SharedPlan.barriers`), each initialized at the
  kernel's entry with an arrival count of one. Thread 0 posts each copy's bytes
  (`mbarrier.expect_tx`) and issues it (`cp.async.bulk.tensor`, which zero-fills outside
  the tensor, as `copy_async` does); `copy_async_commit` is thread 0's arrival on the
  group's barrier and counts the group (a register, `tma_groups`); `copy_async_wait(n)`
  waits, in every thread, for the phases of the groups up to `groups - n - 1` not yet
  waited for (parity `(j / R) & 1`; `tma_waited` counts them).
  Copies of the program that stay `cp.async` keep their hardware groups alongside.
- *Producer warp* (`split_producer_warp`): one thread of the extra warp runs the
  program's `producer` body, the other warps its `body`. There a copy first waits for
  its buffer's "empty" barrier (after the ring; arrival count: the `num_warps` warps),
  phase by phase (a count per buffer); then posts and issues as above, and the commit
  arrives. In `body`, a copy is the buffer's release (each warp's lane 0 arrives, once
  the warp's lanes are all past it) and a commit only counts the group. A converting
  producer (a warpgroup, all of whose threads run `producer`, thread 0 the copies) also
  stores the tiles `dot`s read: each such tile has an "empty" barrier as a copied
  buffer has, released where `body` keeps the store, and a "full" one (after the
  "empty" ones; arrival count: the producer's warps), on which each producer warp
  arrives after its stores and `fence.proxy.async` (`producer_store`), and on which a
  `dot` reading the tile waits for the store its warps last released
  (`wait_for_stores`).
- *Multicast* (`copy_async(..., multicast=True)`, a program with `cluster` n > 1): the
  buffer's "empty" barrier counts the releases of every block of the cluster (n times
  the warps; a warp arrives on each block's, through `mapa`), so a producer issues only
  once the whole cluster is done with the buffer. Block r of the cluster then fetches
  slice r of the box (its outermost dimension cut in n; its own tensor map, of the
  slice's box) into every block's buffer at that slice's offset, completing on each
  block's barrier of the group (`.multicast::cluster`); each block still posts the
  whole box's bytes. The ring is long enough that a peer's slice never lands on a
  barrier still counting an earlier group (`multicast_refill_bound`). The barriers'
  initialization is published to the cluster (a cluster barrier after it), and every
  thread of the cluster meets at a cluster barrier before it exits
  (`cluster_barrier`), so that no peer's release or slice reaches a block that is gone.
"""

from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

from tilevm.backend.analysis.shared_memory import shared_plan
from tilevm.backend.analysis.signature import TensorMapSpec
from tilevm.backend.analysis.tma import (
    is_tma,
    producer_buffers,
    stored_operands,
    tensor_map,
    tma_ring,
    uses_cp_async,
)
from tilevm.backend.llvm.context import KernelContext
from tilevm.backend.llvm.lowering.barrier import cluster_barrier, emit_barrier, void_asm
from tilevm.backend.llvm.shared_buffer import shared_base
from tilevm.backend.llvm.types import I8, I32, I64
from tilevm.ir import instructions as ins
from tilevm.ir.transform import instructions

MAP_BYTES = 128
MAP_TYPE = ir.ArrayType(I8, MAP_BYTES)


class TmaState:
    """Per kernel: the map parameters, the barrier ring and the group counter."""

    def __init__(self, cg: KernelContext, maps: tuple[TensorMapSpec, ...],
                 first_param: int) -> None:
        plan = shared_plan(cg.program)
        self.maps = {spec: cg.function.args[first_param + i] for i, spec in enumerate(maps)}
        self.ring = tma_ring(cg.program)
        self.ring_offset = plan.barrier_offset
        # With a producer warp: each buffer's "empty" barrier (after the ring), and in
        # the producer, how many copies (stores) into it were issued (which phase to
        # wait for); with a converting producer each stored tile's "full" barrier (after
        # those), and in the other warps how many times they released it (which store a
        # `dot` reads: the last one).
        self.empty = {name: self.ring + i for i, name in enumerate(producer_buffers(
            cg.program))} if cg.program.producer_warps else {}
        self.full = {name: self.ring + len(self.empty) + i
                     for i, name in enumerate(stored_operands(cg.program))}
        self.issued = {name: cg.entry_alloca(I32, f"issued.{name}") for name in self.empty}
        self.released = {name: cg.entry_alloca(I32, f"released.{name}")
                         for name in self.full}
        self.cluster = cg.program.cluster
        self.multicast = {i.dst.name for i in instructions(cg.program.body)
                          if is_tma(i) and i.multicast}
        for slot in (*self.released.values(), *self.issued.values()):
            cg.b.store(ir.Constant(I32, 0), slot)
        self.cp_async = uses_cp_async(cg.program)
        self.groups = cg.entry_alloca(I32, "tma_groups")  # groups committed
        cg.b.store(ir.Constant(I32, 0), self.groups)
        self.waited = cg.entry_alloca(I32, "tma_waited")  # the newest group waited for
        cg.b.store(ir.Constant(I32, -1), self.waited)

    def barrier(self, cg: KernelContext, slot: ir.Value) -> ir.Value:
        """The 32-bit shared address of barrier `slot` (i32) of the ring."""
        base = cg.b.ptrtoint(shared_base(cg), I32)
        return cg.b.add(base, cg.b.add(ir.Constant(I32, self.ring_offset),
                                       cg.b.mul(slot, ir.Constant(I32, 8))))

    def current_slot(self, cg: KernelContext) -> ir.Value:
        return cg.b.urem(cg.b.load(self.groups), ir.Constant(I32, self.ring))


def add_map_params(function: ir.Function, module: ir.Module, first: int, count: int,
                   annotations) -> None:
    """Mark parameters `first .. first + count - 1` as tensor maps: byval, 64-byte
    aligned, `grid_constant` (their address is taken, never copied)."""
    indices = []
    for i in range(first, first + count):
        arg = function.args[i]
        arg.add_attribute("byval")
        arg.attributes.align = 64
        indices.append(ir.Constant(I32, i + 1))  # 1-based, as NVVM counts them
    annotations.add(module.add_metadata([
        function, ir.MetaDataString(module, "grid_constant"), module.add_metadata(indices)]))


@contextmanager
def _thread0(cg: KernelContext):
    """Code that one thread runs: thread 0 (the producer's body runs in one thread, a
    converting producer's in all of them, numbered from 0)."""
    if cg.in_producer and not cg.program.producer_converts:
        yield
        return
    with cg.b.if_then(cg.b.icmp_unsigned("==", cg.tid, ir.Constant(I32, 0))):
        yield


def init_barriers(cg: KernelContext, state: TmaState) -> None:
    """At the kernel's entry: thread 0 initializes the ring (and the "empty" barriers);
    a barrier of the whole block publishes them, of the whole cluster where multicast
    copies let peers arrive on them."""
    with _thread0(cg):
        for k in range(state.ring):
            void_asm(cg, "mbarrier.init.shared::cta.b64 [$0], 1;", "r,~{memory}",
                     [state.barrier(cg, ir.Constant(I32, k))])
        for name, k in state.empty.items():
            blocks = state.cluster if name in state.multicast else 1
            void_asm(cg, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
                     [state.barrier(cg, ir.Constant(I32, k)),
                      ir.Constant(I32, cg.program.num_warps * blocks)])
        for k in state.full.values():  # each producer warp arrives once its lanes stored
            void_asm(cg, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
                     [state.barrier(cg, ir.Constant(I32, k)),
                      ir.Constant(I32, cg.program.producer_warps)])
        void_asm(cg, "fence.mbarrier_init.release.cluster;", "~{memory}")
    if state.multicast:  # a peer's first release or slice may come at once
        cluster_barrier(cg)
    else:  # (in clusters without multicast copies no peer reaches these barriers)
        emit_barrier(cg, whole_block=True)


def _wait_parity(cg: KernelContext, bar: ir.Value, parity: ir.Value) -> None:
    text = ("{ .reg .pred done; wait: mbarrier.try_wait.parity.shared::cta.b64 "
            "done, [$0], $1; @!done bra wait; }")
    void_asm(cg, text, "r,r,~{memory}", [bar, parity])


def emit_tma_release(cg: KernelContext, inst: ins.CopyAsync | ins.StoreShared) -> None:
    """A copy (or a store the converting producer runs) in the body of a program with a
    producer warp: once all its lanes are here, each warp's lane 0 arrives on the
    buffer's "empty" barrier."""
    state: TmaState = cg.tma
    name = inst.dst.name
    bar = state.barrier(cg, ir.Constant(I32, state.empty[name]))
    if name in state.released:
        count = state.released[name]
        cg.b.store(cg.b.add(cg.b.load(count), ir.Constant(I32, 1)), count)
    if not getattr(inst, "multicast", False):
        _warp_arrives(cg, bar)
        return
    void_asm(cg, "bar.warp.sync -1;", "~{memory}")
    with _lane0(cg):
        for rank in range(state.cluster):  # this block's barrier and each peer's
            # (release at the CTA's scope, the default: the buffer's reads are retired
            # wgmmas, so there is nothing to fence; `.release.cluster` would make every
            # arrival a slow cluster-wide fence)
            text = ("{ .reg .b32 remote; mapa.shared::cluster.u32 remote, $0, $1; "
                    "mbarrier.arrive.shared::cluster.b64 _, [remote]; }")
            void_asm(cg, text, "r,r,~{memory}", [bar, ir.Constant(I32, rank)])


@contextmanager
def _lane0(cg: KernelContext):
    """Code that lane 0 of each warp runs."""
    lane = cg.b.and_(cg.tid, ir.Constant(I32, 31))
    with cg.b.if_then(cg.b.icmp_unsigned("==", lane, ir.Constant(I32, 0))):
        yield


def _warp_arrives(cg: KernelContext, bar: ir.Value) -> None:
    """Once all the warp's lanes are here, its lane 0 arrives on mbarrier `bar` (one
    arrival a warp)."""
    void_asm(cg, "bar.warp.sync -1;", "~{memory}")
    with _lane0(cg):
        void_asm(cg, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", [bar])


def _wait_for_release(cg: KernelContext, name: str) -> None:
    """In the producer: wait until the other warps have released buffer `name` as many
    times as the producer filled it before (the k-th fill waits for the k-th release,
    written at the same place of the program), and count this fill."""
    state: TmaState = cg.tma
    issued = state.issued[name]
    count = cg.b.load(issued)
    _wait_parity(cg, state.barrier(cg, ir.Constant(I32, state.empty[name])),
                 cg.b.and_(count, ir.Constant(I32, 1)))
    cg.b.store(cg.b.add(count, ir.Constant(I32, 1)), issued)


@contextmanager
def producer_store(cg: KernelContext, inst: ins.StoreShared):
    """Around a store the converting producer runs into a tile `dot`s read: wait for the
    tile's release, store, then publish the values to the tensor cores' reads (the
    async proxy) and, once all the warp's lanes stored, arrive on its "full" barrier.
    Other stores are left as they are."""
    state: TmaState | None = cg.tma
    name = inst.dst.name
    if not cg.in_producer or state is None or name not in state.full:
        yield
        return
    _wait_for_release(cg, name)
    yield
    void_asm(cg, "fence.proxy.async.shared::cta;", "~{memory}")
    _warp_arrives(cg, state.barrier(cg, ir.Constant(I32, state.full[name])))


def wait_for_stores(cg: KernelContext, inst: ins.Dot) -> None:
    """Before a `dot` in the other warps of a converting producer's program: for each
    shared operand the producer stores, wait for the store it reads (the last one
    before it in the program: the one its last release let in)."""
    state: TmaState | None = cg.tma
    if state is None or cg.in_producer:
        return
    for operand in dict.fromkeys(t.name for t in (inst.a, inst.b)):
        if operand in state.full:
            last = cg.b.sub(cg.b.load(state.released[operand]), ir.Constant(I32, 1))
            _wait_parity(cg, state.barrier(cg, ir.Constant(I32, state.full[operand])),
                         cg.b.and_(last, ir.Constant(I32, 1)))


def emit_tma_copy(cg: KernelContext, inst: ins.CopyAsync, dst: ir.Value) -> None:
    """Thread 0: post the box's bytes on the group's barrier, issue the copy (in the
    producer: once the buffer's "empty" barrier has completed the phase of this copy;
    in the other warps of such a program: the buffer's release)."""
    state: TmaState = cg.tma
    if state.empty and not cg.in_producer:
        emit_tma_release(cg, inst)
        return
    spec = tensor_map(inst, state.cluster)
    bar = state.barrier(cg, state.current_slot(cg))
    coords = [cg.b.trunc(cg.i64(inst.offsets[d]), I32) for d in spec.dims]
    rank = len(spec.dims)
    names = ", ".join(f"${i + 3}" for i in range(rank))
    with _thread0(cg):
        if state.empty:
            _wait_for_release(cg, inst.dst.name)
        void_asm(cg, "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [$0], $1;",
                 "r,r,~{memory}", [bar, ir.Constant(I32, int(inst.lowering["bytes"]))])
        address = cg.b.ptrtoint(dst, I32)
        operands = [address, cg.b.ptrtoint(state.maps[spec], I64), bar, *coords]
        constraints = ["r", "l", "r"] + ["r"] * rank
        multicast = mask = ""
        if inst.multicast:  # this block's slice, into every block of the cluster
            me = cg.sreg("cluster.ctarank")
            slice_bytes = int(inst.lowering["bytes"]) // state.cluster
            operands[0] = cg.b.add(address, cg.b.mul(me, ir.Constant(I32, slice_bytes)))
            operands[-1] = cg.b.add(coords[-1], cg.b.mul(me, ir.Constant(I32, spec.box[-1])))
            operands.append(ir.Constant(ir.IntType(16), (1 << state.cluster) - 1))
            constraints.append("h")
            multicast, mask = ".multicast::cluster", f", ${len(operands) - 1}"
        text = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile"
                f".mbarrier::complete_tx::bytes{multicast} [$0], [$1, {{{names}}}], "
                f"[$2]{mask};")
        void_asm(cg, text, ",".join(constraints + ["~{memory}"]), operands)


def emit_tma_commit(cg: KernelContext) -> None:
    """Thread 0 arrives on the group's barrier (its one arrival); the group is counted
    (with a producer warp, it alone arrives)."""
    state: TmaState = cg.tma
    if cg.in_producer or not state.empty:
        bar = state.barrier(cg, state.current_slot(cg))
        with _thread0(cg):
            void_asm(cg, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", [bar])
    count = cg.b.load(state.groups)
    cg.b.store(cg.b.add(count, ir.Constant(I32, 1)), state.groups)


def emit_tma_wait(cg: KernelContext, n: int) -> None:
    """Every thread waits for the groups up to `groups - n - 1` it has not yet waited
    for (TMA copies may complete out of order, so each barrier is polled; at most the
    ring's R newest can be outstanding, and in a steady pipeline only the newest is)."""
    state: TmaState = cg.tma
    b = cg.b
    target = b.sub(b.load(state.groups), ir.Constant(I32, n + 1))
    waited = b.load(state.waited)
    ring = ir.Constant(I32, state.ring)
    for back in range(state.ring):  # groups target, target - 1, ..., distinct barriers
        group = b.sub(target, ir.Constant(I32, back))
        with b.if_then(b.icmp_signed(">", group, waited)):
            bar = state.barrier(cg, b.urem(group, ring))
            _wait_parity(cg, bar, b.and_(b.udiv(group, ring), ir.Constant(I32, 1)))
    later = b.icmp_signed(">", target, waited)
    b.store(b.select(later, target, waited), state.waited)
