"""Kernels of the `atomic_add` tests (kernels live in files: the frontend reads them)."""

from tilevm.vm import lang as tv


@tv.kernel(num_warps=2)
def last_block_sums(x: tv.ptr(tv.f32, const=True), ws: tv.ptr(tv.f32),
                    counters: tv.ptr(tv.int32), y: tv.ptr(tv.f32), order: tv.ptr(tv.int32),
                    N: tv.int32, *, parts: int = 4):
    """y[n] = sum over p of 2 * x[p, n]: block (c, p) parks 2 * x[p, 64c:64c+64] in `ws`,
    and the last of column c's `parts` blocks to count in adds them up (and sets the
    counter back to zero). `order[p, c]` records each block's place in its column."""
    tv.grid(tv.cdiv(N, 64), parts)
    c = tv.block_idx(0)
    p = tv.block_idx(1)
    gx = tv.global_view(x, [parts, N])
    gw = tv.global_view(ws, [parts, N])
    tv.store_global(gw, tv.load_global(gx, [p, c * 64], [1, 64]) * 2.0, [p, c * 64])
    count = tv.global_view(counters, [tv.cdiv(N, 64)])
    arrived = tv.atomic_add(count, [c], 1)
    tv.store_global(tv.global_view(order, [parts, tv.cdiv(N, 64)]),
                    tv.full([1, 1], arrived, tv.int32), [p, c])
    if arrived == parts - 1:
        total = tv.sum(tv.load_global(gw, [0, c * 64], [parts, 64]), 0, keepdim=True)
        tv.store_global(tv.global_view(y, [1, N]), total, [0, c * 64])
        tv.store_global(count, tv.zeros([1], tv.int32), [c])


@tv.kernel(num_warps=1)
def add_block_index(totals: tv.ptr(tv.int32), n: tv.int32):
    """totals[b % n] += b + 1 for every block b (many blocks on few elements)."""
    tv.grid(64 * n)
    b = tv.block_idx(0)
    tv.atomic_add(tv.global_view(totals, [n]), [b % n], b + 1)


@tv.kernel(num_warps=1)
def add_at(totals: tv.ptr(tv.int32), i: tv.int32):
    """totals[i] += 1 (the tests pass an i outside)."""
    tv.atomic_add(tv.global_view(totals, [4]), [i], 1)
