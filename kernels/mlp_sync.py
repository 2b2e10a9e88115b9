"""The quantized MLP of a transformer layer fused by tile synchronization (issue 47,
docs/tile-sync.md): `y = (silu(x W_gate) * (x W_up)) W_down` as two Hopper kernels
that run at the same time, the second waiting only for the rows of the first it reads.

- `mlp_gate_up`: the Hopper quantized matmul (`qmm_wgmma.wgmma_mainloop`) of x by the
  gate and up weights packed side by side in blocks of `bn / 2` columns
  (`interleave_gate_up`), so that a block's `bn` accumulator rows hold `bn / 2` gate
  and the matching `bn / 2` up features; its epilogue stores `silu(gate) * up` (h, half
  the columns) and posts (`tile_post`) to the semaphore the policy gives its tile. It
  lets the next kernel start at entry (`launch_dependents`, in `block_tile`).
- `mlp_down`: the same matmul of h by W_down (optionally split along K, `split_k`),
  whose blocks wait, as the policy says, for the gate_up tiles whose columns of h they
  read (`generation` times their posts: the semaphores are never reset), and which do
  not wait for the previous kernel as a whole (no `wait_prerequisites`). Its tiles'
  rows must be the gate_up tiles' rows: one `bm` for both.

Two policies (the compile-time constant `policy` of both kernels, one value for the
pair):

- "row" (cuSync's RowSync, the row tile as the semaphore): a down block waits once,
  before its first load of h, for every gate_up tile of its row whose columns of h it
  reads: all `2F / bn` of them, or with `split_k` those in its split's range of K
  (one semaphore per row tile and split; gate_up, told `down_split_k`, posts to the
  split that reads its columns). Semaphores: `[rows, split_k]`.
- "tile" (TileSync on chunks of h: the `stages * bk` columns one iteration of down's
  main loop reads): a down block waits, before it copies the first k-tile of each
  chunk, for the gate_up tiles that wrote those columns, so it starts on a row as soon
  as its first chunk exists. Semaphores: `[rows, ceil(F / chunk)]` (a chunk, not each
  k-tile: every wait stops the block's pipeline; docs/tile-sync.md).

The order of gate_up's tiles decides which policy can overlap: its blocks take them in
groups of `group_m` row tiles, a column tile at a time (`grouped_tiles`, for L2 reuse),
so up to `group_m` row tiles of h fill in column by column, together, and a row is
complete only at the group's end. "tile" (and "row" with several splits) let down
start on the first columns while gate_up's last wave runs; one split of "row" waits
for whole rows. `choose_policy` picks from the cost model's waves of gate_up.

The pair shares `bm`, `bk` and `stages` (down's splits are whole iterations of
`stages * bk` rows of K, which gate_up computes to post to the right split). It runs in
the interpreter (`run_together`) as the specification.
"""

# No `from __future__ import annotations` here: the kernels' parameter annotations
# (`tv.ptr(act)`) must be evaluated where they are written, inside the factory.
from functools import cache

import numpy as np

from tilevm.cost.hardware import GPU
from tilevm.cost.model import Resources, blocks_per_sm, waves
from tilevm.dtypes import DataType
from tilevm.kernels.qmm import activation_type, splitk_sizes
from tilevm.kernels.qmm_wgmma import wgmma_mainloop
from tilevm.kernels.wgmma_epilogue import store_output
from tilevm.kernels.wgmma_grid import split_range
from tilevm.layouts import local
from tilevm.vm import lang as tv
from tilevm.vm.frontend import Kernel

__all__ = ["mlp_kernels", "interleave_gate_up", "store_silu_mul", "choose_policy",
           "semaphores", "workspace", "split_of", "down_blocks_per_sm", "POLICIES"]

POLICIES = ("row", "tile")
# Beyond this many waves of gate_up "row" beat "tile" on the H100 (docs/tile-sync.md)
TILE_SYNC_MAX_WAVES = 4


