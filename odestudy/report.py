"""Reduce scenario records into the study's tables and scaling figures."""

import csv
from pathlib import Path
from typing import Any

from . import records
from .plots import scaling_figures

REFERENCE_CSV = records.ROOT.parent / "shared" / "reference" / "reference_tables.csv"
REFERENCE_COLUMNS = ("Device", "Number of Devices", "Mode", "Controller", "Runtime (s)",
                     "Epoch Time (s)", "Compile Time (s)", "Final Loss")
ADDED_COLUMNS = ("Scaling", "Global batch", "Step time median (s)", "Step time IQR (s)",
                 "Speedup", "Efficiency", "Collectives total / in loops",
                 "Solver steps max / mean", "Status")
MODE_ORDER = {"single": 0, "pmap": 1, "shard": 2, "shard_map": 3}


def load_records(results: str | Path, scale: str) -> list[dict[str, Any]]:
    """Every record under `results/<scale>/`."""
    paths = sorted((Path(results) / scale).glob("*/metrics.json"))
    return [records.read_record(p) for p in paths]


def _baseline(rec: dict[str, Any], recs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ok 1-device record of the same device kind, controller and scaling, with
    the same global batch (strong) or per-device batch (weak)."""
    size = "global_batch" if rec["scaling"] == "strong" else "per_device_batch"
    for r in recs:
        if (r["status"] == "ok" and r["n_devices"] == 1
                and all(r.get(k) == rec.get(k) for k in
                        ("device", "controller", "scaling", "scale", size))):
            return r
    return None


def scaling_rows(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records with speedup and efficiency against the matching 1-device record.

    Strong scaling: speedup `t(1)/t(N)` of the step time, efficiency `speedup / N`.
    Weak scaling: efficiency `t(1)/t(N)` at the same per-device batch, speedup
    `N * t(1)/t(N)` (throughput in samples per second, relative).
    """
    rows = []
    for rec in recs:
        row = dict(rec, speedup=None, efficiency=None)
        base = _baseline(rec, recs)
        if rec["status"] == "ok" and base is not None:
            ratio = base["step_time_s"] / rec["step_time_s"]
            n = rec["n_devices"]
            if rec["scaling"] == "strong":
                row.update(speedup=ratio, efficiency=ratio / n)
            else:
                row.update(speedup=ratio * n, efficiency=ratio)
        rows.append(row)
    rows.sort(key=lambda r: (r["device"], r["scaling"], r["controller"], r["n_devices"],
                             r.get("processes", 1), MODE_ORDER.get(r["mode"], 9)))
    return rows


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def _devices_label(r: dict[str, Any], cores: int | None) -> str:
    label = str(r["n_devices"])
    if r.get("processes", 1) > 1:
        label += f" ({r['processes']} proc × {r['devices_per_process']})"
    if cores and r["device"] == "cpu" and r["n_devices"] > cores:
        label += " †"
    return label


def table_rows(rows: list[dict[str, Any]], cores: int | None) -> list[list[str]]:
    """Table cells: the reference's columns, then ours."""
    out = []
    for r in rows:
        ok = r["status"] == "ok"
        steps = r.get("solver_steps") or {}
        iqr = (f"{_fmt(r['step_time_p25_s'])}–{_fmt(r['step_time_p75_s'])}" if ok else "–")
        out.append([
            r["device"], _devices_label(r, cores), r["mode"], r["controller"],
            _fmt(r.get("runtime_s"), 3), _fmt(r.get("epoch_time_s")),
            _fmt(r.get("compile_time_s"), 3), _fmt(r.get("final_loss")),
            r["scaling"], str(r["global_batch"]), _fmt(r.get("step_time_s")), iqr,
            _fmt(r["speedup"], 3), _fmt(r["efficiency"], 3),
            f"{_fmt(r.get('collectives_total'))} / {_fmt(r.get('collectives_in_loops'))}",
            f"{_fmt(steps.get('max'), 3)} / {_fmt(steps.get('mean'), 3)}" if ok else "–",
            r["status"] if ok else f"{r['status']}: {r.get('error')}",
        ])
    return out


def markdown_table(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line(rows: list[dict[str, Any]], device: str) -> str:
    """Hardware and versions of the records of one device kind."""
    ok = [r for r in rows if r["device"] == device and r["status"] == "ok"]
    if not ok:
        return ""
    hw, v = ok[0].get("hardware") or {}, ok[0].get("versions") or {}
    kind = ok[0].get("device_kind", device)
    return (f"Measured on {hw.get('cpu_model')} ({hw.get('physical_cores')} physical cores"
            f", {hw.get('logical_cpus')} logical), device kind {kind!r}; python "
            f"{v.get('python')}, jax {v.get('jax')}, jaxlib {v.get('jaxlib')}, diffrax "
            f"{v.get('diffrax')}, equinox {v.get('equinox')}, optax {v.get('optax')}; "
            f"pmap is {ok[0].get('pmap_implementation')}; git {ok[0].get('git_commit')}.")


EPOCH_NOTE = (
    "**Epoch Time** here is one pass over the training set: the median step time times "
    "(data set size / global batch). The reference's column of that name is the mean "
    "time of one optimiser step; compare it with *Step time median*. **Runtime** is the "
    "whole scenario (data, compiles, training, evaluation) and **Compile Time** the "
    "AOT `lower().compile()` of the training step, summed over stages. **Final Loss** "
    "is the MSE on a fixed evaluation set of full series, solved with the scenario's "
    "controller, the same in every mode. Speedup and efficiency are step-time ratios "
    "against the 1-device row of the same controller, scaling and batch, from the same "
    "run. Solver steps: forward steps per sample of the last timed step range, the "
    "per-device maximum (what a batched loop executes) and the mean."
)


def device_table(rows: list[dict[str, Any]], device: str) -> str:
    """The markdown table of one device kind, with its notes."""
    sel = [r for r in rows if r["device"] == device]
    cores = next(((r.get("hardware") or {}).get("physical_cores") for r in sel
                  if r.get("hardware")), None)
    parts = [f"# {device.upper()} table", "", EPOCH_NOTE, ""]
    if device == "cpu" and cores:
        parts += [f"† more virtual devices than the {cores} physical cores: those rows "
                  "measure overhead, not parallel speedup.", ""]
    line = machine_line(rows, device)
    if line:
        parts += [line, ""]
    if not sel:
        parts.append("No records.")
    else:
        parts.append(markdown_table(REFERENCE_COLUMNS + ADDED_COLUMNS,
                                    table_rows(sel, cores)))
    return "\n".join(parts) + "\n"


def reference_rows(path: str | Path = REFERENCE_CSV) -> list[dict[str, Any]]:
    """The reference study's published rows (its epoch time is one optimiser step)."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def comparison_table(rows: list[dict[str, Any]], reference: list[dict[str, Any]]) -> str:
    """Our strong-scaling rows beside the reference's rows, with ratios."""
    header = ("Device", "Devices", "Mode", "Controller", "Reference step (s)",
              "Ours step median (s)", "Ours / reference", "Reference final loss",
              "Our final loss", "Our status")
    out = []
    for ref in reference:
        n = int(ref["n_devices"])
        mode = "single" if n == 1 else ref["mode"]
        match = [r for r in rows if r["device"] == ref["device"] and r["n_devices"] == n
                 and r["mode"] == mode and r["controller"] == ref["controller"]
                 and r["scaling"] == "strong" and r.get("processes", 1) == 1]
        ours = match[0] if match else None
        ref_step = float(ref["epoch_time_s"])
        step = ours.get("step_time_s") if ours and ours["status"] == "ok" else None
        out.append([ref["device"], str(n), f"{ref['mode']} → {mode}", ref["controller"],
                    _fmt(ref_step), _fmt(step),
                    _fmt(step / ref_step, 3) if step else "–", ref["final_loss"],
                    _fmt(ours.get("final_loss")) if ours else "–",
                    ours["status"] if ours else "no record"])
    cpu = machine_line(rows, "cpu") or "no CPU records"
    gpu = machine_line(rows, "gpu") or "no GPU records"
    note = ("Reference machine: not recorded by the reference study (JAX version unknown;"
            " 1–2 GPUs and 8 CPU devices). Its step times were taken without waiting for "
            "the device and its modes trained different losses, so ratios compare "
            "magnitudes only. Our rows are strong scaling at our scale's global batch; "
            "the reference's 1-device rows are its `shard` mode on one device, our "
            f"`single`.\n\nOur CPU machine: {cpu}\n\nOur GPU machine: {gpu}")
    return "# Ours beside the reference\n\n" + note + "\n\n" + markdown_table(header, out) + "\n"


def write_report(results: str | Path, scale: str, figures: str | Path,
                 reference: str | Path = REFERENCE_CSV) -> dict[str, Any]:
    """Write `figures/tables/{cpu,gpu,reference}.md` and the scaling figures.

    Returns the rows and the paths written, for display in the report notebook.
    """
    figures = Path(figures)
    rows = scaling_rows(load_records(results, scale))
    tables = figures / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    written = {}
    for device in ("cpu", "gpu"):
        path = tables / f"{device}.md"
        path.write_text(device_table(rows, device))
        written[device] = path
    path = tables / "reference.md"
    path.write_text(comparison_table(rows, reference_rows(reference)))
    written["reference"] = path
    figs = []
    for device in ("cpu", "gpu"):
        sel = [r for r in rows if r["device"] == device and r["status"] == "ok"
               and r.get("processes", 1) == 1]
        cores = next(((r.get("hardware") or {}).get("physical_cores") for r in sel), None)
        figs += scaling_figures(sel, figures, device, cores)
    return {"rows": rows, "tables": written, "figures": figs}
