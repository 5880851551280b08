"""Reduce scenario records into the study's tables and scaling figures."""

from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.timing import PROTOCOL
from ..study.matrix import Step
from ..study.runner import html_exporter
from ..study.studies import Table, pages_of
from ..study.versions import FOLDER as VERSIONS_FOLDER
from . import sessions
from .best import DEFAULT_STEP
from .crossover import write_crossover
from .device_tables import (
    ADDED_COLUMNS,
    DIAGNOSTIC_COLUMNS,
    REFERENCE_COLUMNS,
    _protocol,
    device_table,
    diagnostic_rows,
    machine_line,
    no_rows,
    pick_machine,
    table_rows,
)
from .explain import write_explain
from .floor import gpu_lever_lines
from .frames import (
    BaselineError,
    baseline,
    in_scaling_matrix,
    read_records,
    record_machine_id,
    scaling_rows,
)
from .gpu import gpu_extra, gpu_predictions, headline_figure, predicted_section
from .machines import machines_table, skipped_table
from .plots import scaling_figures, step_cost_figure
from .prediction import write_prediction
from .projection import all_sweeps, write_projection
from .provenance import provenance_table
from .reference import REFERENCE_CSV, comparison_table, reference_rows, seed_rows
from .step import step_table
from .tables import escape as _esc
from .tables import write_table
from .verdict import verdict_markdown
from .versions import version_rows, write_versions_table
from .workloads import write_workloads

__all__ = [
    "ADDED_COLUMNS",
    "DIAGNOSTIC_COLUMNS",
    "REFERENCE_COLUMNS",
    "REFERENCE_CSV",
    "comparison_table",
    "device_table",
    "diagnostic_rows",
    "gpu_extra",
    "headline_figure",
    "machine_line",
    "machines_table",
    "pick_machine",
    "reference_rows",
    "seed_rows",
    "skipped_table",
    "table_rows",
    "BaselineError",
    "baseline",
    "read_records",
    "record_machine_id",
    "scaling_rows",
    "write_report",
]


def report_rows(
    results: str | Path, scale: str
) -> tuple[list[dict[str, Any]], dict[str, str], list[dict[str, Any]], list[tuple[str, str]]]:
    """What the report of `scale` shows: every current record (`every`), the machine
    chosen per device kind (`pick_machine`), the scaling rows of the chosen machines
    under the current protocol (`scaling_rows`) and the records left out with why."""
    skipped: list[tuple[str, str]] = []
    every = read_records(results, scale, current=True, skipped=skipped)
    here = environment.machine_id(environment.this_machine())
    chosen = {d: pick_machine(every, d) or here for d in ("cpu", "gpu")}
    mine = [r for r in every if chosen[r["device"]] == r["machine_id"]]
    # The scaling tables hold one protocol, the current one: a record of an older one
    # (`timing.PROTOCOL`) is listed as skipped, not set beside today's rows.
    older = [r for r in mine if in_scaling_matrix(r) and r.get("protocol") != PROTOCOL]
    skipped += [
        (r["path"], f"older measurement protocol ({_protocol([r])}; now {PROTOCOL})") for r in older
    ]
    rows = scaling_rows([r for r in mine if in_scaling_matrix(r) and r not in older])
    return every, chosen, rows, skipped


def _draw_figures(
    results: str | Path, rows: list[dict[str, Any]], every: list[dict[str, Any]], figures: Path
) -> tuple[list[Path], Path | None]:
    """The report's scaling figures (per device kind) and GPU step-cost figure, and its
    headline figure (None without ok multi-device rows)."""
    figs = []
    # The scaling figures: the default step (the reference's), each mode over its 1 device.
    recs = [r for r in rows if r["status"] == "ok" and r.get("step") == DEFAULT_STEP]
    by_scaling = {k: scaling_rows(recs, k) for k in ("strong", "weak")}
    for device in ("cpu", "gpu"):
        sel = [r for k in by_scaling for r in by_scaling[k] if r["device"] == device]
        cores = next(((r.get("hardware") or {}).get("physical_cores") for r in sel), None)
        figs += scaling_figures(sel, figures, device, cores)
    headline = headline_figure([r for k in by_scaling for r in by_scaling[k]], figures)
    sweeps = [
        s
        for m in sorted({r["machine_id"] for r in every if r["device"] == "gpu"})
        for s in all_sweeps(Path(results) / m, "gpu")
    ]
    if sweeps:
        figs += step_cost_figure(sweeps, figures, "gpu_step_cost")
    return figs, headline


