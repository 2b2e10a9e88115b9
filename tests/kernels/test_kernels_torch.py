"""The quantized matmul inside PyTorch programs (GPU): `torch.compile(fullgraph=True)` of
models with `QuantizedLinear` layers traces the custom operator `tilevm::quantized_matmul`
without a graph break and computes what eager mode computes, bit for bit; a CUDA graph
captured over a 32-layer stack replays what eager mode computes, bit for bit."""

from __future__ import annotations

import pytest
from kernel_harness import cuda_torch

from tilevm import kernels
from tilevm.kernels import quantized_matmul


@pytest.fixture
def torch(tmp_path, monkeypatch):
    torch = cuda_torch()
    monkeypatch.setenv("TILEVM_CACHE_DIR", str(tmp_path))
    return torch


def _layers(torch, dims, dtype, seed):
    """`QuantizedLinear` int4 layers dims[i] -> dims[i + 1], weights of unit gain."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    layers = []
    for k, n in zip(dims, dims[1:]):
        w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) / k ** 0.5
        bias = torch.randn(n, device="cuda", dtype=dtype, generator=gen) * 0.1
        layers.append(kernels.QuantizedLinear.from_weight(w, "int4", 128, bias=bias))
    return layers


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_gpu_torch_compile_traces_quantized_layers_without_graph_breaks(torch, dtype_name):
    dtype = getattr(torch, dtype_name)
    layers = _layers(torch, [512, 1024, 512, 1024, 256], dtype, seed=3)
    # ReLU between the layers: exact, so compiled and eager code round alike
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(),
                                layers[2], torch.nn.ReLU(), layers[3])
    x = torch.randn(5, 512, device="cuda", dtype=dtype)
    eager = model(x)  # tunes, outside the traced region
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    assert torch.equal(compiled(x), eager)
    x2 = torch.randn(5, 512, device="cuda", dtype=dtype)
    assert torch.equal(compiled(x2), model(x2))
    reference = x.double()
    for i, layer in enumerate(layers):
        reference = reference @ layer.qweight.dequantize().double() + layer.bias.double()
        if i < 3:
            reference = reference.relu()
    assert (eager.double() - reference).abs().max() <= 0.05 * reference.abs().max()


@pytest.mark.gpu
def test_gpu_the_operator_without_a_known_quantized_weight(torch):
    """`tilevm::quantized_matmul` called directly with the tensors: the weights are
    checked once and the result is `quantized_matmul`'s."""
    layer = _layers(torch, [256, 96], torch.float16, seed=5)[0]
    qw = layer.qweight
    x = torch.randn(3, 256, device="cuda", dtype=torch.float16)
    packed = qw.packed.clone()  # a tensor no QuantizedWeight holds
    y = torch.ops.tilevm.quantized_matmul(x, packed, qw.scales, qw.zeros, qw.dtype.name,
                                          qw.group_size, qw.shape[1])
    assert torch.equal(y, quantized_matmul(x, qw))
    with pytest.raises((ValueError, RuntimeError), match="scales"):
        torch.ops.tilevm.quantized_matmul(x, packed, -qw.scales, qw.zeros, qw.dtype.name,
                                          qw.group_size, qw.shape[1])


@pytest.mark.gpu
def test_gpu_cuda_graph_of_32_quantized_layers_replays_eager(torch):
    layers = _layers(torch, [512] * 33, torch.float16, seed=7)

    def stack(x):
        for layer in layers:
            x = layer(x)
        return x

    x = torch.randn(2, 512, device="cuda", dtype=torch.float16)
    eager = stack(x)
    assert eager.isfinite().all() and eager.abs().max() > 0.1
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        stack(static_x)  # (warm on a side stream, as PyTorch advises before a capture)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = stack(static_x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, eager)
    x2 = torch.randn(2, 512, device="cuda", dtype=torch.float16)
    static_x.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, stack(x2))
