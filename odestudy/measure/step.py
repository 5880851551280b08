"""The study's training step of a scenario (`make_parallel_step`): the generic
data-parallel step (`modes.make_params_step`) of the problem's loss, handed the study's solve
(`study_loss`), in the scenario's mode."""

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import optax

from .model import Solve, problem_loss
from .modes import Layout, Loss, ParallelStep, local_update, make_params_step
from .problem import AnyProblem, as_ode_problem
from .scenario import Scenario
from .vectors import compiler_options


def study_loss(spec: Solve) -> Loss:
    """The loss of `spec`'s problem handed the study's solve, with the per-sample solver
    steps as `aux` (and a key where the problem `needs_key`)."""
    spec = spec.as_ode()

    def loss(params, static, batch, key=None):
        model = eqx.combine(params, static)
        return problem_loss(model, batch, key, spec)

    return loss


def make_local_step(
    static: Any,
    optimiser: optax.GradientTransformation,
    axis: str | None,
    spec: Solve,
) -> Callable:
    """The study's per-device training step (`local_update` of `study_loss`), averaging
    over mapped `axis` (None: none): `(params, opt_state, batch)` to `(params,
    opt_state, loss, num_steps)`, the batch `(batch, key)` where the problem
    `needs_key`."""
    layout = Layout(keyed=as_ode_problem(spec.problem).needs_key)
    return local_update(study_loss(spec), static, optimiser, axis, layout)


def step_options(scenario: Scenario) -> dict[str, Any] | None:
    """The XLA options the scenario's step is compiled with (its vector width's and its
    added levers'); None for XLA's defaults."""
    out = dict(compiler_options(scenario.vector_width) or {})
    for lever in scenario.added:
        out.update(lever.compiler_options())
    return out or None


def make_parallel_step(
    scenario: Scenario,
    devices: Sequence[jax.Device],
    static: Any,
    optimiser: optax.GradientTransformation,
    *,
    problem: AnyProblem | None = None,
) -> ParallelStep:
    """The study's training step of `scenario` over `devices`: `make_params_step` of
    `study_loss` in the scenario's mode, with its solve, buffers and compiler options;
    `problem`: the problem as the data made it (default the scenario's)."""
    spec = scenario.ode_solve(problem)
    keyed = as_ode_problem(spec.problem).needs_key
    return make_params_step(
        study_loss(spec),
        optimiser,
        scenario.parallel,
        devices,
        static=static,
        donate=scenario.donate,
        keyed=keyed,
        compiler_options=step_options(scenario),
    )
