"""The package's four layers and the direction of their imports: `measure` (what one
run measures) <- `study` (running many, records on disk) <- `report` (tables, figures)
<- `builtin` (the built-in studies, one file each: their scenarios and the tables and
claims of their report, registered in `studies.STUDIES`, which `study` and `report` ask
instead of importing them); `odestudy/__init__.py` and `odestudy/cli.py` are the edge
that may import all four. No import points back up, no import circle, and a package
import inside a function only delays a heavy library (JAX, matplotlib, pandas,
papermill), with a comment."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "odestudy"
LAYERS = ("measure", "study", "report", "builtin")  # each may import the ones before it
HEAVY = {
    "jax",
    "jaxlib",
    "diffrax",
    "equinox",
    "optax",
    "matplotlib",
    "seaborn",
    "pandas",
    "papermill",
    "nbformat",
    "nbconvert",
    "tqdm",
    "IPython",
}


def _modules() -> dict[str, Path]:
    """Every module of the layers, dotted (`measure.training`), with its file."""
    return {
        ".".join(p.relative_to(PACKAGE).with_suffix("").parts): p
        for layer in LAYERS
        for p in sorted((PACKAGE / layer).rglob("*.py"))
        if p.name != "__init__.py"
    }


MODULES = _modules()


def _imports(module: str, top_level_only: bool = False) -> list[tuple[str, ast.stmt, bool]]:
    """`(target, node, in_function)` for each import in `module`: target is a package
    module (dotted), a layer (`measure`), or a third-party top-level name."""
    tree = ast.parse(MODULES[module].read_text())
    here = module.split(".")[:-1]
    out = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = here[: len(here) - (child.level - 1)] + (
                        child.module.split(".") if child.module else []
                    )
                    names = [".".join([*base, a.name]) for a in child.names]
                    hits = [n for n in names if n in MODULES] or [".".join(base)]
                    out.extend((h, child, in_function) for h in hits)
                else:
                    out.append((child.module.split(".")[0], child, in_function))
            elif isinstance(child, ast.Import):
                out.extend((a.name.split(".")[0], child, in_function) for a in child.names)
            elif not (top_level_only and inner):
                visit(child, inner)

    visit(tree, False)
    return out


def _layer(target: str) -> str | None:
    return target.split(".")[0] if target.split(".")[0] in LAYERS else None


def test_every_layer_is_checked_and_the_built_in_studies_are_one_file_each():
    """Each layer has modules to check; each built-in study is one module of the top
    layer, and the studies below it never name that layer (they ask the registry)."""
    from odestudy.builtin import BUILT_IN
    from odestudy.study.studies import STUDIES

    assert {m.split(".")[0] for m in MODULES} == set(LAYERS)
    files = {STUDIES[name].__module__ for name in BUILT_IN}
    assert files == {
        f"odestudy.builtin.{m.split('.')[1]}" for m in MODULES if m.startswith("builtin.")
    }
    assert not (PACKAGE / "study" / "builtin").exists()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    mine = LAYERS.index(module.split(".")[0])
    for target, node, _ in _imports(module):
        assert target != "odestudy", f"{module}:{node.lineno} imports the package's edge"
        layer = _layer(target)
        if layer is not None:
            assert LAYERS.index(layer) <= mine, (
                f"{module}:{node.lineno} imports {target}: {module.split('.')[0]} may not "
                f"import {layer}"
            )


def test_no_import_circle():
    graph = {m: {t for t, _, _ in _imports(m) if t in MODULES} for m in MODULES}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            assert state.get(t) != 1, f"import circle: {' -> '.join([*path, m, t])}"
            if t not in state:
                visit(t, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def _heavy(module: str, seen: set[str] | None = None) -> bool:
    """Whether importing `module` imports a heavy library (at module level, transitively)."""
    seen = seen if seen is not None else set()
    seen.add(module)
    for target, _, _ in _imports(module, top_level_only=True):
        if target in HEAVY or (target in MODULES and target not in seen and _heavy(target, seen)):
            return True
    return False


@pytest.mark.parametrize("module", sorted(MODULES))
def test_package_imports_inside_functions_only_delay_heavy_libraries(module):
    lines = MODULES[module].read_text().splitlines()
    for target, node, in_function in _imports(module):
        if not in_function or target not in MODULES:
            continue
        assert _heavy(target), (
            f"{module}:{node.lineno} imports {target} inside a function, but it is light: "
            "import it at the top"
        )
        context = lines[max(0, node.lineno - 3) : node.end_lineno]
        assert any("#" in line for line in context), (
            f"{module}:{node.lineno}: say why the import of {target} waits (a comment)"
        )


def test_importing_the_package_loads_no_figure_library():
    """Every scenario's kernel and worker process imports the package: matplotlib and
    seaborn wait for a figure (about a second of each process's start)."""
    import subprocess
    import sys

    code = "import sys, odestudy; print(sorted({'matplotlib', 'seaborn'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# The report layer reads as select -> rows -> render: no function of it longer than this.
REPORT_FUNCTION_LINES = 60


def test_no_report_function_is_over_60_lines():
    long = [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted((PACKAGE / "report").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > REPORT_FUNCTION_LINES
    ]
    assert not long, long
