"""The quantized matmul for many rows on Hopper as two kernels: dequantize the weights
into an f16/bf16 workspace, then a plain matmul of x by them.

Same problem, weight format and requirements as `kernels.qmm`. `kernels.qmm_wgmma_shared`
converts each weight once per 256 rows of x, inside the matmul, where the conversion's
integer work competes with the wgmmas for issue slots and registers; here each weight is
converted once, by `dequantize_kernel`, at the cost of writing and reading back
`2 * Np * K` bytes (`schedule.dequant_workspace`). Which one is faster depends on the
conversion's cost (the dearer it is, the better this pair does: docs/quantized-matmul.md,
"Measurements"), so it is a tuning candidate beside that kernel
(`kernels.tilings.candidates`).

- `dequantize_kernel`: one block a k-tile (`bk` rows, 32 or 64, inside one group) of
  `32 * num_warps / (bk / 32)` columns: the codes loaded and converted as the
  shared-weights kernel does (`qmm_wgmma_shared.dequantized`: minus the zero point,
  times the scale, each rounded to the activation type), stored through shared memory
  so that each thread writes 16 contiguous bytes of W^T `[Np, K]` (K contiguous;
  storing the fragments straight from registers, a few bytes a store, is much slower).
- `wt_matmul_kernel`: y^T = W^T x^T, both operands copied by TMA into `stages` buffers,
  `lead` k-tiles ahead, and multiplied by warpgroup MMA from shared memory, `m64n{bm}k16`
  (the shared-weights kernel's pipeline without the conversion: 16 * num_warps columns
  of W^T, `bm` rows of x, blocks in groups of `group_m` row tiles). Rows and columns
  past M, N, K are zero-filled by the copies and never stored. With `producer` a
  producer warp issues the copies; with `cluster` (2 or 4, and the producer) that many
  adjacent column tiles of a row tile form a cluster that reads each k-tile of x once
  (multicast). The tuner times the plain form (no producer, lead 2); the others'
  measurements: docs/design-decisions.md, "Warp specialization, persistence, clusters".
"""

# No `from __future__ import annotations` here: the kernels' parameter annotations
# (`tv.ptr(act)`) must be evaluated where they are written, inside the factory.
from functools import cache

from tilevm.dtypes import DataType
from tilevm.kernels.qmm import activation_type
from tilevm.kernels.qmm_wgmma_shared import dequantized
from tilevm.kernels.weight_format import ATOM, ATOM_LAYOUT, atom_code_layout
from tilevm.kernels.wgmma_epilogue import store_transposed
from tilevm.kernels.wgmma_grid import grouped_tiles, x_sharing_tiles
from tilevm.layouts import local, spatial
from tilevm.layouts.fragments import mma_m16n8k16_c
from tilevm.layouts.shared_layout import swizzled
from tilevm.vm import lang as tv
from tilevm.vm.frontend import Kernel


