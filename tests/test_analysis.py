"""Lock-step waste on hand-made step counts, and complexity-aware batching."""

import numpy as np
import pytest

from odestudy import epoch_batches
from odestudy.measure.analysis import lockstep_waste, mean_waste


def test_no_waste_when_all_samples_take_the_same_steps():
    waste = lockstep_waste([[10, 10], [10, 10]])
    assert waste == {"within_device": 0.0, "across_devices": 0.0, "total": 0.0}


def test_waste_on_hand_made_counts():
    # device 0: needs 10 and 30 (runs 30); device 1: needs 20 and 20 (runs 20).
    waste = lockstep_waste([[10, 30], [20, 20]])
    assert waste["within_device"] == pytest.approx(1 - 20 / 25)
    assert waste["across_devices"] == pytest.approx(1 - 25 / 30)
    assert waste["total"] == pytest.approx(1 - 20 / 30)


def test_waste_rejects_bad_shape():
    with pytest.raises(ValueError, match="devices, batch"):
        lockstep_waste([1, 2, 3])


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("n,batch", [(64, 8), (70, 8)])
def test_epoch_is_a_permutation(grouped, n, batch):
    cost = np.random.default_rng(0).lognormal(size=n) if grouped else None
    batches = epoch_batches(n, batch, np.random.default_rng(1), cost)
    flat = batches.reshape(-1)
    assert batches.shape == (n // batch, batch)
    assert len(set(flat.tolist())) == flat.size  # nothing duplicated
    assert set(flat.tolist()) <= set(range(n))
    assert n - flat.size == n % batch  # only the remainder is left for later epochs


def test_grouping_gathers_similar_costs():
    rng = np.random.default_rng(0)
    cost = rng.lognormal(sigma=1.0, size=256)
    spread = lambda b: np.mean([cost[i].max() / cost[i].mean() for i in b])
    random = epoch_batches(256, 32, np.random.default_rng(1), None)
    grouped = epoch_batches(256, 32, np.random.default_rng(1), cost)
    assert spread(grouped) < spread(random)
    # the same samples, only in other batches
    assert sorted(grouped.reshape(-1)) == sorted(random.reshape(-1)) == list(range(256))


def test_mean_waste_averages_steps():
    per_step = [[[10, 10], [10, 10]], [[10, 30], [20, 20]]]
    assert mean_waste(per_step)["total"] == pytest.approx((0 + (1 - 20 / 30)) / 2)
