"""`odestudy tune` and `odestudy predict` for a plain loss and model, without a problem
class (`tune_loss`, `predict_loss`): the loss, model, optimiser and data given run as a
problem (`loss_problem`), the last fifth of the data held out for the equal-loss check.
"""

import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import numpy as np

from .measure.problem import (
    ATOL,
    RTOL,
    AbstractODEProblem,
    GivenFacts,
    read_through,
    register_problem,
)
from .measure.scenario import Scenario
from .study.steps import Step, step_of_tune
from .tune import BLOCKS, STEPS_PER_BLOCK, print_tune, tune


class Given(NamedTuple):
    """What the researcher gave (`tune_loss`)."""

    loss: Callable[..., Any]
    model: Any
    data: Any
    times: Callable[[Any], Any]
    optimiser: Any


# What each registered `LossProblem` was given, by its name (the problem holds no arrays).
GIVEN: dict[str, Given] = {}
_COUNT = itertools.count()


class LossProblem(AbstractODEProblem):
    """A plain loss, model and data as a problem (`tune_loss`); its facts are the ones
    given (`facts`), its parts `GIVEN[label]`'s."""

    label: str = eqx.field(static=True)
    facts: GivenFacts = eqx.field(static=True)
    trained_at: float = eqx.field(static=True)
    keyed: bool = eqx.field(static=True)
    held_out: int = eqx.field(static=True)

    # The facts given, read through (`GivenFacts`; its name is the label).
    name = read_through("name", "facts")
    time_dependent = read_through("time_dependent", "facts")
    uniform_grid = read_through("uniform_grid", "facts")
    rtol = read_through("rtol", "facts")
    atol = read_through("atol", "facts")
    trained_loss = property(lambda self: self.trained_at)
    needs_key = property(lambda self: self.keyed)

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Any:
        del key, spread  # the data are the data given
        data = GIVEN[self.label].data
        if self.size(data) < size:
            raise ValueError(f"the data hold {self.size(data)} samples; {size} are needed")
        return jax.tree.map(lambda x: np.asarray(x)[:size], data)

    def times(self, data: Any) -> Any:
        return np.asarray(GIVEN[self.label].times(data))

    def size(self, data: Any) -> int:
        return int(np.shape(jax.tree.leaves(data)[0])[0])

    def make_model(self, key: jax.Array, width: int) -> Any:
        del key, width  # the model given
        return GIVEN[self.label].model

    def loss(self, model: Any, batch: Any, key: jax.Array | None, solve: Any) -> Any:
        return GIVEN[self.label].loss(model, batch, key, solve)

    def optimiser(self, learning_rate: float) -> Any:
        del learning_rate  # the optimiser given
        return GIVEN[self.label].optimiser

    def schedule(self, scale: str) -> dict[str, Any]:
        # One stage at the data's full length; the last fifth held out.
        data = GIVEN[self.label].data
        return {"length_fractions": (1.0,), "dataset_size": self.size(data) - self.held_out,
                "eval_size": self.held_out}  # fmt: skip


def loss_problem(
    loss: Callable[..., Any],
    optimiser: Any,
    model: Any,
    data: Any,
    *,
    times: Callable[[Any], Any],
    trained_loss: float,
    time_dependent: bool,
    uniform_grid: bool,
    rtol: float = RTOL,
    atol: float = ATOL,
    needs_key: bool = False,
    name: str = "own_loss",
) -> LossProblem:
    """A plain loss, model and data as a problem registered in this process under a
    name of its own (`tune_loss` and `predict_loss` take it).

    - `loss(model, batch, key, solve)`: a batch's scalar mean loss; it calls
      `solve(field, ts, y0, args)` where it solves the ODE.
    - `data`: host arrays, the samples on the first axis (the last fifth held out);
      `times(data)`: every sample's observation times, shape `(n, n_times)`.
    - `trained_loss`: the loss at or below which the model counts as trained; the
      other keywords are the problem's facts (`GivenFacts`).
    """
    size = int(np.shape(jax.tree.leaves(data)[0])[0])
    label = f"{name}-{next(_COUNT)}"
    GIVEN[label] = Given(loss, model, data, times, optimiser)
    facts = GivenFacts(time_dependent, uniform_grid, rtol, atol, label)
    problem = LossProblem(label, facts, trained_loss, needs_key, max(1, size // 5))
    register_problem(problem)
    return problem


def tune_loss(
    problem: LossProblem,
    *,
    batch: int = 16,
    controller: str = "pid",
    scale: str = "quick",
    devices: int = 1,
    loss_margin: float | None = None,
    blocks: int = BLOCKS,
    steps_per_block: int = STEPS_PER_BLOCK,
    print_line: Callable[[str], None] = print,
) -> Step:
    """The fastest step for `problem` (`loss_problem`) here, as `odestudy tune` finds
    it: prints the command's table and returns the `Step`. `batch`: the global batch;
    `loss_margin`: how far above the default's evaluation loss a step may end; None:
    the default's spread over training seeds measured (and recorded) here."""
    if devices > len(jax.devices()):
        raise ValueError(f"devices={devices}: this process has {len(jax.devices())}")
    s = Scenario(problem=problem.label, scale=scale, controller=controller, batch=batch,
                 device=jax.devices()[0].platform)  # fmt: skip
    found = tune(s, blocks=blocks, steps_per_block=steps_per_block, log=print_line,
                 devices=devices,
                 loss_factor=None if loss_margin is None else 1.0 + loss_margin)  # fmt: skip
    print_tune(found, print_line)
    return step_of_tune(found)


def predict_loss(
    problem: LossProblem,
    *,
    devices: int,
    profile: str,
    batch: int = 16,
    controller: str = "pid",
    scale: str = "quick",
    step: Step | None = None,
    results: str = "results",
) -> dict[str, Any]:
    """`odestudy predict` for `problem` (`loss_problem`): each multi-device mode's step on
    `devices` devices at the global batch `batch`, from a short 1-device sweep here and
    the collective costs of `profile` (as `--profile`), of `step`'s levers. Prints the
    command's lines and returns the prediction. This process must hold `devices` CPU
    devices, to count the loop collectives of the modes with one loop."""
    from .predict import check_prediction, predict_modes, sweep_terms
    from .report.predicted import prediction_lines  # the command's own lines
    from .study.profiles import load_profile

    if devices > len(jax.devices("cpu")):
        raise ValueError(
            f"devices={devices}: this process has {len(jax.devices('cpu'))} CPU devices; set "
            "jax.config.update('jax_num_cpu_devices', N) before JAX starts"
        )
    fields = step.fields if step is not None else {}
    target = Scenario(problem=problem.label, scale=scale, controller=controller, batch=batch,
                      mode="shard_map", devices_per_process=devices, **fields)  # fmt: skip
    chosen = load_profile(profile, results)
    check_prediction(target, chosen)
    out = predict_modes(target, chosen, sweep_terms(target, chosen))
    print("\n".join(prediction_lines(out, target)))
    return out
