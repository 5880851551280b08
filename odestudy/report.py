"""Reduce scenario records into the study's tables and scaling figures."""

import csv
from pathlib import Path
from typing import Any

from . import records
from .plots import scaling_figures

# The reference study's two published tables as data (its "epoch time" is one optimiser
# step), kept in the repo so that a clone anywhere can compare with them.
REFERENCE_CSV = records.ROOT / "data" / "reference_tables.csv"
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


def _baseline(rec: dict[str, Any], recs: list[dict[str, Any]],
              scaling: str) -> dict[str, Any] | None:
    """The ok 1-device record of the same device kind, controller and scale with the
    same global batch (strong scaling) or per-device batch (weak scaling)."""
    size = "global_batch" if scaling == "strong" else "per_device_batch"
    for r in recs:
        if (r["status"] == "ok" and r["n_devices"] == 1 and r["scaling"] == scaling
                and all(r.get(k) == rec.get(k) for k in
                        ("device", "controller", "scale", size, "spread", "solve",
                         "batching"))):
            return r
    return None


def scaling_rows(recs: list[dict[str, Any]], scaling: str | None = None
                 ) -> list[dict[str, Any]]:
    """Records with speedup and efficiency against the matching 1-device record.

    - `scaling`: `None` keeps every record under its own scaling; `"strong"` or
      `"weak"` keeps that scaling's records and those of the other with a baseline
      under this one (at 4 devices one run is both a strong and a weak point).

    Strong scaling: speedup `t(1)/t(N)` of the step time, efficiency `speedup / N`.
    Weak scaling: efficiency `t(1)/t(N)` at the same per-device batch, speedup
    `N * t(1)/t(N)` (throughput in samples per second, relative).
    """
    rows = []
    for rec in recs:
        as_scaling = scaling or rec["scaling"]
        base = _baseline(rec, recs, as_scaling)
        if scaling is not None and rec["scaling"] != scaling and base is None:
            continue  # another scaling's run that is no point of this one
        row = dict(rec, scaling=as_scaling, speedup=None, efficiency=None)
        if rec["status"] == "ok" and base is not None:
            ratio = base["step_time_s"] / rec["step_time_s"]
            n = rec["n_devices"]
            if as_scaling == "strong":
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
            f"pmap is {ok[0].get('pmap_implementation')}; records from git commit(s) "
            f"{', '.join(sorted({str(r.get('git_commit'))[:12] for r in ok}))}.")


EPOCH_NOTE = (
    "**Epoch Time** here is one pass over the training set: the median step time times "
    "(data set size / global batch). The reference's column of that name is the mean "
    "time of one optimiser step; compare it with *Step time median*. **Runtime** is the "
    "whole scenario (data, compiles, training, evaluation) and **Compile Time** the "
    "AOT `lower().compile()` of the training step, summed over stages. **Final Loss** "
    "is the MSE on a fixed evaluation set of full series, solved with the scenario's "
    "controller, the same in every mode. Speedup and efficiency are step-time ratios "
    "against the 1-device row of the same controller, scaling and batch, measured on the "
    "same machine, one scenario at a time. Solver steps: forward steps per sample of the "
    "last timed step range, the "
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
    if any(r["status"] == "not_run" for r in sel):
        parts += ["Rows marked `not_run` need devices this machine does not have; they run "
                  "where JAX sees enough GPUs (`make gpu`).", ""]
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
        raise FileNotFoundError(f"reference tables not found at {path}")
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
            "magnitudes only. Final losses are comparable only at the `seed` scale (the "
            "reference's 3 x 1000 steps); the quick scale trains 60 steps. Our rows are "
            "strong scaling at our scale's global batch; "
            "the reference's 1-device rows are its `shard` mode on one device, our "
            f"`single`.\n\nOur CPU machine: {cpu}\n\nOur GPU machine: {gpu}")
    return "# Ours beside the reference\n\n" + note + "\n\n" + markdown_table(header, out) + "\n"


