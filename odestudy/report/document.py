"""Reduce scenario records into the study's tables and scaling figures."""

from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.recommended import RECOMMENDED
from ..measure.timing import PROTOCOL
from ..study import records
from ..study.runner import html_exporter
from . import loss, sessions
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
    table_body,
    table_rows,
)
from .explain import write_explain
from .floor import FLOOR_TEXT, floor_cells, gpu_lever_lines
from .frames import (
    BaselineError,
    baseline,
    in_scaling_matrix,
    read_records,
    record_machine_id,
    scaling_rows,
)
from .gpu import gpu_extra, headline_figure
from .intervals import fmt_interval
from .machines import machines_table, skipped_table
from .plots import scaling_figures, step_cost_figure
from .prediction import write_prediction
from .projection import all_sweeps, write_projection
from .reference import REFERENCE_CSV, comparison_table, reference_rows, seed_rows
from .step import loop_summary, same_model, verdict
from .tables import escape as _esc
from .tables import fmt as _fmt
from .tables import markdown_table
from .verdict import verdict_markdown
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
    "table_body",
    "write_report",
]


def _short_commit(rec: dict[str, Any]) -> str:
    """A side study's session and commit: `machine, day hh:mm–hh:mm UTC (commit)`."""
    session = rec.get("session")
    commit = sessions.short_commit(rec)
    return f"{session.when} ({commit})" if isinstance(session, sessions.Session) else commit


