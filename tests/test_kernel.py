"""The kernel solve (`odestudy.measure.kernel`, `integrator="kernel"`) in Pallas's
interpret mode on the CPU, against the fused solve with its own reverse loop
(`replay.py`, each step's reverse by hand under PID within-ODE) and diffrax: the same step
counts, saved values, loss and gradients to float32 tolerance, per sample (more series
than one program's block, on padded irregular grids) and within-ODE, PID and StepTo;
float64 gradients against central finite differences; a PID solve past its bound is NaN
at the times it did not reach; and what it refuses, in one line, before compiling."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import odestudy
from odestudy import VectorField
from odestudy.measure import kernel
from odestudy.measure.checks import ProblemError
from odestudy.measure.model import Solve, solve_batch, solve_within_ode
from odestudy.measure.problem import Oscillator
from odestudy.measure.solvers import Kernel, Structure
from odestudy.measure.training import check_mlp_fields
from tests.helpers import (
    Squashed,
    TimeField,
    assert_central_differences,
    assert_same_solve,
    cast,
)


@dataclasses.dataclass(frozen=True)
class _Problem:
    """What a solve reads of a problem (hashable: the jitted runs take it static)."""

    rtol: float = 1e-5
    atol: float = 1e-6
    time_dependent: bool = False


PROBLEM = _Problem()  # tolerances at which PID takes 5 to 8 steps over these grids
_LONG = pytest.mark.long


def _field(width: int = 16, scale: float = 8.0, dtype=jnp.float32) -> VectorField:
    """An MLP field, its output scaled by `scale` (8: PID takes several steps over the
    grids)."""
    field = VectorField(jr.PRNGKey(1), width=width)
    last = field.mlp.layers[-1].weight
    field = eqx.tree_at(lambda f: f.mlp.layers[-1].weight, field, scale * last)
    return cast(field, dtype)


def _irregular(n: int, length: int = 12, pad: int = 0) -> jax.Array:
    """`n` irregular grids of their own horizons, a long first interval,
    the last `pad` times repeating the series' end (padding)."""
    gaps = jr.uniform(jr.PRNGKey(3), (n, length - 1), minval=0.1, maxval=0.4)
    gaps = gaps.at[:, 0].set(1.0)
    ts = jnp.concatenate([jnp.zeros((n, 1)), jnp.cumsum(gaps, axis=1)], axis=1)
    if pad:
        ts = ts.at[:, -pad:].set(ts[:, -pad - 1 : -pad])
    return ts


def _even(n: int, length: int = 10) -> jax.Array:
    """`n` evenly spaced grids of different steps and starts (within-ODE batching)."""
    dt = jr.uniform(jr.PRNGKey(3), (n, 1), minval=0.2, maxval=0.6)
    start = jr.uniform(jr.PRNGKey(4), (n, 1))
    return start + dt * jnp.arange(length)


def _structure(integrator: str, solve: str, controller: str) -> Structure:
    """The kernel solve, or the fused solve with its own reverse loop (by hand where it
    takes it: PID within-ODE), as `solve` batches."""
    bound = {"max_steps": 64} if controller == "pid" else {}
    by_hand = integrator == "fused" and solve == "within_ode" and controller == "pid"
    return Structure(
        solve=solve,
        integrator=integrator,
        adjoint="accepted_steps",
        mlp_reverse=by_hand,
        **bound,
    )


@eqx.filter_jit
def _run(field, ts, y0, spec):
    """The loss of the batch solved as `spec` says, its gradients with respect to the
    field and the initial states, the solutions and the step counts."""
    within = spec.structure.solve == "within_ode"

    def loss(field, y0):
        ys, steps = (solve_within_ode if within else solve_batch)(field, ts, y0, spec)
        return jnp.mean(jnp.sin(ys) ** 2), (ys, steps)

    (value, (ys, steps)), grads = eqx.filter_value_and_grad(loss, has_aux=True)(field, y0)
    return value, grads, ys, steps


def _assert_same(a, b, steps_at_least: int = 4, scale: float = 1.0):
    """`assert_same_solve`, and at least `steps_at_least` steps in every series."""
    assert_same_solve(a, b, scale)
    assert int(np.min(b[3])) >= steps_at_least  # several steps replayed


