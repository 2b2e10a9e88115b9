"""A quantized-matmul problem as the tuner's runner takes it (`tune.runner`): the program
of one schedule and input sets in the interpreter's argument form (numpy arrays and
Python scalars), for searches over the kernel's PTX (`tune.order_search`).

    program, inputs = qmm_problem(schedule, "int4", M=16, N=4096, K=4096)

The first input set is the problem to time. The others are for the bit-exact gate,
small and ragged (M and N not multiples of the tiles; K two groups, or a chunk for
every split of K):

- every code of the weight type, in every column;
- activations with the values where arithmetic differs: NaN, +-Inf, +-0, subnormals,
  the largest finite values, beside random ones;
- random positive scales.

N stays a multiple of 8 if the timed N is one: the Hopper kernels' program depends on it
(`wide_stores`).

For a winner's final check (`tune.verify.check_samples`), `sample_inputs(s, i)` gives
fresh input sets: the timed weights with new random activations, and every fourth set a
small ragged problem with new weights holding every code; `check_outputs` compares a
result with the float64 product `x @ dequantize(W)` within a bound that holds for any
order of the sums: per output, with `A = sum_k |x_k| |w_k|`,

    |y - ref| <= (2^-11 + K 2^-23) A + 2^-11 |ref| + 2^-24

(the weights rounded to f16 once, the sums in f32 however they are split and ordered,
the result rounded to f16 once, with a factor 2 of room on f32's rounding). A set of
more outputs than `CHECKED_PER_SET` is checked on a random subset of its columns. The first
term is not the tighter `K 2^-23 A` of a reference that rounds the weights to f16
itself: kernels convert codes and scales by other steps (the interpreter's run of the
streaming kernel on f6e3m2 exceeds that tighter bound). Inputs are finite here: the
non-finite values are the gate set's, compared bitwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilevm.dtypes import DataType
from tilevm.kernels.matmul_launch import schedule_program
from tilevm.kernels.qmm import splitk_sizes
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.weight_format import FRAGMENTS, code_type, pack_weights, padded_n
from tilevm.kernels.weights import QuantizedWeight

__all__ = ["QmmProblem", "qmm_problem", "SPECIAL_F16"]

SPECIAL_F16 = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 6e-8, -6e-8, 6.1e-5, 65504.0,
                        -65504.0], dtype=np.float16)


F16_ROUNDING = 2.0 ** -11  # the unit roundoff of f16
F32_ROUNDING_ROOM = 2.0 ** -23  # twice f32's unit roundoff, per term of a sum
SAMPLE_GATE_EVERY = 4  # every fourth sample set is a small ragged problem
CHECKED_PER_SET = 1 << 22  # outputs of one set checked at most (a subset of its columns)


class QmmProblem:
    """One problem (weight type, M, N, K) for many schedules: the weights made once,
    each schedule's program (`program`) and input sets (`inputs`, made once per
    argument layout: the split-K kernels take a workspace sized by the split and the
    tile, the others none; `inputs_name` names the layout)."""

    def __init__(self, wdtype: DataType | str, M: int, N: int, K: int, *,
                 group_size: int = 128, seed: int = 0) -> None:
        self.wdtype, self.M, self.N, self.K = code_type(wdtype), M, N, K
        self.group_size = group_size
        self.rng = np.random.default_rng(seed)
        self.timed = _weights(self.rng, self.wdtype, K, N, group_size, every_code=False)
        self.x = self.rng.uniform(-1, 1, (M, K)).astype(np.float16)
        self._inputs: dict[str, list[list[Any]]] = {}
        self._sample_weights: dict[int, QuantizedWeight] = {}  # by id of their codes
        # the timed weights dequantized, and their magnitudes (made once: gigabytes)
        self._timed64: tuple[np.ndarray, np.ndarray] | None = None

    def program(self, s: Schedule) -> Any:
        if s.dequant:
            raise ValueError("a dequantize-then-multiply schedule launches two kernels; "
                             "give one that launches one")
        return schedule_program(self.timed, s, self.N)

    def inputs_name(self, s: Schedule) -> str:
        """The name of `s`'s argument layout: equal names, equal input sets."""
        if not s.splits_k_kernel:
            return "plain"
        # the workspaces of both sets follow the split and the tile; the gate set's K
        # the split and the unroll
        return f"split{s.split_k}x{s.unroll}:bm{s.bm}:bn{s.block_columns}"

    def inputs(self, s: Schedule) -> list[list[Any]]:
        name = self.inputs_name(s)
        if name not in self._inputs:
            gate, x_gate = self._small_problem(s, self.rng)
            x_gate.flat[:SPECIAL_F16.size * 3] = np.tile(SPECIAL_F16, 3)[:x_gate.size]
            self._inputs[name] = [_args(s, self.timed, self.x), _args(s, gate, x_gate)]
        return self._inputs[name]

    def sample_inputs(self, s: Schedule, i: int) -> list[Any]:
        """Input set `i` of a winner's final check (module docstring)."""
        rng = np.random.default_rng([self.M, self.N, self.K, i])
        if i % SAMPLE_GATE_EVERY == SAMPLE_GATE_EVERY - 1:
            qw, x = self._small_problem(s, rng)
            self._sample_weights[id(qw.packed)] = qw
            return _args(s, qw, x)
        return _args(s, self.timed, rng.uniform(-1, 1, (self.M, self.K)).astype(np.float16))

    def _small_problem(self, s: Schedule, rng: np.random.Generator
                       ) -> tuple[QuantizedWeight, np.ndarray]:
        """Weights holding every code and activations of a small ragged problem for `s`:
        N ragged where the timed N may be, a whole chunk of K for every split."""
        small_n = 72 if self.N % 8 == 0 else 71
        small_k = self.group_size * max(2, s.split_k * s.unroll)
        qw = _weights(rng, self.wdtype, small_k, small_n, self.group_size, every_code=True)
        x = rng.uniform(-2, 2, (5 if s.bm > 8 else 3, small_k)).astype(np.float16)
        return qw, x

    def check_outputs(self, args: list[Any], arrays: tuple[np.ndarray, ...]
                      ) -> tuple[int, str | None]:
        """(values compared, failure or None): the result `arrays[0]` of input set `args`
        (from `sample_inputs`) against float64 within the bound of the module docstring."""
        x, packed = args[0], args[1]
        qw = self.timed if packed is self.timed.packed else \
            self._sample_weights.pop(id(packed))
        if qw is not self.timed:
            w, w_abs = _dequantized(qw)
        else:
            if self._timed64 is None:
                self._timed64 = _dequantized(qw)
            w, w_abs = self._timed64
        x64 = x.astype(np.float64)
        M, K = x.shape
        N = w.shape[1]
        # A set of more than CHECKED_PER_SET outputs is checked on a random subset of
        # its columns (every row): the float64 product of a prefill set costs TFLOPs
        # (all columns as a slice: indexing them would copy W in float64 twice a set)
        columns: slice | np.ndarray = slice(None)
        if M * N > CHECKED_PER_SET:
            pick = np.random.default_rng([M, N, int(x.view(np.uint16)[0, 0])])
            columns = np.sort(pick.choice(N, max(1, CHECKED_PER_SET // M), replace=False))
        ref = x64 @ w[:, columns]
        bound = (F16_ROUNDING + K * F32_ROUNDING_ROOM) * (np.abs(x64) @ w_abs[:, columns]) \
            + F16_ROUNDING * np.abs(ref) + 2.0 ** -24
        y = arrays[0][:, columns].astype(np.float64)
        error = np.abs(y - ref)
        bad = ~(error <= bound)  # (a NaN fails too)
        if bad.any():
            m, n = np.argwhere(bad)[0]
            column = np.arange(N)[columns][n]
            return y.size, (f"{int(bad.sum())} of {y.size} outputs outside the bound, the "
                            f"first y[{m}, {column}] = {y[m, n]!r} against "
                            f"{ref[m, n]!r} (bound {bound[m, n]:.3g})")
        return y.size, None


def qmm_problem(s: Schedule, wdtype: DataType | str, M: int, N: int, K: int, *,
                group_size: int = 128, seed: int = 0) -> tuple[Any, list[list[Any]]]:
    """(program, input sets) of the module docstring for schedule `s` (one launch: not a
    dequantize-then-multiply schedule) and f16 activations."""
    problem = QmmProblem(wdtype, M, N, K, group_size=group_size, seed=seed)
    return problem.program(s), problem.inputs(s)


def _dequantized(qw: QuantizedWeight) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(qw.dequantize(), dtype=np.float64)
    return w, np.abs(w)


def _workspace(s: Schedule, M: int, N: int) -> tuple[int, int]:
    """(f32 partial sums, tile counters) the split-K kernels take (one of each when
    they split nothing)."""
    return splitk_sizes(M, N, s.bm, s.block_columns, s.split_k) if s.split_k > 1 \
        else (1, 1)


def _weights(rng: np.random.Generator, wdtype: DataType, K: int, N: int, group_size: int,
             every_code: bool) -> QuantizedWeight:
    Np, codes_n = padded_n(N), 1 << wdtype.bits
    if every_code:  # each column runs through every code, from a column-dependent start
        codes = (np.arange(K)[:, None] + np.arange(Np)[None, :] * 7) % codes_n
    else:
        codes = rng.integers(0, codes_n, (K, Np))
    packed = pack_weights(codes.astype(np.uint8), wdtype, FRAGMENTS)
    scales = rng.uniform(0.5, 2.0, (K // group_size, Np)).astype(np.float16) / \
        np.float16(max(1.0, float(wdtype.max)))
    return QuantizedWeight(packed, scales.astype(np.float16), None, wdtype, group_size,
                           (K, N), FRAGMENTS)


def _args(s: Schedule, qw: QuantizedWeight, x: np.ndarray) -> list[Any]:
    """The kernel's arguments in the order `matmul_launch.plan_call` passes them."""
    K, N = qw.shape
    M = x.shape[0]
    y = np.full((M, N), np.nan, dtype=np.float16)
    head = [x, qw.packed, qw.scales, qw.scales, y]  # (zeros: unread without zero points)
    if not s.splits_k_kernel:
        return [*head, M, N, K]
    floats, tiles = _workspace(s, M, N)
    ws = np.zeros(floats, dtype=np.float32)
    counters = np.zeros(tiles, dtype=np.int32)
    return [*head, ws, counters, M, N, K]
