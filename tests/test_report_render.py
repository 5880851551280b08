"""The report as a reader gets it: `odestudy report` renders records into markdown
tables and an HTML page with no code, and text from a record stays text (records come
from other machines). Synthetic records; the report notebook runs in a real kernel."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from odestudy import cli
from odestudy.measure.scenario import Scenario
from odestudy.report import pages
from odestudy.report.claims import scale_claims
from odestudy.report.document import report_rows, write_report
from odestudy.report.tables import escape
from odestudy.study import records
from odestudy.study.matrix import record_path
from odestudy.study.studies import page_named

from .helpers import record

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


# `odestudy report` in a real kernel, about 25 s here: its tests run in make test-long.
@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, Path]:
    """`odestudy report` over a 1-device record, two 2-device records and a failed
    record whose error holds HTML; returns the results and figures folders."""
    root = tmp_path_factory.mktemp("report")
    results, figures = root / "results", root / "figures"
    one = Scenario(scale="smoke")
    two = Scenario(scale="smoke", devices_per_process=2, mode="shard_map")
    slow = Scenario(scale="smoke", devices_per_process=2, mode="pmap")
    bad = Scenario(scale="smoke", devices_per_process=2, mode="shard")
    hardware = {"cpu_model": "a CPU", "physical_cores": 2, "logical_cpus": 2}
    for s, step in ((one, 0.02), (two, 0.015), (slow, 0.025)):
        rec = dict(record(s, step=step), hardware=hardware, collectives_in_loops=0)
        records.write_json_atomic(record_path(s, results), rec)
    failed = dict(record(bad, status="failed"), error=HOSTILE, step_time_s=None)
    records.write_json_atomic(record_path(bad, results), failed)
    code = cli.main(
        ["report", "--scale", "smoke", "--results", str(results), "--figures", str(figures)]
    )
    assert code == 0
    return results, figures


@pytest.mark.long  # the report notebook rendered (`rendered`)
def test_report_html_shows_no_code_and_no_live_record_markup(rendered):
    _, figures = rendered
    html = (figures / "report_smoke.html").read_text()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert" in html  # the error is there, as text
    assert "publish(" not in html  # no input cells
    assert "hl-ipython3" not in html  # no highlighted code cell
    # The executed notebook keeps the code for those who want it.
    assert "publish(" in (figures / "report_smoke.ipynb").read_text()


@pytest.mark.long  # the report notebook rendered (`rendered`)
def test_report_tables_hold_record_text_as_text(rendered):
    _, figures = rendered
    cpu = (figures / "tables" / "cpu.md").read_text()
    assert "<script>" not in cpu and "&lt;script&gt;" in cpu
    assert "1.33 [1.33, 1.33]" in cpu  # 0.02 / 0.015: the 2-device row's speedup
    assert "Devices in this table: 1, 2" in cpu


@pytest.mark.long  # the report notebook rendered (`rendered`)
def test_report_html_hides_every_code_cell_and_the_parameters(rendered):
    _, figures = rendered
    html = (figures / "report_smoke.html").read_text()
    cells = re.findall(r'<div class="jp-Cell jp-CodeCell[^"]*"', html)
    assert cells and all("jp-mod-noInput" in c for c in cells)
    # papermill's injected parameters are a code cell too: there, but without its code
    assert any("celltag_injected-parameters" in c for c in cells)
    assert 'scale = "smoke"' not in html and 'results = "' not in html


@pytest.mark.long  # the report notebook rendered (`rendered`)
def test_report_opens_with_the_question_the_verdict_and_the_headline_figure(rendered):
    _, figures = rendered
    html = (figures / "report_smoke.html").read_text()
    question = html.index("Which way of splitting the batch over devices trains")
    verdict = html.index("<strong>Use <code>shard_map</code></strong>")
    figure = re.search(r'<img [^>]*src="data:image/png', html).start()
    table = html.index("<table")
    assert question < verdict < figure < table
    # The verdict's slowest mode and its measured reason, from the records.
    assert "Slowest <strong>pmap</strong>, 0.80× [0.80, 0.80]" in html
    assert "measured reason: overhead" in html
    assert "no multi-device GPU row of the current protocol at the smoke scale" in html
    assert (figures / "headline_speedup.png").exists()
    assert (figures / "tables" / "verdict.md").read_text().startswith("# Verdict (smoke scale)")


@pytest.fixture(scope="module")
def values(rendered) -> dict:
    """The report's tables of `rendered` as values (`write_report`'s `values`)."""
    results, figures = rendered
    return write_report(results, "smoke", figures, draw=False)["values"]


@pytest.mark.long  # the report notebook rendered (`rendered`)
def test_a_results_page_answers_first_in_html(rendered, values, tmp_path):
    results, figures = rendered
    _, _, rows, _ = report_rows(results, "smoke")
    claims = scale_claims(str(results), "smoke", rows)
    text = pages.page(page_named("quick"), figures, tmp_path / "docs", claims, values)
    assert text.startswith(pages.GENERATED_START) and text.rstrip().endswith(pages.GENERATED_END)
    html = pages.render_html(text, tmp_path / "page.html", tmp_path / "docs" / "results")
    body = html.read_text()
    answer = body.index("1.33x [1.33, 1.33]")
    figure = re.search(r'<img [^>]*src="data:image/png', body).start()
    assert body.index("Quick scaling") < answer < figure < body.index("<table")
    assert "None." not in body and "odestudy.write_report(" not in body


def test_a_page_with_no_rows_says_so_in_one_line(tmp_path):
    text = pages.page(page_named("workloads"), tmp_path / "figures", tmp_path / "docs")
    body = [x for x in text.splitlines() if x.strip() and not x.startswith(("<!--", "#"))]
    assert len(body) == 1 and body[0].startswith("No rows yet")


@pytest.mark.long  # the report notebook rendered (`rendered`)
def test_results_page_fits_a_1400_px_window(rendered, values, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("chromium not installed (/usr/bin/chromium): the page width is not checked")
    results, figures = rendered
    _, _, rows, _ = report_rows(results, "smoke")
    claims = scale_claims(str(results), "smoke", rows)
    text = pages.page(page_named("quick"), figures, tmp_path, claims, values)
    html = pages.render_html(text, tmp_path / "quick.html", tmp_path / "results")
    assert_fits_1400_px(html.read_text(), tmp_path)


@pytest.mark.long  # the report notebook rendered (`rendered`)
def test_device_tables_split_in_two_with_the_notes_below(rendered):
    _, figures = rendered
    cpu = (figures / "tables" / "cpu.md").read_text()
    headers = [line for line in cpu.splitlines() if line.startswith("| Device")]
    first, second = ([c.strip() for c in h.strip("|").split("|")] for h in headers)
    assert first[:4] == ["Device", "Number of Devices", "Mode", "Controller"]
    assert first[-3:] == ["Scaling", "Global batch", "Problem"]
    assert not [c for c in first if c.startswith("Speedup")]
    assert second[:5] == ["Devices", "Mode", "Controller", "Scaling", "Global batch"]
    assert "Speedup over the best 1-device step [95% CI]" in second
    assert "Runtime (s)" not in second
    notes = cpu.index("How to read these tables")
    assert cpu.rindex("| Devices") < notes < cpu.index("one optimiser step")


CHROMIUM = Path("/usr/bin/chromium")
# Appended to a copy of the page: once it has laid out, the widest right edge of any
# element (its own scroll width included: a table that scrolls inside its output area
# counts) and the window's width, written into the DOM for --dump-dom to return.
WIDTH_PROBE = """<script>window.addEventListener("load", () => {
  let widest = document.documentElement.scrollWidth;
  for (const e of document.querySelectorAll("body *")) {
    const r = e.getBoundingClientRect();
    widest = Math.max(widest, r.right, r.left + e.scrollWidth);
  }
  const out = document.createElement("pre");
  out.id = "odestudy-width";
  out.textContent = JSON.stringify({widest: Math.ceil(widest), window: window.innerWidth});
  document.body.appendChild(out);
});</script>"""


@pytest.mark.long  # the report notebook rendered (`rendered`)
def test_report_page_fits_a_1400_px_window(rendered, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("chromium not installed (/usr/bin/chromium): the page width is not checked")
    _, figures = rendered
    assert_fits_1400_px((figures / "report_smoke.html").read_text(), tmp_path)


def assert_fits_1400_px(html: str, tmp_path: Path) -> None:
    """Open `html` in headless Chromium at 1400 px and check no element reaches past the
    window's right edge."""
    page = tmp_path / "page.html"
    page.write_text(html.replace("</body>", WIDTH_PROBE + "</body>"))
    args = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1400,1000",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.as_uri(),
    ]
    dom = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    found = re.search(r'id="odestudy-width">([^<]*)<', dom)
    assert found, "the width probe did not run"
    width = json.loads(found.group(1))
    assert width["window"] == 1400
    assert width["widest"] <= width["window"], width
