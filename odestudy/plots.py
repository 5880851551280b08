"""Figures: one scenario (notebook) and the scaling figures of the report."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

MODE_STYLE = {"single": "k", "pmap": "tab:blue", "shard": "tab:red",
              "shard_map": "tab:green"}
CONTROLLER_STYLE = {"pid": "-o", "stepto": "--s"}


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers of one record, as a small dict for display."""
    keys = ("status", "error", "name", "n_devices", "mode", "controller", "scaling",
            "global_batch", "compile_time_s", "step_time_s", "step_time_p25_s",
            "step_time_p75_s", "epoch_time_s", "runtime_s", "final_loss",
            "collectives_total", "collectives_in_loops")
    out = {k: record.get(k) for k in keys}
    steps = record.get("solver_steps") or {}
    out["solver_steps_mean"], out["solver_steps_max"] = steps.get("mean"), steps.get("max")
    return out


def plot_scenario(record: dict[str, Any]):
    """Training loss per step and a histogram of per-sample solver steps."""
    fig, (ax_loss, ax_steps) = plt.subplots(1, 2, figsize=(10, 3.5))
    losses = record.get("train_loss") or []
    ax_loss.semilogy(np.arange(1, len(losses) + 1), losses)
    ax_loss.set(xlabel="optimiser step", ylabel="training loss (MSE)",
                title=record.get("name", ""))
    steps = (record.get("solver_steps") or {}).get("last_step_per_sample") or []
    if steps:
        ax_steps.hist(steps, bins=min(30, max(5, len(set(steps)))))
    ax_steps.set(xlabel="forward solver steps per sample (last timed step)",
                 ylabel="samples")
    fig.tight_layout()
    return fig


def _save(fig, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    with plt.rc_context({"svg.hashsalt": "odestudy"}):  # the same figure, the same file
        for p in paths:
            fig.savefig(p, dpi=120, bbox_inches="tight",
                        metadata={"Date": None} if p.suffix == ".svg" else None)
    plt.close(fig)
    return paths


def scaling_figures(rows: Sequence[dict[str, Any]], out: str | Path, device: str,
                    cores: int | None) -> list[Path]:
    """Step time, speedup and efficiency against devices, per mode and controller,
    strong and weak scaling. `rows` come from `report.scaling_rows`; devices beyond
    `cores` physical cores are shaded (times then measure overhead, not speedup)."""
    out = Path(out)
    paths = []
    for scaling in ("strong", "weak"):
        sel = [r for r in rows if r["scaling"] == scaling and r["device"] == device]
        if not sel:
            continue
        fig, axes = plt.subplots(1, 3, figsize=(15, 5))
        ns = sorted({r["n_devices"] for r in sel})
        for (mode, controller, processes), group in _groups(sel):
            group = sorted(group, key=lambda r: r["n_devices"])
            x = [r["n_devices"] for r in group]
            label = f"{mode} {controller}"
            fmt = CONTROLLER_STYLE.get(controller, "-o")
            if processes > 1:  # multi-process rows: hollow markers, no line
                label += f" ({processes} processes)"
                fmt = fmt[-1]
            style = dict(color=MODE_STYLE.get(mode, "grey"), label=label)
            if processes > 1:
                style.update(markerfacecolor="none", markersize=10)
            y = [r["step_time_s"] for r in group]
            lo = [r["step_time_s"] - r["step_time_p25_s"] for r in group]
            hi = [r["step_time_p75_s"] - r["step_time_s"] for r in group]
            axes[0].errorbar(x, y, yerr=[lo, hi], fmt=fmt, capsize=3, **style)
            for ax, key in ((axes[1], "speedup"), (axes[2], "efficiency")):
                _with_interval(ax, x, group, key, fmt, style)
        axes[0].set(yscale="log", ylabel="step time (s), median, IQR bars")
        axes[1].plot(ns, ns, ":", color="grey", label="ideal")
        axes[1].set(ylabel="speedup t(1)/t(N), 95% interval" if scaling == "strong"
                    else "throughput speedup N t(1)/t(N), 95% interval")
        axes[2].plot(ns, [1.0] * len(ns), ":", color="grey", label="ideal")
        axes[2].set(ylabel="efficiency: speedup / N" if scaling == "strong"
                    else "weak-scaling efficiency t(1)/t(N)")
        for ax in axes:
            ax.set(xscale="log", xlabel="devices", xticks=ns)
            ax.set_xticklabels([str(n) for n in ns])
            if cores and device == "cpu" and max(ns) > cores:
                ax.axvspan(cores + 0.5, max(ns) * 1.2, color="grey", alpha=0.15,
                           label=f"devices > {cores} physical cores")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8,
                   bbox_to_anchor=(0.5, -0.02))
        what = "fixed global batch" if scaling == "strong" else "fixed per-device batch"
        fig.suptitle(f"{device.upper()} {scaling} scaling ({what})")
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        paths += _save(fig, out, f"{device}_{scaling}_scaling")
    return paths


