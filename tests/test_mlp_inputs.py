"""The reverse step by hand (`mlp_reverse`) for MLP fields with inputs of the time and
`args` beyond the state (`AbstractMLPField.inputs`): in float64, the loss and gradients
of the batch solved as one ODE by the fused solve equal those of a plain
`diffrax.diffeqsolve` (Tsit5, PID, the same steps) for a field of its time, of its
series' controls and of both (the controlled problem's `ForcedField`); and each field it
cannot run is refused before compiling, in one line."""

import types
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import odestudy
from odestudy.measure import kernel
from odestudy.measure.checks import ProblemError
from odestudy.measure.model import Solve, solve_within_ode
from odestudy.measure.problem import Oscillator
from odestudy.measure.scenario import Scenario
from odestudy.measure.solvers import Structure
from odestudy.measure.training import _check_mlp_levers, check_mlp_fields, solve_args
from odestudy.problems.controlled import PROBLEM as FORCED
from odestudy.problems.controlled import ForcedField
from tests.helpers import cast

FUSED = dict(solve="within_ode", integrator="fused", adjoint="accepted_steps", max_steps=256)
TOL = dict(rtol=1e-6, atol=1e-8)


class TimeInputs(odestudy.AbstractMLPField):
    """`dy/dt = mlp([y, sin 3t, cos 2t])`: inputs of the time alone."""

    mlp: eqx.nn.MLP

    def inputs(self, t: Any, args: Any) -> jax.Array:
        return jnp.stack([jnp.sin(3 * t), jnp.cos(2 * t)])

    def __call__(self, t, y, args):
        return self.mlp(jnp.concatenate([y, self.inputs(t, args)]))


class ControlInputs(TimeInputs):
    """`dy/dt = mlp([y, u])`: its series' controls `u` (`args`), not its time."""

    def inputs(self, t: Any, args: Any) -> jax.Array:
        return args


class WrongTime(TimeInputs):
    """Reads its inputs at another time than the one it is given: not its MLP."""

    def __call__(self, t, y, args):
        return self.mlp(jnp.concatenate([y, self.inputs(t + 1.0, args)]))


class GroupedInputs(TimeInputs):
    """Inputs of the time with two slices of the state (groups 2): not run."""

    @property
    def groups(self) -> int:
        return 2

    def inputs(self, t: Any, args: Any) -> jax.Array:
        return jnp.sin(t)[None]

    def __call__(self, t, y, args):
        rows = [jnp.concatenate([part, self.inputs(t, args)]) for part in jnp.split(y, 2)]
        return jnp.concatenate([self.mlp(row) for row in rows])


def _mlp(inputs: int, key: int = 1, dtype: Any = jnp.float32) -> eqx.nn.MLP:
    """A tanh MLP from a state of 2 and `inputs` more to 2, its output scaled by 4 (PID
    takes several steps over the grids)."""
    mlp = eqx.nn.MLP(2 + inputs, 2, 16, 2, activation=jnp.tanh, key=jr.PRNGKey(key))
    mlp = eqx.tree_at(lambda m: m.layers[-1].weight, mlp, 4.0 * mlp.layers[-1].weight)
    return cast(mlp, dtype)


def _case(kind: str) -> tuple[odestudy.AbstractMLPField, jax.Array | None, bool]:
    """The float64 field, its series' `args` (4 series) and whether it reads its time."""
    controls = jr.uniform(jr.PRNGKey(5), (4, 2), jnp.float64, minval=0.5, maxval=2.0)
    if kind == "time":
        return TimeInputs(_mlp(2, dtype=jnp.float64)), None, True
    if kind == "args":
        return ControlInputs(_mlp(2, dtype=jnp.float64)), controls, False
    field = ForcedField(jr.PRNGKey(1), 16)
    field = eqx.tree_at(lambda f: f.mlp, field, _mlp(1, dtype=jnp.float64))
    return field, controls, True


def _grids(dtype: Any = jnp.float64) -> jax.Array:
    """4 evenly spaced grids of different steps and starts (within-ODE batching)."""
    dt = jr.uniform(jr.PRNGKey(3), (4, 1), dtype, minval=0.2, maxval=0.6)
    return jr.uniform(jr.PRNGKey(4), (4, 1), dtype) + dt * jnp.arange(10, dtype=dtype)


def _loss(ys: jax.Array) -> jax.Array:
    return jnp.mean(jnp.sin(ys) ** 2)


def _fused(field, ts, y0, args, time_dependent: bool):
    """Loss, steps and gradients (field, initial states) by the fused solve with
    `mlp_reverse`, the batch as one ODE."""
    problem = types.SimpleNamespace(**TOL, time_dependent=time_dependent)
    spec = Solve("pid", Structure(**FUSED, mlp_reverse=True), problem)

    def loss(diff):
        ys, steps = solve_within_ode(diff[0], ts, diff[1], spec, args)
        return _loss(ys), steps[0]

    return eqx.filter_jit(eqx.filter_value_and_grad(loss, has_aux=True))((field, y0))


