"""The GPU table's extra sections (rows predicted from one GPU, projected rows, the
reference's GPU rows) and the headline figure (speedup over one device, by mode)."""

from pathlib import Path
from typing import Any

from ..measure.modes import MODES
from ..measure.scenario import Scenario
from ..measure.timing import PROTOCOL
from ..study import records
from ..study.rec import Prediction, Projected, Published, Rec
from ..study.studies import Block, Grid, Interval, Text
from .plots import CONTROLLER_STYLE, MODE_STYLE, _save
from .projection import projected_grid
from .sessions import short_commit
from .tables import escape
from .tables import fmt as _fmt
from .verdict import exceeds_cores
from .workloads import step_of

# A machine's folder of predictions of several GPUs from one (`odestudy predict --device
# gpu --out`, `benchmarks/gpu_session.sh predict` and `predictbest`).
PREDICTIONS_FOLDER = "predictions"


def gpu_predictions(results: str | Path, scale: str) -> list[Prediction]:
    """Every machine's predictions of several GPUs at `scale`, by step, controller and GPUs."""
    out = []
    paths = records.every_machines(results, PREDICTIONS_FOLDER, "gpu-*.json")
    for path, rec in records.readable(paths):
        p = Prediction(rec, path=str(path), machine=path.parent.parent.name)
        if p.fields.scale == scale and p.fields.device == "gpu":
            out.append(p)
    return sorted(out, key=lambda p: (step_of(p), p.fields.controller, p.profile.name, p.n_devices))


def made_when(p: Rec | Prediction) -> str:
    """When a record was finished: its own time, else (a prediction) its sweep's probe's."""
    found = p.finished or (p.sweep.probe.finished if isinstance(p, Prediction) else None)
    return str(found or "unknown").replace("T", " ").replace("+00:00", " UTC")


def _measured_one_gpu(p: Prediction, rows: list[Rec]) -> Rec | None:
    """The measured 1-GPU row (current protocol) of what a prediction's sweep timed, if any."""
    key = Scenario.from_dict(p.sweep.scenario or p.scenario).key()
    machine = p.sweep.machine_id or p.machine_id
    found = (r for r in rows if r.scenario_key == key and r.ok and r.protocol == PROTOCOL)
    return next((r for r in found if r.machine_id == machine), None)


def _ms(seconds: float) -> str:
    """Seconds as milliseconds to about 3 significant digits, trailing zeros kept."""
    ms = seconds * 1e3
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _predicted_cells(p: Prediction, measured: Rec | None) -> list[list[object]]:
    """A prediction's cells, a row per mode."""
    order = list(MODES)
    one = measured.step_time_s if measured else None
    out: list[list[object]] = []
    for r in sorted(p.rows, key=lambda r: order.index(r.mode) if r.mode in order else 0):
        lo, hi = r.step_time_interval_s
        speedup = Interval(r.speedup, *r.speedup_interval) if p.trained else "– (not trained)"
        out.append(
            [
                f"{p.n_devices} (predicted)",
                escape(r.mode),
                escape(p.fields.controller),
                step_of(p),
                str(Scenario.from_dict(p.scenario).global_batch),
                _ms(p.one_device_step_s),
                _ms(one) if one is not None else "–",
                f"{_ms(r.step_time_s)} [{_ms(lo)}, {_ms(hi)}]",
                speedup,
                escape(p.profile.name),
                escape(Path(p.path).stem),
            ]
        )
    return out


def _source_line(p: Prediction, measured: Rec | None) -> str:
    """Where a prediction comes from: its record, machine, time, sweep, row and profile."""
    sweep = p.sweep
    path = Path(p.path)
    batches = ", ".join(str(r.batch) for r in sweep.rows)
    timed = sorted({len(r.step_times_s or []) for r in sweep.rows})
    model = (
        f"the trained model of the 1-GPU row `{escape(Path(p.trained_from).name)}`"
        if p.trained_from
        else "the model trained anew by the prediction"
    )
    trained = "trained" if p.trained else f"not trained (above {p.trained_loss})"
    row = (
        f"; the measured 1-GPU row: `{escape(measured.name)}` (finished "
        f"{escape(made_when(measured))})"
        if measured
        else "; no measured 1-GPU row of its step under the current protocol"
    )
    versions = sweep.versions or {}
    return (
        f"- `{escape(path.stem)}` (`{escape(path.parent.parent.name)}/{PREDICTIONS_FOLDER}/`): "
        f"made on {escape(sweep.machine_id or p.machine_id)} "
        f"({escape(sweep.device_kind)}), {escape(made_when(p))}, JAX "
        f"{escape(versions.get('jax'))}, commit {escape(short_commit(sweep))}, measurement "
        f"protocol {escape(sweep.protocol)}; its 1-GPU sweep: batches {escape(batches)} "
        f"({escape('/'.join(map(str, timed)))} timed steps each) of {model} (final loss "
        f"{p.final_loss:.2g}: {trained}){row}; profile {escape(p.profile.name)}: "
        f"{escape(p.profile.description)}."
    )


