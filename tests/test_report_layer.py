"""The report layer on synthetic records: intervals, the baseline join, weak scaling
on the strong 1-device run, stale and corrupt records, resume keyed on the machine,
and merging repeats. Nothing here runs JAX programs."""

import json

import numpy as np
import pytest

from odestudy.measure import environment
from odestudy.measure.environment import versions
from odestudy.measure.recommended import recommended
from odestudy.measure.scenario import Scenario
from odestudy.measure.timing import PROTOCOL
from odestudy.report.document import write_report
from odestudy.report.frames import BaselineError, baseline, scaling_rows
from odestudy.report.intervals import fmt_interval, ratio_interval
from odestudy.study import records
from odestudy.study.grid import seed_scenarios
from odestudy.study.matrix import record_path
from odestudy.study.plan import reusable
from odestudy.study.rec import Rec, Sweep
from odestudy.study.repeats import merge_runs, runs
from odestudy.study.studies import Text

from .helpers import HERE, record


def test_interval_of_exact_ratio_is_a_point():
    a, b = record(Scenario(), step=0.02), record(Scenario(), step=0.01)
    assert ratio_interval(a, b) == pytest.approx((2.0, 2.0, 2.0))


def test_interval_of_noisy_ratio_contains_the_estimate():
    a = record(Scenario(), step=0.02, jitter=0.2, seed=1)
    b = record(Scenario(), step=0.01, jitter=0.2, seed=2)
    est, lo, hi = ratio_interval(a, b)
    assert lo < est < hi and lo < 2.0 < hi
    assert fmt_interval(1.8, 1.62, 1.95) == "1.80 [1.62, 1.95]"
    assert fmt_interval(None, None, None) == "–"


def test_strong_speedup_against_the_joined_baseline():
    one = record(Scenario(), step=0.02)
    two = record(Scenario(devices_per_process=2, mode="shard_map"), step=0.01)
    other = record(Scenario(controller="stepto"), step=0.5)  # another controller
    rows = {r["name"]: r for r in scaling_rows([one, two, other])}
    row = rows[two["name"]]
    assert row["speedup"] == pytest.approx(2.0) and row["efficiency"] == pytest.approx(1.0)
    assert row["speedup_ci"] == pytest.approx((2.0, 2.0))


def test_weak_scaling_reuses_the_strong_one_device_run():
    one = record(Scenario(), step=0.02)  # strong, global batch 32
    weak = record(Scenario(devices_per_process=4, mode="pmap", scaling="weak"), step=0.04)
    assert weak["global_batch"] == 128 and weak["per_device_batch"] == 32
    one, weak = Rec(one), Rec(weak)
    assert baseline(weak, [one, weak], "weak") is one
    row = next(r for r in scaling_rows([one, weak]) if r["name"] == weak["name"])
    assert row["efficiency"] == pytest.approx(0.5) and row["speedup"] == pytest.approx(2.0)


def test_ambiguous_and_missing_baselines_are_named_errors():
    one = record(Scenario(), step=0.02)
    twin = dict(one, name="the-same-configuration-again")
    two = record(Scenario(devices_per_process=2, mode="pmap"), step=0.01)
    one, twin, two = Rec(one), Rec(twin), Rec(two)
    with pytest.raises(BaselineError, match="2 ambiguous"):
        baseline(two, [one, twin, two], "strong")
    with pytest.raises(BaselineError, match="no 1-device baseline"):
        baseline(two, [two], "strong")
    row = scaling_rows([two])[0]
    assert row["speedup"] is None and "no 1-device baseline" in row["baseline_error"]


def test_baseline_comes_from_the_same_machine_only():
    one = Rec(record(Scenario(), step=0.02, machine="another-machine"))
    two = Rec(record(Scenario(devices_per_process=2, mode="pmap"), step=0.01))
    with pytest.raises(BaselineError):
        baseline(two, [one, two], "strong")


def _write(results, rec, name=None, text=None):
    path = results / rec["machine_id"] / rec["scale"] / (name or rec["name"]) / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text is not None else json.dumps(rec))
    return path


def test_report_skips_corrupt_and_stale_records(tmp_path):
    results = tmp_path / "results"
    one = record(Scenario(scale="smoke"), step=0.02)
    two = record(Scenario(scale="smoke", devices_per_process=2, mode="shard"), step=0.015)
    for r in (one, two):
        _write(results, r)
    corrupt = _write(results, one, name="corrupt", text="{not json")
    stale_rec = record(Scenario(scale="smoke", batch=7))  # in no matrix
    stale = _write(results, stale_rec)
    # `odestudy matrix --recommended` writes records of its own: not stale.
    levered = _write(results, record(recommended(Scenario(scale="smoke")), step=0.018))
    out = write_report(results, "smoke", tmp_path / "figures", draw=False)
    reasons = dict(out["skipped"])
    assert reasons[str(corrupt)].startswith("unreadable")
    assert reasons[str(stale)].startswith("stale")
    assert str(levered) not in reasons
    table = out["tables"]["cpu"].read_text()
    assert "1.33 [1.33, 1.33]" in table  # 0.02 / 0.015, a 95% interval
    assert HERE in table
    assert "corrupt" in out["tables"]["skipped"].read_text()
    # Tables only: no scaling or headline figure drawn.
    assert out["headline"] is None and not list((tmp_path / "figures").glob("*scaling*"))


