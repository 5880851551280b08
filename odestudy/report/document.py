"""Reduce scenario records into the study's tables and scaling figures."""

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.recommended import RECOMMENDED
from ..measure.timing import PROTOCOL
from ..study import records
from ..study.runner import html_exporter
from . import loss, sessions
from .explain import write_explain
from .frames import (
    BaselineError,
    baseline,
    in_scaling_matrix,
    read_records,
    record_machine_id,
    scaling_rows,
)
from .intervals import METHOD, fmt_interval
from .plots import CONTROLLER_STYLE, MODE_STYLE, _save, scaling_figures, step_cost_figure
from .prediction import write_prediction
from .projection import all_sweeps, projected_table, write_projection
from .step import loop_summary, same_model, verdict
from .tables import escape as _esc
from .tables import fmt as _fmt
from .tables import loss_cell, markdown_table
from .verdict import exceeds_cores, verdict_markdown
from .workloads import write_workloads

__all__ = [
    "BaselineError",
    "baseline",
    "read_records",
    "record_machine_id",
    "scaling_rows",
    "table_body",
    "write_report",
]

# The reference study's two published tables as data (its "epoch time" is one optimiser
# step), kept in the repo so that a clone anywhere can compare with them.
REFERENCE_CSV = environment.shipped("data", "reference_tables.csv")
REFERENCE_COLUMNS = (
    "Device",
    "Number of Devices",
    "Mode",
    "Controller",
    "Runtime (s)",
    "Epoch Time (s)",
    "Compile Time (s)",
    "Final Loss",
)
# The reference's table gets the row identity it leaves implicit: the first table of a
# device kind is `REFERENCE_COLUMNS + ADDED_COLUMNS`, the second (our diagnostics)
# `DIAGNOSTIC_COLUMNS`, which start with the same row identity so that the two read side
# by side (each fits a 1400 px page).
ADDED_COLUMNS = ("Scaling", "Global batch", "Problem")
IDENTITY_COLUMNS = ("Devices", "Mode", "Controller", "Scaling", "Global batch")
DIAGNOSTIC_COLUMNS = IDENTITY_COLUMNS + (
    "Step time median (s)",
    "Step time IQR (s)",
    "Runs",
    "Speedup [95% CI]",
    "Efficiency [95% CI]",
    "Efficiency vs machine ceiling [95% CI]",
    "Collectives total / in loops",
    "Solver steps max / mean",
    "Status",
)


def pick_machine(recs: list[dict[str, Any]], device: str) -> str | None:
    """The machine whose `device` rows make the tables: of the machines with ok records
    of that kind under the current protocol (`timing.PROTOCOL`; any protocol where
    none has such), this machine if it is one, else the one with the most (ties: the
    latest), so that every clone writes the same tables from the same records."""
    ok = [r for r in recs if r["device"] == device and r["status"] == "ok"]
    ok = [r for r in ok if r.get("protocol") == PROTOCOL] or ok
    if not ok:
        return None
    here = environment.machine_id(environment.this_machine())
    if any(r["machine_id"] == here for r in ok):
        return here
    count: dict[str, tuple[int, str]] = {}
    for r in ok:
        n, last = count.get(r["machine_id"], (0, ""))
        count[r["machine_id"]] = (n + 1, max(last, str(r.get("finished"))))
    return max(count, key=lambda m: count[m])


def _devices_label(r: dict[str, Any], cores: int | None) -> str:
    label = str(r["n_devices"])
    if r.get("processes", 1) > 1:
        label += f" ({r['processes']} proc × {r['devices_per_process']})"
    if cores and r["device"] == "cpu" and r["n_devices"] > cores:
        label += " †"
    return label


def table_rows(rows: list[dict[str, Any]], cores: int | None) -> list[list[str]]:
    """The first table's cells: the reference's columns, then the row identity it
    leaves implicit (`REFERENCE_COLUMNS + ADDED_COLUMNS`)."""
    return [
        [
            r["device"],
            _devices_label(r, cores),
            r["mode"],
            r["controller"],
            _fmt(r.get("runtime_s"), 3),
            _fmt(r.get("epoch_time_s")),
            _fmt(r.get("compile_time_s"), 3),
            loss_cell(r),
            r["scaling"],
            str(r["global_batch"]),
            _esc(problem_name(r)),
        ]
        for r in rows
    ]