def _both(field, ts, y0, solve: str, controller: str) -> dict:
    """`_run` by the kernel solve and by the fused solve."""
    return {
        integrator: _run(
            field, ts, y0, Solve(controller, _structure(integrator, solve, controller), PROBLEM)
        )
        for integrator in ("kernel", "fused")
    }


def _inputs(solve: str, controller: str, dtype=jnp.float32):
    """Field, grids and initial states: per sample, more series than one program's block
    (two programs) on irregular grids (PID: padded); within-ODE, 6 series (rows padded
    to the block) of width 12 (the hidden layers padded to 16)."""
    if solve == "per_sample":
        n = kernel.BLOCK + 4
        ts = _irregular(n, pad=2 if controller == "pid" else 0)
        field = _field(dtype=dtype)
    else:
        n = 6
        ts = _even(n)
        field = _field(width=12, dtype=dtype)
    return field, ts.astype(dtype), jr.normal(jr.PRNGKey(2), (n, 2), dtype)


# Each some 15 to 35 s here (the interpreted kernels' compile): make test-long.
@_LONG
@pytest.mark.parametrize(
    ("solve", "controller"),
    [
        ("per_sample", "pid"),
        ("within_ode", "pid"),
        ("per_sample", "stepto"),
        ("within_ode", "stepto"),
    ],
)
def test_kernel_matches_the_fused_solve(solve, controller):
    # In float32 a PID step's accept/reject can sit on the rounding boundary of its error
    # norm, where the two solves' different order of the same work decides it (one sample
    # on CI's host; two of 20 here with XLA's optimisations on). In float64 no decision is
    # that close: compared at float32's tolerances times 1e-5.
    with jax.enable_x64(True):
        field, ts, y0 = _inputs(solve, controller, dtype=jnp.float64)
        run = _both(field, ts, y0, solve, controller)
        at_least = 3 if controller == "pid" else ts.shape[1] - 1  # PID: 3 to 4 steps
        _assert_same(run["kernel"], run["fused"], steps_at_least=at_least, scale=1e-5)
        if solve == "per_sample" and controller == "pid":  # rejections, samples unlike
            assert len(set(np.asarray(run["fused"][3]).tolist())) > 1


@pytest.mark.parametrize("controller", ["pid", "stepto"])
@pytest.mark.parametrize("solve", ["per_sample", "within_ode"])
def test_the_kernels_lower_for_an_nvidia_gpu_by_triton(solve, controller, monkeypatch):
    """The step's kernels (forward and reverse) lowered for CUDA on this CPU machine, as
    a GPU would compile them: by Triton (`compat.triton_params`), whose lowering rules
    differ from the interpret mode's."""
    monkeypatch.setattr(kernel, "interpret_mode", lambda: False)
    field, ts, y0 = _inputs(solve, controller)
    spec = Solve(controller, _structure("kernel", solve, controller), PROBLEM)
    params, static = eqx.partition(field, eqx.is_array)
    solver = solve_within_ode if solve == "within_ode" else solve_batch

    def loss(p, y):  # traced afresh: `_run`'s cache holds the interpreted kernels
        ys, _ = solver(eqx.combine(p, static), ts, y, spec)
        return jnp.mean(jnp.sin(ys) ** 2)

    run = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    text = run.trace(params, y0).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("custom_call @__gpu$xla.gpu.triton(") == 2  # the solve, its reverse


@pytest.mark.long
def test_kernel_matches_diffrax_per_sample():
    """Per sample on padded irregular grids against diffrax's default solve (its own
    step bound, recursive checkpointing)."""
    # In float32 some series' step sat on the rounding boundary of its error norm, at 1:
    # accepted by diffrax, rejected by the kernel solve, at PROBLEM's rtol here and at
    # 3e-5 on CI's host. In float64 (whose draws differ) no decision is that close; 3 to
    # 6 steps at 3e-6.
    with jax.enable_x64(True):
        field, ts, y0 = _inputs("per_sample", "pid", dtype=jnp.float64)
        problem = _Problem(rtol=3e-6)
        structure = _structure("kernel", "per_sample", "pid")
        ours = _run(field, ts, y0, Solve("pid", structure, problem))
        theirs = _run(field, ts, y0, Solve("pid", Structure(max_steps=64), problem))
        _assert_same(ours, theirs, steps_at_least=3, scale=1e-5)


