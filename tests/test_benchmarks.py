"""The benchmark scripts import only names the package has (their imports sit inside
functions, so that a worker sets its devices first: nothing else would notice a name
that moved)."""

import ast
import importlib

import pytest

from odestudy.measure.environment import ROOT

SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_package_name_a_benchmark_imports_exists(script):
    tree = ast.parse(script.read_text())
    imported = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("odestudy"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{script.name}: {node.module}.{alias.name}"
                imported += 1
    assert imported, f"{script.name} imports nothing from the package"


def _script(name: str):
    """A benchmark script as a module (its `__main__` part does not run)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        name.removesuffix(".py"), ROOT / "benchmarks" / name
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lever_record(s, labels: list[str]) -> dict:
    """A record of `benchmarks/levers.py` for `labels` on `s`, made here and now."""
    from odestudy.measure import environment
    from odestudy.measure.timing import PROTOCOL, measurement_env

    levers = _script("levers.py")
    return {
        "scenario": s.to_dict(),
        "rows": [{"label": label, "levers": levers.levers_of(label, s)} for label in labels],
        "blocks": 6,
        "steps_per_block": 10,
        "machine_id": environment.machine_id(environment.this_machine()),
        "versions": environment.versions(),
        "protocol": PROTOCOL,
        "measurement_env": measurement_env(),
    }


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({}, None),
        ({"machine_id": "elsewhere"}, "machine differs"),
        ({"protocol": -1}, "protocol differs"),
        ({"versions": {"jax": "0.0"}}, "versions differs"),
        ({"measurement_env": {"XLA_FLAGS": "--x"}}, "measurement environment differs"),
        ({"blocks": 5}, "blocks differs"),
        ({"rows": [{"label": "default"}]}, "variants differs"),
        # A label whose levers changed since (the fused solve's reverse mode, say).
        (
            {
                "rows": [
                    {"label": "default", "levers": {}},
                    {"label": "recommended-fused", "levers": {"adjoint": "all_steps"}},
                ]
            },
            "levers differs",
        ),
        ({"scenario": {"controller": "stepto"}}, "scenario differs"),
        (None, "no record to keep"),
    ],
)
def test_a_map_lever_record_is_kept_only_where_it_stands_for_the_run(tmp_path, change, why):
    """`make map-levers` (`levers.py --map`) keeps a record on a rerun only where it was
    made for the same run on this machine, versions, protocol and environment."""
    import json

    from odestudy import Scenario
    from odestudy.study.workloads import WORKLOADS

    levers = _script("levers.py")
    s = Scenario(controller="pid", **WORKLOADS[0].fields())
    labels = ["default", "recommended-fused"]
    path = tmp_path / "levers.json"
    if change is not None:
        path.write_text(json.dumps({**_lever_record(s, labels), **change}))
    found = levers.why_rerun(path, s, labels, 6, 10)
    assert found is None if why is None else found.startswith(why)


def test_the_gpu_sessions_default_variants_are_levers_variants():
    """`gpu_session.sh levers` runs on a lent GPU only: a variant its defaults name that
    `levers.py` does not know would cost that session's device time."""
    import re

    levers = _script("levers.py")
    text = (ROOT / "benchmarks" / "gpu_session.sh").read_text()
    defaults = re.findall(r'^(?:LEVERS_\w+|KERNEL_LEVERS)=\$\{\w+:-"([^"]+)"\}', text, flags=re.M)
    assert len(defaults) == 3
    for label in ",".join(defaults).split(","):
        assert label in levers.VARIANTS or label in levers.RECOMMENDED_VARIANTS, label


@pytest.mark.parametrize("controller", ["pid", "stepto"])
def test_the_width_variants_are_the_recommended_step_at_each_width(controller):
    """`make map-vectors` compares the recommended step at XLA's width and at 512 bits,
    whatever width the recommended step itself takes."""
    from odestudy import Scenario
    from odestudy.measure.recommended import recommended_levers

    levers = _script("levers.py")
    s = Scenario(controller=controller)
    for label, width in (("recommended-vw0", 0), ("recommended-vw512", 512)):
        assert levers.levers_of(label, s) == {**recommended_levers(s), "vector_width": width}
    make = (ROOT / "Makefile").read_text()
    variants = make.split("MAP_VECTORS = ")[1].splitlines()[0].split(",")
    assert all(v in levers.VARIANTS or v in levers.RECOMMENDED_VARIANTS for v in variants)