def problem_name(r: dict[str, Any]) -> str:
    """What a row trained: its problem's name (records before problems: the oscillator)."""
    return str((r.get("problem_facts") or {}).get("name") or r.get("problem") or "oscillator")


def diagnostic_rows(rows: list[dict[str, Any]], cores: int | None) -> list[list[str]]:
    """The second table's cells: the row identity, then our diagnostics
    (`DIAGNOSTIC_COLUMNS`)."""
    out = []
    for r in rows:
        ok = r["status"] == "ok"
        steps = r.get("solver_steps") or {}
        iqr = f"{_fmt(r['step_time_p25_s'])}–{_fmt(r['step_time_p75_s'])}" if ok else "–"
        runs = ", ".join(_fmt(x, 3) for x in r.get("step_time_runs_s") or []) if ok else ""
        status = r["status"] if ok else f"{r['status']}: {r.get('error')}"
        if ok and r.get("baseline_error"):
            status += f" (no speedup: {r['baseline_error']})"
        if ok and r.get("untrained"):
            status += f" (no speedup: {r['untrained']} did not train)"
        out.append(
            [
                _devices_label(r, cores),
                r["mode"],
                r["controller"],
                r["scaling"],
                str(r["global_batch"]),
                _fmt(r.get("step_time_s")),
                iqr,
                (f"{len(r['step_time_runs_s'])} ({runs})" if r.get("step_time_runs_s") else "1")
                if ok
                else "–",
                loss.baseline_flag(
                    fmt_interval(r["speedup"], *(r.get("speedup_ci") or (None, None))), r
                ),
                fmt_interval(r["efficiency"], *(r.get("efficiency_ci") or (None, None))),
                fmt_interval(*(r.get("efficiency_vs_ceiling") or (None, None, None))),
                f"{_fmt(r.get('collectives_total'))} / {_fmt(r.get('collectives_in_loops'))}",
                f"{_fmt(steps.get('max'), 3)} / {_fmt(steps.get('mean'), 3)}" if ok else "–",
                status,
            ]
        )
    return out


def _known(value: Any) -> Any:
    """A record's value for a sentence: "unknown" where the record has none."""
    return "unknown" if value is None else value


def _protocol(rows: list[dict[str, Any]]) -> str:
    """The measurement protocol(s) of `rows`, "none recorded" for records made before
    protocols were."""
    found = sorted({str(r["protocol"]) for r in rows if r.get("protocol") is not None})
    none = any(r.get("protocol") is None for r in rows)
    return ", ".join(found + (["none recorded"] if none else [])) or "none recorded"


def machine_line(rows: list[dict[str, Any]], device: str) -> str:
    """Hardware and versions of the records of one device kind."""
    ok = [r for r in rows if r["device"] == device and r["status"] == "ok"]
    if not ok:
        return ""
    # Every value here comes from a record: escaped, never markup; none left as None.
    hw = {k: _esc(_known(v)) for k, v in (ok[0].get("hardware") or {}).items()}
    hw = {k: hw.get(k, "unknown") for k in ("cpu_model", "physical_cores", "logical_cpus")}
    v = {k: _esc(_known(x)) for k, x in (ok[0].get("versions") or {}).items()}
    v = {k: v.get(k, "unknown") for k in ("python", "jax", "jaxlib", "diffrax", "equinox", "optax")}
    kind = _esc(repr(ok[0].get("device_kind", device)))
    commits = ", ".join(sorted({_esc(str(r.get("git_commit") or "unknown")[:12]) for r in ok}))
    return (
        f"Machine {_esc(ok[0].get('machine_id'))}: {hw.get('cpu_model')} "
        f"({hw.get('physical_cores')} physical cores"
        f", {hw.get('logical_cpus')} logical), device kind {kind}; python "
        f"{v.get('python')}, jax {v.get('jax')}, jaxlib {v.get('jaxlib')}, diffrax "
        f"{v.get('diffrax')}, equinox {v.get('equinox')}, optax {v.get('optax')}; "
        f"pmap is {_esc(_known(ok[0].get('pmap_implementation')))}; measurement protocol "
        f"{_esc(_protocol(ok))}; records from git commit(s) {commits}."
    )


