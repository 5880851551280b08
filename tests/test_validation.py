"""Bad parameters fail with a clear message naming the valid choices, before anything
is compiled, in the library and on the command line."""

import signal

import pytest

import odestudy.measure.training
from odestudy import Scenario, train, validate

BAD = [
    (dict(mode="bogus"), "valid choices: single, pmap, shard, shard_map"),
    (dict(controller="adaptive"), "valid choices: pid, stepto"),
    (dict(mode="shard", devices_per_process=0), "devices_per_process must be a whole number >= 1"),
    (dict(mode="shard_map", devices_per_process=3, batch=8), "not divisible by the device count 3"),
    (dict(mode="single", devices_per_process=2), "use one of: pmap, shard, shard_map"),
    (dict(mode="pmap", devices_per_process=16, batch=32), "only 8 exist; valid: 1..8"),
    (dict(scaling="diagonal"), "valid choices: strong, weak"),
]


@pytest.mark.parametrize("params,message", BAD)
def test_bad_parameters_fail_before_compiling(monkeypatch, params, message):
    def no_work(*args, **kwargs):
        raise AssertionError("reached data generation / compilation")

    monkeypatch.setattr(odestudy.measure.training, "cached_dataset", no_work)
    monkeypatch.setattr(odestudy.measure.training, "make_parallel_step", no_work)
    with pytest.raises(ValueError, match=message):  # at construction, or on the devices
        train(Scenario(scale="smoke", **params))


def test_unknown_scale_names_choices():
    with pytest.raises(ValueError, match="valid choices: smoke, quick, seed"):
        Scenario(scale="huge")


def test_valid_scenario_passes():
    validate(Scenario(mode="shard", devices_per_process=4, scale="smoke"), available_devices=8)


def _cli(capsys, *args) -> tuple[int, str]:
    """`odestudy run --scale smoke --out unused ARGS` in this process (what the command
    runs: `cli.main`): its exit status and standard error."""
    from odestudy import cli

    sigterm = signal.getsignal(signal.SIGTERM)  # `main` installs its own handler
    try:
        status = cli.main(["run", "--scale", "smoke", "--out", "unused", *args])
    except SystemExit as exc:  # argparse's errors
        status = exc.code
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--mode", "single", "--devices", "2"], "use one of: pmap, shard, shard_map"),
        (["--mode", "shard", "--devices", "0"], "devices_per_process must be a whole number >= 1"),
        (["--mode", "shard", "--devices", "3"], "not divisible by the device count 3"),
        # More GPUs than a machine here has, so that the test holds on GPU machines too.
        (
            ["--device", "gpu", "--mode", "pmap", "--devices", "64", "--batch", "64"],
            "64 gpu device(s) requested but only",
        ),
        (["--spread", "nan"], "spread must be a finite number"),
        (["--out", "/proc/no/such/folder"], "cannot write to output folder"),
        (["--mode", "bogus"], "invalid choice: 'bogus'"),
        (["--controller", "x"], "invalid choice: 'x'"),
        (["--recommended", "--solve", "per_sample"], "give either --recommended or --solve"),
    ],
)
def test_cli_exits_nonzero_with_message(capsys, args, message):
    status, stderr = _cli(capsys, *args)
    assert status == 2
    assert message in stderr
    if "--mode" in args and "bogus" in args:  # argparse names every valid choice
        assert all(m in stderr for m in ("single", "pmap", "shard", "shard_map"))
    if "--controller" in args:
        assert "pid" in stderr and "stepto" in stderr


def test_recommended_applies_its_levers_and_keeps_the_rest():
    from odestudy.measure.recommended import recommended, recommended_levers

    base = Scenario(scale="smoke", controller="stepto", devices_per_process=2, mode="shard_map")
    s = recommended(base)
    levers = recommended_levers(base)
    assert levers and all(getattr(s, k) == v for k, v in levers.items())
    assert (s.controller, s.devices_per_process, s.mode, s.scale) == (
        "stepto",
        2,
        "shard_map",
        "smoke",
    )
    assert s.name() != base.name() and s.key() != base.key()  # records side by side


def test_recommended_matrix_is_for_the_scaling_study(tmp_path):
    from odestudy.study.matrix import run_matrix

    with pytest.raises(ValueError, match="scaling study only"):
        run_matrix("smoke", "cpu", results=tmp_path, study="explain", recommended=True)
    assert not any(tmp_path.iterdir())  # nothing ran, nothing written
