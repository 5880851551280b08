"""The best 1-device step as every multi-device speedup's base, and where splitting the
batch pays (the crossover): the rules and the fit on synthetic records. Nothing here
times or compiles anything."""

import dataclasses

import numpy as np
import pytest

from odestudy.measure.recommended import recommended
from odestudy.measure.scenario import Scenario
from odestudy.report import answer, crossover
from odestudy.report.best import (
    DEFAULT_STEP,
    RECOMMENDED_STEP,
    attach_best,
    best_for,
    best_steps,
    step_of,
)
from odestudy.study.rec import Rec
from odestudy.study.workloads import MAP_DEVICES, WORKLOADS

from .helpers import record


def _one(step_s: float, loss: float = 0.004, best: bool = False, **fields) -> Rec:
    s = Scenario(**fields)
    rec = record(recommended(s) if best else s, step=step_s, jitter=0.02)
    rec.update(final_loss=loss, trained=True)
    return Rec(rec)


def test_the_best_1_device_step_is_the_fastest_that_trains_the_same_model(spread_measured):
    default = _one(0.020)
    fast = _one(0.005, best=True)
    bests = best_steps([default, fast])
    (best,) = bests.values()
    assert best.record is fast and best.step == RECOMMENDED_STEP and best.default is default
    assert best.said().startswith("the recommended step, 5")
    # Trained to another model (final losses past the loss rule): not a base case.
    other = _one(0.005, loss=0.04, best=True)
    (best,) = best_steps([default, other]).values()
    assert best.record is default and best.step == DEFAULT_STEP
    # Untrained: not a base case either.
    lazy = Rec(_one(0.001, best=True), trained=False)
    assert next(iter(best_steps([default, lazy]).values())).record is default


def test_every_multi_device_row_is_set_against_the_best_1_device_step_of_its_batch():
    default, fast = _one(0.020), _one(0.005, best=True)
    two = Scenario(mode="shard_map", devices_per_process=2)
    row = Rec(record(recommended(two), step=0.004, jitter=0.02), final_loss=0.004, trained=True)
    slow = Rec(record(two, step=0.012, jitter=0.02), final_loss=0.004, trained=True)
    rows = [Rec(r, scaling="strong") for r in (default, fast, row, slow)]
    attach_best(rows, rows)
    fast_row, slow_row = rows[2], rows[3]
    assert fast_row["best_step"] == RECOMMENDED_STEP
    assert fast_row["speedup_best"] == pytest.approx(0.005 / 0.004, rel=0.05)
    low, high = fast_row["speedup_best_ci"]
    assert low < fast_row["speedup_best"] < high
    # The default step on 2 devices is slower than the best step on 1: under 1.
    assert slow_row["speedup_best"] < 1
    # Another batch has another base case: none measured here.
    other = dataclasses.replace(two, batch=64)
    assert best_for(Rec(record(other), scaling="strong"), best_steps(rows), "strong") is None


def test_a_step_is_named_by_its_levers():
    assert step_of(record(Scenario())) == DEFAULT_STEP
    assert step_of(record(recommended(Scenario()))) == RECOMMENDED_STEP
    assert step_of(record(Scenario(solve="within_ode"))) == "solve=within_ode"


@pytest.mark.parametrize(
    ("speedups", "pays"),
    [((1.2, 1.5, 1.8), True), ((0.5, 0.6, 0.8), False)],
)
def test_a_crossing_outside_the_measured_span_says_so(speedups, pays):
    found = crossover.crossing([1, 2, 4], [(s, s * 0.95, s * 1.05) for s in speedups], "line")
    assert found.at is None and found.pays is pays
    said = found.said("ms")
    assert ("pays over all of" in said) if pays else ("does not pay up to 4" in said)


@pytest.mark.parametrize("how", ["line", "path"])
def test_the_crossing_is_where_the_speedup_rises_through_one(how):
    work = [0.1, 0.2, 0.4, 0.8, 1.6]
    # speedup = work / 0.4: crosses 1 at 0.4
    speedups = [(w / 0.4, w / 0.4 * 0.9, w / 0.4 * 1.1) for w in work]
    found = crossover.crossing(work, speedups, how)
    assert found.at is not None and found.pays is None
    estimate, low, high = found.at
    assert estimate == pytest.approx(0.4, rel=1e-6)
    assert low <= estimate <= high and high / low < 2
    assert found.said("ms").startswith("pays from 0.4 ms [0.")
    # An interval reaching past the measured span says so rather than extrapolate.
    wide = crossover.Crossing((0.4, 0.01, 9.0), None, (0.1, 1.6), 5)
    assert wide.said("ms") == "pays from 0.4 ms [<0.1, >1.6]"
    assert crossover.Crossing(None, True, (4.0, 128.0), 4).said("series") == (
        "pays over all of 4–128 series"
    )


