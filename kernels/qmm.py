"""The quantized matmul `y[M, N] = x[M, K] @ dequant(W)[K, N]`, written on the VM.

Weights are b-bit codes (any 1..8-bit int, uint or float type) with one scale per
group of `group_size` rows of K and column (and, for unsigned types, optionally a zero
point: `W = (code - zero) * scale`); activations and output are f16 or bf16.

The streaming kernel (decode and small batches; `kernels.qmm_staged` is the one for
many rows; the schedule picks the kernel and its tile sizes):

- each warp owns 32 columns of y and streams its weights straight from global memory
  into registers, 16 bytes per lane for int4 (`4 * b` bytes: 32 codes), already in the
  order the tensor cores read them. The weight format (`kernels.weight_format`) stores each
  32 x 32 block of codes ("atom") lane by lane: lane `t` finds its 32 codes of the
  atom's eight `mma.m16n8k16` B fragments in `4 * b` consecutive bytes (each word's
  codes ordered so a converted pair is one mma register: `storage_order`). So a `view`
  of the loaded bytes, cast, is the B operand of `dot` (no shuffle, no shared memory),
  and the 16-byte loads of a warp cover 512 contiguous bytes;
- `cast` to f16/bf16 (two codes per f16x2 op; minus the zero points; a low-bit float
  into f16 as `value * 2^-e`, with no float op, its re-bias 2^e moved to the f32 scale:
  `rebias_exponent`), `dot` into an f32
  partial sum per scale group, which is multiplied by the group's scale row (in f32)
  and added to the accumulator `[bm, 32 * num_warps]`: the scale costs one FMA per
  output element and group instead of one multiply per weight;
- the activations go through shared memory, one `copy_async` per block and k-tile (rows
  past M are zero-filled without being read), and `ldmatrix` into the A fragments
  (`x_shared=False` loads them from global memory straight into the mma fragments
  instead, fetched ahead like the weights);
- the weights are fetched `prefetch` k-tiles ahead, and the main loop's body is
  `unroll` scale groups, unrolled at compile time, so that the registers in flight come
  round to the loop's start without a copy (see `qmm_kernel`); each block views the
  operands from its first row of K to its last (a split's k-tiles fetched ahead past
  its end read nothing);
- finally `cast` to the output type and a masked store (ragged M and N);
- `swap_ab` (decode): `y^T = W^T x^T`, the weights as the mma A operand and x^T (x
  from shared memory relabeled by a `view`, or from global memory) as B, so x pads to
  8 rows instead of 16; the same weight format, its codes reordered inside the thread
  by the `cast`.

Requirements the format and the runtime enforce (`tv.assume`, checked before launch):
K is a multiple of `unroll * group_size` (the split-K blocks take whole chunks of that
many rows, `split_k` at most K / chunk) and of 32; N is any width (the format
pads it to a multiple of 32, `Np`; the store is masked); `bk` is a multiple of 32
dividing `group_size` (a k-tile never straddles two scale groups), and with the
two-stage pipeline of activations the main loop's `unroll * group_size / bk` k-tiles
are even.
"""


# No `from __future__ import annotations` here: the kernels' parameter annotations
# (`tv.ptr(act)`) must be evaluated where they are written, inside the factories.
from functools import cache

from tilevm import dtypes
from tilevm.dtypes import DataType
from tilevm.dtypes.conversion import conversion_rule, takes_exponent
from tilevm.kernels.weight_format import ATOM, ATOM_LAYOUT, atom_code_layout
from tilevm.layouts import RegisterLayout, local, replicated, spatial
from tilevm.layouts.fragments import mma_m16n8k16_a, mma_m16n8k16_b, mma_m16n8k16_c
from tilevm.vm import lang as tv
from tilevm.vm.frontend import Kernel


def activation_type(act: DataType | str) -> DataType:
    """The activation type of a kernel factory: f16 or bf16, else a ValueError."""
    act = dtypes.parse(act)
    if act.name not in ("f16", "bf16"):
        raise ValueError(f"activations must be f16 or bf16, got {act}")
    return act


