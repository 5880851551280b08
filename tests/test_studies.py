"""Studies as types (`odestudy.study.studies`): the built-in studies (`odestudy.builtin`)
are registered classes that `plan` and the matrix ask (their scenarios, runs, ceiling,
folder) and whose tables and claims the report renders, and a study defined in one file
outside the package (`tests/example_study.py`: scenarios, one table, one page) runs
through `odestudy matrix --study` and `odestudy report --study` with no edit to the
package."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from odestudy.builtin import BUILT_IN
from odestudy.measure.environment import ROOT
from odestudy.measure.scenario import Scenario
from odestudy.study import matrix, records
from odestudy.study.grid import explain_scenarios, node_scenarios, scenarios, target_scenarios
from odestudy.study.matrix import get_study
from odestudy.study.records import record_path
from odestudy.study.studies import (
    STUDIES,
    Grid,
    Interval,
    ReportInputs,
    Study,
    Table,
    Text,
    page_named,
)

from .helpers import record

SPEC = "tests.example_study:TinyStudy"


def test_the_built_in_studies_are_registered_and_say_how_they_run():
    assert set(BUILT_IN) <= set(STUDIES)
    assert get_study("scaling").ceiling and get_study("scaling").recommendable
    assert get_study("explain").runs("quick") == 3
    assert get_study("versions").runs("quick") == 1 and get_study("explain").runs("seed") == 1
    assert str(get_study("map").results("results")).endswith("map")
    with pytest.raises(ValueError, match="valid choices: scaling, explain"):
        get_study("nope")


def test_plan_asks_the_study():
    explain, _ = matrix.plan("quick", "cpu", "explain")
    assert explain == explain_scenarios("quick")
    tiny, not_run = matrix.plan("smoke", "cpu", SPEC)
    assert [s.mode for s in tiny] == ["single"] and not not_run
    runnable, _, wanted, probes = matrix._scenarios_to_run(
        "smoke", "cpu", SPEC, False, None, None, None, False, None
    )
    assert runnable == tiny and wanted == 1 and probes == []
    with pytest.raises(ValueError, match="scaling study only"):
        matrix._scenarios_to_run("smoke", "cpu", SPEC, False, None, None, None, True, None)


def test_a_study_in_one_file_writes_its_table_and_page_from_its_records(tmp_path):
    from odestudy.report.studies import write_study_report

    study = get_study(SPEC)
    (s,) = study.scenarios("smoke")[0]
    path = record_path(s, tmp_path / "results")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record(s, step=0.004)))
    written = write_study_report(SPEC, tmp_path / "results", "smoke", tmp_path / "fig", tmp_path)
    table = (tmp_path / "fig" / "tables" / "tiny.md").read_text()
    assert table.startswith("# Step time of the tiny study") and s.name() in table
    page = (tmp_path / "results" / "tiny.md").read_text()
    assert "# A tiny study (smoke scale)" in page and "| Step time (ms)" in page
    assert len(written) == 2
    with pytest.raises(ValueError, match="whole report's"):
        write_study_report("step", tmp_path / "results", "quick", tmp_path / "fig", tmp_path)


def test_a_study_needs_only_its_class():
    class Empty(Study):
        name = "empty-test-study"

        def scenarios(self, scale, device="auto", full=False):
            return [], []

    try:
        assert isinstance(get_study("empty-test-study"), Empty)
        inputs = ReportInputs(Path("results"), "quick", Path("figures"))
        assert get_study(Empty).tables(inputs) == [] and get_study(Empty).claims(inputs) == []
        assert Table("t", "T").body == () and Table("t", "T").figures == ()
    finally:
        STUDIES.pop("empty-test-study")


@pytest.mark.long  # one smoke scenario trained in its own kernel
def test_odestudy_matrix_and_report_run_a_study_defined_outside_the_package(tmp_path):
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    results = tmp_path / "results"
    command = [sys.executable, "-m", "odestudy.cli"]
    run = subprocess.run(
        [*command, "matrix", "--study", SPEC, "--scale", "smoke", "--device", "cpu",
         "--results", str(results), "--wait"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 of 1 scenarios ok" in run.stdout
    report = subprocess.run(
        [*command, "report", "--study", SPEC, "--scale", "smoke", "--results", str(results),
         "--figures", str(tmp_path / "figures"), "--docs", str(tmp_path / "docs")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 0, report.stdout + report.stderr
    page = (tmp_path / "docs" / "results" / "tiny.md").read_text()
    assert "| ok " in page and "smoke" in page


def test_the_seed_study_is_the_seed_scales_rows_and_their_time_to_target():
    seed, _ = matrix.plan("seed", "cpu", "seed")
    scaling, _ = matrix.plan("seed", "cpu", "scaling")
    target = matrix.select(target_scenarios("seed"), {"batch": "32"})
    assert seed == scaling + target and get_study("seed").runs("seed") == 1
    assert matrix.plan("quick", "cpu", "seed") == ([], [])


def test_the_report_asks_the_studies_which_records_are_current_and_which_pages_it_writes():
    from odestudy.measure.recommended import recommended
    from odestudy.report import frames
    from odestudy.study.studies import pages_of

    for scale in ("quick", "seed"):
        grid = [s for d in ("cpu", "gpu") for s in scenarios(scale, d)]
        assert frames.scaling_keys(scale) == {s.key() for s in grid}
        current = [*grid, *map(recommended, grid), *node_scenarios(scale)]
        current += explain_scenarios(scale)
        assert frames.current_keys(scale) == {s.key() for s in current}
    assert [p.name for p in pages_of("quick")] == [
        "quick",
        "explain",
        "versions",
        "workloads",
        "crossover",
        "step",
        "prediction",
    ]
    assert [p.name for p in pages_of("seed")] == ["seed"] and pages_of("smoke") == []
    assert [p.name for p in pages_of("quick") if p.answer] == ["quick"]


def test_the_step_study_reads_a_machines_lever_records(tmp_path):
    step = get_study("step")
    folder = tmp_path / "results" / "a-machine" / "levers"
    folder.mkdir(parents=True)
    lever = {"scenario": {"controller": "pid"}, "rows": []}
    (folder / "cpu-pid.json").write_text(json.dumps(lever))
    (folder / "loss-spread-pid.json").write_text(json.dumps(dict(lever, spread_relative=0.1)))
    (found,) = step.lever_records(tmp_path / "results", "a-machine")
    assert found["path"].endswith("cpu-pid.json") and step.records(tmp_path / "results", "quick")
    assert step.loss_spreads(tmp_path / "results", "a-machine")["pid"]["spread_relative"] == 0.1
    assert step.scenarios("quick") == ([], [])


def test_the_answer_and_the_figures_are_values_that_pages_render(tmp_path):
    from odestudy.report.claims import render_claims
    from odestudy.report.pages import page_figures, render_figure
    from odestudy.study.studies import Answer, page_named

    claims = [Answer("cpu", ("- Use `shard_map`.",)), Answer("gpu", missing="no rows.")]
    assert render_claims(claims) == [
        "**CPU**",
        "",
        "- Use `shard_map`.",
        "",
        "**GPU**: no rows.",
        "",
    ]
    (tmp_path / "workloads.png").write_bytes(b"")
    (figure,) = page_figures(page_named("workloads"), tmp_path)
    assert render_figure(figure, tmp_path / "docs") == "![workloads](../workloads.png)"


def test_a_table_is_its_title_and_blocks_rendered_by_one_function():
    from odestudy.report.tables import render

    grid = Grid(("a", "b"), (("x|y", Interval(1.0, 0.5, 1.5)),))
    table = Table("t", "A *title*", (Text("Some text."), grid))
    text = render(table)
    assert text.startswith("# A \\*title\\*\n\nSome text.\n\n| a ") and text.endswith("|\n")
    assert "| x\\|y | 1.00 [0.50, 1.50] |" in text  # cells escaped, an interval as such
    assert render(table, 2).startswith("## A")


def test_a_page_renders_its_tables_and_reads_no_file_back(tmp_path):
    from odestudy.report.pages import page

    written = Table("workloads", "Workload map", (Text("rows"),))
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "workloads.md").write_text("# Stale\n\nold rows\n")
    spec, docs = page_named("workloads"), tmp_path / "docs"
    text = page(spec, tmp_path, docs, (), {"workloads": written})
    assert "## Workload map\n\nrows" in text and "Stale" not in text
    # Without the value the page has no table, whatever files lie there.
    assert "No rows yet" in page(spec, tmp_path, docs, (), {})
    rows = Table("t", "T", (Grid(("a",), (("1",),)), Text("n")))
    assert "| a" in page(spec, tmp_path, tmp_path, (), {"workloads": rows})


def _quick_results(root: Path) -> Path:
    """A small results tree: the quick scale's 1-device row and two 2-device rows."""
    for i, s in enumerate(
        [
            Scenario(scale="quick"),
            Scenario(scale="quick", devices_per_process=2, mode="shard_map"),
            Scenario(scale="quick", devices_per_process=2, mode="pmap"),
        ]
    ):
        rec = dict(record(s, step=0.02 - 0.004 * i, jitter=0.01, seed=i), seed=i)
        records.write_json_atomic(record_path(s, root), rec)
    return root


