"""A controller is a type: each registered controller's facts and diffrax controller, and
a third controller, defined here, is a valid choice everywhere (a scenario, the command
line, the solve, the study's step, the report) without an edit to the package."""

from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from odestudy import (
    CONTROLLERS,
    PID,
    AbstractController,
    Scenario,
    Solve,
    StepTo,
    cli,
    make_parallel_step,
    solve,
)
from odestudy.measure.controllers import parse_controller
from odestudy.measure.model import DEFAULT
from odestudy.measure.solvers import Structure, solve_options
from odestudy.measure.training import shares_program
from odestudy.report.claims import controller_label
from odestudy.report.plots import CONTROLLER_STYLE

from .helpers import dataset

TS = jnp.linspace(0.0, 10.0, 100)


class Rotation(eqx.Module):
    """dy/dt = [y1, -y0]: y(t) = [cos t, -sin t] from y0 = [1, 0]."""

    def __call__(self, t, y, args):
        return jnp.stack([y[1], -y[0]])


def test_the_study_registers_pid_and_stepto_in_order():
    assert list(CONTROLLERS) == ["pid", "stepto"]
    assert CONTROLLERS["pid"] is PID and CONTROLLERS["stepto"] is StepTo


@pytest.mark.parametrize("name", list(CONTROLLERS))
def test_each_controller_is_its_scenario_type(name):
    cls = CONTROLLERS[name]
    s = Scenario(scale="smoke", controller=name)
    assert type(s.stepsize_controller) is cls and s.controller == name
    assert s.ode_solve().controller == cls() and Solve(name).controller == cls()
    assert parse_controller(name) == cls() and parse_controller(cls()) == cls()
    assert controller_label(name) == cls.label and CONTROLLER_STYLE[name] == cls.line


@pytest.mark.parametrize("name", list(CONTROLLERS))
def test_each_controller_builds_diffrax_s_controller(name):
    controller, dt0 = CONTROLLERS[name]().stepsize_controller(TS, 1e-4, 1e-7)
    if name == "pid":
        assert isinstance(controller, diffrax.PIDController)
        assert (controller.rtol, controller.atol) == (1e-4, 1e-7)
        assert float(dt0) == pytest.approx(float(TS[1] - TS[0]))
    else:
        assert isinstance(controller, diffrax.StepTo) and dt0 is None
        np.testing.assert_array_equal(controller.ts, TS)


@pytest.mark.parametrize("name", list(CONTROLLERS))
def test_a_controller_s_facts_decide_its_bound_and_its_stages(name):
    controller = CONTROLLERS[name]()
    lever = Structure(adjoint="all_steps")
    bound = solve_options(lever, controller, TS)["max_steps"]
    assert bound == (99 if controller.on_grid else lever.max_steps)
    assert solve_options(DEFAULT, controller, TS)["max_steps"] == DEFAULT.max_steps
    assert shares_program(Scenario(scale="smoke", controller=name)) == (not controller.on_grid)


def test_an_unknown_controller_names_the_valid_choices():
    with pytest.raises(ValueError, match="valid choices: pid, stepto"):
        parse_controller("euler")
    with pytest.raises(ValueError, match="valid choices: pid, stepto"):
        Scenario(controller="euler")


@pytest.fixture
def third():
    class ConstantStep(AbstractController):
        """Four constant steps per interval of the grid: a controller that exists only
        in this test."""

        name: ClassVar[str] = "constant"
        label: ClassVar[str] = "constant step"
        line: ClassVar[str] = ":x"
        adaptive: ClassVar[bool] = False
        on_grid: ClassVar[bool] = False
        fused: ClassVar[bool] = False

        def stepsize_controller(self, ts, rtol, atol):
            return diffrax.ConstantStepSize(), (ts[1] - ts[0]) / 4

    try:
        yield ConstantStep
    finally:
        CONTROLLERS.pop("constant", None)


def test_defining_the_class_makes_it_a_choice(third):
    assert CONTROLLERS["constant"] is third and list(CONTROLLERS)[-1] == "constant"
    s = Scenario(scale="smoke", controller="constant")
    assert isinstance(s.stepsize_controller, third)
    assert s.name() == "cpu-1dev-single-constant-strong-smoke"
    args = cli.parser().parse_args(["run", "--out", "x", "--controller", "constant"])
    assert cli.scenario_from_args(args) == Scenario(controller="constant")
    assert controller_label("constant") == "constant step" and CONTROLLER_STYLE["constant"] == ":x"


def test_the_explain_figure_draws_the_third_controller_with_its_line(third):
    """The time-to-target figure takes each controller's dashes from its class's `line`
    (a record of a controller no class names is solid), so that a third controller's
    records draw (the dashes were keyed by pid and stepto: seaborn refused any other)."""
    import matplotlib.pyplot as plt

    from odestudy.builtin.explain import _target_figure
    from odestudy.report.plots import controller_dashes

    names = ["pid", "stepto", "constant", "removed"]
    assert controller_dashes(names) == {
        "pid": "",
        "stepto": (4, 2),
        "constant": (1, 2),
        "removed": "",
    }
    points = [
        {"run": f"{c} run", "mode": "single", "controller": c, "time_s": t, "loss": 1 / (1 + t)}
        for c in names
        for t in (1.0, 2.0, 3.0)
    ]
    fig = _target_figure(points, 0.3)
    legend = {line.get_label(): line for line in fig.axes[0].get_legend().get_lines()}
    assert {n: legend[n].get_linestyle() for n in names} == {
        "pid": "-",
        "stepto": "--",
        "constant": "--",
        "removed": "-",
    }
    plt.close(fig)


def test_the_third_controller_s_facts_refuse_what_it_cannot_run(third):
    with pytest.raises(ValueError, match="fixed-step solve: it needs controller='stepto'"):
        Scenario(scale="smoke", controller="constant", solve="scan")
    with pytest.raises(ValueError, match="fused loop has no controller 'constant'"):
        Scenario(scale="smoke", controller="constant", integrator="fused", adjoint="all_steps")


@pytest.mark.long  # about 10 s here: make test-long keeps make test within its budget
def test_the_third_controller_solves_and_trains(third):
    ys, steps = solve(Rotation(), TS, jnp.array([1.0, 0.0]), Solve("constant"))
    exact = np.stack([np.cos(TS), -np.sin(TS)], axis=-1)
    np.testing.assert_allclose(ys, exact, atol=1e-5)  # Tsit5 at a quarter of the grid's step
    assert int(steps) == pytest.approx(4 * 99, abs=1)
    # The study's step of the scenario, as for any controller.
    from odestudy import VectorField

    data = dataset(8, 0).truncate(10)
    params, static = eqx.partition(VectorField(jr.PRNGKey(1)), eqx.is_array)
    s = Scenario(scale="smoke", controller="constant")
    step = make_parallel_step(s, jax.devices()[:1], static, optax.sgd(1e-3))
    placed = step.place_state(params, optax.sgd(1e-3).init(params))
    _, _, loss, steps = step(*placed, step.place_batch((data.ts, data.ys)))
    assert np.isfinite(float(loss)) and np.all(np.asarray(steps) >= 4 * 9)


def test_a_controller_without_a_recommendation_says_so(third):
    from odestudy.measure.recommended import recommended_levers

    with pytest.raises(ValueError, match="no recommended step for controller 'constant'"):
        recommended_levers(Scenario(scale="smoke", controller="constant"))