@cache
def qmm_kernel(act: DataType | str = "f16") -> Kernel:
    """The kernel for activations (and scales, zeros, output) of type `act`.

    `ws` and `counters` serve `split_k > 1` only (any pointers otherwise): `ws`, the f32
    workspace of partial sums, holds `split_k * tiles * bm * bn` floats and `counters`
    `tiles` int32 zeros (`splitk_sizes`); the kernel leaves the counters at zero again."""
    act = activation_type(act)

    @tv.kernel(num_warps=1)
    def qmm(x: tv.ptr(act, const=True), w: tv.ptr(tv.uint8, const=True),
            scales: tv.ptr(act, const=True), zeros: tv.ptr(act, const=True),
            y: tv.ptr(act), ws: tv.ptr(tv.f32), counters: tv.ptr(tv.int32),
            M: tv.int32, N: tv.int32, K: tv.int32,
            *, wdtype: DataType = tv.int4, group_size: int = 128, has_zeros: bool = False,
            bm: int = 16, bk: int = 32, num_warps: int = 1, split_k: int = 1,
            x_shared: bool = True, prefetch: int = 1, swap_ab: bool = False,
            unroll: int = 1):
        b = wdtype.bits
        tv.static_assert(1 <= b <= 8, f"wdtype must have 1..8 bits, got {wdtype}")
        tv.static_assert(bk % ATOM == 0 and group_size % bk == 0,
                         f"bk={bk} must be a multiple of {ATOM} dividing "
                         f"group_size={group_size}")
        tv.static_assert(not x_shared or (unroll * group_size // bk) % 2 == 0,
                         f"the activations' two shared-memory stages need an even number of "
                         f"k-tiles per iteration of the main loop (unroll * group_size / bk "
                         f"= {unroll * group_size // bk})")
        tv.static_assert(bm % (8 if swap_ab else 16) == 0,
                         f"bm={bm} must be a multiple of {8 if swap_ab else 16}")
        tv.static_assert(prefetch in (1, 2, 3, 4), f"prefetch is 1 to 4 k-tiles, got {prefetch}")
        tv.static_assert(unroll >= 1, f"unroll is a number of groups, got {unroll}")
        bn = ATOM * num_warps
        chunk = unroll * group_size  # rows of K per iteration of the main loop
        # A low-bit float's conversion ends in a multiplication by 2^e (its exponent
        # re-bias): with f16 activations the codes convert to value * 2^-e instead, with
        # no float op, and the f32 group scale takes the 2^e (exact: the products of
        # those f16 values stay far above f32's smallest normal; not so in bf16).
        shift = rebias_exponent(wdtype, act)
        tv.assume(K % chunk == 0)
        tv.assume(K % ATOM == 0)
        Np = tv.cdiv(N, ATOM) * ATOM  # the format's padded width

        tv.grid(tv.cdiv(N, bn), tv.cdiv(M, bm), split_k)
        # Programmatic dependent launch (sm_90): the next kernel may start now; this one
        # waits for the previous one here, before touching memory.
        tv.launch_dependents()
        tv.wait_prerequisites()
        n0 = tv.block_idx(0) * bn
        m0 = tv.block_idx(1) * bm
        atom_n0 = tv.block_idx(0) * num_warps
        # Split z takes chunks [z * C / split_k, (z + 1) * C / split_k) of the C = K / chunk
        # (rounded down: splits differ by at most one chunk, so any split_k <= C fits and
        # the tuner may pick one that fills a whole number of waves).
        chunks = K // chunk
        k_begin = tv.block_idx(2) * chunks // split_k * chunk
        k_len = (tv.block_idx(2) + 1) * chunks // split_k * chunk - k_begin
        # Weights and activations are viewed from this block's first row of K on, and
        # end at its last: a k-tile fetched ahead past the block's rows is masked (it
        # reads nothing) instead of reading the next split's weights.
        gw = tv.global_view(w, [k_len // ATOM, Np // ATOM, 32, 4 * b],
                            offset=k_begin // ATOM * (Np // ATOM) * (ATOM * 4 * b))
        gx = tv.global_view(x, [M, k_len], strides=[K, 1], offset=k_begin)
        groups = k_len // group_size  # this block's scale groups, from `first` on
        first = k_begin // group_size * Np
        if swap_ab:  # x^T (the B operand); scales and zeros as columns [Np, groups]
            gxt = tv.global_view(x, [k_len, M], strides=[1, K], offset=k_begin)
            gs = tv.global_view(scales, [Np, groups], strides=[1, Np], offset=first)
            gz = tv.global_view(zeros, [Np, groups], strides=[1, Np], offset=first)
        else:
            gs = tv.global_view(scales, [groups, Np], offset=first)
            gz = tv.global_view(zeros, [groups, Np], offset=first)

        # Lane t of warp j holds, for each of the bk/32 atoms along K, the 4*b bytes of
        # its 32 codes of atom (k, j): the B fragments of `dot`, in its register order.
        byte_layout = local(bk // ATOM, 1, 1, 1).spatial(1, num_warps, 32, 1) \
            .local(1, 1, 1, 4 * b)
        atoms = local(bk // ATOM, 1) * spatial(1, num_warps)  # a warp's atoms of a k-tile
        code_layout = atoms * atom_code_layout(b)  # the codes as stored
        tile = [bk // ATOM, num_warps, 32, 4 * b]
        if swap_ab:
            # y^T = W^T @ x^T: the weights are the mma A operand (16 columns of W per
            # fragment), x^T the B operand (8 rows of x): for M <= 8, half the padding
            # work and accumulators of x as A (16 rows). A lane's codes of an atom are
            # the same 32 as for B (the A fragment of W^T over 16 columns is the two B
            # fragments of W side by side), so the format serves both; `cast` reorders
            # them inside the thread.
            a_layout = spatial(num_warps, 1) * local(2, bk // 16) * mma_m16n8k16_a()
            xt_layout = replicated(num_warps, ndim=2) * local(bk // 16, bm // 8) \
                * mma_m16n8k16_b()
            acc_shape = [bn, bm]
            acc_layout = spatial(num_warps, 1) * local(2, bm // 8) * mma_m16n8k16_c()
        else:
            acc_shape = [bm, bn]
            acc_layout = spatial(1, num_warps) * local(bm // 16, 4) * mma_m16n8k16_c()

        # The k-tile at row `k` (of this block's rows) of the operands fetched ahead into
        # registers: the weights, as each lane's bytes of its atoms, and with
        # `x_shared=False` the activations (rows past M and K: zeros).
        codes_at = lambda k: tv.load_global(gw, [k // ATOM, atom_n0, 0, 0], tile,  # noqa: E731
                                            layout=byte_layout)
        if swap_ab:  # x^T straight into the B fragments
            x_at = lambda k: tv.load_global(gxt, [k, m0], [bk, bm], layout=xt_layout)  # noqa: E731
        else:
            x_at = lambda k: tv.load_global(gx, [m0, k], [bm, bk])  # noqa: E731

        # y = sum over groups of scale[g] * (x_g @ (codes_g - zero_g)): each group's
        # products are summed in f32 by the tensor cores, then scaled once per group and
        # column (the codes, and codes minus integer zero points, are exact in f16/bf16).
        acc = tv.zeros(acc_shape, tv.f32, layout=acc_layout)
        # Software pipelining: `prefetch` k-tiles of weights are in flight in registers
        # while one is computed (`w1` ... `w4`, next first; with `x_shared=False` the
        # activations too, `x1` ...); with `x_shared` the next k-tile of activations is
        # in flight to one of two shared-memory stages. The main loop's body is `unroll`
        # groups, statically unrolled: when its k-tiles are a multiple of `prefetch + 1`,
        # the registers a load fills come round to the loop's start without a copy (a
        # copy at the loop's end would wait for the load it copies).
        w1, w2, w3, w4 = fetch_ahead(codes_at, bk, prefetch)
        x1, x2, x3, x4 = fetch_ahead(x_at, bk, 0 if x_shared else prefetch)
        if x_shared:
            xs = [tv.alloc_shared(act, [bm, bk]) for _ in range(2)]
            tv.copy_async(xs[0], gx, [m0, 0])
            tv.copy_async_commit()
        for c0 in tv.range(0, k_len, chunk):
            for gi in range(unroll):  # unrolled: group gi of the chunk
                g0 = c0 + gi * group_size if gi else c0
                part = tv.zeros(acc_shape, tv.f32, layout=acc_layout)
                group = g0 // group_size
                # loaded now, used after the group's k-tiles: its latency is hidden
                if swap_ab:  # held by the threads that use them: no conversion
                    scale = tv.load_global(gs, [n0, group], [bn, 1],
                                           layout=acc_layout.reduce(1))
                    zero = tv.load_global(gz, [n0, group], [bn, 1],
                                          layout=a_layout.reduce(1)) if has_zeros else None
                else:
                    scale = tv.load_global(gs, [group, n0], [1, bn])
                    zero = tv.load_global(gz, [group, n0], [1, bn]) if has_zeros else None
                for t in range(group_size // bk):  # unrolled: k-tile t of the group
                    k = g0 + t * bk if t else g0
                    stage = (gi * group_size // bk + t) % 2
                    if x_shared:  # the next k-tile's activations (rows past M: zeros)
                        tv.copy_async(xs[1 - stage], gx, [m0, k + bk])
                        tv.copy_async_commit()
                    ahead = k + prefetch * bk
                    packed, w1, w2, w3, w4 = shift_ahead((w1, w2, w3, w4), codes_at(ahead))
                    if not x_shared:
                        xa, x1, x2, x3, x4 = shift_ahead((x1, x2, x3, x4), x_at(ahead))
                    if swap_ab:
                        wt = tv.cast(tv.view(packed, wdtype, [bn, bk],
                                             code_layout.permute((1, 0))), act, a_layout,
                                     exponent=-shift)
                    else:
                        wt = tv.cast(tv.view(packed, wdtype, [bk, bn], code_layout), act,
                                     atoms * ATOM_LAYOUT, exponent=-shift)
                    if has_zeros:
                        wt = wt - zero
                    if x_shared:
                        tv.copy_async_wait(1)  # this stage's activations have landed ...
                        tv.sync()  # ... for every warp
                        if swap_ab:  # x^T: x's rows as ldmatrix reads them, relabeled
                            xa = tv.view(tv.load_shared(xs[stage], [0, 0], [bm, bk],
                                                        xt_layout.permute((1, 0))),
                                         act, [bk, bm], xt_layout)
                        else:
                            xa = tv.load_shared(xs[stage], [0, 0], [bm, bk])
                    part = tv.dot(wt, xa, part) if swap_ab else tv.dot(xa, wt, part)
                    if x_shared:
                        tv.sync()  # every warp has read the stage before it is refilled
                scale = tv.cast(scale, tv.f32)
                acc = tv.fma(part, scale * 2.0 ** shift if shift else scale, acc)
        if x_shared:
            tv.copy_async_wait(0)
        if split_k > 1:
            # Split-K (`park_partial_sums`): the last of the tile's `split_k` blocks adds
            # the parts up, in split order (the same sum whichever block is last) and two
            # splits at a time (all at once would hold split_k accumulators), stores y
            # and sets the tile's count back to zero for the next call.
            tiles_n = tv.cdiv(N, bn)
            tiles = tiles_n * tv.cdiv(M, bm)
            tile = tv.block_idx(1) * tiles_n + tv.block_idx(0)
            parts, arrived = park_partial_sums(ws, counters, acc, split_k, tiles, tile,
                                               tv.block_idx(2))
            if arrived == split_k - 1:
                total = parts_total(parts, split_k, tile, acc, unroll=2)
                _store_y(y, total, act, swap_ab, M, N, n0, m0)
                reset_count(counters, tiles, tile)
        else:
            _store_y(y, acc, act, swap_ab, M, N, n0, m0)

    qmm.name = f"qmm_{act.name}"
    return qmm


def park_partial_sums(ws, counters, acc, slots, tiles, tile, slot):
    """Split-K's first half, as the kernels that split K share it (a compile-time
    helper; the reduction's loop and `if` are the kernel's own): this block's f32 partial
    sums `acc` go to `ws` as part `slot` (of `slots`) of `tile` (of `tiles`), in
    `workspace_order`, and the block counts itself in on `counters[tile]`. Returns the
    workspace's view and how many of the tile's parts had arrived before this one (the
    last of n sees `n - 1`)."""
    shape, order = workspace_order(acc)
    parts = tv.global_view(ws, [slots, tiles, *shape])
    tv.store_global(parts, tv.view(acc, tv.f32, [1, 1, *shape], order),
                    [slot, tile, 0, 0, 0])
    return parts, tv.atomic_add(tv.global_view(counters, [tiles]), [tile], 1)


@tv.inline
def parts_total(parts, count, tile, acc, unroll: int | None = None):
    """The sum of the first `count` parts of `tile` (`park_partial_sums`), in part order
    (the same sum whichever block adds them), as a tile like the accumulator `acc`."""
    total = tv.zeros(list(acc.shape), tv.f32, layout=acc.layout)
    for i in tv.range(0, count, unroll=unroll):
        total = total + partial_sums(parts, i, tile, acc)
    return total


def partial_sums(parts, split, tile, acc):
    """Split `split`'s parked partial sums of `tile` (`park_partial_sums`), as a tile like
    the accumulator `acc`."""
    shape, order = workspace_order(acc)
    part = tv.load_global(parts, [split, tile, 0, 0, 0], [1, 1, *shape], layout=order)
    return tv.view(part, tv.f32, list(acc.shape), acc.layout)


def workspace_order(acc) -> tuple[list[int], RegisterLayout]:
    """How a block's partial sums lie in the workspace: `[vectors, threads, width]`, the
    threads' registers in runs of `width` (4 where they divide, else 2 or 1), run `v` of
    every thread side by side, so that a warp's 16-byte stores and loads are one
    contiguous 512 bytes (with each thread's registers contiguous instead, a warp's
    access spans 32 runs and twice the sectors). Returns the shape and the layout of the
    view `[1, 1, vectors, threads, width]` (a compile-time helper)."""
    threads, regs = acc.layout.num_threads, acc.layout.local_size
    width = next(w for w in (4, 2, 1) if regs % w == 0)
    vectors = regs // width
    order = local(1, 1, vectors, 1, 1).spatial(1, 1, 1, threads, 1).local(1, 1, 1, 1, width)
    return [vectors, threads, width], order

def reset_count(counters, tiles, tile) -> None:
    """Split-K's end: the tile's count back to zero, for the next launch."""
    tv.store_global(tv.global_view(counters, [tiles]), tv.zeros([1], tv.int32), [tile])


def rebias_exponent(wdtype: DataType, act: DataType) -> int:
    """The power of two `e` a `wdtype` code's conversion to `act` ends with, when the
    kernel moves it to the f32 scale (`tv.cast(..., exponent=-e)` then needs no float
    op): low-bit floats into f16; 0 otherwise."""
    if not (wdtype.is_float and act.name == "f16"):
        return 0
    e = conversion_rule(wdtype, act, allow_rounding=True).scale_exponent
    return e if takes_exponent(wdtype, act, -e) else 0


def splitk_sizes(M: int, N: int, bm: int, bn: int, split_k: int) -> tuple[int, int]:
    """(f32 elements of `ws`, int32 elements of `counters`) that a kernel splitting K
    into `split_k` blocks of `bm x bn` tiles needs (`qmm_kernel`, `bn = 32 * num_warps`;
    `kernels.qmm_wgmma`): one counter per output tile, and `split_k` tiles of `bm * bn`
    partial sums per tile."""
    tiles = -(-M // bm) * -(-N // bn)
    return split_k * tiles * bm * bn, tiles


def _store_y(y, acc, act, swap_ab: bool, M, N, n0, m0) -> None:
    """Store the block's tile of y (`acc` is y^T with `swap_ab`), masked to M x N (a
    compile-time helper of `qmm_kernel`)."""
    if swap_ab:
        tv.store_global(tv.global_view(y, [N, M], strides=[1, N]), tv.cast(acc, act), [n0, m0])
    else:
        tv.store_global(tv.global_view(y, [M, N]), tv.cast(acc, act), [m0, n0])


def fetch_ahead(fetch, bk: int, n: int, slots: int = 4) -> tuple:
    """The first `n` k-tiles `fetch(i * bk)`, in `slots` slots (None past `n`; a
    compile-time helper of the kernels that keep k-tiles in flight in registers: one
    name a slot, `w1, w2, w3, w4 = ...`, carried through the main loop)."""
    return tuple(fetch(i * bk) if i < n else None for i in range(slots))


def shift_ahead(ahead: tuple, later) -> tuple:
    """`(first, *rest, later)`: the operands fetched ahead, the first of them taken for
    use and `later` appended in the first free slot (a compile-time helper, with
    `fetch_ahead`; unused slots stay None)."""
    filled = [a for a in ahead if a is not None][1:] + [later]
    return (ahead[0], *filled, *[None] * (len(ahead) - len(filled)))


# The kernels as module-level values, for `vmc compile kernels/qmm.py:qmm_f16 --set
# wdtype=int3 --set split_k=4 ...` (inspecting the PTX, `--dump-after`, `--check`).
qmm_f16 = qmm_kernel("f16")
qmm_bf16 = qmm_kernel("bf16")

