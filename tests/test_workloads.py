"""The workload map: its rows, the larger-state problem, a trained state loaded back,
and its report (table, where the answer changes, the prediction's check) on synthetic
records. Nothing here times anything."""

import dataclasses

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import pytest

from odestudy.measure.problem import PROBLEMS, OscillatorBank
from odestudy.measure.recommended import recommended
from odestudy.measure.scenario import Scenario
from odestudy.measure.solvers import Structure
from odestudy.measure.state import save_state
from odestudy.measure.training import load_trained, prepare
from odestudy.report import workloads as report
from odestudy.report.map_levers import MAP_LEVERS, lever_section, lever_summary
from odestudy.report.tables import render_blocks
from odestudy.study import records
from odestudy.study.rec import LeverRecord, Prediction, Rec
from odestudy.study.studies import Text
from odestudy.study.workloads import (
    CROSSOVER_BATCHES,
    CROSSOVER_WORKLOADS,
    MAP_DEVICES,
    MAP_FOLDER,
    MULTI_MODES,
    WORKLOADS,
    crossover_scenarios,
    map_scenarios,
    workload_of,
)

from .helpers import HERE, dataset, record


def test_the_map_has_every_mode_and_controller_of_every_workload():
    rows = map_scenarios()
    assert (
        len({s.key() for s in rows}) == len(rows) == len(WORKLOADS) * 2 * (3 + 2 * len(MULTI_MODES))
    )
    assert {s.problem for s in rows} >= {"oscillator", "oscillator_bank"}
    assert len({s.width for s in rows if s.problem == "oscillator"}) >= 3
    for w in WORKLOADS:
        mine = [s for s in rows if workload_of(s.to_dict()) is w]
        for controller in ("pid", "stepto"):
            default = {
                (s.mode, s.total_devices)
                for s in mine
                if s.controller == controller and s.structure == Structure()
            }
            assert default == {("single", 1)} | {(m, MAP_DEVICES) for m in MULTI_MODES}
            best = {
                (s.mode, s.total_devices, s.batch)
                for s in mine
                if s.controller == controller and s.structure != Structure()
            }
            whole, share = mine[0].batch, mine[0].batch // MAP_DEVICES
            assert best == {(m, n, whole) for m, n in default} | {("single", 1, share)}
    assert all(s.scaling == "strong" and s.device == "cpu" for s in rows)
    # A workload's own training is part of every row's name and key.
    w256 = next(w for w in WORKLOADS if w.width == 256)
    assert all("lr0.003" in s.name() for s in rows if workload_of(s.to_dict()) is w256)


def test_the_batch_axis_runs_the_recommended_step_at_every_per_device_batch():
    rows = crossover_scenarios()
    assert len({s.key() for s in rows}) == len(rows)
    assert all(recommended(s) == s and s.scaling == "strong" for s in rows)
    for name in CROSSOVER_WORKLOADS:
        for controller in ("pid", "stepto"):
            mine = [
                s
                for s in rows
                if workload_of(s.to_dict()).name == name and s.controller == controller
            ]
            for b in CROSSOVER_BATCHES:
                # the weak base at b, the strong base at MAP_DEVICES * b, every mode there
                assert any(s.total_devices == 1 and s.batch == b for s in mine)
                at = {s.mode for s in mine if s.batch == MAP_DEVICES * b}
                assert at == {"single", *MULTI_MODES}
    # The map's own rows at its batch are the same scenarios (one record serves both).
    shared = {s.key() for s in map_scenarios()} & {s.key() for s in rows}
    assert len(shared) == len(CROSSOVER_WORKLOADS) * 2 * (2 + len(MULTI_MODES))


def test_the_bank_stacks_oscillator_series_in_one_state():
    bank = PROBLEMS["oscillator_bank"]
    assert isinstance(bank, OscillatorBank)
    data = bank.make_data(3, jr.PRNGKey(0))
    assert data.ys.shape == (3, 100, 2 * bank.COPIES) and data.ts.shape == (3, 100)
    one = dataset(3 * bank.COPIES, 0)
    # jr.PRNGKey(0) as `helpers.dataset` draws it: series i, copy k is oscillator series
    # COPIES * i + k.
    np.testing.assert_allclose(data.ys[1, :, 4:6], one.ys[bank.COPIES + 2])
    field = bank.make_field(jr.PRNGKey(1), 16)
    assert field(0.0, data.ys[0, 0], None).shape == (16,)


