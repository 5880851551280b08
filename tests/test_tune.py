"""Levers as types (`measure/lever.py`, `measure/levers/`), the step files of `odestudy
tune` (`study/steps.py`) and what `--step FILE` and `--recommended` run; a lever defined
here (`helpers.FastMinMax`) through `odestudy run`, the levers benchmark and `tune`.
Nothing here times anything for a verdict."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from odestudy import cli
from odestudy.measure import levers as _shipped  # noqa: F401 - registers them
from odestudy.measure.lever import LEVERS, Facts, combine, get_lever, resolve_lever
from odestudy.measure.recommended import safe_levers
from odestudy.measure.scenario import Scenario
from odestudy.measure.step import step_options
from odestudy.study import steps
from odestudy.tune import applicable, greedy

from .helpers import FastMinMax

ROOT = Path(__file__).resolve().parent.parent


def _step_file(path: Path, s: Scenario, levers: list[str], **extra) -> Path:
    chosen = [get_lever(n) for n in levers]
    fields = combine(s, chosen, Facts(solver_steps=20))
    data = {
        "kind": steps.KIND,
        "problem": s.problem,
        "controller": s.controller,
        "device": s.device,
        "scale": s.scale,
        "levers": levers,
        "fields": fields,
        "speedup": 2.0,
        "speedup_ci": [1.5, 2.5],
        **extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_every_shipped_lever_says_what_it_is_and_refuses_in_one_line():
    latent = Scenario(problem="latent_ode", scale="smoke")
    for name, cls in LEVERS.items():
        assert cls.name == name and cls.help, name
        why = cls().refusal(latent, Facts(solver_steps=20))
        assert why is None or "\n" not in why
    # Within-ODE batching needs even grids; a bound needs the trained field's steps.
    assert "evenly spaced" in get_lever("within_ode").refusal(latent)
    assert "tune measures" in get_lever("step_bound").refusal(Scenario(scale="smoke"))
    assert "stepto" in get_lever("save_steps").refusal(Scenario(scale="smoke"))
    assert "cpu" in get_lever("wide_vectors").refusal(Scenario(scale="smoke", device="gpu"))


def test_the_step_bound_doubles_the_measured_steps_to_a_power_of_two():
    s = Scenario(scale="smoke")
    assert get_lever("step_bound").fields(s, Facts(solver_steps=22)) == {"max_steps": 64}
    assert get_lever("step_bound").fields(s, Facts(solver_steps=3)) == {"max_steps": 16}
    # The per-step checkpoints under PID come with the bound, never 4096 of them.
    assert get_lever("all_steps").fields(s, Facts(solver_steps=30))["max_steps"] == 64


@pytest.mark.parametrize("problem", ["oscillator", "latent_ode", "forced_oscillator"])
def test_before_any_tune_only_levers_that_cannot_slow_the_step_apply(problem):
    pid = Scenario(scale="smoke", problem=problem)
    names, fields = safe_levers(pid)
    assert names == ["unrolled_stages"] and fields == {"stages": "unrolled"}
    # No unbounded per-step checkpoints (the latent ODE's 0.48x): StepTo's are its grid's.
    names, fields = safe_levers(dataclasses.replace(pid, controller="stepto"))
    assert fields == {"stages": "unrolled", "adjoint": "all_steps", "saveat": "steps"}


def test_the_greedy_combination_skips_levers_that_conflict_or_change_nothing():
    s = Scenario(scale="smoke")
    facts = Facts(solver_steps=20)
    winners = [get_lever(n) for n in ("mlp_reverse", "fused", "unrolled_stages", "donate")]
    combos = greedy(s, winners, facts)
    # fused is in mlp_reverse already; unrolled stages are the fused loop's own: their
    # combination starts from them.
    names = [[lever.name for lever in c] for c in combos]
    assert names == [["mlp_reverse", "donate"], ["unrolled_stages", "donate"]]
    levers, refused = applicable(s, facts)
    assert "save_steps" in refused and "fused" in {lever.name for lever in levers}


def test_an_added_lever_is_named_and_keyed_only_where_set():
    s = Scenario(scale="smoke")
    spec = FastMinMax.spec()
    assert spec == "tests.helpers:FastMinMax" and resolve_lever(spec).short == "tfmm"
    added = dataclasses.replace(s, **FastMinMax().fields(s, Facts()))
    assert added.name().endswith("-tfmm") and added.key() != s.key()
    assert step_options(added) == {"xla_cpu_enable_fast_min_max": True}
    assert step_options(s) is None
    assert Scenario.from_dict(json.loads(json.dumps(added.to_dict()))) == added
    with pytest.raises(ValueError, match="cpu"):
        dataclasses.replace(added, device="gpu")
    with pytest.raises(ValueError, match="unknown added lever 'nope'"):
        Scenario(scale="smoke", added_levers=("nope",))


def test_a_step_file_is_applied_to_its_problem_and_refused_elsewhere(tmp_path):
    s = Scenario(scale="smoke")
    path = _step_file(tmp_path / "step.json", s, ["mlp_reverse", "fast_activations"])
    chosen = steps.apply_step(s, steps.read_step(path), path)
    assert chosen.mlp_reverse and chosen.fast_activations and chosen.max_steps == 64
    with pytest.raises(ValueError, match="tuned for controller 'pid'"):
        steps.apply_step(dataclasses.replace(s, controller="stepto"), steps.read_step(path))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a step file"):
        steps.read_step(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="cannot read step file"):
        steps.read_step(tmp_path / "missing.json")


def test_recommended_is_the_tuned_step_where_recorded_else_the_safe_levers(tmp_path):
    own = Scenario(scale="smoke", problem="tests.problems:UNIFORM")
    chosen, why = steps.recommended_step(own, tmp_path)
    assert chosen == dataclasses.replace(own, stages="unrolled") and "no tune" in why
    s = Scenario(scale="smoke")  # a shipped problem: the study measured its step
    chosen, why = steps.recommended_step(s, tmp_path)
    assert chosen.mlp_reverse and "the study's step" in why
    _step_file(steps.step_path(s, tmp_path), s, ["fused"])
    chosen, why = steps.recommended_step(s, tmp_path)
    assert chosen.integrator == "fused" and "odestudy tune measured" in why
    # Nothing measured faster: the default, said.
    _step_file(steps.step_path(s, tmp_path), s, [])
    chosen, why = steps.recommended_step(s, tmp_path)
    assert chosen == s.default_step() and "nothing faster" in why


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--step", "x.json", "--solve", "within_ode"], "give either --step"),
        (["run", "--step", "x.json", "--recommended"], "give one of --step"),
        (["run", "--step", "missing.json"], "cannot read step file"),
        (["tune", "--problem", "nope"], "unknown problem 'nope'"),
        (["tune", "--devices", "0"], "whole number >= 1"),
    ],
)
def test_bad_step_options_are_one_line_errors(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main([*argv, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.long
def test_tune_on_several_devices_names_the_mode_that_pays_or_one_device(tmp_path, monkeypatch):
    """`tune(devices=2)`: the chosen step (here the default: no lever is tried) on one
    device and split over 2 in every multi-device mode, interleaved; the file names the
    fastest mode whose interval lies above 1, else one device, and `--step FILE` runs
    what it names unless a mode is given. Nothing here reads a time for a verdict."""
    import argparse

    import odestudy.tune
    from odestudy.measure.modes import modes_here
    from odestudy.tune import tune

    monkeypatch.setattr(odestudy.tune, "study_measured", lambda s: False)
    monkeypatch.setattr(odestudy.tune, "_loss_factor", lambda *a: 1.1)  # no seeds trained
    saved = dict(LEVERS)
    try:
        LEVERS.clear()
        out = tune(Scenario(scale="smoke"), blocks=2, steps_per_block=2, results=tmp_path,
                   devices=2)  # fmt: skip
    finally:
        LEVERS.update(saved)
    split = out["split"]
    assert [r["label"] for r in split["rows"]] == ["single", *modes_here(multi_device=True)]
    pays = [r for r in split["rows"] if r["verdict"] == "faster"]
    if pays:
        best = max(pays, key=lambda r: r["speedup"])
        assert (out["mode"], out["devices"]) == (best["label"], 2)
        assert all(r["speedup_ci"][0] > 1 for r in pays)
    else:
        assert (out["mode"], out["devices"]) == ("single", 1) and "one device" in split["said"]
    path = tmp_path / "step.json"
    path.write_text(json.dumps({**out, "mode": "shard_map", "devices": 2}))
    assert (steps.load_step(path).mode, steps.load_step(path).devices) == ("shard_map", 2)
    args = argparse.Namespace(step=str(path), recommended=False, mode=None,
                              devices_per_process=None, results=str(tmp_path))  # fmt: skip
    chosen = cli.step_of(Scenario(scale="smoke"), args)
    assert (chosen.mode, chosen.devices_per_process) == ("shard_map", 2)
    args.mode, args.devices_per_process = "pmap", 2
    given = Scenario(scale="smoke", mode="pmap", devices_per_process=2)
    assert cli.step_of(given, args).mode == "pmap"


def test_commands_that_time_in_their_own_process_time_as_the_kernels_do(monkeypatch):
    """`odestudy tune` and `predict` start again with `EQX_ON_ERROR=nan`, as every
    scenario kernel runs, where it is unset (a value given is kept, and recorded)."""
    import os

    calls = []
    monkeypatch.delenv("EQX_ON_ERROR", raising=False)
    monkeypatch.setattr(os, "execve", lambda exe, args, env: calls.append((args, env)))
    cli._timed_as_kernels(["tune", "--scale", "smoke"])
    cli._timed_as_kernels(["report"])
    ((args, env),) = calls
    assert args[1:] == ["-m", "odestudy.cli", "tune", "--scale", "smoke"]
    assert env["EQX_ON_ERROR"] == "nan"
    monkeypatch.setenv("EQX_ON_ERROR", "raise")
    cli._timed_as_kernels(["predict"])
    assert len(calls) == 1


@pytest.mark.long
def test_a_lever_of_ones_own_runs_through_run_the_levers_benchmark_and_tune(tmp_path, monkeypatch):
    """`helpers.FastMinMax`, defined in a test file: `odestudy tune` tries it (the
    shipped levers left out here, for time, and so the study's own step, made of them),
    `odestudy run --step` runs the chosen step and the levers benchmark times it by its
    `module:Class`."""
    import odestudy.tune
    from odestudy.tune import print_tune, tune

    monkeypatch.setattr(odestudy.tune, "study_measured", lambda s: False)

    s = Scenario(scale="smoke", dataset_size=64)
    kept = {"unrolled_stages", FastMinMax.name}
    saved = dict(LEVERS)
    try:
        for name in set(LEVERS) - kept:
            del LEVERS[name]
        out = tune(s, blocks=1, steps_per_block=2, results=tmp_path)
    finally:
        LEVERS.clear()
        LEVERS.update(saved)
    labels = {r["label"] for r in out["tried"]}
    assert {"default", "test_fast_min_max", "unrolled_stages"} <= labels
    assert out["kind"] == steps.KIND and out["losses"]["default_check"] > 0
    lines: list[str] = []
    print_tune(out, lines.append)
    assert any("test_fast_min_max" in line for line in lines)
    # The step file runs; the lever by hand too.
    step = tmp_path / "step.json"
    forced = {**out, "levers": [FastMinMax.name], "fields": FastMinMax().fields(s, Facts())}
    step.write_text(json.dumps(forced))
    run = [sys.executable, "-m", "odestudy.cli", "run", "--scale", "smoke"]
    done = subprocess.run(
        [*run, "--step", str(step), "--out", str(tmp_path / "run")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["scenario"]["added_levers"] == [FastMinMax.spec()]
    bench = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/levers.py", "--scale", "smoke", "--variants",
         f"default,{FastMinMax.spec()}", "--blocks", "1", "--steps-per-block", "2",
         "--out", str(bench)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(bench.read_text())["rows"]
    assert rows[1]["levers"] == {"added_levers": [FastMinMax.spec()]}


def test_own_model_shows_the_examples_latest_tune_as_printed(tmp_path):
    """docs/own_model.md's sample is written from the example's latest tune record, as
    `odestudy tune` printed it (`print_tune`), with its machine, session and wall time."""
    import shutil

    from odestudy.report.pages import update_own_model
    from odestudy.report.tuned import EXAMPLE
    from odestudy.tune import print_tune

    committed, *_ = sorted(ROOT.glob("results/" + EXAMPLE))
    target = tmp_path / "results" / committed.relative_to(ROOT / "results")
    target.parent.mkdir(parents=True)
    shutil.copy(committed, target)
    page = tmp_path / "own_model.md"
    page.write_text(
        "intro\n\n<!-- region:tune-sample -->\n\nmiddle\n\n"
        "<!-- region:predict-sample -->\n\nafter\n"
    )
    update_own_model(page, tmp_path / "results")
    text = page.read_text()
    printed: list[str] = []
    print_tune(json.loads(committed.read_text()), printed.append)
    assert "\n".join(printed) in text and printed[-1].startswith("wall time")
    assert "No prediction of the example yet: run `make own-predict`." in text
    assert text.startswith("intro") and text.rstrip().endswith("after")
    update_own_model(page, tmp_path / "results")
    assert page.read_text() == text  # rewriting the region leaves the page as it was


def test_own_model_shows_the_examples_prediction_of_its_tuned_step_as_printed(tmp_path):
    """docs/own_model.md's `predict` sample is the example's latest `predict --record` of
    a tuned step, printed by the command's own lines (`prediction_lines`)."""
    import shutil

    from odestudy.measure.scenario import Scenario
    from odestudy.report.pages import update_own_model
    from odestudy.report.predicted import EXAMPLE, prediction_lines

    found = sorted(ROOT.glob("results/" + EXAMPLE))
    for path in found:
        target = tmp_path / "results" / path.relative_to(ROOT / "results")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    page = tmp_path / "own_model.md"
    page.write_text("<!-- region:tune-sample -->\n\n<!-- region:predict-sample -->\n\nafter\n")
    update_own_model(page, tmp_path / "results")
    text = page.read_text()
    tuned = [
        p for p in found if Scenario.from_dict(json.loads(p.read_text())["scenario"]).step_tag()
    ]
    out = json.loads(max(tuned, key=lambda p: json.loads(p.read_text())["finished"]).read_text())
    lines = prediction_lines(out, Scenario.from_dict(out["scenario"]))
    assert "\n".join(lines) in text and lines[0].startswith("forced_decay, pid")
    assert text.rstrip().endswith("after")


def test_a_round_the_host_contended_is_left_out_where_two_remain():
    """Tune leaves a round of blocks out of its speedups where the host contended one of
    its blocks (`measure.host.contended`), as the report leaves such a run out; never so
    many that fewer than two rounds remain."""
    from odestudy.tune import Tuner

    quiet = {"steal": 0.0, "probe_before_ms": 1.0, "probe_after_ms": 1.01}
    stolen = {"steal": 0.2, "probe_before_ms": 1.0, "probe_after_ms": 1.0}
    tuner = object.__new__(Tuner)
    tuner.blocks = 4
    tuner.host_blocks = {"default": [quiet, stolen, quiet, quiet], "fused": [quiet] * 4}
    (why,) = tuner.contended().items()
    assert why[0] == 1 and "default" in why[1] and "steal" in why[1]
    tuner.host_blocks["fused"] = [stolen, quiet, stolen, quiet]
    assert tuner.contended() == {}  # three of four contended: one would remain, none left out