def step_table(
    sweeps: list[dict[str, Any]],
    levers: list[dict[str, Any]],
    spreads: dict[str, dict[str, Any]] | None = None,
) -> str:
    """What bounds one training step (1 device, trained model) and the levers measured
    on it: the step-cost sweeps' verdicts (`step.verdict`) and the levers' speedups with
    their intervals, loop counts and final losses (`benchmarks/levers.py`).

    - `spreads`: per controller, the default's run-to-run loss spread
      (`benchmarks/loss_spread.py`), which says whether a lever trains the same model.
    """
    parts = ["# What bounds a training step, and the levers on it", ""]
    machines = sorted({_esc(r.get("machine_id")) for r in [*sweeps, *levers]})
    if machines:
        parts += [
            f"Machine: {', '.join(machines)}. Each row says the session it was measured in "
            "(`odestudy/report/sessions.py`); a speedup compares rows of one record, so "
            "of one session.",
            "",
        ]
    if not sweeps:
        parts += ["No step-cost sweep of this machine (`benchmarks/step_cost.py`).", ""]
    rows = []
    order = sorted(sweeps, key=lambda s: (s["scenario"]["controller"], s.get("label") != "default"))
    for s in order:
        v = verdict(s)
        rates = s.get("rates") or {}
        shares = [x for x in v["forward_share"] if x is not None]
        rows.append(
            [
                s["scenario"]["controller"],
                _esc(s.get("label") or "default"),
                _short_commit(s),
                f"{s['fit']['fixed_per_iteration_s'] * 1e6:.0f}",
                f"{s['fit']['per_sample_iteration_s'] * 1e6:.1f}",
                _fmt(v["crossover_batch"], 2),
                f"{min(shares):.2f}–{max(shares):.2f}" if shares else "–",
                _fmt(v["flops_per_s"] and v["flops_per_s"] / 1e9, 3),
                _fmt(rates.get("matmul_flops_per_s") and rates["matmul_flops_per_s"] / 1e9, 3),
                _fmt(v["bytes_per_s"] and v["bytes_per_s"] / 1e9, 3),
                _fmt(rates.get("cache_bytes_per_s") and rates["cache_bytes_per_s"] / 1e9, 3),
                _fmt(rates.get("memory_bytes_per_s") and rates["memory_bytes_per_s"] / 1e9, 3),
                v["bound"] or "–",
            ]
        )
    if rows:
        parts += [
            "Step time per executed solver iteration = fixed + per sample x batch, fitted "
            "over batch sizes (`benchmarks/step_cost.py`). **Crossover**: the batch at which "
            "the per-sample work equals the fixed cost; below it the fixed cost bounds the "
            "step. **Forward share**: the forward pass (the loss alone) over the whole step, "
            "over the batch sizes swept. The per-sample work's GFLOP/s and GB/s come from "
            "XLA's cost analysis (one forward and one backward loop body per iteration) "
            "against this machine's measured float32 matmul rate and bandwidths (**cache**: "
            "an elementwise update of a 1 MB array repeated in one compiled loop; "
            "**memory**: of a 256 MB array). XLA counts the bytes of every operation, most "
            "of them cache hits for this model's small arrays, so **bound** is compute "
            "where the FLOP/s reach half the matmul rate, memory where the bytes/s reach "
            "half the cache bandwidth, else overhead.",
            "",
            markdown_table(
                (
                    "Controller",
                    "Variant",
                    "Session (commit)",
                    "Fixed (us/iteration)",
                    "Per sample (us/iteration)",
                    "Crossover batch",
                    "Forward share",
                    "Per-sample GFLOP/s",
                    "Matmul GFLOP/s",
                    "Per-sample GB/s",
                    "Cache GB/s",
                    "Memory GB/s",
                    "Bound",
                ),
                rows,
            ),
            "",
        ]
    lever_rows = []
    for rec in levers:
        controller = rec["scenario"]["controller"]
        spread = (spreads or {}).get(controller)
        for r in rec["rows"]:
            lo, hi = r["speedup_ci"]
            bodies, conds = loop_summary(r.get("loops"))
            equal = same_model(r["final_loss"], rec["rows"][0]["final_loss"], spread)
            same = "–" if equal is None else ("yes" if equal else "no")
            lever_rows.append(
                [
                    controller,
                    r["label"],
                    ", ".join(f"{k}={v}" for k, v in r["levers"].items()) or "–",
                    f"{r['step_time_s'] * 1e3:.2f}",
                    fmt_interval(r["speedup_vs_default"], lo, hi)
                    + (f" {loss.MARK}" if same == "no" else ""),
                    bodies,
                    conds,
                    _fmt(r["final_loss"], 3),
                    same,
                    *floor_cells(rec, r),
                    _short_commit(rec),
                ]
            )
    parts += ["## Levers", ""]
    if lever_rows:
        spread_text = "; ".join(
            f"{_esc(c)}: {v['spread_relative']:.1%} over {len(v['rows'])} seeds"
            for c, v in sorted((spreads or {}).items())
        )
        parts += [
            "Each lever against the default on the trained quick model, 1 device, last "
            "(full-length) stage: every variant in its own process, timed from the default's "
            "trained state on the same batches in interleaved blocks; speedup = default "
            "median step / variant's, 95% bootstrap over blocks and steps. **Loop bodies** "
            "and **conditionals**: what one step executes, forward / backward, counted "
            "in a profile of one untimed step (`measure.loops`; every while loop's body: "
            "solver steps, Tsit5's stages, saved times, checkpoint recomputation). "
            "**Final loss**: the variant's own training from scratch. **Trains the same "
            "model**: its final loss is at most the default's plus the default's "
            f"run-to-run spread over training seeds ({spread_text or 'not measured'}); a "
            "lower loss trains at least as well. A lever that does not is reported, not "
            "recommended. " + FLOOR_TEXT,
            "",
            markdown_table(
                (
                    "Controller",
                    "Variant",
                    "Levers",
                    "Step (ms)",
                    "Speedup [95% CI]",
                    "Loop bodies (fwd / bwd)",
                    "Conditionals (fwd / bwd)",
                    "Final loss",
                    "Trains the same model",
                    "Floor (ms)",
                    "x floor [95% CI]",
                    "Session (commit)",
                ),
                lever_rows,
            ),
            "",
            "Recommended (`odestudy run --recommended`, `odestudy matrix --recommended`), "
            "per controller: "
            + "; ".join(
                f"{c}: " + (", ".join(f"`{k}={v}`" for k, v in levers_.items()) or "the default")
                for c, levers_ in RECOMMENDED.items()
            )
            + ". The default is the reference's algorithm (Tsit5, one solve per sample "
            "under `vmap`, `SaveAt(ts=...)`, diffrax's default adjoint), so a speedup over "
            "the default is one over the reference's algorithm on this software stack.",
            "",
        ]
        for controller, levers_ in RECOMMENDED.items():
            found = [
                (rec, r)
                for rec in levers
                if rec["scenario"]["controller"] == controller
                for r in rec["rows"]
                if r["levers"] == levers_
            ]
            if found:
                measured = "; ".join(
                    f"{fmt_interval(r['speedup_vs_default'], *r['speedup_ci'])} "
                    f"({r['step_time_s'] * 1e3:.2f} ms a step, final loss "
                    f"{_fmt(r['final_loss'], 3)} against {_fmt(rec['rows'][0]['final_loss'], 3)}; "
                    f"{_short_commit(rec)})"
                    for rec, r in found
                )
                parts += [f"- {_esc(controller)}, over the default: {_esc(measured)}."]
        parts += [""]
    else:
        parts += ["No lever records of this machine (`benchmarks/levers.py`).", ""]
    return "\n".join(parts).rstrip() + "\n"


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
    recs = [r for r in rows if r["status"] == "ok"]
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
) -> dict[str, Path]:
    """Write `projection.md` and the device tables (`cpu.md`, `gpu.md`: how to read
    them once, in the first with rows); returns their paths."""
    written: dict[str, Path] = {}
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
    guide = True  # how to read the tables: once, in the first table with rows
    for device in ("cpu", "gpu"):
        path = tables / f"{device}.md"
        if not any(r["device"] == device and r["status"] == "ok" for r in rows):
            path.write_text(
                f"# {device.upper()} table\n\n{no_rows(rows, results, device, scale)}\n"
            )
        else:
            extra = (
                gpu_extra(gpu_rows, projected, reference_rows(reference)) if device == "gpu" else ""
            )
            path.write_text(device_table(rows, device, extra, guide))
            guide = False
        written[device] = path
    return written