def test_a_saved_state_loads_back_as_the_trained_model(tmp_path):
    s = Scenario(scale="smoke", width=16)
    devices = jax.devices("cpu")[:1]
    setup = prepare(s, devices)
    params = jax.tree.map(lambda x: x + 1.0, setup.step.unplace(setup.params))
    opt_state = setup.step.unplace(setup.opt_state)
    save_state(tmp_path / "state.npz", params, opt_state)
    state: dict = {}
    assert load_trained(s, devices, tmp_path / "state.npz", state)["device_kind"]
    loaded = eqx.filter(state["model"], eqx.is_array)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _map_records(speedups: dict[str, list[float]]) -> list[Rec]:
    """Synthetic map records of the first two workloads, PID: 1 device at 10 ms (the
    first workload with twice the solver iterations: the lighter per iteration), each
    2-device mode at 10 ms / its speedup per workload."""
    out = []
    for i, w in enumerate(WORKLOADS[:2]):
        one = w.scenario(controller="pid")
        base = Rec(record(one, step=0.01, jitter=0.02, seed=i))
        base["solver_steps"] = {"executed_per_device": 20.0 / (i + 1), "mean": 5, "max": 10}
        out.append(base)
        for mode, values in speedups.items():
            s = dataclasses.replace(one, mode=mode, devices_per_process=MAP_DEVICES)
            out.append(Rec(record(s, step=0.01 / values[i], jitter=0.02, seed=10 + i)))
    for r in out:
        r["machine_id"] = "m"
        r["path"] = "x"
    return out


def test_map_rows_give_speedups_and_leave_untrained_rows_without_one():
    recs = _map_records(
        {"pmap": [1.5, 1.6], "shard": [0.4, 1.2], "shard_map": [1.5, 1.7], "explicit": [0.4, 1.2]}
    )
    recs[-1]["trained"], recs[-1]["final_loss"] = False, 0.3
    rows = report.map_rows(recs)
    first = [r for r in rows if r.workload == WORKLOADS[0].name]
    assert [r.mode for r in first] == ["single", *MULTI_MODES]
    shard = next(r for r in first if r.mode == "shard")
    est, low, high = shard.speedup
    assert low <= est <= high and est == pytest.approx(0.4, rel=0.05)
    untrained = next(r for r in rows if r.record is recs[-1])
    assert untrained.speedup is None  # untrained: no speedup
    assert "untrained" in report.workloads_table(rows)


def test_the_map_states_its_answer_as_claims_the_table_shows(monkeypatch):
    """`Map.claims` (`workloads.map_claims`): a claim per cell of the best-step table,
    each mode's speedup over the best 1-device step, as the cell renders it."""
    recs = _map_records({"pmap": [1.5, 1.6], "shard": [0.4, 1.2], "shard_map": [1.5, 1.7]})
    rows = report.map_rows(recs)
    monkeypatch.setattr(report, "rows_of", lambda results, scale: (recs, rows))
    claims = report.map_claims("results", "quick")
    cells = [c for row in report.best_table(rows).rows for c in row[3:] if c != "–"]
    assert len(claims) == len(cells) == 6
    for claim, cell in zip(claims, cells, strict=True):
        value, low, high = claim.stated()
        assert cell.startswith(f"{value:.2f} [{low:.2f}, {high:.2f}]")
        assert claim.comparison.baseline == "the best 1-device step"


def test_the_crossover_names_where_shard_stops_being_the_slow_mode():
    """`shard` is set against the modes with a loop per device (`pmap`, `shard_map`);
    a one-loop mode's rows (`explicit`), present or not, change nothing."""
    recs = _map_records({"pmap": [1.5, 1.6], "shard": [0.4, 1.65], "shard_map": [1.5, 1.7]})
    assert report.RIVALS == ("pmap", "shard_map")
    text = report.crossover(report.map_rows(recs), "pid")
    first, second = (f"{w.name} (" for w in WORKLOADS[:2])
    assert f"stops being below both other modes between {first}" in text
    assert f"and {second}" in text and "(still below `shard_map` there" in text
    level = _map_records({"pmap": [1.5, 1.6], "shard": [0.4, 1.8], "shard_map": [1.5, 1.7]})
    text = report.crossover(report.map_rows(level), "pid")
    assert f"stops being the slow mode between {first}" in text and f"and {second}" in text
    slow = _map_records({"pmap": [1.5, 1.6], "shard": [0.4, 0.5], "shard_map": [1.5, 1.7]})
    assert "slow mode at every measured workload" in report.crossover(report.map_rows(slow), "pid")
    slow = _map_records(
        {"pmap": [1.5, 1.6], "shard": [0.4, 0.5], "shard_map": [1.5, 1.7], "explicit": [2, 2]}
    )
    assert "slow mode at every measured workload" in report.crossover(report.map_rows(slow), "pid")