def test_each_built_in_study_with_a_page_makes_its_tables_and_the_report_renders_them(
    tmp_path,
):
    from odestudy.report import pages
    from odestudy.report.document import read_inputs, report_studies, write_report
    from odestudy.report.tables import render

    results, figures = _quick_results(tmp_path / "results"), tmp_path / "figures"
    with records.read_once():
        inputs = read_inputs(results, "quick", figures, draw=False)
        made = {s.name: s.tables(inputs) for s in report_studies()}
        claims = get_study("scaling").claims(inputs)
    # Every built-in study with a page, and those alone, make tables: non-empty.
    with_page = [n for n in BUILT_IN if STUDIES[n].page is not None]
    assert list(made) == with_page
    assert all(made[n] for n in with_page), [n for n in with_page if not made[n]]
    # Each page's tables are its studies' (the seed page shows the scaling study's too).
    names = {t.name for tables in made.values() for t in tables}
    for name in with_page:
        assert set(STUDIES[name].page.tables) <= names
    # The scaling study states the verdict's claims on its rows, each with its session.
    assert claims and all(c.sessions for c in claims)
    assert {c.comparison.mode for c in claims} >= {"shard_map", "pmap"}
    # The report writes those values, and the pages render them and nothing else: a
    # table file planted afterwards does not reach a page.
    report = write_report(results, "quick", figures, draw=False)
    values = report["values"]
    assert set(values) == names and report["inputs"].rows == inputs.rows
    for name, table in values.items():
        assert (figures / "tables" / f"{name}.md").read_text() == render(table)
        (figures / "tables" / f"{name}.md").write_text(f"# Stale {name}\n\nold\n")
    planted = {n: Table(n, f"Planted {n}", (Text(f"planted {n}"),)) for n in values}
    for spec in pages.pages_of("quick"):
        text = pages.page(spec, figures, tmp_path / "docs", (), planted)
        assert "Stale" not in text
        assert all(f"## Planted {t}\n\nplanted {t}" in text for t in spec.tables)
