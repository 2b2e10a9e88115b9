"""Run `kernels_exp.wt_mm`'s epilogue variants on the GPU against float64; for a wrong
result, say whether it is the reference shifted by (dm, dn). Prints one line a variant.
`python run_exp.py [nostm]` (nostm: stmatrix off, st.shared instead)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "nostm" in sys.argv:
    import tilevm.backend.passes.select_instructions as si
    si.STMATRIX_SM = 1000
import kernels_exp as e  # noqa: E402

from tilevm.backend.launch import launch_program  # noqa: E402

VARIANTS = [dict(tile="direct"), dict(tile="padded"), dict(tile="rowmajor"),
            dict(tile="swizzled"), dict(tile="swizzled", free=False),
            dict(tile="swizzled", src="global"), dict(tile="rowmajor", free=False),
            dict(tile="padded", free=False)]
if len(sys.argv) > 2:
    VARIANTS = [eval(a) for a in sys.argv[2:]]


def shift_of(y, ref):
    for dm in range(-16, 17, 8):
        for dn in range(-16, 17, 8):
            a = y[max(dm, 0):y.shape[0] + min(dm, 0), max(dn, 0):y.shape[1] + min(dn, 0)]
            b = ref[max(-dm, 0):ref.shape[0] + min(-dm, 0), max(-dn, 0):ref.shape[1] + min(-dn, 0)]
            if np.allclose(a, b, atol=0.05, rtol=0.01):
                return dm, dn
    return None


for kw in VARIANTS:
    for M, N, K in ((256, 128, 64), (512, 256, 320), (1024, 768, 1024)):
        rng = np.random.default_rng(M)
        x = rng.uniform(-1, 1, (M, K)).astype(np.float16)
        wt = rng.uniform(-1, 1, (N, K)).astype(np.float16)
        ref = x.astype(np.float64) @ wt.astype(np.float64).T
        reft = np.ascontiguousarray(ref.T.astype(np.float32))
        y = np.full((M, N), np.nan, np.float16)
        launch_program(e.wt_mm.specialize(**kw), [x, wt, y, reft, M, N, K])
        err = np.nanmax(np.abs(y.astype(np.float64) - ref)) if not np.isnan(y).all() else np.inf
        bad = np.abs(y.astype(np.float64) - ref) > 0.05 + 0.01 * np.abs(ref)
        bad |= np.isnan(y)
        where = np.argwhere(bad)
        first = tuple(where[0]) if len(where) else None
        print(f"{'nostm ' if 'nostm' in sys.argv else ''}{kw} {M}x{N}x{K}: "
              f"{'OK' if not bad.any() else 'WRONG'} bad={bad.mean():.3f} first={first} "
              f"maxerr={err:.3g} shift={shift_of(y.astype(np.float64), ref) if bad.any() else ''}",
              flush=True)