def interleave_gate_up(w_gate: np.ndarray, w_up: np.ndarray, bn: int) -> np.ndarray:
    """W_gate and W_up `[K, F]` as one `[K, 2F]` matrix whose column tiles of `bn` hold
    `bn / 2` gate columns then the same `bn / 2` up columns (F a multiple of `bn / 2`)."""
    K, F = w_gate.shape
    half = bn // 2
    if w_up.shape != (K, F) or F % half:
        raise ValueError(f"gate and up weights must have one shape [K, F] with F a multiple "
                         f"of {half}, got {w_gate.shape} and {w_up.shape}")
    blocks = np.stack([w_gate.reshape(K, F // half, half), w_up.reshape(K, F // half, half)],
                      axis=2)
    return blocks.reshape(K, 2 * F)


def store_silu_mul(h, acc, acc_layout, act, M, F, n0, m0, num_warps: int, buffers) -> None:
    """Store `silu(gate) * up` of the block's accumulators `acc` ([bn, bm] of the
    transposed product: rows `0..bn/2` the gate features, `bn/2..bn` the up ones) into
    h `[M, F]` at rows `m0`, columns `n0`, masked to M (a compile-time helper): through
    shared memory, where the two halves meet."""
    bn, bm = acc_layout.shape
    half, threads = bn // 2, 32 * num_warps
    across = min(bm, threads)  # threads along a row of the tile
    tv.static_assert(bm % across == 0 and half % (threads // across) == 0,
                     f"the silu * up epilogue spreads a [{half}, {bm}] tile over {threads} "
                     f"threads: bm must be a power of two")
    for buf in buffers:
        tv.free_shared(buf)
    tv.sync()  # every warp is done with the buffers whose bytes the tile takes
    tile = tv.alloc_shared(tv.f32, [bn, bm])
    tv.store_shared(tile, acc)
    tv.sync()
    layout = local(half // (threads // across), bm // across) \
        .spatial(threads // across, across)
    gate = tv.load_shared(tile, [0, 0], [half, bm], layout=layout)
    up = tv.load_shared(tile, [half, 0], [half, bm], layout=layout)
    value = gate / (tv.exp(-gate) + 1.0) * up
    tv.store_global(tv.global_view(h, [F, M], strides=[1, F]), tv.cast(value, act), [n0, m0])


def semaphores(policy: str, M: int, F: int, bm: int, chunk: int, split_k: int = 1) -> int:
    """How many int32 semaphores the pair takes (module docstring): `chunk` is
    `stages * bk`, `split_k` down's."""
    rows = -(-M // bm)
    return rows * split_k if policy == "row" else rows * -(-F // chunk)


def workspace(M: int, H: int, bm: int, bn: int, split_k: int) -> tuple[int, int]:
    """(f32 words, int32 counters) down's split-K reduction takes (`qmm.splitk_sizes`;
    none without a split)."""
    return splitk_sizes(M, H, bm, bn, split_k) if split_k > 1 else (0, 0)


def down_blocks_per_sm(M: int, H: int, bm: int, bn: int, split_k: int, sms: int) -> int:
    """The cap on down's blocks per SM (`Kernel.prepare(max_blocks_per_sm=)`) that
    spreads them as a launch on an idle GPU would: their even share of the `sms` SMs.
    Launched as a dependent of gate_up, they take the SMs gate_up's blocks free first,
    and may pile up two or more on one SM while others idle."""
    blocks = -(-M // bm) * -(-H // bn) * split_k
    return -(-blocks // sms)


def split_of(column, K, chunk: int, split_k: int):
    """The split (`split_range`) whose rows of K hold row `column` of h."""
    return ((column // chunk + 1) * split_k - 1) // tv.cdiv(K, chunk)


def choose_policy(M: int, F: int, bm: int, bn: int, gpu: GPU, resources: Resources) -> str:
    """The policy for gate_up's waves on `gpu` (its blocks holding `resources`:
    `cost.model.blocks_per_sm`): "tile" for more than one wave and at most
    `TILE_SYNC_MAX_WAVES`, else "row". In one wave gate_up's tiles all finish together:
    there is nothing to overlap, and "row" waits least. Past one wave, "tile" lets down
    start on the columns of h the earlier waves finished while the last one runs; but
    the overlap is at most that last wave, a shrinking share of the pair as the waves
    grow, while "tile"'s waits (one a chunk of down's K) grow with down."""
    occupancy = blocks_per_sm(gpu, resources.threads, resources.registers_per_thread,
                              resources.shared_bytes)
    tiles = -(-M // bm) * (2 * F // bn)
    count = waves(gpu, tiles, occupancy.blocks_per_sm).waves
    return "tile" if 1 < count <= TILE_SYNC_MAX_WAVES else "row"


@tv.inline
def wait_for_chunk(chunks, k, m0, K, bm: int, chunk: int, half: int, generation):
    """Before the copy of k-tile `k` of h: at the first of a chunk inside K, wait for the
    posts of its gate_up tiles (`half` columns of h each) of this call."""
    if k < K:
        if k % chunk == 0:
            tv.tile_wait(chunks, [m0 // bm, k // chunk],
                         generation * tv.cdiv(tv.minimum(K - k, chunk), half))


def _check_policy(policy: str) -> None:
    tv.static_assert(policy in POLICIES, f"policy must be one of {POLICIES}, got {policy!r}")


@cache
def mlp_kernels(act: DataType | str = "f16") -> tuple[Kernel, Kernel]:
    """(gate_up, down) for activations of type `act` (module docstring)."""
    act = activation_type(act)

    @tv.kernel(num_warps=4)
    def mlp_gate_up(x: tv.ptr(act, const=True), w: tv.ptr(tv.uint8, const=True),
                    scales: tv.ptr(act, const=True), zeros: tv.ptr(act, const=True),
                    h: tv.ptr(act), sem: tv.ptr(tv.int32), M: tv.int32, N2: tv.int32,
                    K: tv.int32, *, wdtype: DataType = tv.int4, group_size: int = 128,
                    has_zeros: bool = False, bm: int = 128, bk: int = 64,
                    num_warps: int = 4, stages: int = 4, group_m: int = 8, lead: int = 2,
                    prefetch: int = 2, half_atoms: bool = False, policy: str = "row",
                    down_split_k: int = 1):
        _check_policy(policy)
        acc, acc_layout, bn, n_tile, n0, m0, buffers = wgmma_mainloop(
            x, w, scales, zeros, M, N2, K, act, wdtype, group_size, has_zeros, bm, bk,
            num_warps, stages, group_m, lead, prefetch, half_atoms, 1)
        tv.assume(N2 % bn == 0)  # whole tiles: each holds a gate and an up block
        store_silu_mul(h, acc, acc_layout, act, M, N2 // 2, n_tile * (bn // 2), m0,
                       num_warps, buffers)
        if policy == "row":  # the semaphore of down's split that reads these columns
            split = split_of(n_tile * (bn // 2), N2 // 2, stages * bk, down_split_k) \
                if down_split_k > 1 else 0
            tv.tile_post(tv.global_view(sem, [tv.cdiv(M, bm), down_split_k]),
                         [m0 // bm, split], 1)
        else:  # the semaphore of the chunk of h that holds these columns
            chunk = stages * bk
            tv.static_assert(chunk % (bn // 2) == 0,
                             f"a chunk of h (stages * bk = {chunk} columns) must hold whole "
                             f"gate_up tiles ({bn // 2} columns of h)")
            tv.tile_post(tv.global_view(sem, [tv.cdiv(M, bm), tv.cdiv(N2 // 2, chunk)]),
                         [m0 // bm, n_tile * (bn // 2) // chunk], 1)

    @tv.kernel(num_warps=4)
    def mlp_down(h: tv.ptr(act, const=True), w: tv.ptr(tv.uint8, const=True),
                 scales: tv.ptr(act, const=True), zeros: tv.ptr(act, const=True),
                 y: tv.ptr(act), sem: tv.ptr(tv.int32), ws: tv.ptr(tv.f32),
                 counters: tv.ptr(tv.int32), M: tv.int32, N: tv.int32, K: tv.int32,
                 generation: tv.int32, *, producer_bn: int = 128,
                 wdtype: DataType = tv.int4, group_size: int = 128,
                 has_zeros: bool = False, bm: int = 128, bk: int = 64, num_warps: int = 4,
                 stages: int = 4, group_m: int = 8, lead: int = 2, prefetch: int = 2,
                 half_atoms: bool = False, wide_stores: bool = False, policy: str = "row",
                 split_k: int = 1):
        _check_policy(policy)
        # K = F: a row of h is 2K / producer_bn gate_up tiles, each posting once a call
        producer_tiles = 2 * K // producer_bn
        if policy == "row":  # the posts of the gate_up tiles in this split's columns
            split, posts = 0, producer_tiles
            if split_k > 1:
                split = tv.block_idx(2)
                begin, end = split_range(split, K, stages * bk, split_k)
                posts = tv.cdiv(tv.minimum(end, K) - begin, producer_bn // 2)
            rows = tv.global_view(sem, [tv.cdiv(M, bm), split_k])
            waits = dict(before_loads=lambda m0: tv.tile_wait(
                rows, [m0 // bm, split], generation * posts))
        else:  # the chunk of h a copy starts (none for copies past K: zeros)
            chunks = tv.global_view(sem, [tv.cdiv(M, bm), tv.cdiv(K, stages * bk)])
            waits = dict(before_copy=lambda k, m0: wait_for_chunk(
                chunks, k, m0, K, bm, stages * bk, producer_bn // 2, generation))
        acc, acc_layout, bn, n_tile, n0, m0, buffers = wgmma_mainloop(
            h, w, scales, zeros, M, N, K, act, wdtype, group_size, has_zeros, bm, bk,
            num_warps, stages, group_m, lead, prefetch, half_atoms, split_k,
            wait_previous=False, **waits)
        store_output(y, ws, counters, acc, acc_layout, act, M, N, bm, bn, n_tile, n0, m0,
                     split_k, num_warps, buffers, wide_stores)

    mlp_gate_up.name = f"mlp_gate_up_{act.name}"
    mlp_down.name = f"mlp_down_{act.name}"
    return mlp_gate_up, mlp_down