def test_the_prediction_check_gives_a_median_error_per_mode_and_the_wrong_term():
    recs = _map_records(
        {"pmap": [1.5, 1.6], "shard": [0.4, 1.2], "shard_map": [1.5, 1.7], "explicit": [0.4, 1.2]}
    )
    rows = report.map_rows(recs)
    measured = {(r.workload, r.mode): r.record.step_time_s for r in rows if r.n_devices > 1}

    def prediction(w, factor):
        out = []
        for mode in MULTI_MODES:
            t = measured[(w.name, mode)] * factor[mode]
            loop = t / 2 if mode in ("shard", "explicit") else 0.0
            out.append(
                dict(mode=mode, step_time_s=t, compute_s=t - loop, allreduce_s=0.0, in_loop_s=loop)
            )
        return Prediction(workload=w.name, scenario={"controller": "pid"}, n_devices=2, rows=out)

    factor = {"pmap": 1.1, "shard": 0.5, "shard_map": 0.9, "explicit": 0.5}
    errors = report.prediction_errors(rows, [prediction(w, factor) for w in WORKLOADS[:2]])
    assert len(errors) == 8
    lines = report.validation_lines(errors)
    assert lines[0].startswith("- `pmap`: median |error| = 10 % over 2 rows")
    assert "above 25 %" in lines[1] and "too low" in lines[1] and "solver loop" in lines[1]
    assert "above" not in lines[2]
    assert lines[3].startswith("- `explicit`") and "`explicit`'s solver loop" in lines[3]


def test_the_prediction_check_is_given_session_by_session(tmp_path):
    """Each session's trained 2-device rows against the newest prediction made before
    them: the row measured again is checked against the prediction made again before it,
    the row it replaced (kept under `sessions/`) against the earlier one (`earlier/`)."""
    w = WORKLOADS[0]
    one = w.scenario(controller="pid")
    two = dataclasses.replace(one, mode="pmap", devices_per_process=MAP_DEVICES)
    folder = tmp_path / MAP_FOLDER
    replaced = folder / records.REPLACED / "20260102T0950"
    day1, day2 = "2026-01-01T10:00:00+00:00", "2026-01-02T10:00:00+00:00"
    for root, started, step in ((replaced, day1, 0.008), (folder, day2, 0.004)):
        for s, t in ((one, 0.01), (two, step)):
            rec = record(s, step=t)
            rec.update(started=started, finished=started)
            records.write_json_atomic(records.record_path(s, root), rec)
    predict = records.machine_folder(folder) / "predict"
    for path, t, made in (
        (predict / records.EARLIER / "p.1.json", 0.01, "2026-01-01T09:00:00+00:00"),
        (predict / "p.json", 0.005, "2026-01-02T09:00:00+00:00"),
    ):
        row = dict(mode="pmap", step_time_s=t, compute_s=t, allreduce_s=0.0, in_loop_s=0.0)
        records.write_json_atomic(path, dict(
            workload=w.name, scenario=two.to_dict(), n_devices=MAP_DEVICES, rows=[row],
            finished=made, made_from={"model": 12, "profile": None},
        ))  # fmt: skip
    checked = report.session_errors(tmp_path, HERE, "quick")
    assert [session.start.day for session, _ in checked] == [1, 2]
    (first,), (second,) = (errors for _, errors in checked)
    assert first.predicted_s == 0.01 and first.error == pytest.approx(0.01 / 0.008 - 1)
    assert second.predicted_s == 0.005 and second.error == pytest.approx(0.005 / 0.004 - 1)
    text = report.session_lines(checked)
    assert text.count("`pmap` 25 % (1 rows)") == 2 and "made before the rows" in text
    said = report._sessions_said(checked)
    assert "prediction model 12 made before the rows, in 2 sessions" in said
    assert "at most 25 % (`pmap`, 2026-01-01" in said
    # On the page of another machine, this machine's check is a section of its own.
    assert report.other_machines_section(tmp_path, HERE, "quick") == []
    head, where, lines = report.other_machines_section(tmp_path, "another-machine", "quick")
    assert head.markdown == f"### On {HERE}" and lines.markdown == text
    assert f"{MAP_FOLDER}/{HERE}/`" in where.markdown


