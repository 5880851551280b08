"""Figures: one scenario (notebook) and the scaling figures of the report."""

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..measure.controllers import CONTROLLERS
from ..measure.modes import MODES
from ..study.rec import Rec, Sweep

# matplotlib and seaborn are imported inside the functions that draw (here and in the
# report's other modules): every scenario's kernel and worker imports the package and
# draws nothing, and the two cost about a second of each process's start.

# A mode no class names (a record of a mode since removed) is drawn in this colour.
OTHER_COLOUR = "tab:gray"
# A controller no class names is drawn with this line and marker.
OTHER_LINE = "-o"


@dataclasses.dataclass(frozen=True, eq=False)
class ClassStyles(Mapping[str, str]):
    """Each registered class's style (its attribute `attr`), in the order of the tables;
    any other name gets `other`, never a KeyError."""

    registry: Mapping[str, Any]
    attr: str
    other: str

    def __getitem__(self, name: str) -> str:
        found = self.registry.get(name)
        return getattr(found, self.attr) if found is not None else self.other

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.registry))

    def __len__(self) -> int:
        return len(self.registry)


# Each mode's colour (`AbstractMode.colour`), each controller's line and marker
# (`AbstractController.line`).
MODE_STYLE = ClassStyles(MODES, "colour", OTHER_COLOUR)
CONTROLLER_STYLE = ClassStyles(CONTROLLERS, "line", OTHER_LINE)

# seaborn's dashes (`lineplot(dashes=...)`) of a matplotlib line style, the longer
# styles first; "" is a solid line.
DASHES: dict[str, str | tuple[float, ...]] = {
    "--": (4, 2),
    "-.": (4, 1.5, 1, 1.5),
    ":": (1, 2),
    "-": "",
}


def line_dashes(line: str) -> str | tuple[float, ...]:
    """seaborn's dashes of a matplotlib format's line style (`"--s"` gives `(4, 2)`)."""
    return next((dashes for style, dashes in DASHES.items() if line.startswith(style)), "")


def controller_dashes(controllers: Iterable[str]) -> dict[str, str | tuple[float, ...]]:
    """Each of `controllers`' dashes in a seaborn figure, from its line."""
    return {c: line_dashes(CONTROLLER_STYLE[c]) for c in controllers}


def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """The headline numbers of one record, as a small dict for display."""
    rec = Rec(record)
    keys = (
        "status",
        "error",
        "name",
        "n_devices",
        "mode",
        "controller",
        "scaling",
        "global_batch",
        "compile_time_s",
        "step_time_s",
        "step_time_p25_s",
        "step_time_p75_s",
        "epoch_time_s",
        "runtime_s",
        "final_loss",
        "collectives_total",
        "collectives_in_loops",
    )
    steps = rec.solver_steps
    return {k: rec.get(k) for k in keys} | {
        "solver_steps_mean": steps.mean,
        "solver_steps_max": steps.max,
    }


def plot_scenario(record: Mapping[str, Any]):
    """Training loss per step and a histogram of per-sample solver steps of one record."""
    import matplotlib.pyplot as plt

    rec = Rec(record)
    fig, (ax_loss, ax_steps) = plt.subplots(1, 2, figsize=(10, 3.5))
    losses = rec.train_loss or []
    ax_loss.semilogy(np.arange(1, len(losses) + 1), losses)
    ax_loss.set(xlabel="optimiser step", ylabel="training loss (MSE)", title=rec.name or "")
    steps = rec.solver_steps.last_step_per_sample or []
    if steps:
        ax_steps.hist(steps, bins=min(30, max(5, len(set(steps)))))
    ax_steps.set(xlabel="forward solver steps per sample (last timed step)", ylabel="samples")
    fig.tight_layout()
    return fig


def _save(fig, out: Path, stem: str) -> list[Path]:
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    with plt.rc_context({"svg.hashsalt": "odestudy"}):  # the same figure, the same file
        for p in paths:
            fig.savefig(
                p,
                dpi=120,
                bbox_inches="tight",
                metadata={"Date": None} if p.suffix == ".svg" else None,
            )
    plt.close(fig)
    return paths


METRICS = ("step time (s)", "speedup", "efficiency")
FRAME_COLUMNS = (
    "device",
    "scaling",
    "mode",
    "controller",
    "processes",
    "devices",
    "metric",
    "value",
    "low",
    "high",
)


