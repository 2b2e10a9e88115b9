"""The quantized matmul benchmark's weights: one random quantized matrix on the GPU
(finite codes, positive scales, and the float64 weights the reference multiplies by),
shared by every backend of a configuration, and the row packer of the example kernel's
format. Large layers are made a block of rows at a time (`row_chunks`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilevm import dtypes
from tilevm.bench.measure import Unsupported
from tilevm.kernels import pack_weights

CHUNK_ELEMENTS = 1 << 26


def row_chunks(rows: int, cols: int) -> Iterable[slice]:
    """Row blocks of about CHUNK_ELEMENTS elements: the int64 temporaries of the
    generators stay small (a 70B gate_up layer has 470M weights)."""
    step = max(1, CHUNK_ELEMENTS // max(cols, 1))
    for r0 in range(0, rows, step):
        yield slice(r0, min(rows, r0 + step))


def pack_rows(codes: Any, bits: int) -> Any:
    """torch uint8 `codes[K, N]` (N % 8 == 0) -> `[K, N*bits/8]` bytes, row k packed along N
    exactly as the example's `pack_weights` (`tilevm.dtypes.pack`) does: element n at bits
    [n*b, (n+1)*b) of the row, little-endian. `tilevm.kernels.pack_weights` on the
    tensor's device, a block of rows at a time (its temporaries stay small for a
    470M-weight layer)."""
    import torch

    K, N = codes.shape
    if N % 8:
        raise ValueError(f"N must be a multiple of 8, got {N}")
    out = torch.empty((K, N * bits // 8), dtype=torch.uint8, device=codes.device)
    for rows in row_chunks(K, N):
        out[rows] = pack_weights(codes[rows], f"uint{bits}")  # packing sees only the bits
    return out


@dataclass
class Weights:
    """One random quantized weight matrix on the GPU, shared by every backend."""

    wdtype: str
    group_size: int
    codes: Any  # uint8 [K, N], codes of finite values only
    scales: Any  # f16 [K / g, N], positive
    dequantized: Any  # float64 [K, N]: decode(codes) * scales, the reference's weights

    @property
    def K(self) -> int:
        return int(self.codes.shape[0])

    @property
    def N(self) -> int:
        return int(self.codes.shape[1])


def decode_table(wdtype: str) -> np.ndarray:
    """float64 value of every code of `wdtype` (NaN/inf at special codes)."""
    t = dtypes.parse(wdtype)
    return dtypes.decode(np.arange(1 << t.bits), t).astype(np.float64)


def make_weights(wdtype: str, group_size: int, N: int, K: int, generator: Any,
                 device: str = "cuda") -> Weights:
    """Uniformly random finite codes (as the example's `random_codes`) and random
    positive f16 scales in [0.5, 2) / largest |value| (as its `example_inputs`), made on
    `device` (the generator's)."""
    import torch

    if K % group_size:
        raise Unsupported(f"K ({K}) is not a multiple of group_size ({group_size})")
    t = dtypes.parse(wdtype)
    table = decode_table(wdtype)
    finite = torch.as_tensor(np.flatnonzero(np.isfinite(table)), dtype=torch.uint8,
                             device=device)
    lut = torch.as_tensor(table, device=device)
    codes = torch.empty((K, N), dtype=torch.uint8, device=device)
    for rows in row_chunks(K, N):
        n = rows.stop - rows.start
        idx = torch.randint(0, len(finite), (n, N), device=device, generator=generator)
        codes[rows] = finite[idx]
    largest = max(abs(float(t.min)), float(t.max))
    scales = ((torch.rand((K // group_size, N), device=device, generator=generator) * 1.5
               + 0.5) / largest).to(torch.float16).clamp_min(2.0 ** -24)
    dequant = torch.empty((K, N), dtype=torch.float64, device=device)
    for rows in row_chunks(K, N):
        # The scale rows of the groups this block touches, one per weight row.
        g0, g1 = rows.start // group_size, (rows.stop - 1) // group_size + 1
        per_row = scales[g0:g1].double().repeat_interleave(group_size, 0)
        offset = rows.start - g0 * group_size
        dequant[rows] = lut[codes[rows].long()] * per_row[offset:offset + rows.stop - rows.start]
    return Weights(wdtype, group_size, codes, scales, dequant)
