"""The measurement protocol: what keys a record's reuse (protocol number, machine,
versions, measurement environment), the guard that fingerprints the measuring code,
and the program fingerprint. Nothing here trains."""

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from odestudy.measure import environment, timing
from odestudy.measure.scenario import Scenario
from odestudy.measure.training import base_record
from odestudy.study import plan, records


def test_the_measuring_code_is_the_blessed_one():
    """Fails when code that runs a measurement changed (comments and docstrings do not
    count): decide whether what is measured changed."""
    blessed = json.loads(timing.BLESSED.read_text())
    now = timing.code_fingerprint()
    assert (blessed["protocol"], blessed["fingerprint"]) == (timing.PROTOCOL, now["fingerprint"]), (
        "The code a measurement runs changed (modules: "
        f"{', '.join(now['modules'])}). If what is measured changed, bump PROTOCOL in "
        "odestudy/measure/timing.py and say why in its changelog; either way re-bless the "
        "fingerprint: .venv/bin/python -m odestudy.measure.timing --bless"
    )


def test_the_fingerprint_covers_the_modules_a_run_imports_and_no_others():
    modules = set(timing.measuring_modules())
    assert {
        "measure.training",
        "measure.modes",
        "measure.model",
        "measure.solvers",
        "measure.data",
        "measure.timing",
        "measure.resume",
        "measure.compat",
        "measure.scenario",
        "study.distributed",
    } <= modules
    # Presentation and bookkeeping never change a measurement: no report module, and of
    # the study layer only the launcher of multi-process runs and the record writer.
    assert not {m for m in modules if m.startswith("report.")}
    assert {m for m in modules if m.startswith("study.")} <= {
        "study.distributed",
        "study.records",
        "study.runner",
    }


@pytest.fixture
def package_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the package folder and the scenario notebook."""
    package = tmp_path / "odestudy"
    shutil.copytree(timing.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    notebook = tmp_path / "scenario.ipynb"
    shutil.copy(timing.SCENARIO_NOTEBOOK, notebook)
    return package, notebook


def test_comments_and_docstrings_leave_the_fingerprint_unchanged(package_copy):
    package, notebook = package_copy
    before = timing.code_fingerprint(package, notebook)["fingerprint"]
    path = package / "measure" / "training.py"
    text = path.read_text()
    text = text.replace('"""Run one scenario', '"""Run (edited docstring) one scenario', 1)
    path.write_text("# a new comment\n" + text.replace("\n\n\ndef ", "\n\n\n# note\ndef ", 1))
    assert timing.code_fingerprint(package, notebook)["fingerprint"] == before
    path.write_text(text.replace("lengths[-1] else None", "lengths[0] else None"))
    assert timing.code_fingerprint(package, notebook)["fingerprint"] != before


def _record_here(s: Scenario) -> dict:
    """An ok record of `s` as this machine would make it now."""
    rec = base_record(s)
    rec.update(
        status="ok",
        error=None,
        machine_id=environment.machine_id(environment.this_machine()),
        versions=environment.versions(),
        protocol=timing.PROTOCOL,
        measurement_env=plan.expected_env(s),
    )
    return rec


def test_a_record_is_reused_while_protocol_and_environment_match(tmp_path, monkeypatch):
    s = Scenario(scale="smoke", devices_per_process=2, mode="shard_map")
    path = tmp_path / "metrics.json"
    records.write_json_atomic(path, _record_here(s))
    assert plan.reusable(s, path) is not None
    # Another XLA flag changes what is measured: the record is stale.
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")
    assert plan.reusable(s, path) is None
    assert "measurement environment" in plan.why_stale(s, records.read_record(path))
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setenv("EQX_ON_ERROR", "raise")
    assert plan.reusable(s, path) is None
    monkeypatch.delenv("EQX_ON_ERROR")
    assert plan.reusable(s, path) is not None
    # A new protocol makes every record stale.
    monkeypatch.setattr(plan, "PROTOCOL", timing.PROTOCOL + 1)
    assert "protocol" in plan.why_stale(s, records.read_record(path))


def test_records_without_a_protocol_are_stale(tmp_path):
    s = Scenario(scale="smoke")
    rec = _record_here(s)
    del rec["protocol"]
    rec["code_version"] = "81136de70a3e"  # how records were keyed before
    assert plan.why_stale(s, rec).startswith("protocol differs")


def test_measurement_env_leaves_out_the_device_count_and_sorts_flags():
    env = {
        "XLA_FLAGS": "--b=1 --xla_force_host_platform_device_count=8 --a=2",
        "EQX_ON_ERROR": "nan",
        "HOME": "/root",
        "OMP_NUM_THREADS": "",
    }
    assert timing.measurement_env(env) == {"XLA_FLAGS": "--a=2 --b=1", "EQX_ON_ERROR": "nan"}
    only_count = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    assert timing.measurement_env(only_count) == {}


def _first():
    def f(x):
        return jnp.sin(x) * 2.0

    return f


def _second():
    # The same program, written on other lines.

    def f(x):
        y = jnp.sin(x)
        return y * 2.0

    return f


def _third():
    def f(x):
        return jnp.cos(x) * 2.0

    return f


def test_program_fingerprint_ignores_where_the_code_was_written():
    fp = [
        timing.program_fingerprint(jax.jit(make()).lower(1.0)) for make in (_first, _second, _third)
    ]
    assert fp[0] == fp[1] != fp[2]


def test_run_steps_times_every_step_after_the_warmup_and_stops_on_divergence():
    def step(p, o, x):
        return p + x, o, p * x, jnp.ones(2)

    compiled = jax.jit(step).lower(1.0, 0.0, 1.0).compile()
    run = timing.run_steps(
        compiled, 1.0, 0.0, (jnp.float32(1.0) for _ in range(5)), steps=5, warmup=2
    )
    assert len(run.times) == 3 and len(run.losses) == 5 and len(run.num_steps) == 3
    assert run.losses == [1.0, 2.0, 3.0, 4.0, 5.0] and float(run.params) == 6.0
    fixed = timing.run_steps(
        compiled, 1.0, 0.0, (jnp.float32(1.0) for _ in range(3)), steps=3, carry=False
    )
    assert fixed.losses == [1.0, 1.0, 1.0]
    with pytest.raises(FloatingPointError, match="diverged"):
        timing.run_steps(compiled, 1.0, 0.0, (jnp.float32(jnp.inf) for _ in range(3)), steps=3)


def test_interleaved_reverses_its_order_every_other_round():
    """`timing.interleaved`: each call once per round, the warm-up rounds left out of its
    times, and no call always right after the same one."""
    log: list[str] = []
    calls = [lambda name=name: log.append(name) for name in "abc"]
    times = timing.interleaved(calls, rounds=4, warmup=1)
    assert [len(t) for t in times] == [4, 4, 4]
    assert "".join(log) == "abc" + "cba" + "abc" + "cba" + "abc"
