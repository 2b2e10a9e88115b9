"""The quantized matmul for many rows (prefill): `y[M, N] = x[M, K] @ dequant(W)[K, N]`
with every operand staged in shared memory, written on the VM.

Same problem, weight format ("fragments") and requirements as `kernels.qmm` (whose
kernel streams the weights into registers, the right shape for decode). With thousands
of rows the work is the tensor cores', and what limits that kernel is the traffic and
the conversions per `mma`: each warp holds all `bm` rows of its 32 columns, so a block
is at most 64 x 128 and re-reads x and the weights from L2 once per such tile. Here:

- a block computes a `bm x bn` tile with `warps_m x warps_n` warps, each `bm / warps_m`
  rows and 32 columns (one atom of the format): a weight is converted by `warps_m`
  warps of a block and used by `bm / warps_m` rows of each, and a 128 x 128 tile reads
  x once per 128 columns and the weights once per 128 rows;
- a k-tile (`bk` rows of K) of activations, codes and scales is copied by `copy_async`
  into one of `stages` shared-memory buffers, `stages - 1` k-tiles ahead of the one
  computed, one barrier per k-tile (the buffer refilled is the one every warp finished
  in the previous k-tile);
- each warp reads its codes (`4 * b` consecutive bytes per lane per atom: conflict-free)
  and the activations (`ldmatrix`, swizzled tile) from shared memory, converts the codes
  to f16/bf16 and multiplies them by their scale row (`(code - zero) * scale`, rounded
  once to the activation type, as the weights of an f16 layer are) so the tensor cores
  accumulate `x @ W` directly into one f32 accumulator;
- rows past M and k-tiles past K are zero-filled by the copies (so K needs no multiple
  of `stages * bk`); the store is masked (ragged M and N).

`bk` divides the group size (a k-tile has one scale row); the format needs K % 32 == 0
and K % group_size == 0, as in `kernels.qmm`.
"""

# No `from __future__ import annotations` here: the kernels' parameter annotations
# (`tv.ptr(act)`) must be evaluated where they are written, inside the factory.
from functools import cache

from tilevm.dtypes import DataType
from tilevm.kernels.qmm import activation_type
from tilevm.kernels.weight_format import ATOM, ATOM_LAYOUT, atom_code_layout
from tilevm.layouts import local, replicated, spatial
from tilevm.layouts.fragments import mma_m16n8k16_a, mma_m16n8k16_c
from tilevm.vm import lang as tv
from tilevm.vm.frontend import Kernel


