"""The quantized matmul for many rows on Hopper with the converted weights in shared
memory: `y^T = dequant(W)^T @ x^T` with warpgroup MMA reading both operands from shared
memory, each weight converted once per block of `bm` (256) rows.

Same problem, weight format and requirements as `kernels.qmm`; the sibling of
`kernels.qmm_wgmma`, whose warpgroups each convert the weights they multiply (A in
registers): there every weight is converted once per 128 rows of x, and the weights'
loads and conversion are what that kernel pays over cuBLAS (without them it runs at
cuBLAS's speed). Here:

- a block has `num_warps` warps (whole warpgroups) and computes `bn` columns of y for
  `bm` rows; `bn = 32 * num_warps / (bk / 32)`: warp `(h, j)` loads and converts atom
  `j`'s codes for rows `32 h ..` of the k-tile (one warp a 32 x 32 piece: 128 columns
  with 8 warps and 64-row k-tiles), minus the zero point, times the group's scale
  (rounded once to the activation type), and stores them into the k-tile's shared tile
  of weights `[bn, bk]` (K-major, 128-byte swizzle: the layout wgmma reads as A; the
  values in mma fragment order, so the stores are `stmatrix` on sm_90);
- warpgroup `g`'s wgmmas multiply rows `64 g ..` of that tile (`bn / 64` x 16-row blocks
  over the warps: `acc_layout`) by the k-tile of x^T `[bk, bm]` (copied by `copy_async`,
  `lead` k-tiles ahead, as in `kernels.qmm_wgmma`), `m64n{bm}k16`, accumulating y^T in
  f32 registers (`bn * bm / (32 num_warps)` per thread: 128 for 128 x 256);
- the pipeline, per k-tile t, in `stages` buffers of x, scales and weights: wait for x
  of t and the scales of t + 1, barrier (every warp's weights of t stored), `dot` on
  k-tile t (its wgmmas run while the rest goes on; the `dot` retires the previous
  k-tile's), copy x of t + lead and the scales of t + lead + 1 (right after the `dot`:
  issued after the conversion, or before the `dot`, they were slower), load the codes of
  t + 1 + `prefetch` (in flight in registers meanwhile; with `prefetch == stages`, the
  tuned tiling, a whole iteration's codes are fetched at once instead, after its first
  k-tile's conversion), convert the weights of t + 1 into their buffer. A buffer is
  rewritten only once the wgmmas reading it are retired, which needs
  `lead <= stages - 2` (the wait analysis keeps the previous k-tile's group in flight
  across the barrier then; with less room it waits, still correct);
- blocks take their tiles in groups of `group_m` row tiles (`wgmma_grid.block_tile`);
- with `split_k` a tile's K is split as in `kernels.qmm_wgmma` (whole loop iterations a
  block, `block_rows`; the partial sums parked in the workspace and added by the tile's
  last block, `store_output`): a layer of few 256 x 128 tiles (8B down: 32) fills the
  GPU's SMs;
- with `cluster_n` (2 or 4, unsplit) that many adjacent column tiles of a row tile are
  one cluster (`wgmma_grid.x_sharing_tiles`) and a producer warp copies each k-tile of x
  once for all of them (TMA multicast), and the scales of its own columns;
- with `producer=R` a converting producer warpgroup (`tv.producer_warp(registers=R,
  converts=True)`) converts the weights instead, `stages - 1` k-tiles ahead, its scales
  read from global memory with the codes; the 8 warps only wait and multiply. It is
  slower than the tuned kernel (one warpgroup converting is the slowest stage): not
  tuned.

With 256 rows, 8 warps, 4 stages, x two k-tiles ahead, the codes a loop iteration at a
time and the copies right after the `dot`, it beats every `kernels.qmm_wgmma` tiling at
every type measured (docs/quantized-matmul.md, "Measurements"): a tuning candidate, with
the two best of those tilings beside it.
"""

# No `from __future__ import annotations` here: the kernels' parameter annotations
# (`tv.ptr(act)`) must be evaluated where they are written, inside the factory.
from functools import cache

from tilevm.dtypes import DataType
from tilevm.kernels.qmm import activation_type, fetch_ahead, shift_ahead
from tilevm.kernels.qmm_wgmma import copy_scales
from tilevm.kernels.weight_format import ATOM, ATOM_LAYOUT, atom_code_layout
from tilevm.kernels.wgmma_epilogue import store_output
from tilevm.kernels.wgmma_grid import block_rows, block_tile
from tilevm.layouts import local, replicated, spatial
from tilevm.layouts.fragments import mma_m16n8k16_c
from tilevm.layouts.shared_layout import swizzled
from tilevm.vm import lang as tv
from tilevm.vm.frontend import Kernel

