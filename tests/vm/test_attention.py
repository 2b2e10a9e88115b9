"""examples/attention.py in the interpreter: the FlashAttention forward against a float64
softmax written out here, for f16 and bf16, causal and not, ragged sequence lengths and
other tile shapes; exact facts of the masks; the program's text form; its errors; and
the race checker on its pipeline. (tests/vm/test_examples.py runs it through the `vmc run`
protocol with the other examples; tests/backend/test_attention.py compiles and launches it.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_harness import ROOT, load_module

from tilevm.cli.common import compare
from tilevm.ir.errors import VMError
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_program
from tilevm.ir.verifier import verify
from tilevm.vm import lang as tv

EXAMPLE = ROOT / "examples" / "attention.py"
attention = load_module(EXAMPLE)
KERNELS = {"f16": attention.attention, "bf16": attention.make_attention(tv.bf16)}
# p is rounded to the input type before `p @ v`: 2^-11 (f16) or 2^-8 (bf16) of the values
# averaged, beyond f32 accumulation (the example's ATOL is f16's).
ATOLS = {"f16": attention.ATOL, "bf16": 2.0 ** -6}


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """float64 `softmax(q k^T / sqrt(d), masked) v`, one query row at a time."""
    BH, S, d = q.shape
    out = np.empty((BH, S, d))
    for b in range(BH):
        for i in range(S):
            keys = i + 1 if causal else S
            scores = k[b, :keys] @ q[b, i] / math.sqrt(d)
            weights = np.exp(scores - scores.max())
            out[b, i] = weights @ v[b, :keys] / weights.sum()
    return out


def run(dtype: str, seed: int, S: int, BH: int = 2, **constants) -> tuple[list, np.ndarray]:
    """Run the kernel on random inputs; return (its arguments, o as float64)."""
    kernel = KERNELS[dtype]
    args, constants = attention.example_inputs(np.random.default_rng(seed), kernel=kernel,
                                               S=S, BH=BH, **constants)
    kernel.interpret(*args, **constants)
    return args, attention.from_host(args[3], kernel.signature.params[0].type.dtype)


def check(dtype: str, seed: int, S: int, causal: bool, BH: int = 2, **constants) -> None:
    args, got = run(dtype, seed, S, BH, causal=causal, **constants)
    host_type = KERNELS[dtype].signature.params[0].type.dtype
    q, k, v = (attention.from_host(a, host_type) for a in args[:3])
    want = softmax_attention(q, k, v, causal)
    assert not np.isnan(got).any(), "an output element was not written"
    ok, stats = compare(got, want, ATOLS[dtype])
    assert ok, f"{dtype} S={S} causal={causal} {constants}: {stats}"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S", [1, 40, 64, 130])  # one key; ragged; one tile; 3 tiles, ragged
def test_attention_matches_float64(dtype, causal, S):
    check(dtype, S, S, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("constants", [
    {"d": 128},
    {"block_q": 128, "num_warps": 8},  # two key tiles on each block's diagonal
    {"block_q": 128, "block_kv": 32, "num_warps": 4},
], ids=["d128", "bq128", "bq128-bkv32"])
def test_attention_other_tiles(constants, causal):
    check("f16", 7, 150, causal, BH=1, **constants)


def test_the_reference_of_the_example_protocol_agrees():
    rng = np.random.default_rng(3)
    args, constants = attention.example_inputs(rng, S=33, causal=True)
    q, k, v = (a.astype(np.float64) for a in args[:3])
    expected = attention.reference(*args, **constants)[3]
    assert np.allclose(expected, softmax_attention(q, k, v, True), rtol=1e-12, atol=1e-12)


def test_causal_masks_exactly():
    # Query 0 sees key 0 alone: p = 1, l = 1, o = v[0] exactly. The last query sees every
    # key, as without the mask, through the same tiles in the same order: bitwise equal.
    S = 100
    args, causal = run("f16", 11, S, causal=True)
    _, full = run("f16", 11, S, causal=False)
    assert np.array_equal(causal[:, 0], args[2][:, 0].astype(np.float64))
    assert np.array_equal(causal[:, S - 1], full[:, S - 1])
    assert not np.allclose(causal[:, S // 2], full[:, S // 2])


def test_ragged_keys_are_masked():
    # Keys past S are zeros in shared memory; unmasked they would add exp(0 - m) to l.
    # With S = 1 the one key gets all the weight: o = v[0] exactly.
    args, got = run("f16", 12, 1, causal=False)
    assert np.array_equal(got[:, 0], args[2][:, 0].astype(np.float64))


@pytest.mark.parametrize("causal", [False, True])
def test_program_verifies_and_round_trips(causal):
    program = attention.attention.specialize(causal=causal)
    verify(program)
    text = format_program(program)
    assert parse_program(text) == program
    assert format_program(parse_program(text)) == text


@pytest.mark.parametrize("constants, message", [
    ({"d": 96}, "d must be 64 or 128"),
    ({"block_q": 64, "block_kv": 128}, "multiple of block_kv"),
    ({"block_q": 32, "block_kv": 32}, r"multiple of 16 \* num_warps"),
])
def test_bad_constants_are_refused(constants, message):
    with pytest.raises(VMError, match=message):
        attention.attention.specialize(**constants)


@pytest.mark.parametrize("mutation", [
    ("tv.sync()  # every thread has read K", "pass  # "),  # refill K still being read
    ("tv.sync()  # every thread has read V", "pass  # "),  # refill V still being read
    ("tv.copy_async_wait(1)  # V of this tile", "tv.copy_async_wait(2)  # "),  # V not landed
])
def test_the_pipeline_is_race_checked(tmp_path, mutation):
    # The interpreter checks every sync and wait of the K / V pipeline: each one matters.
    source = EXAMPLE.read_text()
    assert source.count(mutation[0]) == 1
    broken = tmp_path / "attention_broken.py"
    broken.write_text(source.replace(mutation[0], mutation[1]))
    module = load_module(broken)
    args, constants = module.example_inputs(np.random.default_rng(0), S=150, BH=1)
    with pytest.raises(VMError, match="shared-memory race"):
        module.attention.interpret(*args, **constants)
