"""The version study without running it: its rows, its plan, the environments it asks
for, and its table from synthetic records of two releases."""

import pytest

from odestudy.builtin.versions import versions_body, write_versions
from odestudy.measure.scenario import Scenario
from odestudy.study import records
from odestudy.study.grid import versions_scenarios
from odestudy.study.matrix import plan, record_path
from odestudy.study.studies import Text
from odestudy.study.versions import REQUIREMENTS, VERSION_SETS, build

from .helpers import record


def test_the_core_rows():
    rows = versions_scenarios("quick")
    assert len({s.name() for s in rows}) == len(rows) == 9
    assert {(s.mode, s.total_devices) for s in rows} == {
        ("single", 1),
        ("pmap", 2),
        ("shard", 2),
        ("shard_map", 2),
        ("shard", 8),
    }
    assert all(s.scaling == "strong" and s.device == "cpu" for s in rows)
    assert plan("quick", "cpu", "versions") == (rows, [])


def test_every_version_set_pins_jax_and_its_libraries():
    for name in VERSION_SETS:
        text = (REQUIREMENTS / f"{name}.txt").read_text()
        version = name.removeprefix("jax-")
        assert f"jax[cpu]=={version}" in text and f"jaxlib=={version}" in text
        for package in ("diffrax==", "equinox==", "optax=="):
            assert package in text
    with pytest.raises(ValueError, match="valid choices: jax-0.4.34"):
        build("jax-9.9")


def _write_set(folder, step_one: float, step_shard: float, jax_version: str) -> None:
    for s, step in (
        (Scenario(), step_one),
        (Scenario(mode="shard", devices_per_process=2), step_shard),
    ):
        rec = record(s, step=step)
        rec["versions"] = dict(rec["versions"], jax=jax_version)
        records.write_json_atomic(record_path(s, folder), rec)


def test_the_table_joins_within_each_release(tmp_path, spread_measured):
    results = tmp_path / "versions"
    _write_set(results / VERSION_SETS[0], 0.08, 0.40, "0.4.34")
    _write_set(results / VERSION_SETS[-1], 0.02, 0.04, "0.10.2")
    out = write_versions(results, tmp_path / "figures")
    text = out["table"].read_text()
    assert out["sets"] == [VERSION_SETS[0], VERSION_SETS[-1]] and out["rows"] == 4
    # Each release's speedup against its own 1-device row, never across releases.
    assert "0.4.34 / " in text and "2 devices 0.20 [0.20, 0.20]" in text
    assert "2 devices 0.50 [0.50, 0.50]" in text
    # The 1-device step of the old release against the current one: 4x as long.
    assert "takes 4.00 [4.00, 4.00] times as long" in text
    assert [p.suffix for p in out["figures"]] == [".png", ".svg"]


def test_no_records_say_so():
    assert versions_body({}) == [Text("No records of the version study (`make versions`).")]


def test_the_versions_table_is_written_as_its_value_renders_it(tmp_path):
    """`write_tables` writes the version table's markdown (`render`), with nothing
    parsed back from the file."""
    from odestudy.builtin.versions import versions_table
    from odestudy.report.document import write_tables
    from odestudy.report.tables import render

    table = versions_table({})
    path = write_tables([table], tmp_path)["versions"]
    assert table == versions_table({})
    assert path.read_text() == render(table)
    assert path.read_text().startswith("# The core rows across JAX releases\n\n")


def test_the_version_study_states_its_speedups_as_claims(tmp_path, spread_measured):
    """Each release's speedup of a one-loop mode, as its page states it, is a claim over
    its own 1-device row under that release: two releases, two comparisons."""
    from odestudy.study.matrix import get_study
    from odestudy.study.studies import ReportInputs

    results = tmp_path / "results"
    _write_set(results / "versions" / VERSION_SETS[0], 0.08, 0.40, "0.4.34")
    _write_set(results / "versions" / VERSION_SETS[-1], 0.02, 0.04, "0.10.2")
    claims = get_study("versions").claims(ReportInputs(results, "quick", tmp_path))
    assert sorted(round(c.value, 2) for c in claims) == [0.2, 0.5]
    assert len({c.comparison for c in claims}) == 2
    assert all(
        "0.10.2" in c.comparison.baseline or "0.4.34" in c.comparison.baseline for c in claims
    )
    assert get_study("versions").claims(ReportInputs(results, "seed", tmp_path)) == []
