"""A scenario measured twice in one session counts once with all its runs, and a
prediction is held out from it only where made before every run."""

from odestudy.report.heldout import made_before
from odestudy.report.runs import merged
from odestudy.study.rec import Rec


def _rec(started: str, runs: list[list[float]]) -> Rec:
    return Rec(scenario_key="k", started=started, step_times_runs_s=runs)


def test_a_scenario_measured_twice_pools_its_runs_and_starts_with_the_first():
    first = _rec("2026-11-29T16:15:00+00:00", [[1.0, 1.1], [1.2, 1.0]])
    again = _rec("2026-11-29T17:07:00+00:00", [[2.0, 2.1]])
    (joined,) = merged([again, first])
    assert joined.step_times_runs_s == [[1.0, 1.1], [1.2, 1.0], [2.0, 2.1]]
    assert joined.started == first.started and joined.newest is again
    between = {"finished": "2026-11-29T17:00:00+00:00"}
    assert made_before(between, [joined]) is False
    assert made_before(between, [joined.newest]) is True