def _map_point(workload, b: int, mode: str, t1_b: float, t1_2b: float, t2: float) -> list[Rec]:
    """The records of one point: 1 device at b and 2b (the recommended step), 2 devices."""
    w = next(x for x in WORKLOADS if x.name == workload)
    at = dict(scale="quick", controller="pid", device="cpu")
    one = recommended(w.scenario(batch=b, **at))
    whole = recommended(w.scenario(batch=MAP_DEVICES * b, **at))
    two = dataclasses.replace(whole, mode=mode, devices_per_process=MAP_DEVICES)
    out = []
    for s, t, seed in ((one, t1_b, 1), (whole, t1_2b, 2), (two, t2, 3)):
        rec = record(s, step=t, jitter=0.02, seed=seed)
        rec.update(
            final_loss=0.004,
            trained=True,
            solver_steps={"mean": 20.0, "max": 20.0, "executed_per_device": 20.0},
        )
        out.append(Rec(rec))
    return out


def test_points_and_the_crossover_from_records(monkeypatch):
    recs = []
    # 1-device time per iteration: 0.1 ms fixed + 0.01 ms per series; 2 devices pay
    # 0.15 ms more per iteration: splitting pays from 15 series per device.
    for b in (4, 16, 64, 128):
        t1 = lambda n: 20 * (0.1 + 0.01 * n) * 1e-3  # noqa: E731
        recs += _map_point("oscillator w16", b, "shard_map", t1(b), t1(2 * b), t1(b) + 20 * 0.15e-3)
    pts = crossover.points(recs)
    assert len(pts) == 4 and {p.per_device_batch for p in pts} == {4, 16, 64, 128}
    p16 = next(p for p in pts if p.per_device_batch == 16)
    assert p16.work_s == pytest.approx((0.1 + 0.16) * 1e-3, rel=0.05)
    assert p16.base.step == RECOMMENDED_STEP and p16.per_device is not None
    found = crossover.batch_crossing(pts, "oscillator w16", "pid", "shard_map")
    assert found is not None and found.at is not None
    assert 4 < found.at[0] < 16 + 16  # it crosses between the measured batches
    work = crossover.work_crossing(pts, "pid", "shard_map")
    assert work is not None and work.at is not None
    table = str(crossover.crossover_table(pts).rows)
    assert "shard_map" in table and "from" in table
    assert "oscillator w16" in str(crossover.points_table(pts).rows)
    # Each point is a claim (`Crossover.claims`), its speedup as the table states it.
    monkeypatch.setattr(crossover, "points_of", lambda results, scale: (recs, pts))
    claims = crossover.crossover_claims("results", "quick")
    assert [c.value for c in claims] == [p.speedup[0] for p in pts]
    assert {c.comparison.baseline for c in claims} == {"the best 1-device step"}


def test_the_readme_answer_names_the_base_case_and_stays_short(tmp_path):
    default, fast = _one(0.020), _one(0.005, best=True)
    rows = []
    for mode, t in (("shard_map", 0.006), ("pmap", 0.0062), ("shard", 0.02)):
        two = recommended(Scenario(mode=mode, devices_per_process=2))
        rows.append(Rec(record(two, step=t, jitter=0.02), final_loss=0.004, trained=True))
    rows = [Rec(r, scaling="strong", n_devices=r["n_devices"]) for r in (default, fast, *rows)]
    attach_best(rows, rows)
    lines = answer.quick_lines(rows, "cpu")
    text = "\n".join(lines)
    assert "over the best 1-device step, the recommended step, 5" in text
    assert "`shard_map` 0.8" in text and "does not pay" in text and "`shard` 0.2" in text
    # Over the reference's step: on the page, in the table of sessions.
    page = "\n".join(answer.session_table(answer.controller_answers(rows, "cpu", rows)))
    assert "Over the reference's step" in page and "20 ms" in page
    assert np.all([len(line) <= 300 for line in lines])


def test_predicts_default_axis_is_cut_to_what_the_data_set_holds():
    """At the smoke scale (64 series) on 2 devices the default axis stops at 16 per
    device; a batch given by hand that the data set cannot hold is refused in one line."""
    from odestudy.cli import _held

    two = Scenario(scale="smoke", mode="shard_map", devices_per_process=2)
    assert _held((4, 16, 64, 128), two, default=True) == (4, 16)
    with pytest.raises(ValueError, match="more than the data set's 64 series"):
        _held((4, 64), two, default=False)
