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
    """The study's loss of a batch: the loss of `spec`'s problem (as the study runs it,
    `AbstractODEProblem.loss`), handed the study's solve `spec` (its controller and
    structure), with the solver's per-sample step counts as `aux`. Takes a key where
    the problem `needs_key`."""
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
    """The study's per-device training step: `local_update` of `study_loss`.

    - `static`: the non-array part of the model (`eqx.partition`).
    - `optimiser`: the optax transformation.
    - `axis`: the mapped axis name to average over, or `None` for no averaging.
    - `spec`: the solve (`Solve`): the controller, the structure (its `solve`:
      `"per_sample"`: vmap, `"within_ode"`: one ODE per local batch, `"scan"`:
      fixed-step `lax.scan`) and the problem whose loss it trains.

    The step maps `(params, opt_state, batch)` to `(params, opt_state, loss,
    num_steps)`; `num_steps` is per sample. The batch is `(ts, ys)` for an
    `AbstractProblem`, the problem's batch otherwise, and `(batch, key)` where the
    problem `needs_key`.
    """
    layout = Layout(keyed=as_ode_problem(spec.problem).needs_key)
    return local_update(study_loss(spec), static, optimiser, axis, layout)


def step_options(scenario: Scenario) -> dict[str, Any] | None:
    """The XLA options the scenario's step is compiled with: its vector width's
    (`vectors.compiler_options`) and its added levers' (`AbstractAddedLever.
    compiler_options`); None for XLA's defaults."""
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
    `study_loss`, in the scenario's mode (`Scenario.parallel`), with its solve
    (`Scenario.ode_solve`) and buffers (`donate`, as in `make_params_step`); its
    batch is as in `make_local_step` (keyed where the problem `needs_key`); `compile`
    builds it with the scenario's vector width (`vectors.compiler_options`).

    - `static`, `optimiser`: as in `make_local_step`.
    - `problem`: the problem as the data made it (`SeriesProblem.for_data` weights it
      where the series hold different numbers of points); default the scenario's.
    """
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