def _in_main_tables(r: dict[str, Any]) -> bool:
    """The scaling tables hold the reference configuration of each scenario; the
    explanation studies (spread, grouping, within-ODE, batch sweeps) have their own."""
    s = r.get("scenario") or {}
    from .config import SCALES

    default_steps = SCALES.get(s.get("scale"), {}).get("steps_per_stage")
    return (s.get("spread", 0) == 0 and s.get("batching", "random") == "random"
            and s.get("solve", "per_sample") == "per_sample"
            and s.get("lr_scaling", "fixed") == "fixed" and not s.get("eval_every")
            and s.get("steps_per_stage") == default_steps
            and _matrix_batch(s))


def _matrix_batch(s: dict[str, Any]) -> bool:
    """The batch of the scaling matrix: the scale's global batch (strong) or a quarter
    of it per device (weak); other batches belong to the batch-size study."""
    from .config import SCALES
    from .matrix import weak_batch

    if s.get("scale") not in SCALES:
        return False
    strong = s.get("scaling") == "strong"
    return s.get("batch") == (SCALES[s["scale"]]["batch"] if strong else weak_batch(s["scale"]))


def write_report(results: str | Path, scale: str, figures: str | Path,
                 reference: str | Path = REFERENCE_CSV) -> dict[str, Any]:
    """Write `figures/tables/{cpu,gpu,reference,explain}.md` and the figures.

    Returns the rows and the paths written, for display in the report notebook.
    """
    figures = Path(figures)
    every = load_records(results, scale)
    rows = [r for r in scaling_rows(every) if _in_main_tables(r)]
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
    recs = [r for r in rows if r["status"] == "ok"]
    by_scaling = {k: scaling_rows(recs, k) for k in ("strong", "weak")}
    for device in ("cpu", "gpu"):
        sel = [r for k in by_scaling for r in by_scaling[k] if r["device"] == device]
        cores = next(((r.get("hardware") or {}).get("physical_cores") for r in sel), None)
        figs += scaling_figures(sel, figures, device, cores)
    from .explain import write_explain

    explain = write_explain(every, figures)
    written["explain"] = explain["table"]
    return {"rows": rows, "tables": written, "figures": figs + explain["figures"]}



README_START = "<!-- results:start (written by `odestudy report --readme`) -->"
README_END = "<!-- results:end -->"


def update_readme(readme: str | Path, tables: dict[str, Path], figures: list[Path],
                  scale: str) -> None:
    """Put the current CPU table, the GPU table and the main scaling figure of `scale`
    between the README's result markers (from the records, never by hand)."""
    readme = Path(readme)
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no result markers {README_START!r} ... "
                         f"{README_END!r}")
    root = readme.parent.resolve()

    def rel(p: Path) -> str:
        return str(Path(p).resolve().relative_to(root))

    def body(path: Path) -> str:  # the table file without its own title
        return "\n".join(path.read_text().splitlines()[1:]).strip()

    main_fig = [p for p in figures if p.name.endswith("cpu_strong_scaling.png")]
    weak_fig = [p for p in figures if p.name.endswith("cpu_weak_scaling.png")]
    parts = [README_START, "", f"### CPU ({scale} scale)", "", body(tables["cpu"]), ""]
    for fig in main_fig + weak_fig:
        parts += [f"![{fig.stem}]({rel(fig)})", ""]
    parts += [f"### GPU ({scale} scale)", "", body(tables["gpu"]), "",
              f"More: [{rel(tables['reference'])}]({rel(tables['reference'])}) (ours "
              f"beside the reference), [{rel(tables['explain'])}]({rel(tables['explain'])})"
              " (why), and the executed report `figures/report_" + scale + ".html`.", "",
              README_END]
    start, end = text.index(README_START), text.index(README_END) + len(README_END)
    tmp = readme.with_suffix(".md.tmp")
    tmp.write_text(text[:start] + "\n".join(parts) + text[end:])
    tmp.replace(readme)