def test_the_scaling_tables_hold_the_current_protocol_only(tmp_path):
    """A record of an older measurement protocol is listed as skipped, not set beside
    today's rows (its speedup could not be joined to today's baseline anyway)."""
    results = tmp_path / "results"
    _write(results, record(Scenario(scale="smoke"), step=0.02))
    _write(results, record(Scenario(scale="smoke", devices_per_process=2, mode="pmap")))
    old = _write(
        results,
        dict(
            record(Scenario(scale="smoke", devices_per_process=4, mode="pmap")),
            protocol=PROTOCOL - 1,
        ),
    )
    out = write_report(results, "smoke", tmp_path / "figures", draw=False)
    assert dict(out["skipped"])[str(old)].startswith("older measurement protocol")
    table = out["tables"]["cpu"].read_text()
    # The reference's columns: one row each for 1 and 2 devices, none for the old 4.
    assert sum(line.startswith("| cpu") for line in table.splitlines()) == 2


def test_the_reference_is_compared_with_seed_rows_only(tmp_path):
    """The reference's rows stand beside our seed-scale rows (its configuration), never
    beside the quick scale's, whatever scale the report holds."""
    results = tmp_path / "results"
    _write(results, record(Scenario(scale="quick"), step=0.0123))
    out = write_report(results, "quick", tmp_path / "figures", draw=False)
    text = out["tables"]["reference"].read_text()
    assert "0.0123" not in text and "no record" in text and "**seed** scale" in text
    (one,) = [s for s in seed_scenarios("cpu") if s.total_devices == 1 and s.controller == "pid"]
    _write(results, record(one, step=0.0456))
    text = write_report(results, "quick", tmp_path / "figures", draw=False)["tables"][
        "reference"
    ].read_text()
    assert "0.0456" in text and "0.0123" not in text


def test_the_gpu_table_says_where_the_gpu_rows_are(tmp_path):
    """No current GPU row at this scale: the table says so and names the GPU records that
    exist (an older protocol, the seed scale), machine and folder."""
    results = tmp_path / "results"
    _write(results, record(Scenario(scale="smoke"), step=0.02))
    (one,) = [s for s in seed_scenarios("gpu") if s.total_devices == 1 and s.controller == "pid"]
    _write(results, dict(record(one, machine="a-gpu-machine"), protocol=PROTOCOL - 1))
    text = write_report(results, "smoke", tmp_path / "figures", draw=False)["tables"][
        "gpu"
    ].read_text()
    assert "No GPU row of the current protocol" in text
    assert "1 at the seed scale on `a-gpu-machine`" in text


def test_resume_runs_records_of_another_machine_and_skips_this_ones(tmp_path):
    s = Scenario(scale="smoke")
    path = record_path(s, tmp_path)
    assert path.parent.parent.parent.name == HERE
    rec = dict(record(s), scenario_key=s.key())
    records.write_json_atomic(path, rec)
    assert reusable(s, path) is not None
    records.write_json_atomic(path, dict(rec, machine_id="another-machine"))
    assert reusable(s, path) is None
    records.write_json_atomic(path, dict(rec, versions=dict(versions(), jax="0.0.1")))
    assert reusable(s, path) is None


@pytest.mark.parametrize("status", ["failed", "not_run"])
def test_failed_and_not_run_records_are_retried(tmp_path, status):
    s = Scenario(scale="smoke")
    path = record_path(s, tmp_path)
    records.write_json_atomic(path, record(s, status=status))
    assert reusable(s, path) is None


def test_merging_a_repeat_pools_step_times():
    s = Scenario(scale="smoke")
    first = record(s, step=0.01, n_runs=1)
    repeat = record(s, step=0.03, n_runs=1)
    merged = merge_runs(first, repeat)
    assert runs(merged) == 2
    assert merged["step_time_runs_s"] == pytest.approx([0.01, 0.03])
    assert merged["step_time_s"] == pytest.approx(0.02)
    assert merged["final_loss"] == first["final_loss"]  # the cold run's
    failed = merge_runs(first, dict(repeat, status="failed", error="boom"))
    assert runs(failed) == 1 and failed["repeat_errors"] == ["boom"]
    with pytest.raises(ValueError):
        merge_runs(first, record(Scenario(scale="smoke", controller="stepto")))