def _device_tables(
    results: str | Path,
    scale: str,
    every: list[dict[str, Any]],
    chosen: dict[str, str],
    rows: list[dict[str, Any]],
    tables: Path,
    reference: str | Path,
) -> dict[str, Table]:
    """Write `projection.md` and the device tables (`cpu.md`, `gpu.md`: how to read
    them once, in the first with rows); returns them as values."""
    written: dict[str, Table] = {}
    by_machine = {
        m: scaling_rows(
            [
                r
                for r in every
                if r["machine_id"] == m and r["device"] == "cpu" and in_scaling_matrix(r)
            ]
        )
        for m in sorted({r["machine_id"] for r in every if r["device"] == "cpu"})
    }
    gpu_rows = [r for r in rows if r["device"] == "gpu"]
    cpu_rows = [r for r in rows if r["device"] == "cpu"]
    written["projection"], projected = write_projection(
        results, by_machine, gpu_rows, chosen["gpu"], cpu_rows, tables / "projection.md"
    )
    # The GPU rows predicted from one GPU, beside the measured ones (or alone).
    predicted = {"cpu": "", "gpu": predicted_section(gpu_predictions(results, scale), every)}
    guide = True  # how to read the tables: once, in the first table with rows
    for device in ("cpu", "gpu"):
        path = tables / f"{device}.md"
        if not any(r["device"] == device and r["status"] == "ok" for r in rows):
            text = f"# {device.upper()} table\n\n{no_rows(rows, results, device, scale)}\n"
            text += f"\n{predicted[device]}" if predicted[device] else ""
        else:
            extra = (
                gpu_extra(gpu_rows, projected, reference_rows(reference)) if device == "gpu" else ""
            )
            text = device_table(rows, device, predicted[device] + extra, guide)
            guide = False
        written[device] = write_table(path, text)
    return written