def scaling_frame(rows: Sequence[Rec]) -> pd.DataFrame:
    """Scaling rows in long form: a row per record and metric, with its interval (the IQR
    for step times, the 95% interval for speedup and efficiency)."""
    out = []
    for r in rows:
        if not r.ok:
            continue
        head = {
            "device": r.device,
            "scaling": r.scaling,
            "mode": r.mode,
            "controller": r.controller,
            "processes": r.processes or 1,
            "devices": r.n_devices,
        }
        for metric, value, (low, high) in (
            (METRICS[0], r.step_time_s, (r.step_time_p25_s, r.step_time_p75_s)),
            ("speedup", r.speedup, r.speedup_ci or (None, None)),
            ("efficiency", r.efficiency, r.efficiency_ci or (None, None)),
        ):
            out.append({**head, "metric": metric, "value": value, "low": low, "high": high})
    frame = pd.DataFrame(out, columns=list(FRAME_COLUMNS))
    return frame.astype({"value": float, "low": float, "high": float})


def _draw(data: pd.DataFrame, color=None, **_) -> None:
    """One mode's lines on one facet: a line per controller (solid PID, dashed StepTo),
    error bars from `low`/`high`; multi-process rows as hollow markers."""
    import matplotlib.pyplot as plt

    ax = plt.gca()
    for (controller, processes), group in data.groupby(["controller", "processes"]):
        group = group.dropna(subset=["value"]).sort_values("devices")
        if group.empty:
            continue
        fmt = CONTROLLER_STYLE.get(controller, "-o")
        style: dict[str, Any] = {"color": color}
        if processes > 1:
            fmt, style = fmt[-1], {**style, "markerfacecolor": "none", "markersize": 10}
        err = [
            (group["value"] - group["low"]).clip(lower=0),
            (group["high"] - group["value"]).clip(lower=0),
        ]
        ax.errorbar(group["devices"], group["value"], yerr=err, fmt=fmt, capsize=3, **style)


def _scaling_axes(grid: Any, ns: list[int], scaling: str, cores: int | None) -> None:
    """Each facet's scales, labels and ideal line; devices beyond `cores` shaded."""
    labels = {
        "step time (s)": "step time (s): median, IQR bars",
        "speedup": "speedup t(1)/t(N), 95% interval"
        if scaling == "strong"
        else "throughput speedup N·t(1)/t(N), 95% interval",
        "efficiency": "efficiency speedup/N, 95% interval"
        if scaling == "strong"
        else "efficiency t(1)/t(N), 95% interval",
    }
    for ax, metric in zip(grid.axes.flat, METRICS, strict=True):
        if metric == "speedup":
            ax.plot(ns, ns, ":", color="grey")
        elif metric == "efficiency":
            ax.plot(ns, [1.0] * len(ns), ":", color="grey")
        else:
            ax.set_yscale("log")
        ax.set(xscale="log", xticks=ns, xlabel="devices", ylabel=labels[metric], title=metric)
        ax.set_xticklabels([str(n) for n in ns])
        if cores and max(ns) > cores:
            ax.axvspan(cores + 0.5, max(ns) * 1.2, color="grey", alpha=0.15)


def _scaling_legend(
    grid: Any, modes: list[str], sel: pd.DataFrame, ns: list[int], cores: int | None
) -> None:
    """The legend below the facets."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Line2D([], [], color=MODE_STYLE[m], lw=2, label=m) for m in modes]
    for c, line in CONTROLLER_STYLE.items():
        if c in set(sel["controller"]):
            handles.append(Line2D([], [], color="k", ls=line[:-1], marker=line[-1], label=c))
    handles.append(Line2D([], [], color="grey", ls=":", label="ideal"))
    if (sel["processes"] > 1).any():
        hollow: dict[str, Any] = {"marker": "o", "ls": "", "markerfacecolor": "none"}
        handles.append(Line2D([], [], color="k", label="several processes", **hollow))
    if cores and max(ns) > cores:
        handles.append(
            Patch(color="grey", alpha=0.15, label=f"devices > {cores} physical cores (overhead)")
        )
    grid.figure.legend(
        handles=handles,
        loc="upper center",
        ncol=len(handles),
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
        frameon=False,
    )


def scaling_figures(
    rows: Sequence[Rec], out: str | Path, device: str, cores: int | None
) -> list[Path]:
    """Step time, speedup and efficiency against devices, a figure per scaling; devices
    beyond `cores` physical cores shaded (times there measure overhead, not speedup)."""
    import seaborn as sns

    # A model that did not train has no speedup to plot: left out, and counted in the title.
    shown = [r for r in rows if r.device == device]
    kept = [r for r in shown if r.trained is not False and not r.untrained]
    data = scaling_frame(kept)
    paths = []
    for scaling in ("strong", "weak"):
        sel = data[data["scaling"] == scaling]
        if sel.empty:
            continue
        present = set(sel["mode"])
        modes = [m for m in MODE_STYLE if m in present] + sorted(present - set(MODE_STYLE))
        grid = sns.FacetGrid(
            sel,
            col="metric",
            col_order=list(METRICS),
            hue="mode",
            hue_order=modes,
            palette={m: MODE_STYLE[m] for m in modes},
            sharey=False,
            height=4.2,
            aspect=1.1,
        )
        grid.map_dataframe(_draw)
        ns = sorted(set(sel["devices"]))
        _scaling_axes(grid, ns, scaling, cores if device == "cpu" else None)
        _scaling_legend(grid, modes, sel, ns, cores if device == "cpu" else None)
        what = "fixed global batch" if scaling == "strong" else "fixed per-device batch"
        left_out = sum(1 for r in shown if r.scaling == scaling and r not in kept)
        note = f"; {left_out} rows not trained, left out" if left_out else ""
        grid.figure.suptitle(f"{device.upper()} {scaling} scaling ({what}){note}", y=1.02)
        paths += _save(grid.figure, Path(out), f"{device}_{scaling}_scaling")
    return paths


# The step-cost figure's x axis: one device's batch, in log.
BATCH_AXIS = {"xscale": "log", "xlabel": "batch (one device)"}


def _forward_axes(
    c: Any, sweeps: Sequence[Sweep], data: pd.DataFrame, palette: dict, name: Any
) -> None:
    """The step-cost figure's third panel: the forward pass against the rest of the step."""
    for sw in sweeps:
        sel = data[(data["sweep"] == name(sw)) & data["forward_s"].notna()]
        label, color = name(sw), palette[name(sw)]
        c.plot(sel["batch"], sel["forward_s"] * 1e3, "o-", color=color, label=f"{label}: forward")
        rest = (sel["step_s"] - sel["forward_s"]) * 1e3
        c.plot(sel["batch"], rest, "s--", color=color, label=f"{label}: backward + update")
    c.set(**BATCH_AXIS, yscale="log", ylabel="ms per step (medians)")
    c.set_title("forward (loss alone) vs the rest")
    c.legend(fontsize=7)