EPOCH_NOTE = (
    "**Epoch Time** here is one pass over the training set: the median step time times "
    "(data set size / global batch). The reference's column of that name is the mean "
    "time of one optimiser step; compare it with *Step time median*. **Runtime** is the "
    "whole scenario (data, compiles, training, evaluation) and **Compile Time** the "
    "AOT `lower().compile()` of the training step, summed over the programs its length "
    "stages compile (PID: one program for every stage; StepTo: one per stage). **Final Loss** "
    "is the MSE on a fixed evaluation set of full series, solved with the scenario's "
    "controller, the same in every mode. Speedup and efficiency are step-time ratios "
    "against the 1-device row of the same controller, scaling and batch, measured on the "
    "same machine, versions and code (an explicit join on every other scenario field), "
    "one scenario at a time. **Runs**: the number of runs and each run's median step "
    "time. The quick scaling matrix runs every scenario 3 times at different times, "
    "interleaved: the first a fresh kernel that trains both stages and compiles cold; "
    "each repeat times 40 more full-length steps from that run's trained state with "
    "that run's own compiled step (never its timings), in a plain process per device "
    "count and round. The step time is the median of all runs' steps pooled. **Efficiency "
    "vs machine ceiling** (weak scaling): the efficiency divided by this machine's "
    "ceiling, t(one 1-device training alone) / t(two side by side), measured in every "
    "repeat round (`odestudy/study/ceiling.py`): 1 is as good as two independent trainings. "
    "Seed-scale rows and "
    "the GPU rows run once: their intervals hold the spread of steps within that run "
    "only. Compile time and final loss are the first run's. "
    + METHOD
    + ". Solver steps: forward steps per sample of the "
    "last stage's timed steps: the steps a batched loop executes (the per-device "
    "maximum; in `shard` one loop spans all devices, so the global batch's maximum) "
    "and the mean."
)


READ_HEADING = "#### How to read these tables"


def device_table(
    rows: list[dict[str, Any]], device: str, extra: str = "", guide: bool = True
) -> str:
    """The markdown tables of one device kind with ok rows: the reference's columns, our
    diagnostics (with a **Session** column where the rows span several sessions), the
    session and machine they were measured on, `extra` (markdown), then how to read
    them (`guide`; else a pointer to the page that has it)."""
    sel = [r for r in rows if r["device"] == device]
    cores = next(
        ((r.get("hardware") or {}).get("physical_cores") for r in sel if r.get("hardware")), None
    )
    found = list(dict.fromkeys(sessions.session_of(r) for r in sel))
    header: tuple[str, ...] = DIAGNOSTIC_COLUMNS
    cells = diagnostic_rows(sel, cores)
    if len(found) > 1:
        header = (*header, "Session")
        cells = [[*c, sessions.session_of(r).label] for c, r in zip(cells, sel, strict=True)]
    parts = [
        f"# {device.upper()} table",
        "",
        _esc(sessions.sessions_line(sel, sel)),
        "",
        "**The reference's columns.**",
        "",
        markdown_table(REFERENCE_COLUMNS + ADDED_COLUMNS, table_rows(sel, cores)),
        "",
        "**Our diagnostics.**",
        "",
        markdown_table(header, cells),
        "",
    ]
    if any(loss.MARK in c for row in cells for c in row):
        parts += [loss.NOTE, ""]
    line = machine_line(rows, device)
    if line:
        parts += [line, ""]
    counts = sorted({r["n_devices"] for r in sel if r["status"] != "not_run"})
    if device == "cpu" and cores and counts:
        whole = max(counts) > cores
        parts += [
            f"Devices in this table: {', '.join(map(str, counts))}, on a machine "
            f"of {cores} physical cores: "
            + (
                "the whole matrix (`make full`)."
                if whole
                else "the matrix sized to the machine (`make all`); `make full` adds "
                "the rows with more virtual devices than cores."
            )
            + (
                f" † more virtual devices than the {cores} physical cores: those "
                "rows measure overhead, not parallel speedup."
                if whole
                else ""
            ),
            "",
        ]
    if any(r["status"] == "not_run" for r in sel):
        parts += [
            "Rows marked `not_run` need devices this machine does not have; they run "
            "where JAX sees enough GPUs (`make gpu`).",
            "",
        ]
    if extra:
        parts += [extra.strip(), ""]
    if guide:
        parts += [READ_HEADING, "", EPOCH_NOTE]
    else:
        parts += ["How to read these tables: as the CPU table above (`docs/method.md`)."]
    return "\n".join(parts).rstrip() + "\n"


