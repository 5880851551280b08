"""The compute floor (`measure.floor`): the FLOPs of one field evaluation over the
batch, forward and backward, counted by XLA on loop-free programs, against the field's
own arithmetic; and the floor's arithmetic."""

import pytest

from odestudy import Scenario
from odestudy.measure.floor import STAGES_PER_STEP, evaluation_flops, floor_time


@pytest.mark.parametrize("width", [16, 64])
def test_one_evaluation_counts_the_fields_matmuls_forward_and_backward(width):
    """The oscillator's field, an MLP 2 -> width -> width -> 2: `2 (2w + w^2 + 2w)`
    FLOPs forward per series; the backward pass of each matmul is two more of its
    size, so forward and backward together are about three times the forward."""
    s = Scenario(scale="smoke", width=width)
    flops = evaluation_flops(s)
    forward = 2 * (2 * width + width**2 + 2 * width) * s.batch
    assert flops["batch"] == s.batch
    assert 2.5 * forward < flops["per_evaluation"] < 4 * forward
    assert 0 <= flops["rest"] < flops["per_evaluation"]


def test_floor_time_is_the_evaluations_arithmetic_at_the_rate():
    flops = {"per_evaluation": 1e6, "rest": 2e6, "batch": 32}
    steps = 20
    expected = (2e6 + (STAGES_PER_STEP * steps + 1) * 1e6) / 1e9
    assert floor_time(flops, steps, 1e9) == pytest.approx(expected)