def _step_inputs(
    results: str | Path, machine: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The step page's records of `machine`: its CPU step-cost sweeps, its lever records
    (each placed in its session) and its loss spreads per controller."""
    if not machine:
        return [], [], {}
    cpu_sweeps = all_sweeps(Path(results) / machine, "cpu")
    levers = [
        {**records.read_json(p), "path": str(p)}
        for p in sorted(Path(results, machine, "levers").glob("cpu-*.json"))
    ]
    found = sessions.index(results)
    for side in [*cpu_sweeps, *levers]:
        side["session"] = found.get(side["path"])
    spreads = {
        r["scenario"]["controller"]: r
        for p in sorted(Path(results, machine, "levers").glob("loss-spread-*.json"))
        if (r := records.read_json(p))
    }
    return cpu_sweeps, levers, spreads


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
    rows), the paths written and the other figures, and the skipped records, for
    display in the report notebook.
    """
    figures = Path(figures)
    every, chosen, rows, skipped = report_rows(results, scale)
    tables = figures / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    written = {}

    written.update(_device_tables(results, scale, every, chosen, rows, tables, reference))
    verdict_text = verdict_markdown(rows, scale)
    for name, text in (
        ("verdict", f"# Verdict ({_esc(scale)} scale)\n\n{verdict_text}"),
        ("reference", comparison_table(seed_rows(results), reference_rows(reference))),
        ("machines", machines_table(every, chosen)),
        ("skipped", skipped_table(skipped)),
    ):
        path = tables / f"{name}.md"
        path.write_text(text)
        written[name] = path
    figs, headline = _draw_figures(results, rows, every, figures) if draw else ([], None)
    cpu_sweeps, levers, spreads = _step_inputs(results, chosen["cpu"])
    if cpu_sweeps and draw:
        figs += step_cost_figure(cpu_sweeps, figures, "cpu_step_cost")
    path = tables / "step.md"
    gpu = "\n".join(gpu_lever_lines(results))
    path.write_text(step_table(cpu_sweeps, levers, spreads) + "\n" + gpu)
    written["step"] = path

    explain = write_explain([r for r in every if r["machine_id"] == chosen["cpu"]], figures)
    written["explain"] = explain["table"]
    written["prediction"] = write_prediction(results, figures, chosen["cpu"])
    workloads = write_workloads(results, figures, scale)  # `make map`: the quick scale
    written.update({"workloads": workloads["table"]} if "table" in workloads else {})
    figs += [workloads["figure"]] if "figure" in workloads else []
    return {
        "rows": rows,
        "verdict": verdict_text,
        "headline": headline,
        "tables": written,
        "figures": figs + explain["figures"],
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
