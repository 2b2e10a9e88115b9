"""On the GPU: reordered PTX (tune.ptx_order) computes bit for bit what the compiled PTX
computes, for 20 kernels of the examples on random inputs of the examples' own
`example_inputs` (ragged sizes, every code of the weight types)."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from tilevm import dtypes
from tilevm.bench.examples import load_example

pytestmark = pytest.mark.gpu

# (example, kernel attribute, settings): 20 kernels
CORPUS = [
    *[("matmul", "matmul", {"bm": bm, "bn": bn, "bk": 32})
      for bm, bn in ((32, 32), (64, 64), (16, 64))],
    *[("attention", "attention", {"d": d, "causal": causal, "block_q": bq, "block_kv": 64,
                                  "num_warps": w})
      for d in (64, 128) for causal in (False, True) for bq, w in ((64, 4), (128, 8))],
    ("softmax", "softmax_f32", {}),
    ("vector_add", "vector_add", {}),
    *[("quantized_matmul", "quantized_matmul", {"wdtype": dtypes.parse(t)})
      for t in ("int4", "int3", "f6e3m2", "int8", "uint2", "f4e2m1")],
]


def run_pair(module, kernel, original, variant, rng):
    """Outputs of the compiled kernel and of the variant on one random input."""
    from tilevm.backend.launch import copy_back, to_device

    args, constants = module.example_inputs(rng, **copy.deepcopy(kernel[1]))
    program = kernel[0].specialize(**constants)
    outputs = []
    for loaded in (original, variant):
        mine = copy.deepcopy(args)
        device_args, copies = to_device(program, mine)
        loaded(*device_args)
        copy_back(copies)
        outputs.append([host.view(np.uint8).copy() for host, _ in copies])
    return outputs


@pytest.mark.parametrize("example, name, settings", CORPUS,
                         ids=[f"{e}-{i}" for i, (e, _, _) in enumerate(CORPUS)])
def test_gpu_reordered_ptx_is_bit_exact(example, name, settings):
    from tilevm.backend.launch import compiled_kernel
    from tilevm.tune.ptx_order import PtxOrder
    from tilevm.tune.variants import compiled_ptx, ptx_variant

    module = load_example(example)
    kernel = getattr(module, name)
    rng = np.random.default_rng(7)
    _, constants = module.example_inputs(rng, **copy.deepcopy(settings))
    program = kernel.specialize(**constants)
    order = PtxOrder.parse(compiled_ptx(program))
    for seed in (1, 2):
        variant = ptx_variant(program, order.permuted(random.Random(seed)))
        original = compiled_kernel(program)
        for _ in range(3):
            before, after = run_pair(module, (kernel, settings), original, variant, rng)
            assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
