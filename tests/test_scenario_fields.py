"""The `Scenario` dataclass is the one source of a scenario's fields: the command line,
the scenario notebook, `name()` and the default configuration all follow from it, so
that adding a field is one edit to `Scenario` plus its test."""

import dataclasses
import json

import pytest

from odestudy import cli
from odestudy.measure.modes import MODES, AbstractMode, parse_mode
from odestudy.measure.scenario import SCALES, Scenario, default_config
from odestudy.study.grid import explain_scenarios, scenarios, seed_scenarios
from odestudy.study.records import read_record
from odestudy.study.runner import ROOT

# A value other than the default for every field that is not part of the identity.
OTHER = {
    "spread": 0.5,
    "batching": "grouped",
    "solve": "within_ode",
    "lr_scaling": "linear",
    "optimiser_state": "fresh",
    "batch": 16,
    "dataset_size": 128,
    "steps_per_stage": 7,
    "warmup_steps": 2,
    "length_fractions": (0.5, 1.0),
    "eval_size": 64,
    "learning_rate": 1e-3,
    "eval_every": 10,
    "seed": 1,
    "trace": True,
    "problem": "tests.problems:UNIFORM",
    "width": 32,
    "saveat": "dense",
    "adjoint": "direct",
    "max_steps": 64,
    "unroll": 4,
    "stages": "bounded",
    "integrator": "fused",
    "donate": True,
    "fast_activations": True,
    "mlp_reverse": True,
    "vector_width": 512,
    "added_levers": ("tests.helpers:FastMinMax",),
}
# Fields whose other value needs others set (in the base scenario too).
NEEDS = {
    "unroll": {"controller": "stepto", "solve": "scan"},
    "mlp_reverse": {
        "controller": "pid",
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "accepted_steps",
    },
}


def test_every_field_says_what_it_is():
    for field in Scenario.fields():
        meta = field.metadata
        assert meta["help"] and meta["role"] in ("identity", "size", "config"), field.name
        if meta["role"] != "identity":
            assert meta["tag"] is not None, f"{field.name} has no name tag"
    others = {f.name for f in Scenario.fields() if f.metadata["role"] != "identity"}
    assert others == set(OTHER), "give a new field a value in OTHER"


@pytest.mark.parametrize("name", sorted(OTHER))
def test_a_changed_field_changes_the_name_and_the_key(name):
    base = Scenario(scale="quick", **NEEDS.get(name, {}))
    changed = dataclasses.replace(base, **{name: OTHER[name]})
    assert changed.name() != base.name() and changed.key() != base.key()


def test_names_are_unique_across_the_study():
    every = [s for scale in SCALES for d in ("cpu", "gpu") for s in scenarios(scale, d)]
    every += explain_scenarios("quick") + seed_scenarios("cpu") + seed_scenarios("gpu")
    by_name = {}
    for s in every:
        assert by_name.setdefault(s.name(), s) == s, f"two scenarios share {s.name()}"


def test_the_default_configuration_follows_the_fields():
    config = default_config("quick")
    assert set(config) == {f.name for f in Scenario.fields() if f.metadata["role"] == "config"}
    assert config["optimiser_state"] == SCALES["quick"]["optimiser_state"]
    assert config["spread"] == 0.0 and config["seed"] == 5678


def _options(fields: dict) -> list[str]:
    args = []
    for name, value in fields.items():
        option = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(option)
        elif isinstance(value, tuple):
            args += [option, *map(str, value)]
        else:
            args += [option, str(value)]
    return args


@pytest.mark.parametrize("name", sorted(OTHER))
def test_the_command_line_has_an_option_per_field(name):
    p = cli.parser()
    fields = {**NEEDS.get(name, {}), name: OTHER[name]}
    s = cli.scenario_from_args(p.parse_args(["run", "--out", "x", *_options(fields)]))
    assert all(getattr(s, k) == v for k, v in fields.items())