def _sweep(controller="pid"):
    """A synthetic step-cost sweep: iterations 10 + log2(b), 1 ms + 10 us * b each."""
    rows = []
    for b in (8, 16, 32, 64):
        iters = 10 + np.log2(b)
        rows.append(
            {"batch": b, "iterations_executed": iters, "step_time_s": iters * (1e-3 + 1e-5 * b)}
        )
    return Sweep(rows=rows, scenario={"controller": controller})


def test_projection_scales_the_measured_baseline_by_the_sweep():
    from odestudy.report.projection import Validation, predict, projection_body

    sweep, c = _sweep(), (lambda b: 1e-3 + 1e-5 * b)
    base = Rec(global_batch=32, step_time_s=0.05)
    p = predict(sweep, base, "pmap", 2, 32, allreduce_s=1e-4)
    assert p.compute_s == pytest.approx(0.05 * c(16) / c(32))
    assert p.step_time_s == pytest.approx(p.compute_s + 1e-4)
    shard = predict(sweep, base, "shard", 2, 32, 1e-4, in_loop=3, loop_latency_s=1e-5)
    assert shard.in_loop_s == pytest.approx(3 * 15 * 1e-5)  # I(32) = 15
    weak = predict(sweep, Rec(global_batch=16, step_time_s=0.02), "shard_map", 2, 32, 0)
    assert weak.compute_s == pytest.approx(0.02 * 15 / 14)  # I(32) / I(16)
    body = projection_body(
        [
            Validation(
                machine="m",
                mode="pmap",
                n_devices=2,
                controller="pid",
                scaling="strong",
                measured_s=p.step_time_s * 1.1,
                predicted=p,
                error=-0.1,
            )
        ],
        ["m"],
        [],
    )
    assert body[-1] == Text("validation: median |error| = 10%")


def test_settled_report_has_no_clock_times(tmp_path):
    import nbformat

    from odestudy.report.document import settle_report

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f'results = "{environment.ROOT}/results"'),
        nbformat.v4.new_markdown_cell("x"),
    ]
    stamp = {
        "start_time": "2026-01-01T00:00:00",
        "end_time": "2026-01-01T00:00:01",
        "duration": 1.0,
        "status": "completed",
    }
    nb.metadata["papermill"] = dict(stamp)
    for cell in nb.cells:
        cell.metadata["papermill"] = dict(stamp)
        cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
    nbformat.write(nb, tmp_path / "report_x.ipynb")
    html = settle_report(tmp_path / "report_x.html")
    first = (tmp_path / "report_x.ipynb").read_text(), html.read_text()
    settled = nbformat.read(tmp_path / "report_x.ipynb", 4)
    assert [c.id for c in settled.cells] == ["cell-00", "cell-01"]
    assert settled.cells[0].source == 'results = "results"'  # relative to the checkout
    for node in [settled, *settled.cells]:
        assert "execution" not in node.metadata
        assert node.metadata["papermill"] == {"status": "completed"}
    settle_report(html)
    assert ((tmp_path / "report_x.ipynb").read_text(), html.read_text()) == first


def test_records_outside_scale_folders_are_not_read(tmp_path):
    from odestudy.report.frames import read_records

    rec = record(Scenario(scale="smoke"))
    inside = _write(tmp_path, rec)
    aside = tmp_path / rec["machine_id"] / "optimiser_pair" / rec["name"] / "metrics.json"
    aside.parent.mkdir(parents=True)
    aside.write_text(json.dumps(rec))
    assert [r["path"] for r in read_records(tmp_path, None, current=False)] == [str(inside)]


def _bounded_sweep(per_sample_flops: float, rates: dict | None) -> dict:
    """A sweep whose fit is 200 us fixed + 20 us per sample per iteration, and whose cost
    analysis grows by `per_sample_flops` and 1 kB per sample."""
    rows = [
        {
            "batch": b,
            "flops_cost_analysis": 1e5 + per_sample_flops * b,
            "bytes_cost_analysis": 1e4 + 1e3 * b,
            "forward_share": 0.3,
        }
        for b in (4, 16, 64)
    ]
    return {
        "rows": rows,
        "rates": rates,
        "label": "default",
        "scenario": {"controller": "pid"},
        "fit": {"fixed_per_iteration_s": 2e-4, "per_sample_iteration_s": 2e-5},
    }