def predicted_section(predictions: list[Prediction], rows: list[Rec]) -> list[Block]:
    """The GPU table's rows predicted from one GPU (`gpu_predictions`), each beside the
    measured 1-GPU row of its step in `rows` if any, then each record's source."""
    if not predictions:
        return []
    measured = [_measured_one_gpu(p, rows) for p in predictions]
    cells = [c for p, m in zip(predictions, measured, strict=True) for c in _predicted_cells(p, m)]
    header = ("GPUs", "Mode", "Controller", "Step", "Global batch", "1 GPU, its sweep (ms)",
              "1 GPU, measured row (ms)", "Predicted step (ms) [95% interval]",
              "Predicted speedup [95% interval]", "Profile", "Record")  # fmt: skip
    sources = (_source_line(p, m) for p, m in zip(predictions, measured, strict=True))
    return [
        Text("**Predicted rows (not measured on several GPUs).**"),
        Text(
            "`odestudy predict --device gpu --devices N --profile P` on one GPU "
            "(`benchmarks/gpu_session.sh predict`, and `predictbest` for the recommended "
            "step): the 1-GPU step measured by its sweep on that GPU, the collective costs "
            "of N GPUs from the profile. Brackets: 95% intervals over the sweep's timed "
            "steps and the profile's stated range, not the model's own error. No machine "
            "measured several GPUs under the current protocol, so no row here is checked."
        ),
        Grid(header, tuple(cells)),
        Text("\n".join(sources)),
    ]


def _gpu_reference_row(
    ref: dict[str, Any], gpu_rows: list[Rec], projected: list[Projected]
) -> list[str]:
    """One reference GPU row beside our measured 1-GPU or projected 2-GPU step."""
    n, controller = int(ref["n_devices"]), ref["controller"]
    mode = "single" if n == 1 else ref["mode"]
    if n == 1:
        mine = (r for r in gpu_rows if r.ok and r.n_devices == 1 and r.controller == controller)
        ours = next((r for r in mine if r.scale == "seed"), None)
        cell = f"{_fmt(ours.step_time_s)} (measured)" if ours else "–"
    else:
        found = (p for p in projected if p["mode"] == mode and p["controller"] == controller)
        projected_row = next((p for p in found if p["scale"] == "seed"), None)
        cell = f"{_fmt(projected_row['step_time_s'])} (projected)" if projected_row else "–"
    return [
        str(n),
        f"{ref['mode']} → {mode}",
        ref["controller"],
        _fmt(float(ref["epoch_time_s"])),
        cell,
        ref["final_loss"],
    ]


def gpu_extra(
    gpu_rows: list[Rec], projected: list[Projected], reference: list[Published]
) -> list[Block]:
    """The GPU table's second part: projected 2-GPU rows and the reference's GPU rows."""
    out: list[Block]
    if not projected:
        out = [Text("No projected 2-GPU rows (no GPU step-cost sweep of this machine).")]
    else:
        out = [
            Text("**Projected rows (not measured).**"),
            Text(
                "No machine available to this study has two GPUs. These rows are the "
                "projection model of `projection.md` (validated on CPU rows), anchored on "
                "the measured 1-GPU rows above; brackets: the cited all-reduce latency "
                "range."
            ),
            projected_grid(projected),
        ]
    out.append(Text("**The reference's GPU rows beside ours.**"))
    if not any(r.scale == "seed" for r in gpu_rows):
        return [
            *out,
            Text(
                "The reference's GPU rows are at its configuration: see the seed-scale GPU "
                "table (`figures/seed/tables/gpu.md`)."
            ),
        ]
    header = ("GPUs", "Mode", "Controller", "Reference step (s)", "Ours step (s)",
              "Reference final loss")  # fmt: skip
    ours = [_gpu_reference_row(r, gpu_rows, projected) for r in reference if r["device"] == "gpu"]
    return [
        *out,
        Text(
            "The reference's step (its 'epoch time', one optimiser step, not waited "
            "for) beside our measured 1-GPU and projected 2-GPU steps at the seed "
            "scale (the reference's configuration), same mode and controller."
        ),
        Grid(header, tuple(ours)),
    ]


