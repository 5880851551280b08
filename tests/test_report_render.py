"""The report as a reader gets it: `odestudy report` renders records into markdown
tables and an HTML page with no code, and text from a record stays text (records come
from other machines). Synthetic records; the report notebook runs in a real kernel."""

from pathlib import Path

import pytest

from odestudy import cli
from odestudy.measure.scenario import Scenario
from odestudy.report.tables import escape
from odestudy.study import records
from odestudy.study.matrix import record_path

from .test_report_layer import record

HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(2)>"


def test_escape_leaves_no_markup():
    assert escape(HOSTILE) == (
        "&lt;script&gt;alert('x')&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
    )
    assert escape("[click](javascript:x) *a* `b` c|d _e_") == (
        "[click\\](javascript:x) \\*a\\* \\`b\\` c\\|d \\_e\\_"
    )
    # What the tables hold of their own stays readable.
    assert escape("shard_map 1.80 [1.62, 1.95] 2 †") == "shard_map 1.80 [1.62, 1.95] 2 †"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, Path]:
    """`odestudy report` over a 1- and a 2-device record and a failed record whose error
    and machine hold HTML; returns the results and figures folders."""
    root = tmp_path_factory.mktemp("report")
    results, figures = root / "results", root / "figures"
    one = Scenario(scale="smoke")
    two = Scenario(scale="smoke", n_devices=2, mode="shard_map")
    bad = Scenario(scale="smoke", n_devices=2, mode="shard")
    hardware = {"cpu_model": "a CPU", "physical_cores": 2, "logical_cpus": 2}
    records.write_json_atomic(
        record_path(one, results), dict(record(one, step=0.02), hardware=hardware)
    )
    records.write_json_atomic(
        record_path(two, results), dict(record(two, step=0.015), hardware=hardware)
    )
    failed = dict(record(bad, status="failed"), error=HOSTILE, step_time_s=None)
    records.write_json_atomic(record_path(bad, results), failed)
    code = cli.main(
        ["report", "--scale", "smoke", "--results", str(results), "--figures", str(figures)]
    )
    assert code == 0
    return results, figures


def test_report_html_shows_no_code_and_no_live_record_markup(rendered):
    _, figures = rendered
    html = (figures / "report_smoke.html").read_text()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert" in html  # the error is there, as text
    assert "odestudy.write_report(" not in html  # no input cells
    assert "hl-ipython3" not in html  # no highlighted code cell
    # The executed notebook keeps the code for those who want it.
    assert "write_report" in (figures / "report_smoke.ipynb").read_text()


def test_report_tables_hold_record_text_as_text(rendered):
    _, figures = rendered
    cpu = (figures / "tables" / "cpu.md").read_text()
    assert "<script>" not in cpu and "&lt;script&gt;" in cpu
    assert "1.33 [1.33, 1.33]" in cpu  # 0.02 / 0.015: the 2-device row's speedup
    assert "Devices in this table: 1, 2" in cpu
