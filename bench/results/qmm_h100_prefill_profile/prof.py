"""prof.py: one launch each, between cudaProfilerStart/Stop (for ncu --profile-from-start
off), on 8B qkv and 70B o at M = 4096 (f16): the dequant pair's matmul (`wt_matmul`,
wide stores, as `kernels.matmul` runs it), the shared-weights kernel for int8 and the
dequantize kernel for f6e3m2 (their tuned schedules), and cuBLAS (torch.matmul)."""
import torch

from tilevm.bench.ab import profile_once
from tilevm.bench.qmm import SHAPES
from tilevm.kernels.matmul import _dequantizer, _qmm
from tilevm.kernels.schedule import dequant_schedule, shared_weights_tiles
from tilevm.kernels.weights import quantize

M = 4096


def launches(shape):
    """The four launches on `shape` (each warmed up twice)."""
    N, K = SHAPES[shape]
    torch.manual_seed(0)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.empty(M, N, device="cuda", dtype=torch.float16)
    q8 = quantize(w, "int8", 128, format="fragments")
    q6 = quantize(w, "f6e3m2", 128, format="fragments")
    wt = torch.empty(N, K, device="cuda", dtype=torch.float16)
    mm = _qmm(q6, dequant_schedule(), N)
    shared = _qmm(q8, shared_weights_tiles(128)[0], N)
    deq = _dequantizer(q6)
    found = [lambda: deq(q6.packed, q6.scales, q6.scales, wt, N, K),
             lambda: mm(x, wt, y, M, N, K),
             lambda: shared(x, q8.packed, q8.scales, q8.scales, y, M, N, K),
             lambda: torch.matmul(x, w, out=y)]
    return found


profile_once(launches("8b.qkv") + launches("70b.o"))
