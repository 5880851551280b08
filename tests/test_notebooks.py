"""The exploration layer on the committed records: `odestudy.load_records` as a
DataFrame, `notebooks/explore.ipynb` under papermill, and `make lab` serving the
notebooks (started headless, checked through the server's API, stopped)."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

import odestudy
from odestudy.measure.environment import ROOT
from odestudy.report.best import RECOMMENDED_STEP

RESULTS = ROOT / "results"


@pytest.mark.long  # about 10 s here
def test_load_records_gives_one_row_per_quick_record():
    df = odestudy.load_records(RESULTS, "quick")
    assert len(df) >= 36
    for column in (
        "mode",
        "controller",
        "n_devices",
        "step_time_s",
        "final_loss",
        "status",
        "machine_id",
        "jax",
        "default",
        "scaling_matrix",
    ):
        assert column in df.columns
    ok = df[(df["status"] == "ok") & df["scaling_matrix"]]
    assert len(ok) >= 36 and ok["step_time_s"].gt(0).all()
    # The quick matrix times the default step and the recommended one, nothing else.
    assert ok["default"].any()
    assert (ok["default"] | (ok["step"] == RECOMMENDED_STEP)).all()
    steps = odestudy.load_steps(RESULTS, "quick")
    per_record = steps.groupby(["machine_id", "name"]).size()
    assert per_record.min() >= 35  # the cold run's timed steps at least
    runs = odestudy.load_runs(RESULTS, "quick")
    scaling = runs[runs["name"].isin(ok["name"])]
    # One row per run the record keeps: the repeats from the trained state, the cold run set
    # apart (report/runs.py); a record cut off after its first run keeps that one.
    rows = scaling.groupby(["machine_id", "name"]).size()
    kept = ok.set_index(["machine_id", "name"])["step_time_runs_s"].map(len)
    assert (rows == kept.reindex(rows.index)).all()
    assert (rows >= 2).mean() > 0.8


@pytest.mark.long  # about 10 s here: make test-long keeps make test within its budget
def test_explore_notebook_runs_from_the_repository_root_and_writes_nothing(tmp_path):
    """The newcomer's path: `papermill notebooks/explore.ipynb out.ipynb` run from the
    repository root, with the notebook's own defaults, finds the committed records."""
    import papermill

    figures = ROOT / "figures"
    before = {p: p.stat().st_mtime for p in figures.rglob("*")}
    nb = papermill.execute_notebook(
        str(ROOT / "notebooks" / "explore.ipynb"),
        str(tmp_path / "explore.ipynb"),
        parameters={"figures_dir": str(tmp_path / "explore")},
        kernel_name="python3",
        progress_bar=False,
        cwd=str(ROOT),
        extra_arguments=["--log-level=ERROR"],
    )
    assert "current records of scale 'quick'" in _stream_text(nb)
    assert not (tmp_path / "explore").exists()
    assert {p: p.stat().st_mtime for p in figures.rglob("*")} == before


@pytest.mark.long  # about 17 s here (a notebook's kernel)
def test_explore_notebook_without_records_says_so_in_one_line(tmp_path):
    import papermill

    nb = papermill.execute_notebook(
        str(ROOT / "notebooks" / "explore.ipynb"),
        str(tmp_path / "explore.ipynb"),
        parameters={"results": str(tmp_path / "none"), "scale": "smoke"},
        kernel_name="python3",
        progress_bar=False,
        cwd=str(ROOT),
        extra_arguments=["--log-level=ERROR"],
    )
    text = _stream_text(nb).strip()
    assert text.startswith("No records of scale 'smoke' under ") and "\n" not in text
    assert "make all" in text


def _stream_text(nb) -> str:
    """Everything an executed notebook printed."""
    return "".join(
        out.get("text", "")
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# About 30 s here (JupyterLab's start): with the long tests, beside the browser test.
@pytest.mark.long
def test_make_lab_serves_the_notebooks():
    port, token = _free_port(), "odestudy-test"
    args = f"LAB_ARGS=--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token}"
    proc = subprocess.Popen(
        ["make", "-s", "lab", args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        names, deadline = None, time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            try:
                url = f"http://127.0.0.1:{port}/api/contents?token={token}"
                with urllib.request.urlopen(url, timeout=5) as response:
                    names = {item["name"] for item in json.load(response)["content"]}
                break
            except OSError:
                time.sleep(1)
        assert names is not None, f"JupyterLab did not answer (exit {proc.poll()})"
        assert {"scenario.ipynb", "report.ipynb", "explore.ipynb"} <= names
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/lab?token={token}", timeout=10
        ) as response:
            assert response.status == 200
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