def table_body(path: str | Path) -> str:
    """A table file without its own title line (its first line), for a page that gives
    it a heading of its own (the report notebook, the README)."""
    return "\n".join(Path(path).read_text().splitlines()[1:]).strip() + "\n"


def reference_rows(path: str | Path = REFERENCE_CSV) -> list[dict[str, Any]]:
    """The reference study's published rows (its epoch time is one optimiser step)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"reference tables not found at {path}")
    with open(path) as f:
        return list(csv.DictReader(f))


def _float(text: Any) -> float | None:
    """A number of the reference's table, None where it has none."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _reference_status(ours: dict[str, Any] | None) -> str:
    """Our row's status beside the reference's, saying where its record is of an older
    measurement protocol (left out of every other table: `skipped.md`)."""
    if ours is None:
        return "no record"
    if ours["status"] == "ok" and ours.get("protocol") != PROTOCOL:
        return (
            f"ok, older measurement protocol ({_protocol([ours])}; now {PROTOCOL}): left "
            "out of the other tables, magnitudes only"
        )
    return str(ours["status"])


def comparison_table(rows: list[dict[str, Any]], reference: list[dict[str, Any]]) -> str:
    """Our seed-scale strong-scaling rows (`seed_rows`) beside the reference's rows,
    with ratios."""
    header = (
        "Device",
        "Devices",
        "Mode",
        "Controller",
        "Reference step (s)",
        "Ours step median (s)",
        "Ours / reference",
        "Reference final loss",
        "Our final loss",
        "Our status",
        "Our session",
    )
    out = []
    for ref in reference:
        n = int(ref["n_devices"])
        mode = "single" if n == 1 else ref["mode"]
        match = [
            r
            for r in rows
            if r["device"] == ref["device"]
            and r["n_devices"] == n
            and r["mode"] == mode
            and r["controller"] == ref["controller"]
            and r["scaling"] == "strong"
            and r.get("processes", 1) == 1
        ]
        ours = match[0] if match else None
        ref_step = float(ref["epoch_time_s"])
        step = ours.get("step_time_s") if ours and ours["status"] == "ok" else None
        out.append(
            [
                ref["device"],
                str(n),
                f"{ref['mode']} → {mode}",
                ref["controller"],
                _fmt(ref_step),
                _fmt(step),
                loss.flag(_fmt(step / ref_step, 3), ours, _float(ref["final_loss"]))
                if ours and step
                else "–",
                ref["final_loss"],
                _fmt(ours.get("final_loss")) if ours else "–",
                _reference_status(ours),
                f"{sessions.session_of(ours).label} (protocol {_protocol([ours])})"
                if ours
                else "–",
            ]
        )
    cpu = machine_line(rows, "cpu") or "no CPU records"
    gpu = machine_line(rows, "gpu") or "no GPU records"
    protocols = _protocol([r for r in rows if r["status"] == "ok"])
    note = (
        "Like for like: our rows here are the **seed** scale, the reference's own "
        "configuration (2048 series, global batch 32, 10 %, 50 % and 100 % of each series "
        "for 1000 steps each, learning rate 3e-3, a fresh optimiser state per stage), "
        "whatever scale the rest of this report holds; quick-scale rows are never set "
        "beside the reference's. What still differs: the reference's machine is not "
        "recorded (JAX version unknown; 1–2 GPUs and 8 CPU devices), our 8 CPU devices "
        "are virtual devices on a 2-core machine (overhead, not speedup), its step times "
        "are unsynchronised means (no wait on the device) where ours are waited-for "
        "medians, its `pmap` summed the gradients where ours average them, and its modes "
        "trained different losses: ratios compare magnitudes only. The reference's "
        "1-device rows are its `shard` mode on one device, our `single`. Our seed rows "
        "run once each (measurement protocol "
        f"{_esc(protocols)}).\n\nOur CPU machine: {cpu}\n\nOur GPU "
        f"machine: {gpu}"
    )
    table = markdown_table(header, out)
    flagged = f"\n\n{loss.NOTE}" if loss.MARK in table else ""
    return "# Ours beside the reference\n\n" + note + "\n\n" + table + flagged + "\n"