def test_the_table_says_so_where_the_map_has_no_records(tmp_path):
    body, rows = report.workloads_body(tmp_path)
    assert rows == [] and "make map" in str(body)


def test_map_records_read_the_map_folder_of_one_machine(tmp_path):
    s = WORKLOADS[0].scenario(controller="pid")
    path = records.record_path(s, tmp_path / MAP_FOLDER)
    records.write_json_atomic(path, record(s))
    stray = Scenario(width=48)  # not a row of the map: left out
    records.write_json_atomic(records.record_path(stray, tmp_path / MAP_FOLDER), record(stray))
    found = report.map_records(tmp_path)
    assert [r["scenario_key"] for r in found] == [s.key()]


def _lever_row(label: str, step_s: float, loss: float) -> dict:
    rng = np.random.default_rng(len(label))
    times = [list(step_s * (1 + 0.01 * rng.standard_normal(10))) for _ in range(6)]
    return {
        "label": label,
        "levers": {},
        "final_loss": loss,
        "step_time_runs_s": [float(np.median(t)) for t in times],
        "step_times_runs_s": times,
    }


@pytest.mark.parametrize("lever", MAP_LEVERS, ids=lambda lever: lever.folder)
def test_a_lever_along_the_map_gives_each_pair_its_speedup(tmp_path, lever):
    w = WORKLOADS[0]
    (base, with_it, _), (rec_base, rec_with, _) = lever.pairs
    rec = {
        "workload": w.name,
        "scenario": w.scenario(controller="pid", scale="quick").to_dict(),
        "machine_id": "m",
        "started": "2026-11-25T10:00:00+00:00",
        "finished": "2026-11-25T10:05:00+00:00",
        "rows": [
            _lever_row(base, 0.010, 0.004),
            _lever_row(with_it, 0.008, 0.004),
            _lever_row(rec_base, 0.008, 0.004),
            _lever_row(rec_with, 0.010, 0.5),  # did not train
        ],
    }
    path = tmp_path / MAP_FOLDER / "m" / lever.folder / f"{w.slug()}-pid.json"
    records.write_json_atomic(path, rec)
    assert lever.records(tmp_path, "m") == [{**rec, "path": str(path)}]
    text = render_blocks(lever_section(tmp_path, "m", lever))
    (row,) = [line for line in text.splitlines() if line.startswith("| ")][1:]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:2] == [w.name, "pid"]
    assert cells[2].startswith("1.25 [") and "not trained" not in cells[2]
    assert cells[3].startswith("0.80 [") and "not trained" in cells[3]
    # A machine without such records shows the one that holds them, and says so.
    elsewhere = lever_section(tmp_path, "other", lever)
    assert elsewhere[1] == Text("Measured on m: other holds no such records.")
    assert "| " + w.name in render_blocks(elsewhere)
    missing = lever_section(tmp_path / "none", "other", lever)[1]
    assert missing == Text(f"No records yet: run `make {lever.target}`.")
    # The README's line counts only pairs whose models trained: here none.
    assert lever_summary([LeverRecord(rec)], lever) == []
    rec["rows"][3] = _lever_row(rec_with, 0.010, 0.004)
    (line,) = lever_summary([LeverRecord(rec)], lever)
    assert line.startswith(f"- {lever.name} on the recommended step")
    assert "0.80x to 0.80x over 1 workload" in line and "0 of them faster" in line
    assert "1 slower" in line


def test_the_map_time_is_read_from_its_records_only_within_one_session():
    def timed(started: str, finished: str) -> dict:
        return {"machine_id": "m", "started": started, "runs_finished": [finished]}

    rows = [
        timed("2026-11-25T06:45:00+00:00", "2026-11-25T07:10:00+00:00"),
        timed("2026-11-25T06:50:00+00:00", "2026-11-25T07:12:00+00:00"),
    ]
    found = [{"machine_id": "m", "finished": "2026-11-25T07:20:00+00:00"}]
    line = report.map_time_line(rows, found)
    assert "2 rows and 1 predictions here in 35 min (06:45–07:20 UTC" in line
    # A row measured hours later is another session: no one time.
    late = [*rows, timed("2026-11-25T11:00:00+00:00", "2026-11-25T11:05:00+00:00")]
    assert "span 2 sessions" in report.map_time_line(late, found)
    assert report.map_time_line([], []) == ""