@pytest.mark.parametrize("per_sample_flops,bound", [(2e4, "overhead"), (2e6, "compute")])
def test_step_verdict_from_the_fit_and_the_measured_rates(per_sample_flops, bound):
    from odestudy.report.step import verdict
    from odestudy.study.rec import Sweep

    rates = {"matmul_flops_per_s": 1e11, "memory_bytes_per_s": 1e10, "cache_bytes_per_s": 1e11}
    v = verdict(Sweep(_bounded_sweep(per_sample_flops, rates)))
    assert v.crossover_batch == pytest.approx(10)  # 200 us / 20 us
    assert v.flops_per_s == pytest.approx(per_sample_flops / 2e-5)
    assert v.bytes_per_s == pytest.approx(1e3 / 2e-5)
    assert v.bound == bound
    assert v.memory_fraction == pytest.approx(5e7 / 1e10)
    assert verdict(Sweep(_bounded_sweep(per_sample_flops, None))).bound is None  # no rates
    dram_only = {"matmul_flops_per_s": 1e11, "memory_bytes_per_s": 1e10}
    assert verdict(Sweep(_bounded_sweep(per_sample_flops, dram_only))).bound is None
    cache_bound = dict(rates, cache_bytes_per_s=6e7)  # 50 MB/s per sample >= half of it
    assert verdict(Sweep(_bounded_sweep(2e4, cache_bound))).bound == "memory"


def test_step_table_lists_the_verdict_and_every_lever():
    from odestudy.report.step import step_table
    from odestudy.report.tables import render_blocks

    lever = {
        "label": "within_ode",
        "levers": {"solve": "within_ode"},
        "step_time_s": 0.02,
        "speedup_vs_default": 1.2,
        "speedup_ci": [1.1, 1.3],
        "final_loss": 0.004,
        "first_step_params_rel_diff_vs_default": 1e-3,
    }
    text = render_blocks(
        step_table(
            [
                _bounded_sweep(
                    2e4,
                    {
                        "matmul_flops_per_s": 1e11,
                        "memory_bytes_per_s": 1e10,
                        "cache_bytes_per_s": 1e11,
                    },
                )
            ],
            [{"scenario": {"controller": "pid"}, "rows": [lever]}],
        )
    )
    assert "| overhead" in text and "1.20 [1.10, 1.30]" in text
    assert "`solve=within_ode`" in text  # the recommended levers are named
    empty = render_blocks(step_table([], []))
    assert "No step-cost sweep" in empty and "No lever records" in empty


def test_step_cost_figure_splits_forward_from_the_rest_when_timed(tmp_path):
    """Sweeps that timed the forward pass alone get a third panel (forward against
    backward + update); older sweeps without it still draw the two panels."""
    import matplotlib.image as mpimg

    from odestudy.report.plots import step_cost_figure

    def sweep(forward: bool) -> Sweep:
        rows = [
            {
                "batch": b,
                "step_time_s": 1e-3 * b,
                "step_time_p25_s": 0.9e-3 * b,
                "step_time_p75_s": 1.1e-3 * b,
                "per_iteration_s": 5e-5 * b,
                **({"forward_time_s": 0.3e-3 * b} if forward else {}),
            }
            for b in (1, 4, 16)
        ]
        return Sweep(
            rows=rows,
            scenario={"controller": "pid"},
            label="default",
            device_kind="cpu",
            hardware={"cpu_model": "test"},
            fit={"fixed_per_iteration_s": 1e-5, "per_sample_iteration_s": 5e-5},
        )

    widths = {}
    for forward in (False, True):
        paths = step_cost_figure([sweep(forward)], tmp_path / str(forward), "cost")
        png = next(p for p in paths if p.suffix == ".png")
        assert {p.suffix for p in paths} == {".png", ".svg"}
        widths[forward] = mpimg.imread(png).shape[1]
    assert widths[True] > widths[False] * 1.3  # three panels against two


def test_time_to_target_calls_a_row_fastest_only_where_its_interval_says_so(tmp_path):
    """On the committed time-to-target rows of each machine: the heading says "Fastest"
    only where the compared rows ran more than once and the interval lies above 1, else
    that they are not separable, or (one run per row) that the interval backs no
    verdict."""
    import re

    from odestudy.builtin.explain import FIRST_NOT_SEPARABLE, FIRST_ONE_RUN, time_to_target

    folders = sorted((environment.ROOT / "results").glob("*/quick"))
    checked = 0
    for folder in folders:
        recs = [Rec(json.loads(p.read_text())) for p in folder.glob("*every10*/metrics.json")]
        blocks, _ = time_to_target(recs, tmp_path)
        text = "\n".join(b.markdown for b in blocks if isinstance(b, Text))
        found = re.search(r"\*\*(.+?)\*\* \(.*takes [\d.]+x as long \[([\d.]+), [\d.]+\]", text)
        if found is None:
            continue
        head, low = found.group(1), float(found.group(2))
        if all(len(r.get("step_time_runs_s") or []) <= 1 for r in recs if r.get("eval_curve")):
            assert head == FIRST_ONE_RUN
        elif low != 1.0:  # printed to 2 decimals: 1.00 may be either side of 1
            assert head == ("Fastest to the target here" if low > 1 else FIRST_NOT_SEPARABLE)
        checked += 1
    assert checked >= 1
