"""Execute the scenario notebook for one scenario in a fresh kernel (papermill)."""

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.devices import child_environment
from ..measure.environment import ROOT, in_checkout, notebook
from ..measure.record import REQUIRED_KEYS, Record
from ..measure.scenario import Scenario
from ..measure.timing import PROTOCOL, measurement_env
from ..measure.training import base_record
from . import records
from .records import RECORD_NAME

SCENARIO_NOTEBOOK = notebook("scenario.ipynb")
# Kernels start in the checkout, or where the command runs (an installed package).
KERNEL_CWD = ROOT if in_checkout() else Path.cwd()


@contextlib.contextmanager
def environ(env: dict[str, str]) -> Iterator[None]:
    """Temporarily replace this process's environment (a kernel inherits it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def execute_notebook(
    path: Path, out: Path, parameters: dict[str, Any], timeout_s: float | None = None
) -> None:
    """Execute the notebook at `path` with `parameters` in a fresh kernel (papermill) into
    `out`; `timeout_s` per cell."""
    import papermill

    papermill.execute_notebook(
        str(path),
        str(out),
        parameters=parameters,
        kernel_name="python3",
        progress_bar=False,
        cwd=str(KERNEL_CWD),
        execution_timeout=timeout_s,
        # ipykernel warns at every start that it runs over TCP without encryption
        # (loopback here); errors still show.
        extra_arguments=["--log-level=ERROR"],
    )


def expected_env(s: Scenario) -> dict[str, str]:
    """The measurement environment (`timing.measurement_env`) of a kernel started here for `s`."""
    return measurement_env(child_environment(s.device, s.devices_per_process))


def failed_record(s: Scenario, error: str, status: str = "failed", **extra: Any) -> Record:
    """A record for a scenario that did not produce one itself."""
    record: dict[str, Any] = {**base_record(s)}
    record.update(
        status=status,
        error=error,
        versions=environment.versions(),
        **environment.provenance(),
        protocol=PROTOCOL,
        measurement_env=expected_env(s),
        hardware=environment.cpu_info(),
        machine=environment.this_machine(),
        machine_id=environment.machine_id(environment.this_machine()),
        finished=environment.now(),
        **extra,
    )
    for key in REQUIRED_KEYS:
        record.setdefault(key, None)
    return Record(record)


def execute_scenario(
    s: Scenario,
    out_dir: str | os.PathLike,
    timeout_s: float | None = None,
    extra_env: dict[str, str] | None = None,
) -> Record:
    """Run `s` by executing `notebooks/scenario.ipynb` in a fresh kernel, its record and
    the executed notebook in `out_dir`; a failure gets a failed record, never raised."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex
    parameters = {"scenario": s.to_dict(), "out_dir": str(out_dir.resolve()), "run_id": run_id}
    env = {**child_environment(s.device, s.devices_per_process), **(extra_env or {})}
    start = time.perf_counter()
    error = None
    try:
        with environ(env):
            execute_notebook(SCENARIO_NOTEBOOK, out_dir / "scenario.ipynb", parameters, timeout_s)
    except Exception as exc:  # recorded below; the study goes on
        error = f"{type(exc).__name__}: {exc}".strip()
    path = out_dir / RECORD_NAME
    record: Record | None = records.read_record(path) if path.exists() else None
    wall = time.perf_counter() - start
    if record is None or record.get("run_id") != run_id:
        record = failed_record(
            s, error or "the notebook wrote no record", runtime_s=wall, run_id=run_id
        )
    # The kernel's whole time (start, imports, run, shutdown) beside its `runtime_s`.
    record["kernel_wall_s"] = wall
    records.write_json_atomic(path, record)
    return record


def html_exporter():
    """The HTML page of an executed notebook for readers: markdown and outputs only."""
    import nbconvert

    return nbconvert.HTMLExporter(
        exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True
    )


def execute_report(
    results: str | os.PathLike,
    scale: str,
    figures: str | os.PathLike,
    docs: str | os.PathLike | None = None,
    readme: str | os.PathLike | None = None,
) -> Path:
    """Execute `notebooks/report.ipynb` over the records of `scale` and render it as HTML
    (in `figures`, beside its tables and figures); returns the HTML path."""
    import nbformat

    figures = Path(figures)
    figures.mkdir(parents=True, exist_ok=True)
    executed = figures / f"report_{scale}.ipynb"
    parameters = {
        "results": str(Path(results).resolve()),
        "scale": scale,
        "figures": str(figures.resolve()),
        "docs": str(Path(docs).resolve()) if docs is not None else None,
        "readme": str(Path(readme).resolve()) if readme is not None else None,
    }
    execute_notebook(notebook("report.ipynb"), executed, parameters)
    html, _ = html_exporter().from_notebook_node(nbformat.read(executed, 4))
    out = figures / f"report_{scale}.html"
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(html)
    os.replace(tmp, out)
    return out
