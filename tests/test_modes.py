"""Every mode computes the same training step as one device, and the collective audit
reads what each mode compiles to (the explicit mode's own facts: test_explicit_mode)."""

import jax
import numpy as np
import pytest

from odestudy import count_collectives
from odestudy.measure.modes import tree_max_rel_diff

from .helpers import RTOL_STEP, one_step

MULTI = ("pmap", "shard", "shard_map", "explicit")


# Both controllers on 2 devices; on 4 (2 samples a device), `shard` and `explicit` with
# PID only: their split is the compiler's (pmap and shard_map split the batch as the
# code says, the same code path on 2 devices as on 4), and PID's samples take different
# solver steps, so it is the controller whose lock-step loop a wrong split would show.
# Every test here that compiles a step (some 15 to 40 s each here) runs in make
# test-long; make test trains a user's model alike in every mode (test_problems.py).
CASES = [(m, 2, c) for m in MULTI for c in ("pid", "stepto")] + [
    (m, 4, "pid") for m in ("shard", "explicit")
]


@pytest.mark.long
@pytest.mark.parametrize(("mode", "n_devices", "controller"), CASES)
def test_step_matches_single_device(mode, controller, n_devices):
    loss0, steps0, grads0, _ = one_step("single", 1, controller)
    loss, steps, grads, _ = one_step(mode, n_devices, controller)
    assert abs(loss - loss0) <= RTOL_STEP * abs(loss0)
    assert tree_max_rel_diff(grads, grads0) <= RTOL_STEP
    np.testing.assert_array_equal(steps.reshape(-1), steps0.reshape(-1))


@pytest.mark.long
@pytest.mark.parametrize(
    ("mode", "controller"),
    [("pmap", "pid"), ("pmap", "stepto"), ("shard_map", "pid"), ("shard_map", "stepto")],
)
def test_modes_with_written_collectives_have_none_in_loops(mode, controller):
    *_, compiled = one_step(mode, 2, controller)
    audit = count_collectives(compiled.as_text())
    assert audit.while_loops > 0
    assert audit.in_loops == 0
    assert audit.total >= 1  # the gradient all-reduce
    assert audit.by_kind.get("all-reduce", 0) >= 1


@pytest.mark.long
@pytest.mark.parametrize("mode", ["shard", "explicit"])
def test_one_loop_modes_with_pid_put_collectives_in_loops(mode):
    *_, compiled = one_step(mode, 2, "pid")
    audit = count_collectives(compiled.as_text())
    assert audit.in_loops > 0
    assert audit.total > audit.in_loops


@pytest.mark.long
def test_single_device_has_no_collectives():
    *_, compiled = one_step("single", 1, "pid")
    audit = count_collectives(compiled.as_text())
    assert audit.total == 0 and audit.while_loops > 0
    assert len(jax.devices()) == 8
