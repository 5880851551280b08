"""The explain study on trained models: heterogeneous rows train longer (and say why in
their record), rows above the trained loss are marked in every table, ratios carry
intervals, and the time-to-target rows (the recommended step beside the default) are a
study of their own. Synthetic records; nothing here trains."""

from odestudy.builtin.explain import grouping, within_ode
from odestudy.measure.recommended import controller_levers
from odestudy.measure.scenario import Scenario, heterogeneous_training
from odestudy.report.loss import trained
from odestudy.study.grid import SPREADS, WITHIN_ODE_SPREAD, explain_scenarios
from odestudy.study.matrix import parse_selection, plan, select
from odestudy.study.rec import Rec

from .helpers import record


def test_heterogeneous_rows_train_as_chosen_and_say_why():
    chosen = heterogeneous_training("quick")
    assert chosen == {"steps_per_stage": 300, "learning_rate": 3e-3}
    rows = [s for s in explain_scenarios("quick") if s.spread > 0]
    assert {s.spread for s in rows} == set(SPREADS)
    assert all(s.steps_per_stage == 300 and s.learning_rate == 3e-3 for s in rows)
    assert all("300 steps per stage" in s.training_note() for s in rows)
    assert Scenario(spread=0.5).training_note() is None  # the scale's own training
    assert record(rows[0])["training_note"] == rows[0].training_note()
    within = [s for s in rows if s.solve == "within_ode"]
    assert within and {s.spread for s in within} == {WITHIN_ODE_SPREAD}


def test_the_target_study_sets_the_recommended_step_beside_the_default():
    rows, not_run = plan("seed", "cpu", study="target")
    assert not not_run and {s.scale for s in rows} == {"seed"}
    chosen = select(rows, parse_selection("batch=32"))
    levered = [s for s in chosen if s.solve == controller_levers("pid")["solve"]]
    assert len(chosen) == 4 and len(levered) == 2
    assert {s.mode for s in levered} == {"single", "shard_map"}
    assert all(s.eval_every for s in chosen)


def _pair(spread: float, loss: float, **changes):
    s = Scenario(spread=spread, **heterogeneous_training("quick"))
    base = Rec(record(s, step=0.02), final_loss=0.005)
    other = Rec(record(Scenario(**{**s.to_dict(), **changes}), step=0.01), final_loss=loss)
    return [base, other]


def test_a_row_above_the_trained_loss_is_marked_in_the_tables():
    assert trained({"scale": "quick", "final_loss": 0.02})
    assert not trained({"scale": "quick", "final_loss": 0.05})
    table = str(grouping(_pair(0.5, 0.14, batching="grouped"))[1].rows)
    assert "0.14 (above 0.02: not trained)" in table
    assert "0.50 [0.50, 0.50]" in table  # grouped / random with its interval
    table = str(within_ode(_pair(0.5, 0.006, solve="within_ode"))[1].rows)
    assert "not trained" not in table and "2.00 [2.00, 2.00]" in table