def _diffrax(field, ts, y0, args, time_dependent: bool):
    """The same by `diffrax.diffeqsolve`: the batch rescaled to its observation index
    `tau` (series `i` at time `t_i = start_i + speed_i tau`), Tsit5 and PID."""
    speed, start = ts[:, 1] - ts[:, 0], ts[:, 0]
    taus = jnp.arange(ts.shape[1], dtype=ts.dtype)

    def loss(diff):
        def rescaled(tau, u, args):
            times = start + speed * tau if time_dependent else jnp.full_like(speed, tau)
            at = jax.vmap(diff[0], in_axes=(0, 0, None if args is None else 0))
            return speed[:, None] * at(times, u, args)

        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(rescaled),
            diffrax.Tsit5(),
            taus[0],
            taus[-1],
            taus[1] - taus[0],
            diff[1],
            args=args,
            saveat=diffrax.SaveAt(ts=taus),
            stepsize_controller=diffrax.PIDController(**TOL),
            max_steps=FUSED["max_steps"],
        )
        return _loss(jnp.swapaxes(sol.ys, 0, 1)), sol.stats["num_steps"]

    return eqx.filter_jit(eqx.filter_value_and_grad(loss, has_aux=True))((field, y0))


# Each compiles two float64 solves and their reverse passes (10 to 30 s here): make
# test-long.
@pytest.mark.long
@pytest.mark.parametrize("kind", ["time", "args", "both"])
def test_gradients_by_hand_equal_diffrax_for_inputs_of_time_and_args(kind):
    with jax.enable_x64(True):
        field, args, time_dependent = _case(kind)
        ts = _grids()
        y0 = jr.normal(jr.PRNGKey(2), (4, 2), jnp.float64)
        check_mlp_fields(Oscillator(), field, args=None if args is None else args[0])
        (loss, steps), grads = _fused(field, ts, y0, args, time_dependent)
        (loss0, steps0), grads0 = _diffrax(field, ts, y0, args, time_dependent)
        assert int(steps) == int(steps0) >= 6  # the same steps, several of them
        np.testing.assert_allclose(loss, loss0, rtol=1e-12)
        leaves, leaves0 = jax.tree.leaves(grads), jax.tree.leaves(grads0)
        assert len(leaves) == len(leaves0) == 7  # the MLP's 6 arrays, the initial states
        for x, y in zip(leaves, leaves0, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12 * float(np.max(np.abs(y))))


@pytest.mark.long  # about 10 s here
def test_the_controlled_problems_field_is_its_mlp_of_its_forcing():
    """`ForcedField` computes `mlp([y, a sin(w t)])` (its forward as before:
    `inputs` is that forcing), on the `args` its loss hands the solve."""
    s = Scenario(scale="smoke", problem="forced_oscillator")
    data = FORCED.make_data(2, jr.PRNGKey(0))
    field = FORCED.make_model(jr.PRNGKey(1), 8)
    args = solve_args(s, FORCED, data, field)
    assert args == jax.ShapeDtypeStruct((2,), data.forcing.dtype)
    check_mlp_fields(FORCED, field, args=args)  # no error
    t, y, forcing = 0.7, jnp.array([0.3, -0.2]), jnp.array([0.5, 1.5])
    before = field.mlp(jnp.concatenate([y, (forcing[0] * jnp.sin(forcing[1] * t))[None]]))
    np.testing.assert_array_equal(field(t, y, forcing), before)


@pytest.mark.parametrize(
    ("field", "args", "message"),
    [
        (
            lambda: TimeInputs(_mlp(3)),
            None,
            r"TimeInputs.inputs\(t, args\) has shape \(2,\); its MLP",
        ),
        (
            lambda: ControlInputs(_mlp(2)),
            jax.ShapeDtypeStruct((3,), jnp.float32),
            r"ControlInputs.inputs\(t, args\) has shape \(3,\)",
        ),
        (lambda: WrongTime(_mlp(2)), None, r"WrongTime does not compute dy/dt = mlp\(\[y, inputs"),
        (lambda: GroupedInputs(_mlp(1)), None, "a field with inputs needs groups 1"),
        (lambda: ForcedField(jr.PRNGKey(1), 8), None, "ForcedField.inputs.t, args. fails"),
    ],
    ids=["size", "args_shape", "not_its_mlp", "grouped", "no_args"],
)
def test_a_field_it_cannot_run_is_refused_before_compiling(field, args, message):
    # Each field is built in its test (a factory): built at collection, every worker
    # compiled their initialisations before running a test.
    with pytest.raises(ProblemError, match=message) as error:
        check_mlp_fields(Oscillator(), field(), args=args)
    assert "\n" not in str(error.value) and "mlp_reverse: " in str(error.value)


def test_the_kernel_solve_refuses_a_field_with_inputs_before_compiling():
    """Before tracing (`training.prepare`'s check, on the `args` the loss hands the
    solve) and while tracing (nothing compiled)."""
    s = Scenario(
        scale="smoke", problem="forced_oscillator", integrator="kernel", adjoint="accepted_steps"
    )
    data = FORCED.make_data(2, jr.PRNGKey(0))
    with pytest.raises(ProblemError, match="integrator='kernel': runs an MLP of the state alone"):
        _check_mlp_levers(s, FORCED, data, FORCED.make_model(jr.PRNGKey(1), 8))
    with pytest.raises(ValueError, match="runs an MLP of the state alone") as error:
        kernel.rows_of(TimeInputs(_mlp(2)))  # as the kernel solve reads its field
    assert "\n" not in str(error.value)


def test_a_field_with_inputs_of_groups_is_refused_while_tracing():
    """The solve's own refusal (nothing compiled), should the model's check be skipped."""
    with jax.enable_x64(True):
        field = GroupedInputs(_mlp(1, dtype=jnp.float64))
        ts = _grids()
        y0 = jnp.ones((4, 4), jnp.float64)
        with pytest.raises(ValueError, match="a field with inputs .* needs groups 1") as error:
            jax.eval_shape(lambda: _fused(field, ts, y0, None, True))
        assert "\n" not in str(error.value)
