"""Helpers shared by the tests."""

import functools
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

from odestudy import VectorField, make_dataset, make_parallel_step
from odestudy.measure import environment, mlp_reverse
from odestudy.measure.environment import machine_id, this_machine, versions
from odestudy.measure.lever import AbstractAddedLever
from odestudy.measure.model import DEFAULT
from odestudy.measure.record import REQUIRED_KEYS
from odestudy.measure.scenario import Scenario
from odestudy.measure.solvers import Structure
from odestudy.measure.timing import PROTOCOL
from odestudy.measure.training import base_record
from odestudy.study.plan import expected_env

# float32: one step in any mode must match one device to this relative tolerance.
RTOL_STEP = 1e-5

# The scenario of the smoke matrix (conftest's `smoke_matrix`): the recommended mode on 2
# virtual devices, one row (a notebook run of about 40 s here, over a minute with the
# probe and the repeat: its tests run in make test-long).
SMOKE = Scenario(devices_per_process=2, mode="shard_map", scale="smoke")
# The multi-process smoke row: 2 processes of 1 device, `shard_map`.
TWO_PROCESSES = Scenario(devices_per_process=1, processes=2, mode="shard_map", scale="smoke")


def step_scenario(
    mode: str,
    n_devices: int,
    controller: str,
    structure: Structure = DEFAULT,
    donate: bool = False,
    **fields,
) -> Scenario:
    """The smoke scenario whose step (`make_parallel_step`) runs `mode` on `n_devices`
    with `controller`, `structure` and `donate`; `fields`: other scenario fields."""
    return Scenario(
        scale="smoke",
        mode=mode,
        devices_per_process=n_devices,
        controller=controller,
        donate=donate,
        **structure.fields(),
        **fields,
    )


def assert_central_differences(loss, params, eps: float = 1e-6) -> None:
    """`loss`'s gradient at `params` (float64) along a random direction against the
    central difference of `loss` along it, to 1e-6 relatively."""
    grads = jax.jit(jax.grad(loss))(params)
    leaves, tree = jax.tree.flatten(params)
    direction = jax.tree.unflatten(
        tree, [jr.normal(jr.PRNGKey(i), x.shape, x.dtype) for i, x in enumerate(leaves)]
    )
    shifted = jax.jit(lambda s: loss(jax.tree.map(lambda p, v: p + s * v, params, direction)))
    numeric = (shifted(eps) - shifted(-eps)) / (2 * eps)
    analytic = sum(
        jax.numpy.vdot(g, v)
        for g, v in zip(jax.tree.leaves(grads), jax.tree.leaves(direction), strict=True)
    )
    assert abs(float(analytic) - float(numeric)) < 1e-6 * max(1.0, abs(float(numeric)))


def cast(tree, dtype):
    """`tree` with its arrays in `dtype` (float64 under `jax.enable_x64`)."""
    return jax.tree.map(lambda x: x.astype(dtype) if eqx.is_array(x) else x, tree)


def assert_same_solve(a, b, scale: float = 1.0) -> None:
    """Loss, gradients, solutions and step counts of two `(loss, grads, ys, steps)`
    results alike, to float32's tolerances times `scale` (float64: 1e-5)."""
    (loss, grads, ys, steps), (loss0, grads0, ys0, steps0) = a, b
    np.testing.assert_array_equal(steps, steps0)
    # Tsit5's interpolant has coefficients up to about 50 that cancel: a saved value
    # between two steps carries some 100 float32 roundings of the stages.
    np.testing.assert_allclose(ys, ys0, rtol=1e-4 * scale, atol=1e-5 * scale)
    np.testing.assert_allclose(loss, loss0, rtol=1e-5 * scale)
    for x, y in zip(jax.tree.leaves(grads), jax.tree.leaves(grads0), strict=True):
        bound = 1e-4 * scale
        np.testing.assert_allclose(x, y, rtol=bound, atol=bound * float(np.max(np.abs(y))))