def _cost_axes(
    a: Any, b: Any, sweeps: Sequence[Sweep], data: pd.DataFrame, palette: dict, name: Any
) -> None:
    """The step-cost figure's first two panels' bars and fitted lines."""
    for sw in sweeps:
        sel = data[data["sweep"] == name(sw)]
        iqr = [sel["step_s"] - sel["p25"], sel["p75"] - sel["step_s"]]
        a.errorbar(
            sel["batch"], sel["step_s"], yerr=iqr, fmt="none", capsize=3, color=palette[name(sw)]
        )
        x = sel["batch"].to_numpy(float)
        fitted = (sw.fit.fixed_per_iteration_s + sw.fit.per_sample_iteration_s * x) * 1e3
        b.plot(x, fitted, ":", color=palette[name(sw)])
    a.set(**BATCH_AXIS, yscale="log", ylabel="step time (s), median, IQR bars")
    b.set(**BATCH_AXIS, ylabel="ms per executed solver iteration (dotted: fit)")


def step_cost_figure(sweeps: Sequence[Sweep], out: str | Path, stem: str) -> list[Path]:
    """Step time and time per executed solver iteration against batch size, a line per
    sweep, with the fitted time per iteration `fixed + per_sample * batch` (dotted)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    def name(sw: Sweep) -> str:
        return f"{sw.fields.controller} {sw.label or ''}".strip()

    rows = [
        {
            "sweep": name(sw),
            "batch": r.batch,
            "step_s": r.step_time_s,
            "p25": r.step_time_p25_s,
            "p75": r.step_time_p75_s,
            "per_iteration_ms": r.per_iteration_s * 1e3,
            "forward_s": r.forward_time_s,
        }
        for sw in sweeps
        for r in sw.rows
    ]
    data = pd.DataFrame(rows).sort_values(["sweep", "batch"])
    names = list(dict.fromkeys(name(sw) for sw in sweeps))
    palette = dict(zip(names, sns.color_palette(n_colors=len(names)), strict=True))
    split = data["forward_s"].notna().any()  # sweeps that timed the forward pass alone
    fig, axes = plt.subplots(1, 3 if split else 2, figsize=(16 if split else 11, 4))
    a, b = axes[0], axes[1]
    if split:
        _forward_axes(axes[2], sweeps, data, palette, name)
    lines: dict[str, Any] = {"data": data, "x": "batch", "hue": "sweep", "palette": palette}
    sns.lineplot(y="step_s", marker="o", ax=a, **lines)
    sns.lineplot(y="per_iteration_ms", marker="o", ax=b, legend=False, **lines)
    _cost_axes(a, b, sweeps, data, palette, name)
    a.legend(fontsize=8)
    kind = (sweeps[0].device_kind or "") if sweeps else ""
    if kind == "cpu":
        kind = f"CPU ({sweeps[0].hardware.cpu_model}, 1 device)"
    fig.suptitle(f"Per-step cost against batch size on {kind} (trained quick model)")
    fig.tight_layout()
    return _save(fig, Path(out), stem)
