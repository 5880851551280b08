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
