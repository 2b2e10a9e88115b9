"""Vector add: `out = x + y` over n elements, with a ragged tail.

The smallest complete tilevm program. It shows

- a kernel's signature: pointer parameters (`tv.ptr(dtype, const=True)` for inputs),
  a runtime scalar `n`, and a keyword-only compile-time constant `block`;
- the launch grid, computed from runtime sizes (`tv.grid(tv.cdiv(n, block))`);
- `tv.global_view` over a pointer, and bounds-masked `load_global` / `store_global`:
  the last block reads elements past `n` as `other` (0) and skips storing them, so `n`
  need not be a multiple of `block`.

Run it in the reference interpreter:

    vmc run examples/vector_add.py --interpret --set n=1000
"""

from __future__ import annotations

import numpy as np

from tilevm.vm import lang as tv


@tv.kernel(num_warps=4)
def vector_add(x: tv.ptr(tv.f32, const=True), y: tv.ptr(tv.f32, const=True),
               out: tv.ptr(tv.f32), n: tv.int32, *, block: int = 512):
    tv.grid(tv.cdiv(n, block))
    gx = tv.global_view(x, [n])
    gy = tv.global_view(y, [n])
    go = tv.global_view(out, [n])
    start = tv.block_idx(0) * block
    a = tv.load_global(gx, [start], [block])  # elements >= n read 0
    b = tv.load_global(gy, [start], [block])
    tv.store_global(go, a + b, [start])  # elements >= n are not written


def example_inputs(rng: np.random.Generator, n: int | None = None, **constants):
    """Random inputs for a ragged problem (n is not a multiple of the block)."""
    block = constants.get("block", 512)
    if n is None:
        n = int(rng.integers(1, 4)) * block + int(rng.integers(1, block))
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, dtype=np.float32)  # every element must be written
    return [x, y, out, n], constants


def reference(x, y, out, n, **constants) -> dict[int, np.ndarray]:
    """Output argument index -> expected values (float64)."""
    return {2: x.astype(np.float64) + y.astype(np.float64)}