@cache
def qmm_staged_kernel(act: DataType | str = "f16") -> Kernel:
    """The staged kernel for activations (and scales, zeros, output) of type `act`."""
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def qmm_staged(x: tv.ptr(act, const=True), w: tv.ptr(tv.uint8, const=True),
                   scales: tv.ptr(act, const=True), zeros: tv.ptr(act, const=True),
                   y: tv.ptr(act), M: tv.int32, N: tv.int32, K: tv.int32,
                   *, wdtype: DataType = tv.int4, group_size: int = 128,
                   has_zeros: bool = False, bm: int = 128, bk: int = 32,
                   num_warps: int = 8, warps_m: int = 2, stages: int = 3):
        b = wdtype.bits
        tv.static_assert(1 <= b <= 8, f"wdtype must have 1..8 bits, got {wdtype}")
        tv.static_assert(bk % ATOM == 0 and group_size % bk == 0,
                         f"bk={bk} must be a multiple of {ATOM} dividing "
                         f"group_size={group_size}")
        tv.static_assert(num_warps % warps_m == 0,
                         f"warps_m={warps_m} must divide num_warps={num_warps}")
        tv.static_assert(bm % (16 * warps_m) == 0,
                         f"bm={bm} must be a multiple of 16 * warps_m = {16 * warps_m}")
        tv.static_assert(2 <= stages <= 6, f"stages must be 2..6, got {stages}")
        warps_n = num_warps // warps_m
        bn = ATOM * warps_n
        rows = bm // warps_m  # of a warp
        tv.assume(K % group_size == 0)
        tv.assume(K % ATOM == 0)
        Np = tv.cdiv(N, ATOM) * ATOM  # the format's padded width

        tv.grid(tv.cdiv(N, bn), tv.cdiv(M, bm))
        # Programmatic dependent launch (sm_90): the next kernel may start now; this one
        # waits for the previous one here, before touching memory.
        tv.launch_dependents()
        tv.wait_prerequisites()
        gx = tv.global_view(x, [M, K])
        gw = tv.global_view(w, [K // ATOM, Np // ATOM, 32, 4 * b])
        gs = tv.global_view(scales, [K // group_size, Np])
        gz = tv.global_view(zeros, [K // group_size, Np])
        n0 = tv.block_idx(0) * bn
        m0 = tv.block_idx(1) * bm
        atom_n0 = tv.block_idx(0) * warps_n

        # Warp (i, j) of the warps_m x warps_n grid: rows [i * rows, (i + 1) * rows) of x
        # (shared by the warps of a row: replicated along j), atom j of the weights
        # (replicated along i), and that tile of the accumulator.
        warps = spatial(warps_m, warps_n)
        acc_layout = warps * local(rows // 16, 4) * mma_m16n8k16_c()
        x_layout = warps.reduce(1) * local(rows // 16, bk // 16) * mma_m16n8k16_a()
        atoms = warps.reduce(0) * local(bk // ATOM, 1)  # a warp's atoms of a k-tile
        w_layout = atoms * ATOM_LAYOUT
        stored_layout = atoms * atom_code_layout(b)  # the codes as stored
        byte_layout = replicated(warps_m, ndim=4) * local(bk // ATOM, 1, 1, 1) \
            .spatial(1, warps_n, 32, 1).local(1, 1, 1, 4 * b)
        code_tile = [bk // ATOM, warps_n, 32, 4 * b]

        xs = [tv.alloc_shared(act, [bm, bk]) for _ in range(stages)]
        ws = [tv.alloc_shared(tv.uint8, code_tile) for _ in range(stages)]
        ss = [tv.alloc_shared(act, [1, bn]) for _ in range(stages)]
        zs = [tv.alloc_shared(act, [1, bn]) for _ in range(stages)] if has_zeros else None
        buffers = (xs, ws, ss, zs)

        sources = (gx, gw, gs, gz if has_zeros else None)
        corner = (m0, n0, atom_n0, group_size)

        for first in range(stages - 1):  # (not `s`: a runtime loop would carry it)
            _fetch(buffers, first, sources, corner, first * bk)
        acc = tv.zeros([bm, bn], tv.f32, layout=acc_layout)
        for k0 in tv.range(0, K, stages * bk):
            for s in range(stages):  # unrolled: buffer s holds k-tile k0 + s * bk
                tv.copy_async_wait(stages - 2)  # this k-tile has landed (this thread's
                tv.sync()  # copies), for every thread; all are done with buffer s - 1
                _fetch(buffers, (s + stages - 1) % stages, sources, corner,
                       k0 + (s + stages - 1) * bk)
                codes = tv.view(tv.load_shared(ws[s], [0, 0, 0, 0], code_tile, byte_layout),
                                wdtype, [bk, bn], stored_layout)
                wt = tv.cast(codes, act, w_layout)
                scale = tv.load_shared(ss[s], [0, 0], [1, bn], w_layout.reduce(0))
                if has_zeros:
                    wt = wt - tv.load_shared(zs[s], [0, 0], [1, bn], w_layout.reduce(0))
                xa = tv.load_shared(xs[s], [0, 0], [bm, bk], x_layout)
                acc = tv.dot(xa, wt * scale, acc)
        tv.copy_async_wait(0)
        gy = tv.global_view(y, [M, N])
        tv.store_global(gy, tv.cast(acc, act), [m0, n0])

    qmm_staged.name = f"qmm_staged_{act.name}"
    return qmm_staged


def _fetch(buffers, stage, sources, corner, k):
    """Start copying k-tile `k` (activations, codes, scales, zeros; past K: zeros) into
    buffer `stage`, one commit group (a compile-time helper of `qmm_staged_kernel`)."""
    xs, ws, ss, zs = buffers
    gx, gw, gs, gz = sources
    m0, n0, atom_n0, group_size = corner
    tv.copy_async(xs[stage], gx, [m0, k])
    tv.copy_async(ws[stage], gw, [k // ATOM, atom_n0, 0, 0])
    tv.copy_async(ss[stage], gs, [k // group_size, n0])
    if zs is not None:
        tv.copy_async(zs[stage], gz, [k // group_size, n0])
    tv.copy_async_commit()


qmm_staged_f16 = qmm_staged_kernel("f16")  # for `vmc compile kernels/qmm_staged.py:...`
