"""The weight formats of the quantized-matmul kernels: how b-bit codes `codes[K, N]` are
laid out in the packed byte matrix a kernel reads.

A *weight format* is named by a string; `QuantizedWeight.format` (`kernels.weights`)
records it and `pack_weights` / `unpack_weights` take it. Two exist:

- `"row_packed"`: `packed[K, N*b/8]` uint8; row k holds the N codes of row k packed
  along N: element n at bits `[n*b, (n+1)*b)` of the row, a little-endian bit stream
  (bit j of the row is bit `j % 8` of byte `j // 8`), i.e. `tilevm.dtypes.pack` of each
  row. N must be a multiple of 8, so a row is whole bytes and every group of 8 codes is
  exactly b bytes. This is the format of examples/quantized_matmul.py.
- `"fragments"`: what the kernels (`kernels.qmm` and its siblings) read. The codes, N
  padded with zero codes to a multiple of 32 (`padded_n`), are cut into 32 x 32 atoms
  (`ATOM`, row-major over the atoms); an atom's 1024 codes are stored as 32 runs of 32,
  run `t` being the codes lane `t` of a warp holds as `mma.m16n8k16` B fragments
  (`ATOM_LAYOUT`, `fragment_order`; each mma register's two codes at positions a
  conversion pairs, d codes apart with d * b = 16 mod 32, the registers of the atom's
  first 16 columns first: `storage_order`), each run packed like a row above (4*b
  bytes). `packed[K/32, Np*4b]` uint8 with `Np = padded_n(N)` (K must be a multiple of
  32); `scales` (and `zeros`) are `[K/g, Np]`, padded with ones (zeros). A warp's
  16-byte loads then bring each lane exactly its fragments, and a `view` of a lane's
  bytes as codes in `atom_code_layout(b)`, cast, is the B operand of `dot`.

docs/quantized-matmul.md ("The weight format") draws the format and says why.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

import numpy as np

from tilevm import dtypes
from tilevm.dtypes import DataType
from tilevm.dtypes.conversion import lane_pairs
from tilevm.kernels.arrays import Array, NumpyOps, TorchOps, array_ops, is_float_array
from tilevm.layouts import RegisterLayout, local
from tilevm.layouts.fragments import mma_m16n8k16_b

__all__ = [
    "ATOM", "ATOM_LAYOUT", "FRAGMENTS", "ROW_PACKED", "WEIGHT_FORMATS", "WeightFormat",
    "atom_code_layout", "check_format", "code_type", "fragment_order",
    "fragment_order_inverse", "half_atom_code_layout", "pack_weights", "padded_n",
    "storage_order", "unpack_weights",
]

WeightFormat = Literal["row_packed", "fragments"]
ROW_PACKED: WeightFormat = "row_packed"
FRAGMENTS: WeightFormat = "fragments"
WEIGHT_FORMATS: tuple[str, ...] = (ROW_PACKED, FRAGMENTS)

ATOM = 32  # the fragments format's block of codes: ATOM x ATOM, one warp's 32 columns
# One warp's registers over an atom: 2 x 4 mma B fragments (16 x 8 each), row-major.
ATOM_LAYOUT = local(2, 4) * mma_m16n8k16_b()


def padded_n(n: int, format: str = "fragments") -> int:
    """The number of columns a format stores for N columns of weights."""
    return -(-n // ATOM) * ATOM if format == FRAGMENTS else n


# ---- the fragments format's order -------------------------------------------------------

def storage_order(bits: int) -> np.ndarray:
    """`order[s]`: which code of a lane's run (in `ATOM_LAYOUT`'s register order) the
    format stores at position `s` (the `s`-th b-bit field of the lane's `4 * b` bytes).

    A `cast` to f16/bf16 converts two codes with one f16x2 operation, the pairs of
    positions `dtypes.conversion.lane_pairs` gives: codes whose bits lie 16 (mod 32) apart,
    one in a low 16-bit lane, the other at the same offset in a high one (for b in {1,
    2, 4, 8} in the same word: one shift and one AND put both in their lanes). The two
    values of an mma register are register-order codes `2i` and `2i + 1`, so the format
    stores those at a pair's positions: then each converted pair is one mma register,
    with no re-packing (`prmt`) of converted halves. The register pairs of half atom 0
    (n-blocks 0 and 1, 16 columns: one A fragment's rows of W^T) take the first 8 pairs of
    positions, half atom 1's the last 8: for an even width b those are the first and the
    second 2b bytes of the run, so a warp converting half an atom loads one run
    (`kernels.qmm_wgmma`'s `half_atoms`); for odd widths each pair spans both halves."""
    order = np.empty(ATOM, dtype=np.int64)
    for i, (first, second) in zip(_pairs_by_half_atom(), lane_pairs(bits, ATOM)):
        order[first], order[second] = 2 * i, 2 * i + 1
    return order


def _pairs_by_half_atom() -> list[int]:
    """The 16 register pairs of a lane's run (pair i: `ATOM_LAYOUT` registers 2i and
    2i + 1, one mma register), those in the atom's first 16 columns (half atom 0) first,
    each half in register order."""
    column = ATOM_LAYOUT.table()[0, ::2, 1]  # of each pair's codes, in lane 0
    return sorted(range(ATOM // 2), key=lambda i: column[i] // (ATOM // 2))


@cache
def atom_code_layout(bits: int) -> RegisterLayout:
    """The layout of a lane's b-bit codes as the format stores them (`storage_order`):
    `ATOM_LAYOUT` with its locals in storage order (the same elements in the same
    threads; `cast` to `ATOM_LAYOUT` only renames registers)."""
    return RegisterLayout.from_table(ATOM_LAYOUT.table()[:, storage_order(bits)],
                                     ATOM_LAYOUT.shape)


@cache
def half_atom_code_layout(bits: int) -> RegisterLayout:
    """Two warps over an atom of b-bit codes (b even), warp h holding n-blocks 2h and
    2h + 1 (16 columns: one A fragment's rows) as the format stores them: half h of a
    lane's 4b bytes (`storage_order` stores half atom 0's codes first; for even b its
    conversion pairs lie inside each half). The layout of `kernels.qmm_wgmma`'s
    `half_atoms`."""
    atom = atom_code_layout(bits).table()
    table = [atom[lane][16 * h:16 * h + 16] for h in range(2) for lane in range(32)]
    return RegisterLayout.from_table(np.array(table), (ATOM, ATOM))


def fragment_order(codes: Array, bits: int) -> Array:
    """`codes[K, N]` (K, N multiples of 32; numpy or torch) of `bits`-bit codes ->
    `[K/32, N/32, 32, 32]`: for each 32 x 32 atom (row-major over the atoms), lane `t`'s
    32 codes in the format's storage order (`atom_code_layout(bits)`: its register order,
    `ATOM_LAYOUT`, with each mma register's two codes at the positions a conversion
    pairs, `storage_order`). The "fragments" weight format packs each such run of 32 codes
    (`pack_weights`), so a lane's load brings exactly its B fragments."""
    K, N = (int(s) for s in codes.shape)
    if K % ATOM or N % ATOM:
        raise ValueError(f"the fragment order needs K and N multiples of {ATOM}, got {K}, {N}")
    ks, ns = _lane_coordinates(bits)
    atoms = codes.reshape(K // ATOM, ATOM, N // ATOM, ATOM)
    atoms = atoms.permute(0, 2, 1, 3) if hasattr(atoms, "permute") else \
        atoms.transpose(0, 2, 1, 3)
    if hasattr(atoms, "permute"):  # torch: index with tensors on its device
        import torch

        ks, ns = (torch.as_tensor(a, device=atoms.device) for a in (ks, ns))
    return atoms[:, :, ks, ns]


def fragment_order_inverse(ordered: Array, bits: int) -> Array:
    """`fragment_order`'s inverse: `[K/32, N/32, 32, 32]` lane runs -> `codes[K, N]`."""
    K32, N32 = (int(s) for s in ordered.shape[:2])
    ks, ns = _lane_coordinates(bits)
    flat = ks * ATOM + ns  # [lane, local] -> position in the atom
    order = np.argsort(flat.reshape(-1))
    runs = ordered.reshape(K32, N32, ATOM * ATOM)
    if hasattr(runs, "permute"):
        import torch

        atoms = runs[:, :, torch.as_tensor(order, device=runs.device)]
        return atoms.reshape(K32, N32, ATOM, ATOM).permute(0, 2, 1, 3).reshape(
            K32 * ATOM, N32 * ATOM)
    atoms = runs[:, :, order]
    return atoms.reshape(K32, N32, ATOM, ATOM).transpose(0, 2, 1, 3).reshape(
        K32 * ATOM, N32 * ATOM)


@cache
def _lane_coordinates(bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, n) inside an atom of each (lane, stored code) of `atom_code_layout(bits)`: two
    [32, 32] arrays."""
    table = atom_code_layout(bits).table()  # [lane, local, (k, n)]
    return table[..., 0], table[..., 1]


# ---- pack / unpack ------------------------------------------------------------------------

def check_format(format: str) -> None:
    """A ValueError unless `format` names a weight format."""
    if format not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {format!r}; known: {', '.join(WEIGHT_FORMATS)}")


def code_type(dtype: DataType | str) -> DataType:
    """The codes' `DataType` (a name is parsed): 1..8 bits, else a ValueError."""
    dtype = dtypes.parse(dtype)
    if not dtype.is_lowbit:
        raise ValueError(f"weights are 1..8-bit codes; {dtype} has {dtype.bits} bits")
    return dtype


def _overlaps(bits: int) -> list[tuple[int, int, int]]:
    """(byte i, code j, shift) of a group of 8 codes = `bits` bytes: code j's bits
    `[j*b, j*b + b)` overlap byte i's bits `[8i, 8i + 8)`, and code j's lsb sits `shift`
    bits above byte i's lsb (negative: below)."""
    return [(i, j, j * bits - 8 * i) for i in range(bits) for j in range(8)
            if j * bits < 8 * i + 8 and 8 * i < j * bits + bits]


def _packing_args(array: Array, dtype: DataType | str, format: str
                  ) -> tuple[DataType, int, NumpyOps | TorchOps, Array]:
    """What `pack_weights` and `unpack_weights` both start from: the checked format and
    dtype, its bit width, the array's library and the array (numpy-converted)."""
    check_format(format)
    dtype = code_type(dtype)
    xp = array_ops(array)
    return dtype, dtype.bits, xp, array if xp.is_torch else np.asarray(array)


def pack_weights(codes: Array, dtype: DataType | str,
                 format: WeightFormat = ROW_PACKED) -> Array:
    """`codes[K, N]` (b-bit codes, N a multiple of 8) -> `packed[K, N*b/8]` uint8 in the
    "row_packed" format (see the module doc): each row is `tilevm.dtypes.pack` of the
    row's codes. numpy in, numpy out; a torch tensor is packed on its device, with
    shifts and ors over groups of 8 codes (= b bytes), no Python loop over elements."""
    dtype, b, xp, codes = _packing_args(codes, dtype, format)
    if len(codes.shape) != 2:
        raise ValueError(f"codes must be a 2-D [K, N] array, got shape {tuple(codes.shape)}")
    if format == FRAGMENTS:
        K, N = (int(s) for s in codes.shape)
        if K % ATOM or N % ATOM:
            raise ValueError(f"the fragments format needs K and N multiples of {ATOM} "
                             f"(pad N with `padded_n`), got {K} x {N}")
        runs = fragment_order(codes, b).reshape(-1, ATOM)  # one row per lane and atom
        return pack_weights(runs, dtype).reshape(K // ATOM, N * b * 4)
    if is_float_array(codes):
        raise TypeError(f"codes must be integers, got {codes.dtype}")
    K, N = (int(s) for s in codes.shape)
    if N % 8:
        raise ValueError(f"N must be a multiple of 8 (rows of whole bytes), got N = {N}")
    c = xp.int64(codes)
    if xp.any((c < 0) | (c >= (1 << b))):
        raise ValueError(f"codes of {dtype} must lie in 0..{(1 << b) - 1}")
    c = c.reshape(K, N // 8, 8)
    out = [None] * b
    for i, j, shift in _overlaps(b):
        term = c[..., j] << shift if shift >= 0 else c[..., j] >> -shift
        out[i] = term if out[i] is None else out[i] | term
    return xp.uint8(xp.stack([part & 0xFF for part in out]).reshape(K, N * b // 8))


def unpack_weights(packed: Array, dtype: DataType | str,
                   format: WeightFormat = ROW_PACKED) -> Array:
    """The inverse of `pack_weights`: `packed[K, N*b/8]` uint8 -> `codes[K, N]` uint8,
    on the input's library and device."""
    dtype, b, xp, packed = _packing_args(packed, dtype, format)
    if format == FRAGMENTS:
        K32, row_bytes = (int(s) for s in packed.shape)
        N = row_bytes // (4 * b)
        runs = unpack_weights(packed.reshape(-1, 4 * b), dtype)  # [.., 32] codes
        return fragment_order_inverse(runs.reshape(K32, N // ATOM, ATOM, ATOM), b)
    if len(packed.shape) != 2:
        raise ValueError(f"packed weights must be a 2-D [K, N*b/8] array, "
                         f"got shape {tuple(packed.shape)}")
    if str(packed.dtype) not in ("uint8", "torch.uint8"):
        raise TypeError(f"packed weights must be uint8, got {packed.dtype}")
    K, row_bytes = (int(s) for s in packed.shape)
    if row_bytes % b:
        raise ValueError(f"a row of {dtype} weights is a multiple of {b} bytes "
                         f"(groups of 8 codes), got {row_bytes}")
    p = xp.int64(packed).reshape(K, row_bytes // b, b)
    out = [None] * 8
    for i, j, shift in _overlaps(b):
        term = p[..., i] >> shift if shift >= 0 else p[..., i] << -shift
        out[j] = term if out[j] is None else out[j] | term
    mask = (1 << b) - 1
    return xp.uint8(xp.stack([part & mask for part in out]).reshape(K, row_bytes * 8 // b))
