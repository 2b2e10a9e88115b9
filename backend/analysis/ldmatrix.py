"""Instruction selection of `ldmatrix` for `load_shared` (pure layout logic; the LLVM
emission is in backend/llvm/lowering/shared_memory.py).

`ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16` loads `n` 8x8 matrices of 16-bit
elements; lane `i` supplies the shared address of row `i % 8` of matrix `i // 8`, each
row 16 contiguous, 16-byte aligned bytes. What lane `4 * g + t` receives of one matrix
is `tilevm.layouts.fragments.ldmatrix(1, trans)`: row `g`, columns `2t, 2t + 1` (plain)
or rows `2t, 2t + 1`, column `g` (.trans), "row" being the 16-byte run in shared memory.

A `load_shared` qualifies when:

1. its source holds 16-bit elements (f16, bf16, int16, ...) and the tile is whole warps;
2. for some dimension `c` of unit stride in shared memory (the run of a row) and some
   other dimension `r` (the rows), the register layout is `X * F` (`layouts.divide`), F
   being `ldmatrix(1, trans)` placed on dims (r, c). F's 32 threads are then each warp's
   lanes and its 2 locals one 32-bit register, and X says where each warp's register
   pair `q` (locals `2q, 2q + 1`) sits: the 8x8 block at `8 * X(warp, q)`;
3. the pairs, `n` at a time (n = 4 if the count allows, else 2, else 1; instruction
   `k` takes pairs `n*k .. n*k + n - 1`), give row addresses that are themselves a
   register layout: lane `i` of warp `w` points at `8 * X(w, n*k + (i // 8) % n) +
   (i % 8) * e_r`. This "address layout" (over the tile with dim c counted in 8-element
   units; lanes past the `n` matrices repeat the first ones) is rebuilt with
   `RegisterLayout.from_table`, which verifies it against the table; the codegen then
   gets each lane's address from its thread part plus a per-instruction constant, as
   for any other access;
4. every row start is 16-byte aligned: the allocation offset is a multiple of 16
   bytes, the tile offset along c is provably a multiple of 8 elements and every other
   dimension's stride a multiple of 8 elements (or the dimension is one element wide
   with a provably suitable offset); a swizzle must move whole 16-byte chunks
   (`base >= 4`), so that a row's 16 bytes stay together.

`.trans` is chosen when a register's two halves lie along `r` (the matrix is read k-major
relative to the fragment): a B operand stored `[k, n]` row-major, for instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilevm.layouts import LayoutError, RegisterLayout, divide
from tilevm.layouts.fragments import ldmatrix
from tilevm.layouts.shared_layout import SharedLayout

ROW_ELEMENTS = 8  # elements of one 16-byte matrix row (16-bit elements)
WARP = 32


@dataclass(frozen=True)
class LdmatrixChoice:
    """How to load a register tile with `ldmatrix`.

    - `num`, `trans`: the instruction `ldmatrix.sync.aligned.m8n8.x{num}[.trans]`;
    - `row_dim`, `col_dim`: tile dims of the matrix rows and of the 16-byte runs;
    - `quotient`: X with `layout == X * fragment` (warps x register pairs -> 8x8 block);
    - `addresses`: the address layout, over the tile with `col_dim` in 8-element units:
      thread `tid`, local `k` -> the row start that `tid` supplies to instruction `k`.
      Register `m` of instruction `k` holds the layout's locals `2(n*k + m)` (low half)
      and `2(n*k + m) + 1` (high half).
    """

    num: int
    trans: bool
    row_dim: int
    col_dim: int
    quotient: RegisterLayout
    addresses: RegisterLayout

    @property
    def instructions(self) -> int:
        return self.addresses.local_size

    @property
    def ptx(self) -> str:
        return self.mnemonic("ldmatrix")

    def mnemonic(self, op: str) -> str:
        """The instruction for `op`: `ldmatrix`, or its mirror `stmatrix` (a store of the
        same matrices from the same registers)."""
        return f"{op}.sync.aligned.m8n8.x{self.num}{'.trans' if self.trans else ''}" \
            ".shared.b16"


def placed_fragment(trans: bool, row_dim: int, col_dim: int, rank: int) -> RegisterLayout:
    """`ldmatrix(1, trans)` with its row dim on tile dim `row_dim` and its run on
    `col_dim` (other dims of extent 1)."""
    frag = ldmatrix(1, trans)
    if rank > 2:
        frag = frag.unsqueeze(list(range(2, rank)))
    others = iter(range(2, rank))
    order = [0 if d == row_dim else 1 if d == col_dim else next(others) for d in range(rank)]
    return frag.permute(order)


def _address_layout(quotient: RegisterLayout, num: int, row_dim: int, col_dim: int,
                    shape: tuple[int, ...]) -> RegisterLayout:
    """The address layout of `LdmatrixChoice` (or `LayoutError` when the row starts are
    no register layout)."""
    q = quotient.table()  # [warp, pair, dim]: 8x8 block coordinates
    warps, pairs = q.shape[0], q.shape[1]
    lanes = np.arange(WARP)
    count = pairs // num
    table = np.zeros((warps * WARP, count, len(shape)), dtype=np.int64)
    for k in range(count):
        pair = num * k + (lanes // ROW_ELEMENTS) % num  # [lane]
        block = q[:, pair, :]  # [warp, lane, dim]
        coord = block * ROW_ELEMENTS
        coord[..., col_dim] //= ROW_ELEMENTS  # runs counted in 8-element units
        coord[..., row_dim] += lanes % ROW_ELEMENTS
        table[:, k, :] = coord.reshape(warps * WARP, len(shape))
    grid = tuple(s // ROW_ELEMENTS if d == col_dim else s for d, s in enumerate(shape))
    return RegisterLayout.from_table(table, grid)


def select_ldmatrix(layout: RegisterLayout, shared: SharedLayout, num_threads: int, *,
                    alloc_offset: int = 0,
                    offset_divisors: Sequence[int] | None = None) -> LdmatrixChoice | None:
    """The `ldmatrix` that loads register tile `layout` from `shared`, or None.

    `offset_divisors[d]` is a number that provably divides the tile's offset along dim d
    (0: the offset is 0; default all 0), `alloc_offset` the allocation's byte offset.
    See the module docstring for the rule.
    """
    rank = shared.rank
    if shared.element_bits != 16 or rank < 2 or layout.ndim != rank:
        return None
    if num_threads % WARP or layout.num_threads != num_threads or layout.local_size % 2:
        return None
    if alloc_offset % 16:
        return None
    sw = shared.swizzle
    if sw is not None and sw.base < 4:
        return None
    divisors = list(offset_divisors) if offset_divisors is not None else [0] * rank
    for col_dim in range(rank):
        if shared.strides[col_dim] != 1 or layout.shape[col_dim] % ROW_ELEMENTS:
            continue
        if divisors[col_dim] % ROW_ELEMENTS:
            continue
        if not all(layout.shape[d] == 1 and (shared.strides[d] * divisors[d]) % ROW_ELEMENTS
                   == 0 or shared.strides[d] % ROW_ELEMENTS == 0
                   for d in range(rank) if d != col_dim):
            continue
        for row_dim in range(rank):
            if row_dim == col_dim or layout.shape[row_dim] % ROW_ELEMENTS:
                continue
            for trans in (False, True):
                choice = _try(layout, trans, row_dim, col_dim)
                if choice is not None:
                    return choice
    return None


def _try(layout: RegisterLayout, trans: bool, row_dim: int, col_dim: int
         ) -> LdmatrixChoice | None:
    frag = placed_fragment(trans, row_dim, col_dim, layout.ndim)
    try:
        quotient = divide(layout, frag)
    except LayoutError:
        return None
    pairs = quotient.local_size
    for num in (4, 2, 1):
        if pairs % num:
            continue
        try:
            addresses = _address_layout(quotient, num, row_dim, col_dim, layout.shape)
        except LayoutError:
            continue
        choice = LdmatrixChoice(num, trans, row_dim, col_dim, quotient, addresses)
        if _verify(layout, choice):
            return choice
    return None


def ldmatrix_form(layout: RegisterLayout, num: int, trans: bool, row_dim: int,
                  col_dim: int) -> LdmatrixChoice:
    """The `LdmatrixChoice` that `select_ldmatrix` made for `layout` with these
    parameters (what `lowering=ldmatrix(...)` records), rebuilt for codegen."""
    quotient = divide(layout, placed_fragment(trans, row_dim, col_dim, layout.ndim))
    return LdmatrixChoice(num, trans, row_dim, col_dim, quotient,
                          _address_layout(quotient, num, row_dim, col_dim, layout.shape))


def _verify(layout: RegisterLayout, choice: LdmatrixChoice) -> bool:
    """Simulate the instructions on coordinates: every (thread, local) of `layout` must
    receive exactly the element the layout puts there."""
    want = layout.table()  # [thread, local, dim]
    addr = choice.addresses.table().copy()  # [thread, instruction, dim]
    addr[..., choice.col_dim] *= ROW_ELEMENTS
    n, threads = choice.num, layout.num_threads
    tid = np.arange(threads)[:, None, None, None]  # [thread, k, m, j]
    k = np.arange(choice.instructions)[None, :, None, None]
    m = np.arange(n)[None, None, :, None]
    j = np.arange(2)[None, None, None, :]
    lane = tid % WARP
    g, t = lane // 4, lane % 4
    row, col = (2 * t + j, g) if choice.trans else (g, 2 * t + j)
    source = tid - lane + 8 * m + row  # the lane that addressed this row
    shape = (threads, choice.instructions, n, 2)
    got = addr[np.broadcast_to(source, shape), np.broadcast_to(k, shape)]  # [..., dim]
    got[..., choice.col_dim] += np.broadcast_to(col, shape)
    return bool(np.array_equal(got.reshape(threads, -1, layout.ndim), want))