# What the warpgroup that only issues copies keeps a thread (`tv.producer_warp`),
# leaving the other 8 warps 232 (with 24, ptxas spilled in the producer).
COPY_PRODUCER_REGISTERS = 40


@cache
def qmm_wgmma_shared_kernel(act: DataType | str = "f16") -> Kernel:
    """The Hopper kernel with shared weights for activations (and scales, zeros, output)
    of type `act`."""
    act = activation_type(act)

    @tv.kernel(num_warps=8)
    def qmm_wgmma_shared(x: tv.ptr(act, const=True), w: tv.ptr(tv.uint8, const=True),
                         scales: tv.ptr(act, const=True), zeros: tv.ptr(act, const=True),
                         y: tv.ptr(act), ws: tv.ptr(tv.f32), counters: tv.ptr(tv.int32),
                         M: tv.int32, N: tv.int32, K: tv.int32,
                         *, wdtype: DataType = tv.int4, group_size: int = 128,
                         has_zeros: bool = False, bm: int = 256, bk: int = 64,
                         num_warps: int = 8, stages: int = 4, lead: int = 2,
                         group_m: int = 8, prefetch: int = 1,
                         wide_stores: bool = False, producer: int = 0, split_k: int = 1,
                         cluster_n: int = 1):
        b = wdtype.bits
        tv.static_assert(1 <= b <= 8, f"wdtype must have 1..8 bits, got {wdtype}")
        tv.static_assert(bk in (32, 64) and group_size % bk == 0,
                         f"bk={bk} must be 32 or 64 (64- or 128-byte rows) dividing "
                         f"group_size={group_size}")
        chunks = bk // ATOM  # warps along k: a warp converts a 32 x 32 piece
        tv.static_assert(num_warps % 4 == 0 and num_warps % chunks == 0,
                         f"num_warps={num_warps} must be whole warpgroups")
        atoms = num_warps // chunks
        bn = ATOM * atoms
        tv.static_assert(bn % (16 * num_warps) == 0 or (16 * num_warps) % bn == 0,
                         f"{bn} columns must split into the warps' 16-row blocks")
        tv.static_assert(bn % 64 == 0, f"bn={bn} must be whole 64-row wgmmas")
        tv.static_assert(bm % 8 == 0 and 8 <= bm <= 256,
                         f"bm={bm} must be a multiple of 8 up to 256 (wgmma's N)")
        tv.static_assert(1 <= lead <= stages - 2 <= 4,
                         f"stages={stages} (3..6) and lead={lead} (1..stages-2)")
        tv.static_assert(group_m >= 1, f"group_m is a number of row tiles, got {group_m}")
        tv.static_assert(1 <= prefetch <= 4, f"prefetch is 1 to 4 k-tiles, got {prefetch}")
        chunk = stages * bk  # rows of K per iteration of the main loop
        tv.static_assert(split_k == 1 or (chunk % group_size == 0 and not producer),
                         f"split_k={split_k} splits K into whole iterations of {chunk} rows "
                         f"(stages * bk), which must be whole groups of {group_size}, "
                         f"without a converting producer")
        tv.static_assert(cluster_n in (1, 2, 4) and (cluster_n == 1 or (
            split_k == 1 and not producer)),
                         f"cluster_n={cluster_n} must be 1, 2 or 4, and more than 1 only "
                         f"without split_k or a converting producer")
        if producer:  # warps of their own convert (`tv.producer_warp`); the scales
            # then come from global memory (the producer waits for no copy)
            tv.producer_warp(registers=producer, converts=True)
        elif cluster_n > 1:  # a warpgroup of its own issues the copies (x's multicast)
            # and gives the 8 warps its registers: they need more than the 168 a thread
            # a block of 12 warps starts with
            tv.producer_warp(registers=COPY_PRODUCER_REGISTERS)
        n_tile, n0, m0, gxt, gw, gs, gz = block_tile(x, w, scales, zeros, M, N, K, b, bm, bn,
                                                     group_size, group_m, split_k=split_k,
                                                     cluster_n=cluster_n)
        shared_x = cluster_n > 1  # (x's tiles copied once for the cluster's blocks)
        # Every k below is of the block's rows of K, offset by `k_begin` where memory is
        # read.
        k_begin, k_len = block_rows(K, chunk, split_k)

        # Warp (h, j): atom j's codes for rows 32 h.. of the k-tile, as loaded (16 bytes
        # a lane for int4), and as f16 in the same threads with the locals in order
        # (pairs along k adjacent: 4-byte shared stores). With a converting producer
        # (one warpgroup) warp j converts atom j's pieces for every 32 rows of the
        # k-tile, as the program's first 4 warps (the others hold copies).
        warps = spatial(chunks, atoms) if not producer else \
            replicated(num_warps // 4, ndim=2) * local(chunks, 1) * spatial(1, atoms)
        tv.static_assert(not producer or atoms == 4,
                         f"a converting producer's 4 warps take one atom each: bn = 128 "
                         f"columns, got {bn}")
        lanes = spatial(1, 1, 32, 1).local(1, 1, 1, 4 * b)  # a warp's 32 x 32 piece
        byte_layout = spatial(chunks, atoms, 1, 1) * lanes if not producer else \
            replicated(num_warps // 4, ndim=4) * local(chunks, 1, 1, 1) \
            * spatial(1, atoms, 1, 1) * lanes
        code_layout = (warps * atom_code_layout(b)).permute((1, 0))
        weight_layout = (warps * ATOM_LAYOUT).permute((1, 0))
        scale_layout = weight_layout.reduce(1)
        tile = [chunks, atoms, 32, 4 * b]
        acc_layout = local(max(1, bn // (16 * num_warps)), 1) * \
            spatial(num_warps, 1) * local(1, bm // 8) * mma_m16n8k16_c()

        codes_at = lambda k: tv.load_global(  # noqa: E731
            gw, [(k_begin + k) // ATOM, n_tile * atoms, 0, 0], tile, layout=byte_layout)
        xs = [tv.alloc_shared(act, [bk, bm], layout=swizzled([bm, bk], act).permute((1, 0)))
              for _ in range(stages)]
        wbufs = [tv.alloc_shared(act, [bn, bk], layout=swizzled([bn, bk], act))
                 for _ in range(stages)]
        ss = [] if producer else [tv.alloc_shared(act, [bn, 1]) for _ in range(stages)]
        zs = [tv.alloc_shared(act, [bn, 1]) for _ in range(stages)] \
            if has_zeros and not producer else None
        # The scales (zeros) of a k-tile's conversion: copied with x a k-tile ahead into
        # `ss` (`zs`), or with a converting producer read from global memory by it.
        sources = (ss, zs)
        group_at = lambda view, k: tv.load_global(  # noqa: E731
            view, [n0, (k_begin + k) // group_size], [bn, 1], layout=scale_layout)
        layouts = (code_layout, weight_layout, scale_layout)
        # Copy group j: x of k-tile j and the scales (zeros) of k-tile j + 1, which the
        # conversion reads a k-tile ahead of the multiplication.
        if not producer:
            copy_scales(ss, zs, 0, gs, gz, n0, k_begin, group_size)
        for first in range(lead):
            tv.copy_async(xs[first], gxt, [k_begin + first * bk, m0], multicast=shared_x)
            if not producer:
                copy_scales(ss, zs, first + 1, gs, gz, n0, k_begin + (first + 1) * bk,
                            group_size)
            tv.copy_async_commit()
        packed = codes_at(0)
        w1, w2, w3, w4 = fetch_ahead(lambda k: codes_at(bk + k), bk, prefetch)
        if producer:  # the scales (zeros) fetched ahead with the codes, as registers
            tv.static_assert(prefetch < stages, "a converting producer fetches the codes "
                             "a k-tile at a time (prefetch < stages)")
            scale, s1, s2, s3, s4 = group_at(gs, 0), *fetch_ahead(
                lambda k: group_at(gs, bk + k), bk, prefetch)
            zero, z1, z2, z3, z4 = (group_at(gz, 0), *fetch_ahead(
                lambda k: group_at(gz, bk + k), bk, prefetch)) if has_zeros else [None] * 5
        # With `prefetch == stages` the codes come a loop iteration at a time, fetched
        # once the iteration's first conversion has read the previous batch. (ptxas
        # tracks every global load with one scoreboard, so the first use of any code
        # register waits for all the loads in flight: loads issued one per k-tile were
        # waited for about one k-tile after they left; a batch gets three.)
        batch = prefetch == stages
        tv.copy_async_wait(lead - 1)
        tv.sync()
        tv.store_shared(wbufs[0], _weights(packed, 0, wdtype, act, layouts,
                                        (scale, zero) if producer else sources))
        # The weights are converted `ahead` k-tiles before their `dot`: one, by the
        # warps that multiply them; `stages - 1` by a converting producer, which is then
        # that many k-tiles ahead of the multiplications instead of one (the buffer it
        # fills was read by the previous k-tile's wgmmas, retired by then).
        ahead = stages - 1 if producer else 1
        for j in range(1, ahead):
            packed, w1, w2, w3, w4 = shift_ahead((w1, w2, w3, w4),
                                                 codes_at((j + prefetch) * bk))
            scale, s1, s2, s3, s4 = shift_ahead((s1, s2, s3, s4),
                                                group_at(gs, (j + prefetch) * bk))
            if has_zeros:
                zero, z1, z2, z3, z4 = shift_ahead((z1, z2, z3, z4),
                                                   group_at(gz, (j + prefetch) * bk))
            tv.store_shared(wbufs[j], _weights(packed, j, wdtype, act, layouts, (scale, zero)))
        acc = tv.zeros([bn, bm], tv.f32, layout=acc_layout)
        for k0 in tv.range(0, k_len, chunk):
            for s in range(stages):  # unrolled: k-tile t = k0 / bk + s in buffers s
                k = k0 + s * bk if s else k0
                tv.copy_async_wait(lead - 1)  # x of k-tile t, the scales of t + 1 (this
                tv.sync()  # thread's copies); every warp's weights of t stored
                acc = tv.dot(wbufs[s], xs[s], acc)
                tv.copy_async(xs[(s + lead) % stages], gxt, [k_begin + k + lead * bk, m0],
                              multicast=shared_x)
                if not producer:
                    copy_scales(ss, zs, (s + lead + 1) % stages, gs, gz, n0,
                                k_begin + k + (lead + 1) * bk, group_size)
                tv.copy_async_commit()
                if batch:
                    packed = (w1, w2, w3, w4)[s]
                else:
                    later = k + (ahead + prefetch) * bk  # the codes fetched now
                    packed, w1, w2, w3, w4 = shift_ahead((w1, w2, w3, w4), codes_at(later))
                    if producer:
                        scale, s1, s2, s3, s4 = shift_ahead((s1, s2, s3, s4),
                                                            group_at(gs, later))
                        if has_zeros:
                            zero, z1, z2, z3, z4 = shift_ahead((z1, z2, z3, z4),
                                                               group_at(gz, later))
                nxt = (s + ahead) % stages
                tv.store_shared(wbufs[nxt], _weights(packed, nxt, wdtype, act, layouts,
                                                  (scale, zero) if producer else sources))
                if batch and s == 0:  # the next iteration's codes, k-tiles t + 5 ..
                    n1, n2, n3, n4 = fetch_ahead(
                        lambda j, k=k: codes_at(k + (stages + 1) * bk + j), bk, stages)
            if batch:
                w1, w2, w3, w4 = n1, n2, n3, n4
        tv.copy_async_wait(0)
        # (the producer's tiles keep their bytes: it may still be storing the k-tile
        # past the last, which no dot reads)
        store_output(y, ws, counters, acc, acc_layout, act, M, N, bm, bn, n_tile, n0, m0,
                     split_k, num_warps, (*xs, *([] if producer else wbufs), *ss, *(zs or ())),
                     wide_stores)

    qmm_wgmma_shared.name = f"qmm_wgmma_shared_{act.name}"
    return qmm_wgmma_shared


def _weights(codes, buf, wdtype, act, layouts, sources):
    """A k-tile's codes converted with their group's scales (zeros): `sources` are the
    shared tiles they were copied into (buffer `buf` of each), or the `[bn, 1]` tiles
    already in registers."""
    code_layout, weight_layout, scale_layout = layouts
    bn = code_layout.shape[0]

    def group(tiles):
        if tiles is None:
            return None
        if isinstance(tiles, list):
            return lambda: tv.load_shared(tiles[buf], [0, 0], [bn, 1], layout=scale_layout)
        return lambda: tiles
    scale, zero = (group(t) for t in sources)
    return dequantized(codes, wdtype, act, code_layout, weight_layout, scale, zero)


def dequantized(codes, wdtype, act, code_layout, weight_layout, scale, zero=None):
    """A k-tile's codes (`code_layout`) as `act` values in `weight_layout`: minus the
    zero point, times the scale, each rounded to `act` (a compile-time helper of the
    kernels; `scale()` and `zero()` give the group's `[bn, 1]` tiles, read where the
    conversion needs them)."""
    bn, bk = code_layout.shape
    wt = tv.cast(tv.view(codes, wdtype, [bn, bk], code_layout), act, weight_layout)
    if zero is not None:
        wt = wt - zero()
    return wt * scale()


# for `vmc compile kernels/qmm_wgmma_shared.py:qmm_wgmma_shared_f16 --arch sm_90a`
qmm_wgmma_shared_f16 = qmm_wgmma_shared_kernel("f16")