def _with_interval(ax, x, group, key: str, fmt: str, style: dict) -> None:
    """Plot `key` of each row with error bars from its 95% interval (`<key>_ci`); rows
    without a baseline give no point."""
    nan = float("nan")
    y = [r[key] if r[key] is not None else nan for r in group]
    ci = [r.get(f"{key}_ci") or (nan, nan) for r in group]
    lo = [max(0.0, v - c[0]) if v == v else nan for v, c in zip(y, ci, strict=True)]
    hi = [max(0.0, c[1] - v) if v == v else nan for v, c in zip(y, ci, strict=True)]
    ax.errorbar(x, y, yerr=[lo, hi], fmt=fmt, capsize=3, **style)


def _groups(rows):
    key = lambda r: (r["mode"], r["controller"], r.get("processes", 1))
    keys = sorted({key(r) for r in rows})
    return [(k, [r for r in rows if key(r) == k]) for k in keys]


def step_cost_figure(sweeps: Sequence[dict[str, Any]], out: str | Path,
                     stem: str) -> list[Path]:
    """Step time and time per executed solver iteration against batch size, one line
    per sweep (`benchmarks/step_cost.py` records: controller and label), with the
    fitted line `fixed + per_sample * batch` of the time per iteration."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for sweep in sweeps:
        rows = sorted(sweep["rows"], key=lambda r: r["batch"])
        x = np.array([r["batch"] for r in rows], float)
        label = f"{sweep['scenario']['controller']} {sweep.get('label') or ''}".strip()
        style = CONTROLLER_STYLE.get(sweep["scenario"]["controller"], "-o")
        lo = [r["step_time_s"] - r["step_time_p25_s"] for r in rows]
        hi = [r["step_time_p75_s"] - r["step_time_s"] for r in rows]
        line = a.errorbar(x, [r["step_time_s"] for r in rows], yerr=[lo, hi], fmt=style,
                          capsize=3, label=label)
        b.plot(x, [r["per_iteration_s"] * 1e3 for r in rows], style,
               color=line[0].get_color(), label=label)
        fit = sweep["fit"]
        b.plot(x, (fit["fixed_per_iteration_s"] + fit["per_sample_iteration_s"] * x) * 1e3,
               ":", color=line[0].get_color())
    a.set(xscale="log", yscale="log", xlabel="batch (one device)",
          ylabel="step time (s), median, IQR bars")
    b.set(xscale="log", xlabel="batch (one device)",
          ylabel="ms per executed solver iteration (dotted: fit)")
    a.legend(fontsize=8)
    kind = sweeps[0].get("device_kind", "") if sweeps else ""
    if kind == "cpu":
        kind = f"CPU ({(sweeps[0].get('hardware') or {}).get('cpu_model')}, 1 device)"
    fig.suptitle(f"Per-step cost against batch size on {kind} (trained quick model)")
    fig.tight_layout()
    return _save(fig, Path(out), stem)