def _step_inputs(
    results: str | Path, machine: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The step page's records of `machine`: its CPU step-cost sweeps, its lever records
    (each placed in its session) and its loss spreads per controller."""
    if not machine:
        return [], [], {}
    cpu_sweeps = all_sweeps(Path(results) / machine, "cpu")
    levers = Step().lever_records(results, machine)
    found = sessions.index(results)
    for side in [*cpu_sweeps, *levers]:
        side["session"] = found.get(side["path"])
    return cpu_sweeps, levers, Step().loss_spreads(results, machine)


def _write_step(
    results: str | Path, machine: str | None, figures: Path, draw: bool
) -> tuple[Table, list[Path]]:
    """Write `tables/step.md` (the step page's table of `machine`'s CPU records and the
    GPU levers' lines) and, with `draw`, the CPU step-cost figure; returns the table
    and the figures drawn."""
    cpu_sweeps, levers, spreads = _step_inputs(results, machine)
    figs = step_cost_figure(cpu_sweeps, figures, "cpu_step_cost") if cpu_sweeps and draw else []
    path = figures / "tables" / "step.md"
    gpu = "\n".join(gpu_lever_lines(results))
    return write_table(path, step_table(cpu_sweeps, levers, spreads) + "\n" + gpu), figs


def _write_side_studies(
    results: str | Path, scale: str, every: list[dict[str, Any]], machine: str, figures: Path
) -> tuple[dict[str, Table], list[Path]]:
    """Write the explanation, prediction, workload and version studies' tables and the
    first three's figures (the explanation's from `machine`'s records among `every`,
    each section from another machine's where `machine` holds none of it; the version
    study's where a page of `scale` shows it); returns the tables by name and the
    figures."""
    explain = write_explain(list(every), figures, machine)
    written = {
        "explain": explain["value"],
        "prediction": write_prediction(results, figures, machine),
    }
    figs = []
    # `make map` and `make crossover`: the quick scale
    for name, found in (
        ("workloads", write_workloads(results, figures, scale)),
        ("crossover", write_crossover(results, figures, scale)),
    ):
        written.update({name: found["value"]} if "value" in found else {})
        figs += [found["figure"]] if "figure" in found else []
    if any("versions" in p.tables for p in pages_of(scale)):
        path = figures / "tables" / "versions.md"
        by_set = version_rows(Path(results) / VERSIONS_FOLDER, scale)
        written["versions"] = write_versions_table(path, by_set)
    return written, figs + explain["figures"]


def write_report(
    results: str | Path,
    scale: str,
    figures: str | Path,
    reference: str | Path = REFERENCE_CSV,
    draw: bool = True,
) -> dict[str, Any]:
    """Write `figures/tables/{verdict,cpu,gpu,reference,machines,skipped,explain,...}.md`,
    the headline figure (`headline_figure`) and the other figures.

    - `draw`: also draw the scaling, headline and step-cost figures (False: the tables,
      and the explain and workload studies' figures, only; much faster).

    Each device kind's tables come from one machine (`pick_machine`); records that do
    not parse or match no scenario of the current matrices are listed in
    `skipped.md` and left out. Returns the rows, the verdict (`verdict.verdict_markdown`,
    also in `tables/verdict.md`), the headline figure's PNG (None without ok multi-device
    rows), the tables as values (`values`, by name: what the pages and the report
    notebook render) and the paths written (`tables`), the other figures, and the
    skipped records.
    """
    figures = Path(figures)
    every, chosen, rows, skipped = report_rows(results, scale)
    tables = figures / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    written = _device_tables(results, scale, every, chosen, rows, tables, reference)
    verdict_text = verdict_markdown(rows, scale)
    for name, text in (
        ("verdict", f"# Verdict ({_esc(scale)} scale)\n\n{verdict_text}"),
        ("reference", comparison_table(seed_rows(results), reference_rows(reference))),
        ("machines", machines_table(every, chosen)),
        ("skipped", skipped_table(skipped)),
        ("provenance", provenance_table(results)),
    ):
        written[name] = write_table(tables / f"{name}.md", text)
    figs, headline = _draw_figures(results, rows, every, figures) if draw else ([], None)
    written["step"], step_figs = _write_step(results, chosen["cpu"], figures, draw)
    side, side_figs = _write_side_studies(results, scale, every, chosen["cpu"], figures)
    written.update(side)
    return {
        "rows": rows,
        "verdict": verdict_text,
        "headline": headline,
        "tables": {name: tables / f"{name}.md" for name in written},
        "values": written,
        "figures": figs + step_figs + side_figs,
        "skipped": skipped,
        "machines": chosen,
    }


def settle_report(html: str | Path) -> Path:
    """Drop the run's clock times from the executed report notebook beside `html`
    (papermill's start and end times and durations, the kernel's execution stamps, the
    injected cell's random id), make paths inside the checkout relative to it, and render
    `html` again, so that rerunning the report on the same records, here or in a clone
    elsewhere, leaves both files, and a clean checkout, unchanged. Returns `html`."""
    import nbformat

    html = Path(html)
    executed = html.with_suffix(".ipynb")
    nb = nbformat.read(executed, 4)
    for number, cell in enumerate(nb.cells):
        cell.id = f"cell-{number:02d}"  # papermill gives its injected cell a random id
    for node in [nb, *nb.cells]:
        node.metadata.pop("execution", None)
        for key in ("start_time", "end_time", "duration"):
            node.metadata.get("papermill", {}).pop(key, None)
    # Paths inside this checkout relative to it: a clone elsewhere writes the same files.
    nb = nbformat.reads(nbformat.writes(nb).replace(f"{environment.ROOT}/", ""), 4)
    nbformat.write(nb, executed)

    body, _ = html_exporter().from_notebook_node(nb)
    tmp = html.with_suffix(".html.tmp")
    tmp.write_text(body)
    tmp.replace(html)
    return html