def _headline_panel(
    ax: Any,
    sel: list[Rec],
    device: str,
    scaling: str,
    modes: list[str],
    controllers: list[str],
) -> tuple[bool, int | None]:
    """One panel of the headline figure, adding what it draws to `modes` and
    `controllers`; returns whether a row ran several processes, and the cores shaded."""
    several, shaded = False, None
    groups: dict[tuple[str, str, int], list[Rec]] = {}
    for r in sel:
        groups.setdefault((r.mode, r.controller, r.processes or 1), []).append(r)
    for (mode, controller, processes), group in sorted(groups.items()):
        group.sort(key=lambda r: r.n_devices)
        fmt = CONTROLLER_STYLE.get(controller, "-o")
        style: dict[str, Any] = {"color": MODE_STYLE.get(mode, "tab:gray")}
        if processes > 1:
            fmt, style = fmt[-1], {**style, "markerfacecolor": "none", "markersize": 10}
            several = True
        x = [r.n_devices for r in group]
        y = [r.speedup or 0.0 for r in group]  # every row drawn has a speedup
        ci = [r.speedup_ci or (v, v) for r, v in zip(group, y, strict=True)]
        err = [
            [max(v - lo, 0) for v, (lo, _) in zip(y, ci, strict=True)],
            [max(hi - v, 0) for v, (_, hi) in zip(y, ci, strict=True)],
        ]
        ax.errorbar(x, y, yerr=err, fmt=fmt, capsize=3, **style)
        modes += [mode] if mode not in modes else []
        controllers += [controller] if controller not in controllers else []
    ns = sorted({r.n_devices for r in sel})
    ax.plot(ns, ns, ":", color="grey")
    ax.axhline(1.0, ls="--", color="grey", lw=0.8)
    beyond = [r.n_devices for r in sel if exceeds_cores(r)]
    if beyond:
        cores = max(r.n_devices for r in sel if not exceeds_cores(r))
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
    return several, shaded


def _headline_legend(
    fig: Any, modes: list[str], controllers: list[str], several: bool, shaded: int | None
) -> None:
    """The headline figure's legend below its panels."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [
        Line2D([], [], color=MODE_STYLE.get(m, "tab:gray"), lw=2, label=m) for m in modes
    ]
    styles = {c: CONTROLLER_STYLE.get(c, "-o") for c in controllers}
    handles += [
        Line2D([], [], color="k", ls=st[:-1], marker=st[-1], label=c) for c, st in styles.items()
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


def headline_figure(rows: list[Rec], out: str | Path) -> Path | None:
    """`headline_speedup.{png,svg}`: speedup over one device against devices, a line per
    mode (colour) and controller (line style), a panel per device kind and scaling; the
    PNG, or None without ok rows with a speedup."""
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.ok and r.speedup is not None]
    panels = [
        (device, scaling)
        for device in ("cpu", "gpu")
        for scaling in ("strong", "weak")
        if any(r.device == device and r.scaling == scaling and r.n_devices > 1 for r in ok)
    ]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.2), squeeze=False)
    modes: list[str] = []
    controllers: list[str] = []
    several, shaded = False, None
    for ax, (device, scaling) in zip(axes[0], panels, strict=True):
        sel = [r for r in ok if r.device == device and r.scaling == scaling]
        many, beyond = _headline_panel(ax, sel, device, scaling, modes, controllers)
        several, shaded = several or many, beyond or shaded
    _headline_legend(fig, modes, controllers, several, shaded)
    fig.suptitle("Speedup over one device, by mode")
    fig.tight_layout()
    return _save(fig, Path(out), "headline_speedup")[0]