@functools.cache
def dataset(size: int, seed: int, spread: float = 0.0):
    """`make_dataset(size, PRNGKey(seed), spread)`, made once per test process (each
    call of `make_dataset` compiles its reference solve); not to be modified."""
    data = make_dataset(size, jr.PRNGKey(seed), spread)
    for array in data:
        array.setflags(write=False)
    return data


def one_step(
    mode: str,
    n_devices: int,
    controller: str,
    batch: int = 8,
    length: int = 20,
    solve: "str | Structure" = "per_sample",
):
    """Loss, per-sample solver steps and new parameters after one training step.

    With adabelief's first update close to sign(gradient), the new parameters are
    compared through the gradient instead: the step uses plain SGD with learning
    rate 1, so `params_before - params_after` is the averaged gradient.
    """
    structure = Structure(solve=solve) if isinstance(solve, str) else solve
    return _one_step(mode, n_devices, controller, batch, length, structure)


# Several tests of a module check the same compiled step (its result, its collectives):
# built once per test process, however its arguments are spelled.
@functools.cache
def _one_step(
    mode: str, n_devices: int, controller: str, batch: int, length: int, solve: Structure
):
    data = dataset(batch, 0).truncate(length)
    model = VectorField(jr.PRNGKey(1))
    params, static = eqx.partition(model, eqx.is_array)
    optimiser = optax.sgd(1.0)
    opt_state = optimiser.init(params)
    s = step_scenario(mode, n_devices, controller, solve)
    step = make_parallel_step(s, jax.devices()[:n_devices], static, optimiser)
    placed_state = step.place_state(params, opt_state)
    placed_batch = step.place_batch((data.ts, data.ys))
    compiled = step.compile(*placed_state, placed_batch)
    new_params, _, loss, num_steps = compiled(*placed_state, placed_batch)
    grads = jax.tree.map(lambda a, b: a - b, params, step.unplace(new_params))
    return float(np.asarray(loss).reshape(-1)[0]), np.asarray(num_steps), grads, compiled


# This machine, as records name it.
HERE = machine_id(this_machine())


def record(
    s: Scenario,
    step: float = 0.01,
    jitter: float = 0.0,
    n_runs: int = 3,
    machine: str = HERE,
    status: str = "ok",
    seed: int = 0,
) -> dict:
    """A record of `s` as the matrix writes it, with synthetic step times."""
    rng = np.random.default_rng(seed)
    times = [list(step * (1 + jitter * rng.standard_normal(20))) for _ in range(n_runs)]
    pooled = np.concatenate(times)
    rec = base_record(s)
    rec.update(
        status=status,
        error=None,
        machine_id=machine,
        versions=versions(),
        protocol=PROTOCOL,
        measurement_env=expected_env(s),
        step_times_runs_s=times,
        step_time_runs_s=[float(np.median(t)) for t in times],
        step_time_s=float(np.median(pooled)),
        step_time_p25_s=float(np.percentile(pooled, 25)),
        step_time_p75_s=float(np.percentile(pooled, 75)),
        final_loss=0.01,
        solver_steps={"mean": 12.0, "max": 15.0},
        finished=environment.now(),
    )
    for key in REQUIRED_KEYS:
        rec.setdefault(key, None)
    return rec


class TimeField(eqx.Module):
    """A field of its time: not an `AbstractMLPField`."""

    field: VectorField

    def __call__(self, t, y, args):
        return jnp.cos(t) * self.field(t, y, args)


class Squashed(mlp_reverse.AbstractMLPField):
    """An MLP field whose output is squashed: not the MLP it names."""

    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        return jnp.tanh(self.mlp(y))


class FastMinMax(AbstractAddedLever):
    """A lever defined outside the package (here, in a test file): XLA's CPU compiler's
    fast min/max, a compile option of the step's own executable. For the tests that run
    a lever of one's own through `odestudy run`, the levers benchmark and `tune`."""

    name: ClassVar[str] = "test_fast_min_max"
    short: ClassVar[str] = "tfmm"
    help: ClassVar[str] = "XLA's fast min/max (a test's lever)"
    devices: ClassVar[tuple[str, ...] | None] = ("cpu",)

    def compiler_options(self) -> dict[str, Any]:
        return {"xla_cpu_enable_fast_min_max": True}