def test_the_command_line_defaults_to_the_default_scenario():
    assert cli.scenario_from_args(cli.parser().parse_args(["run", "--out", "x"])) == Scenario()


def test_the_notebook_takes_the_whole_scenario():
    nb = json.loads((ROOT / "notebooks" / "scenario.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    namespace: dict = {}
    exec("".join(cell["source"]), namespace)
    assert set(namespace) - {"__builtins__"} == {"scenario", "out_dir", "run_id"}
    Scenario.from_dict(namespace["scenario"])  # a valid scenario as it stands


def test_a_scenario_checks_itself_at_construction():
    with pytest.raises(ValueError, match="valid choices: single, pmap, shard, shard_map"):
        Scenario(mode="bogus")
    with pytest.raises(ValueError, match="valid choices: random, grouped"):
        Scenario(batching="sorted")


@pytest.mark.parametrize("name", list(MODES))
def test_modes_are_types_parsed_once(name):
    mode = parse_mode(name)
    assert isinstance(mode, AbstractMode) and mode.name == name
    assert parse_mode(mode) is mode
    s = Scenario(mode=name, devices_per_process=1 if not mode.multi_device else 2, scale="smoke")
    assert type(s.parallel) is MODES[name]


def test_a_field_added_later_keeps_every_record_its_scenarios():
    """`width` came after the committed records: they hold no such field, yet every one
    is still its scenario's (same key), and reads back with the field at its default."""
    checked = 0
    for path in sorted((ROOT / "results").glob("*/quick/*/metrics.json")):
        raw = json.loads(path.read_text())
        if "width" in raw["scenario"]:
            continue
        s = Scenario.from_dict(read_record(path)["scenario"])
        assert s.key() == raw["scenario_key"] and s.width == 64, path
        checked += 1
    assert checked >= 16
    wider = dataclasses.replace(Scenario(), width=32)
    assert wider.key() != Scenario().key() and wider.name().endswith("-w32")


# Names and keys made before `nodes` was added (at 6b46217): unchanged by it.
KEYS_BEFORE_NODES = {
    Scenario(): ("cpu-1dev-single-pid-strong-quick", "5e2e077a8357"),
    Scenario(scale="smoke"): ("cpu-1dev-single-pid-strong-smoke", "e6003a1d92ec"),
    Scenario(mode="shard_map", processes=2): ("cpu-2x1-shard_map-pid-strong-quick", "693c90c3e240"),
    Scenario(mode="shard_map", processes=2, scale="smoke"): (
        "cpu-2x1-shard_map-pid-strong-smoke",
        "4e610d6d075f",
    ),
    Scenario(devices_per_process=2, mode="pmap", controller="stepto", scaling="weak"): (
        "cpu-2dev-pmap-stepto-weak-quick",
        "e8b5dea3074d",
    ),
}


def test_nodes_leaves_every_name_and_key_at_its_default():
    for s, (name, key) in KEYS_BEFORE_NODES.items():
        assert s.nodes == 1 and (s.name(), s.key()) == (name, key)
    two = dataclasses.replace(Scenario(mode="shard_map", processes=2, scale="smoke"), nodes=2)
    assert two.name() == "cpu-2x1-shard_map-pid-strong-smoke-2nodes"
    assert two.key() != Scenario(mode="shard_map", processes=2, scale="smoke").key()
    assert Scenario.from_dict(two.to_dict()) == two


@pytest.mark.parametrize(
    "fields, error",
    [
        (dict(nodes=0), "nodes must be a whole number >= 1"),
        (dict(nodes=2), "2 nodes need several processes"),
        (dict(mode="shard_map", processes=3, nodes=2), r"nodes \(2\) must divide processes \(3\)"),
    ],
)
def test_nodes_must_divide_the_processes(fields, error):
    with pytest.raises(ValueError, match=error):
        Scenario(scale="smoke", **fields)
