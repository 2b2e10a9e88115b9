"""tune.rank: candidates' predicted times (the model's estimates, summed over a call's
launches, in this process or in workers) and the fastest fraction of them."""

import pytest

from tilevm.bench.examples import load_example
from tilevm.cost import hardware
from tilevm.cost.model import Resources, estimate
from tilevm.tune.rank import fastest, predicted_seconds

matmul = load_example("matmul").matmul


def candidate(bm, bn, registers=64):
    program = matmul.specialize(bm=bm, bn=bn, bk=32)
    # sizes a call shares: the program takes M, N, K; "S" is no parameter of it
    return [(program, {"M": 512, "N": 768, "K": 256, "S": 7}, Resources(128, registers, 0))]


CANDIDATES = [candidate(32, 32), candidate(64, 64), candidate(32, 64, 128),
              candidate(64, 32), candidate(64, 64) * 2]


def test_a_candidate_is_predicted_as_the_sum_of_its_launches_estimates():
    gpu = hardware.gpu("h100")
    expected = [sum(estimate(p, {k: v for k, v in s.items() if k != "S"}, gpu, r).predicted_s
                    for p, s, r in c) for c in CANDIDATES]
    assert predicted_seconds(CANDIDATES, gpu, workers=1) == expected
    assert predicted_seconds(CANDIDATES[-1:], gpu)[0] == 2 * expected[1]


def test_workers_predict_what_this_process_does():
    gpu = hardware.gpu("a100")
    assert predicted_seconds(CANDIDATES, gpu, workers=2) == \
        predicted_seconds(CANDIDATES, gpu, workers=1)


@pytest.mark.parametrize("predicted, fraction, kept", [
    ([3.0, 1.0, 2.0, 5.0, 4.0, 0.5], 1 / 3, [5, 1]),
    ([2.0, 1.0, 1.0], 1 / 3, [1]),  # ties: the given order
    ([2.0, 1.0, 3.0, 4.0], 1 / 3, [1]),  # at most a third, at least one
    ([2.0], 1 / 3, [0]),
    ([2.0, 1.0], 1.0, [1, 0]),
    ([], 0.5, []),
])
def test_fastest_keeps_the_fraction_predicted_fastest(predicted, fraction, kept):
    assert fastest(predicted, fraction) == kept


@pytest.mark.parametrize("fraction", [0, -0.5, 1.5])
def test_a_fraction_outside_zero_to_one_is_an_error(fraction):
    with pytest.raises(ValueError, match="fraction of candidates kept must be in"):
        fastest([1.0, 2.0], fraction)