class _Tight(Oscillator):
    """Tolerances at which PID's step sizes (constants to the gradient) barely move the
    solution: for central differences."""

    rtol = 1e-10
    atol = 1e-10


@pytest.mark.long
@pytest.mark.parametrize(("solve", "controller"), [("per_sample", "pid"), ("within_ode", "stepto")])
def test_float64_gradients_match_central_differences(solve, controller):
    """Interpret mode runs the kernels in float64 where JAX is asked to."""
    with jax.enable_x64(True):
        field = _field(width=4, scale=1.0, dtype=jnp.float64)
        ts = (_irregular(3, length=6) if solve == "per_sample" else _even(3, 6)).astype(jnp.float64)
        y0 = jr.normal(jr.PRNGKey(2), (3, 2), jnp.float64)
        params, static = eqx.partition(field, eqx.is_inexact_array)
        structure = Structure(
            solve=solve, integrator="kernel", adjoint="accepted_steps", max_steps=256
        )
        spec = Solve(controller, structure, _Tight())
        within = solve == "within_ode"

        def loss(p):
            field = eqx.combine(p, static)
            ys, _ = (solve_within_ode if within else solve_batch)(field, ts, y0, spec)
            return jnp.sum(jnp.sin(ys))

        assert_central_differences(loss, params)


@pytest.mark.parametrize("solve", ["per_sample", pytest.param("within_ode", marks=_LONG)])
def test_pid_past_its_bound_is_nan_where_unreached(solve):
    field, ts, y0 = _inputs(solve, "pid")
    structure = Structure(solve=solve, integrator="kernel", adjoint="accepted_steps", max_steps=1)
    spec = Solve("pid", structure, PROBLEM)
    batched = solve_within_ode if solve == "within_ode" else solve_batch
    ys, steps = jax.jit(lambda y0: batched(field, ts, y0, spec))(y0)
    assert np.all(np.asarray(steps) == 1)
    assert bool(jnp.all(jnp.isfinite(ys[:, 0]))) and bool(jnp.isnan(ys[:, -1]).all())


@pytest.mark.parametrize(
    ("levers", "message"),
    [
        ({}, "the kernel solve takes adjoint accepted_steps; got 'recursive'"),
        ({"controller": "stepto", "solve": "scan"}, "is a solve of its own"),
        (
            {"solve": "within_ode", "mlp_reverse": True},
            "mlp_reverse is a reverse step of the fused solve",
        ),
    ],
)
def test_structures_it_cannot_run_are_refused(levers, message):
    fields = {"adjoint": "accepted_steps", **levers} if levers else {}
    with pytest.raises(ValueError, match=message) as error:
        odestudy.Scenario(scale="smoke", integrator="kernel", **fields)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("solve", ["per_sample", "within_ode"])
def test_a_field_that_is_not_an_mlp_is_refused_before_compiling(solve):
    """While tracing (nothing compiled) for the solve's own field, and before tracing for
    the model (`training.prepare`, `check_mlp_fields`)."""
    field, ts, y0 = _inputs(solve, "pid")
    spec = Solve("pid", _structure("kernel", solve, "pid"), PROBLEM)
    with pytest.raises(ValueError, match="is not an odestudy.AbstractMLPField") as error:
        jax.eval_shape(lambda: _run(TimeField(field), ts, y0, spec))
    assert "\n" not in str(error.value) and str(error.value).startswith(kernel.WHO)
    who = f"integrator={Kernel.name!r}"
    with pytest.raises(ProblemError, match=f"{who}: the model holds no"):
        check_mlp_fields(Oscillator(), field.mlp, who)
    with pytest.raises(ProblemError, match=f"{who}: Squashed does not compute dy/dt = mlp"):
        check_mlp_fields(Oscillator(), Squashed(field.mlp), who)