def elsewhere(results: str | Path, device: str, scale: str) -> str:
    """Where the `device` rows that exist are, when none of this scale is current: ok
    records of an older protocol at this scale and at the seed scale, per machine."""
    found = []
    for at in dict.fromkeys((scale, "seed")):
        recs = [
            r
            for r in read_records(results, at, current=True)
            if r["device"] == device and r["status"] == "ok"
        ]
        for m in sorted({r["machine_id"] for r in recs}):
            mine = [r for r in recs if r["machine_id"] == m]
            found.append(
                f"{len(mine)} at the {_esc(at)} scale on `{_esc(m)}` (`results/{_esc(m)}/"
                f"{_esc(at)}/`, measurement protocol {_esc(_protocol(mine))})"
            )
    name = device.upper()
    if not found:
        return (
            f"No {name} row of the current protocol at the {_esc(scale)} scale, and none elsewhere."
        )
    return (
        f"No {name} row of the current protocol (`timing.PROTOCOL` {PROTOCOL}) at the "
        f"{_esc(scale)} scale. The {name} rows that exist: " + "; ".join(found) + "."
    )


def no_rows(rows: list[dict[str, Any]], results: str | Path, device: str, scale: str) -> str:
    """The one line of a device kind without ok rows: why its rows of the matrix did not
    run (where they are records), and where that kind's rows that exist are."""
    sel = [r for r in rows if r["device"] == device]
    why = sorted({f"{r['status']}: {r.get('error') or 'no error recorded'}" for r in sel})
    text = elsewhere(results, device, scale)
    if why:
        text += f" The matrix's {len(sel)} {device.upper()} rows here: {_esc('; '.join(why))}."
    return text


def seed_rows(results: str | Path) -> list[dict[str, Any]]:
    """The seed-scale rows (the reference's configuration) of one machine per device
    kind (`pick_machine`), with their speedups: what the reference comparison shows."""
    seed = read_records(results, "seed", current=True)
    chosen = {d: pick_machine(seed, d) for d in ("cpu", "gpu")}
    return scaling_rows(
        [r for r in seed if chosen[r["device"]] == r["machine_id"] and in_scaling_matrix(r)]
    )


def _speedup_cell(r: dict[str, Any]) -> str:
    """A row's speedup with its interval, marked (`loss.MARK`) where it and its
    baseline trained to different losses."""
    text = fmt_interval(r["speedup"], *(r.get("speedup_ci") or (None, None)))
    return loss.baseline_flag(text, r)


def machines_table(every: list[dict[str, Any]], chosen: Mapping[str, str | None]) -> str:
    """Other machines' ok rows of the main tables beside the chosen machine's: step
    times and speedups (with intervals) per scenario, when another machine has any."""
    main = [r for r in every if in_scaling_matrix(r) and r["status"] == "ok"]
    parts = ["# Machines compared", ""]
    for device in ("cpu", "gpu"):
        here = chosen.get(device)
        others = sorted({r["machine_id"] for r in main if r["device"] == device} - {here})
        mine = {
            r["name"]: r
            for r in scaling_rows(
                [r for r in main if r["device"] == device and r["machine_id"] == here]
            )
        }
        for other in others:
            theirs = scaling_rows(
                [r for r in main if r["device"] == device and r["machine_id"] == other]
            )
            out = []
            for r in theirs:
                m = mine.get(r["name"])
                out.append(
                    [
                        r["name"],
                        _fmt(m["step_time_s"]) if m else "–",
                        _fmt(r["step_time_s"]),
                        _speedup_cell(m) if m else "–",
                        _speedup_cell(r),
                    ]
                )
            parts += [
                f"## {device.upper()}: {_esc(here)} (the tables) beside {_esc(other)}",
                "",
                machine_line(theirs, device),
                "",
                _esc(sessions.sessions_line([*mine.values(), *theirs], [])),
                "",
                markdown_table(
                    (
                        "Scenario",
                        f"Step (s) {here}",
                        f"Step (s) {other}",
                        f"Speedup {here}",
                        f"Speedup {other}",
                    ),
                    out,
                ),
                "",
            ]
    if len(parts) == 2:
        parts.append("Only one machine has records of this scale.")
    elif any(loss.MARK in p for p in parts):
        parts += [loss.NOTE, ""]
    return "\n".join(parts) + "\n"


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
            "recommended.",
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