@cache
def dequantize_kernel(act: DataType | str = "f16") -> Kernel:
    """Codes, scales (and zeros) in the "fragments" format -> W^T `[Np, K]` of type
    `act` (parameters `w, scales, zeros, wt, N, K`)."""
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def dequantize(w: tv.ptr(tv.uint8, const=True), scales: tv.ptr(act, const=True),
                   zeros: tv.ptr(act, const=True), wt: tv.ptr(act), N: tv.int32,
                   K: tv.int32, *, wdtype: DataType = tv.int4, group_size: int = 128,
                   has_zeros: bool = False, bk: int = 64, num_warps: int = 8):
        b = wdtype.bits
        tv.static_assert(1 <= b <= 8, f"wdtype must have 1..8 bits, got {wdtype}")
        tv.static_assert(bk in (32, 64) and group_size % bk == 0,
                         f"bk={bk} must be 32 or 64 dividing group_size={group_size}")
        chunks = bk // ATOM  # warps along k: a warp converts a 32 x 32 piece
        tv.static_assert(num_warps % chunks == 0, f"num_warps={num_warps} must be a "
                         f"multiple of {chunks}")
        atoms = num_warps // chunks
        bn = ATOM * atoms
        threads = 32 * num_warps
        tv.static_assert(bn * bk % (8 * threads) == 0 and threads * 8 % bk == 0,
                         f"{bn} x {bk} weights must split into 16-byte pieces per thread")
        tv.assume(K % group_size == 0)
        Np = tv.cdiv(N, ATOM) * ATOM
        tv.grid(tv.cdiv(Np, bn), K // bk)
        # Programmatic dependent launch (sm_90): the next kernel may start now; this one
        # waits for the previous one here, before touching memory.
        tv.launch_dependents()
        tv.wait_prerequisites()
        n_tile = tv.block_idx(0)
        n0, k = n_tile * bn, tv.block_idx(1) * bk
        gw = tv.global_view(w, [K // ATOM, Np // ATOM, 32, 4 * b])
        gs = tv.global_view(scales, [Np, K // group_size], strides=[1, Np])
        gz = tv.global_view(zeros, [Np, K // group_size], strides=[1, Np])
        code_layout = (spatial(chunks, atoms) * atom_code_layout(b)).permute((1, 0))
        weight_layout = (spatial(chunks, atoms) * ATOM_LAYOUT).permute((1, 0))
        scale_layout = weight_layout.reduce(1)
        codes = tv.load_global(gw, [k // ATOM, n_tile * atoms, 0, 0], [chunks, atoms, 32, 4 * b],
                               layout=spatial(chunks, atoms, 32, 1).local(1, 1, 1, 4 * b))
        group = [n0, k // group_size]
        wv = dequantized(codes, wdtype, act, code_layout, weight_layout,
                         lambda: tv.load_global(gs, group, [bn, 1], layout=scale_layout),
                         (lambda: tv.load_global(gz, group, [bn, 1], layout=scale_layout))
                         if has_zeros else None)
        # Through shared memory: each thread then holds 8 consecutive values of a row.
        buf = tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
        tv.store_shared(buf, wv)
        tv.sync()
        rows = local(bn * bk // (8 * threads), 1).spatial(threads * 8 // bk, bk // 8) \
            .local(1, 8)
        tv.store_global(tv.global_view(wt, [Np, K]), tv.load_shared(buf, [0, 0], [bn, bk],
                                                                     layout=rows), [n0, k])

    dequantize.name = f"dequantize_{act.name}"
    return dequantize


@cache
def wt_matmul_kernel(act: DataType | str = "f16") -> Kernel:
    """y = x @ W for x `[M, K]` and W^T `[N, K]` (rows of `wt` at least N; K contiguous)
    of type `act` (parameters `x, wt, y, M, N, K`)."""
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def wt_matmul(x: tv.ptr(act, const=True), wt: tv.ptr(act, const=True), y: tv.ptr(act),
                  M: tv.int32, N: tv.int32, K: tv.int32,
                  *, bm: int = 256, bk: int = 64, num_warps: int = 8, stages: int = 4,
                  lead: int = 2, group_m: int = 8, producer: bool = False,
                  wide_stores: bool = False, cluster: int = 1):
        tv.static_assert(bk in (32, 64), f"bk={bk} must be 32 or 64 (64- or 128-byte rows)")
        tv.static_assert(num_warps % 4 == 0, f"num_warps={num_warps} must be whole "
                         "warpgroups")
        tv.static_assert(bm % 8 == 0 and 8 <= bm <= 256,
                         f"bm={bm} must be a multiple of 8 up to 256 (wgmma's N)")
        most = stages - 1 if producer else stages - 2
        tv.static_assert(3 <= stages <= 6 and 1 <= lead <= most,
                         f"stages={stages} (3..6) and lead={lead} (1..{most})")
        tv.static_assert(cluster in (1, 2, 4) and (cluster == 1 or producer),
                         f"cluster={cluster} must be 1, 2 or 4, and more than 1 only with "
                         "the producer warp (which multicasts the x tiles)")
        if producer:
            tv.producer_warp()
        bn = 16 * num_warps
        tv.assume(K % ATOM == 0)
        if cluster == 1:
            tv.grid(tv.cdiv(N, bn), tv.cdiv(M, bm))
            n_tile, m_tile = grouped_tiles(tv.cdiv(N, bn), tv.cdiv(M, bm), group_m)
        else:  # `cluster` adjacent column tiles of one row tile, sharing x's tiles
            n_tile, m_tile = x_sharing_tiles(tv.cdiv(N, bn), tv.cdiv(M, bm), group_m, cluster)
        tv.launch_dependents()  # (as in the dequantize kernel above)
        tv.wait_prerequisites()
        n0, m0 = n_tile * bn, m_tile * bm
        gxt = tv.global_view(x, [K, M], strides=[1, K])
        gwt = tv.global_view(wt, [N, K])
        acc_layout = local(max(1, bn // (16 * num_warps)), 1) * \
            spatial(num_warps, 1) * local(1, bm // 8) * mma_m16n8k16_c()
        xs = [tv.alloc_shared(act, [bk, bm], layout=swizzled([bm, bk], act).permute((1, 0)))
              for _ in range(stages)]
        ws = [tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
              for _ in range(stages)]
        shared_x = cluster > 1
        for first in range(lead):
            tv.copy_async(xs[first], gxt, [first * bk, m0], multicast=shared_x)
            tv.copy_async(ws[first], gwt, [n0, first * bk])
            tv.copy_async_commit()
        acc = tv.zeros([bn, bm], tv.f32, layout=acc_layout)
        # Whole loop iterations of `stages` k-tiles (buffer s holds k-tile t = k0/bk + s):
        # past K the copies read zeros, which add nothing.
        for k0 in tv.range(0, K, stages * bk):
            for s in range(stages):
                k = k0 + s * bk if s else k0
                tv.copy_async_wait(lead - 1)  # this thread's copies of k-tile t
                tv.sync()  # everyone's
                acc = tv.dot(ws[s], xs[s], acc)
                tv.copy_async(xs[(s + lead) % stages], gxt, [k + lead * bk, m0],
                              multicast=shared_x)
                tv.copy_async(ws[(s + lead) % stages], gwt, [n0, k + lead * bk])
                tv.copy_async_commit()
        tv.copy_async_wait(0)
        store_transposed(y, acc, acc_layout, act, M, N, n0, m0, num_warps, (*xs, *ws),
                         wide_stores)

    wt_matmul.name = f"wt_matmul_{act.name}"
    return wt_matmul


# for `vmc compile kernels/qmm_dequant.py:dequantize_f16 --arch sm_90a`, and likewise
dequantize_f16 = dequantize_kernel("f16")
wt_matmul_f16 = wt_matmul_kernel("f16")
