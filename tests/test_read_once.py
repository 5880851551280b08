"""`odestudy report` reads each record once: the report notebook's one call
(`report.publish`) writes the tables, the claims, the pages and the README's answer
from one read of the records (`records.read_once`), however many of the report's
modules ask for a record."""

import collections
import json
import os
from pathlib import Path

import pytest

from odestudy.measure.scenario import Scenario
from odestudy.report.pages import GENERATED_END, GENERATED_START
from odestudy.report.publish import publish
from odestudy.study import records
from odestudy.study.matrix import record_path

from .helpers import HERE, record


def _results(root: Path) -> list[Path]:
    """A small results tree: the quick scale's 1-device row and two 2-device rows, the
    same rows repeated in the workload map's folder and a version set's, and a loss
    spread; returns every file written."""
    scenarios = [
        Scenario(scale="quick"),
        Scenario(scale="quick", devices_per_process=2, mode="shard_map"),
        Scenario(scale="quick", devices_per_process=2, mode="pmap"),
    ]
    written = []
    for folder in (root, root / "map", root / "versions" / "a-set"):
        for i, s in enumerate(scenarios):
            path = record_path(s, folder)
            records.write_json_atomic(path, dict(record(s, step=0.02 - 0.004 * i), seed=i))
            written.append(path)
    spread = root / HERE / "levers" / "loss-spread-pid.json"
    spread.parent.mkdir(parents=True)
    scenario = {"scale": "quick", "controller": "pid"}
    spread.write_text(json.dumps({"spread_relative": 0.1, "rows": [], "scenario": scenario}))
    return [*written, spread]


@pytest.mark.long  # about 13 s here
def test_publish_opens_each_record_once(tmp_path, monkeypatch):
    written = _results(tmp_path / "results")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n<!-- region:answer -->\n{GENERATED_START}\n\n{GENERATED_END}\n")
    opened: collections.Counter[str] = collections.Counter()
    read_text = records.read_text

    def counting(path):
        opened[os.path.abspath(path)] += 1
        return read_text(path)

    monkeypatch.setattr(records, "read_text", counting)
    report = publish(
        tmp_path / "results", "quick", tmp_path / "figures", tmp_path / "docs", readme, draw=False
    )
    assert report["claims"] and report["pages"] and "**CPU**" in readme.read_text()
    # Every record was read, each once.
    assert {os.path.abspath(p) for p in written} <= set(opened)
    assert max(opened.values()) == 1, [p for p, n in opened.items() if n > 1]
    # Outside `publish`, each read opens the file again.
    records.read_json(written[0]), records.read_json(written[0])
    assert opened[os.path.abspath(written[0])] == 3


@pytest.mark.long  # about 13 s here
def test_publish_makes_its_statements_once(tmp_path, monkeypatch):
    """The scaling study's claims and the pages share one `findings.findings` per report
    (`records.made_once`); outside a report each call makes them anew."""
    from odestudy.report import findings

    _results(tmp_path / "results")
    made: list[str] = []
    real = findings._findings

    def counting(results, scale, rows, scaling):
        made.append(scale)
        return real(results, scale, rows, scaling)

    monkeypatch.setattr(findings, "_findings", counting)
    publish(tmp_path / "results", "quick", tmp_path / "figures", tmp_path / "docs", draw=False)
    assert made == ["quick"]
    rows = []
    a, b = (
        findings.findings(tmp_path / "results", "quick", rows),
        findings.findings(tmp_path / "results", "quick", rows),
    )
    assert made == ["quick"] * 3 and a == b and a is not b
