"""Every mode computes the same training step as one device, and the collective audit
reads what each mode compiles to."""

import jax
import numpy as np
import pytest

from odestudy import count_collectives
from odestudy.measure.modes import tree_max_rel_diff

from .helpers import RTOL_STEP, one_step

MULTI = ("pmap", "shard", "shard_map")


@pytest.fixture(scope="module")
def reference():
    return {c: one_step("single", 1, c) for c in ("pid", "stepto")}


# Both controllers on 2 devices; on 4 (2 samples a device), `shard` with PID only: its
# split is the compiler's (pmap and shard_map split the batch as the code says, the same
# code path on 2 devices as on 4), and PID's samples take different solver steps, so it
# is the controller whose lock-step loop a wrong split would show.
CASES = [(m, n, c) for m in MULTI for n, c in ((2, "pid"), (2, "stepto"))] + [
    pytest.param("shard", 4, "pid", marks=pytest.mark.long)  # 4 devices: make test-long
]


@pytest.mark.parametrize(("mode", "n_devices", "controller"), CASES)
def test_step_matches_single_device(reference, mode, controller, n_devices):
    loss0, steps0, grads0, _ = reference[controller]
    loss, steps, grads, _ = one_step(mode, n_devices, controller)
    assert abs(loss - loss0) <= RTOL_STEP * abs(loss0)
    assert tree_max_rel_diff(grads, grads0) <= RTOL_STEP
    np.testing.assert_array_equal(steps.reshape(-1), steps0.reshape(-1))


@pytest.mark.parametrize("controller", ["pid", "stepto"])
@pytest.mark.parametrize("mode", ["pmap", "shard_map"])
def test_explicit_modes_have_no_collective_in_loops(mode, controller):
    *_, compiled = one_step(mode, 2, controller)
    audit = count_collectives(compiled.as_text())
    assert audit.while_loops > 0
    assert audit.in_loops == 0
    assert audit.total >= 1  # the gradient all-reduce
    assert audit.by_kind.get("all-reduce", 0) >= 1


def test_shard_with_pid_puts_collectives_in_loops():
    *_, compiled = one_step("shard", 2, "pid")
    audit = count_collectives(compiled.as_text())
    assert audit.in_loops > 0
    assert audit.total > audit.in_loops


def test_single_device_has_no_collectives():
    *_, compiled = one_step("single", 1, "pid")
    audit = count_collectives(compiled.as_text())
    assert audit.total == 0 and audit.while_loops > 0
    assert len(jax.devices()) == 8
