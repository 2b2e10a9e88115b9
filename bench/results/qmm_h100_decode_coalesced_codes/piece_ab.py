"""Decode with the codes read lane-interleaved (`piece.patch`) against the tuner's best.

    python3 piece_ab.py OUT.jsonl SHAPES DTYPES MS

For widths whose lane run (4b bytes an atom) is not a multiple of 16 bytes, the format's
runs make each of a warp's loads span more bytes than it uses (int3: three 4-byte
loads a lane, 12 bytes apart). With `piece=c` (c = gcd(4b, 16)) the streaming kernel
reads the same codes re-laid as 4b/c pieces of c bytes, piece j of lane t at
(32 j + t) c. Per (layer, type, M), f16, group 128, write flush (median of >= 50 runs):
the tuner's candidates, then its two fastest, as they are and with `piece`, in three
alternating rounds (`final_us`: the best round of each). Outputs compared bitwise with
the same schedule's unpieced output (`equal`).
"""

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qmm_h100_decode_resident_x"))
from sweep import cells  # noqa: E402  (session 27's cells)

from tilevm.backend.launch import compiled_kernel  # noqa: E402
from tilevm.bench.qmm import Timer  # noqa: E402
from tilevm.kernels.matmul import _splitk_buffers  # noqa: E402
from tilevm.kernels.qmm import qmm_kernel  # noqa: E402
from tilevm.kernels.schedule import candidates  # noqa: E402


def runner(x, qw, packed, s, piece: int):
    M, K = x.shape
    N = qw.shape[1]
    program = qmm_kernel("f16").specialize(wdtype=qw.dtype, group_size=128,
                                           has_zeros=False, piece=piece, **s.constants())
    kern = compiled_kernel(program)
    ws, counters = _splitk_buffers(x.device, M, N, s)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    args = (x, packed, qw.scales, qw.scales, y, ws, counters, M, N, K)
    return y, lambda: kern(*args)


def main() -> None:
    out, shapes, dtypes, ms = sys.argv[1:5]
    timer = Timer(min_reps=50)
    with open(out, "a") as f:
        for shape, N, K, name, qw, M, x in cells(shapes, dtypes, ms):
            b = qw.dtype.bits
            c = math.gcd(4 * b, 16)
            pieced = qw.packed.reshape(K // 32, -1, 32, 4 * b // c, c) \
                .permute(0, 1, 3, 2, 4).contiguous().reshape(qw.packed.shape)
            tuned = [s for s in candidates(M, N, K, 128, hopper=True) if s.fits(K, 128)]
            us = {}
            for s in tuned:
                _, run = runner(x, qw, qw.packed, s, 0)
                us[s] = timer(run)[0] * 1e6
            runs, equal = {}, {}
            for s in sorted(us, key=us.get)[:2]:
                y0, runs[str(s)] = runner(x, qw, qw.packed, s, 0)
                y1, runs[f"{s} piece={c}"] = runner(x, qw, pieced, s, c)
                runs[str(s)]()
                runs[f"{s} piece={c}"]()
                torch.cuda.synchronize()
                equal[str(s)] = bool(torch.equal(y0, y1))
            final = {label: [] for label in runs}
            for _ in range(3):
                for label, run in runs.items():
                    final[label].append(timer(run)[0] * 1e6)
            final_us = {k: round(min(v), 2) for k, v in final.items()}
            best_base = min((k for k in final_us if "piece" not in k), key=final_us.get)
            best_piece = min((k for k in final_us if "piece" in k), key=final_us.get)
            row = {"shape": shape, "dtype": name, "M": M, "equal": equal,
                   "final_us": final_us, "best_base": best_base, "best_piece": best_piece,
                   "ratio": round(final_us[best_piece] / final_us[best_base], 4),
                   "tuned_us": {str(s): round(t, 2) for s, t in us.items()}}
            print(json.dumps({k: row[k] for k in ("shape", "dtype", "M", "equal", "final_us",
                                                  "ratio")}), flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