def skipped_table(skipped: list[tuple[str, str]]) -> str:
    """The records the report left out, with the reason."""
    rows = [
        [
            str(Path(p).relative_to(environment.ROOT))
            if Path(p).is_relative_to(environment.ROOT)
            else p,
            why,
        ]
        for p, why in skipped
    ]
    return (
        "# Records left out of the report\n\n"
        + (markdown_table(("Record", "Reason"), rows) if rows else "No record was left out.")
        + "\n"
    )


def gpu_extra(
    gpu_rows: list[dict[str, Any]], projected: list[dict[str, Any]], reference: list[dict[str, Any]]
) -> str:
    """The GPU table's second part: projected 2-GPU rows (labelled, never mixed with
    measured ones) and the reference's GPU rows beside ours."""
    if projected:
        parts = [
            "",
            "**Projected rows (not measured).**",
            "",
            "No machine available to this study has two GPUs. These rows are the "
            "projection model of `projection.md` (validated on CPU rows), anchored on "
            "the measured 1-GPU rows above; brackets: the cited all-reduce latency "
            "range.",
            "",
            projected_table(projected),
            "",
        ]
    else:
        parts = ["", "No projected 2-GPU rows (no GPU step-cost sweep of this machine).", ""]
    parts += [
        "**The reference's GPU rows beside ours.**",
        "",
        "The reference's step (its 'epoch time', one optimiser step, not waited "
        "for) beside our measured 1-GPU and projected 2-GPU steps at the seed "
        "scale (the reference's configuration), same mode and controller.",
        "",
    ]
    if not any(r["scale"] == "seed" for r in gpu_rows):
        return "\n".join(
            parts[:-2]
            + [
                "The reference's GPU rows are at its configuration: "
                "see the seed-scale GPU table "
                "(`figures/seed/tables/gpu.md`).",
                "",
            ]
        )
    out = []
    for ref in (r for r in reference if r["device"] == "gpu"):
        n = int(ref["n_devices"])
        mode = "single" if n == 1 else ref["mode"]
        if n == 1:
            ours = next(
                (
                    r
                    for r in gpu_rows
                    if r["scale"] == "seed"
                    and r["n_devices"] == 1
                    and r["controller"] == ref["controller"]
                    and r["status"] == "ok"
                ),
                None,
            )
            cell = f"{_fmt(ours['step_time_s'])} (measured)" if ours else "–"
        else:
            ours = next(
                (
                    p
                    for p in projected
                    if p["scale"] == "seed"
                    and p["mode"] == mode
                    and p["controller"] == ref["controller"]
                ),
                None,
            )
            cell = f"{_fmt(ours['step_time_s'])} (projected)" if ours else "–"
        out.append(
            [
                str(n),
                f"{ref['mode']} → {mode}",
                ref["controller"],
                _fmt(float(ref["epoch_time_s"])),
                cell,
                ref["final_loss"],
            ]
        )
    parts += [
        markdown_table(
            (
                "GPUs",
                "Mode",
                "Controller",
                "Reference step (s)",
                "Ours step (s)",
                "Reference final loss",
            ),
            out,
        ),
        "",
    ]
    return "\n".join(parts)


