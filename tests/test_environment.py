"""environment.yml (conda-forge) parses and pins what pyproject.toml pins."""

import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from odestudy.measure.environment import ROOT


def _conda_pins() -> dict[str, SpecifierSet]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    pins = {}
    for dep in env["dependencies"]:
        if isinstance(dep, str) and dep != "pip":
            name, _, spec = dep.partition(" ")
            pins[name] = SpecifierSet(spec.replace(" ", ""))
    return pins


def test_environment_pins_agree_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    wanted += [
        Requirement(r) for extra in ("dev", "lab") for r in project["optional-dependencies"][extra]
    ]
    pins = _conda_pins()
    for req in wanted:
        assert req.name in pins, f"{req.name} missing from environment.yml"
        assert pins[req.name] == req.specifier, (req.name, pins[req.name], req.specifier)
    assert pins["python"] == SpecifierSet(project["requires-python"])