def headline_figure(rows: list[dict[str, Any]], out: str | Path) -> Path | None:
    """`headline_speedup.{png,svg}`: speedup over one device against devices, a line
    per mode (colour) and controller (line style), 95% interval bars, one panel per
    device kind and scaling with ok rows (`scaling_rows` of each scaling); ideal
    scaling dotted, one device's speed dashed, devices beyond the physical cores
    shaded. Returns the PNG, or None without ok rows with a speedup."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ok = [r for r in rows if r["status"] == "ok" and r.get("speedup") is not None]
    panels = [
        (device, scaling)
        for device in ("cpu", "gpu")
        for scaling in ("strong", "weak")
        if any(r["device"] == device and r["scaling"] == scaling and r["n_devices"] > 1 for r in ok)
    ]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.2), squeeze=False)
    modes, controllers, several, shaded = [], [], False, None
    for ax, (device, scaling) in zip(axes[0], panels, strict=True):
        sel = [r for r in ok if r["device"] == device and r["scaling"] == scaling]
        groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
        for r in sel:
            groups.setdefault((r["mode"], r["controller"], r.get("processes", 1)), []).append(r)
        for (mode, controller, processes), group in sorted(groups.items()):
            group.sort(key=lambda r: r["n_devices"])
            fmt = CONTROLLER_STYLE.get(controller, "-o")
            style: dict[str, Any] = {"color": MODE_STYLE.get(mode, "tab:gray")}
            if processes > 1:
                fmt, style = fmt[-1], {**style, "markerfacecolor": "none", "markersize": 10}
                several = True
            x = [r["n_devices"] for r in group]
            y = [r["speedup"] for r in group]
            ci = [r.get("speedup_ci") or (r["speedup"], r["speedup"]) for r in group]
            err = [
                [max(v - lo, 0) for v, (lo, _) in zip(y, ci, strict=True)],
                [max(hi - v, 0) for v, (_, hi) in zip(y, ci, strict=True)],
            ]
            ax.errorbar(x, y, yerr=err, fmt=fmt, capsize=3, **style)
            modes += [mode] if mode not in modes else []
            controllers += [controller] if controller not in controllers else []
        ns = sorted({r["n_devices"] for r in sel})
        ax.plot(ns, ns, ":", color="grey")
        ax.axhline(1.0, ls="--", color="grey", lw=0.8)
        beyond = [r["n_devices"] for r in sel if exceeds_cores(r)]
        if beyond:
            cores = max(r["n_devices"] for r in sel if not exceeds_cores(r))
            ax.axvspan(cores + 0.5, max(ns) * 1.2, color="grey", alpha=0.15)
            shaded = cores
        what = "step-time speedup t(1)/t(N)" if scaling == "strong" else "throughput N·t(1)/t(N)"
        ax.set(
            xscale="log",
            xticks=ns,
            xlabel="devices",
            ylabel=f"{what}, 95% interval",
            title=f"{device.upper()}, {scaling} scaling",
        )
        ax.set_xticklabels([str(n) for n in ns])
    handles: list[Any] = [
        Line2D([], [], color=MODE_STYLE.get(m, "tab:gray"), lw=2, label=m) for m in modes
    ]
    handles += [
        Line2D(
            [],
            [],
            color="k",
            ls=CONTROLLER_STYLE.get(c, "-o")[:-1],
            marker=CONTROLLER_STYLE.get(c, "-o")[-1],
            label=c,
        )
        for c in controllers
    ]
    handles += [
        Line2D([], [], color="grey", ls=":", label="ideal"),
        Line2D([], [], color="grey", ls="--", lw=0.8, label="one device"),
    ]
    if several:
        handles.append(
            Line2D(
                [], [], color="k", marker="o", ls="", markerfacecolor="none", label="processes > 1"
            )
        )
    if shaded:
        handles.append(Patch(color="grey", alpha=0.15, label="beyond the physical cores"))
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=min(len(handles), 6),
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
        frameon=False,
    )
    fig.suptitle("Speedup over one device, by mode")
    fig.tight_layout()
    return _save(fig, Path(out), "headline_speedup")[0]


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
    cpu_sweeps = all_sweeps(Path(results) / chosen["cpu"], "cpu") if chosen["cpu"] else []
    if cpu_sweeps and draw:
        figs += step_cost_figure(cpu_sweeps, figures, "cpu_step_cost")
    levers = (
        [
            {**records.read_json(p), "path": str(p)}
            for p in sorted(Path(results, chosen["cpu"] or "", "levers").glob("cpu-*.json"))
        ]
        if chosen["cpu"]
        else []
    )
    found = sessions.index(results)
    for side in [*cpu_sweeps, *levers]:
        side["session"] = found.get(side["path"])
    spreads = (
        {
            r["scenario"]["controller"]: r
            for p in sorted(Path(results, chosen["cpu"], "levers").glob("loss-spread-*.json"))
            if (r := records.read_json(p))
        }
        if chosen["cpu"]
        else {}
    )
    path = tables / "step.md"
    path.write_text(step_table(cpu_sweeps, levers, spreads))
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
