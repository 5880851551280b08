"""The GPU table's extra sections (projected rows, the reference's GPU rows) and the
headline figure (speedup over one device, by mode)."""

from pathlib import Path
from typing import Any

from .plots import CONTROLLER_STYLE, MODE_STYLE, _save
from .projection import projected_table
from .tables import fmt as _fmt
from .tables import markdown_table
from .verdict import exceeds_cores


def _gpu_reference_row(
    ref: dict[str, Any], gpu_rows: list[dict[str, Any]], projected: list[dict[str, Any]]
) -> list[str]:
    """One reference GPU row beside our measured 1-GPU or projected 2-GPU step."""
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
    return [
        str(n),
        f"{ref['mode']} → {mode}",
        ref["controller"],
        _fmt(float(ref["epoch_time_s"])),
        cell,
        ref["final_loss"],
    ]


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
    out = [
        _gpu_reference_row(ref, gpu_rows, projected) for ref in reference if ref["device"] == "gpu"
    ]
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


def _headline_panel(
    ax: Any,
    sel: list[dict[str, Any]],
    device: str,
    scaling: str,
    modes: list[str],
    controllers: list[str],
) -> tuple[bool, int | None]:
    """One panel of the headline figure (rows `sel` of one device kind and scaling): a
    line per mode and controller with interval bars, ideal and one device's speed, the
    devices beyond the cores shaded. Adds the modes and controllers drawn to `modes` and
    `controllers`; returns whether a row ran several processes, and the cores shaded
    beyond (None where none)."""
    several, shaded = False, None
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


def headline_figure(rows: list[dict[str, Any]], out: str | Path) -> Path | None:
    """`headline_speedup.{png,svg}`: speedup over one device against devices, a line
    per mode (colour) and controller (line style), 95% interval bars, one panel per
    device kind and scaling with ok rows (`scaling_rows` of each scaling); ideal
    scaling dotted, one device's speed dashed, devices beyond the physical cores
    shaded. Returns the PNG, or None without ok rows with a speedup."""
    import matplotlib.pyplot as plt

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
    modes: list[str] = []
    controllers: list[str] = []
    several, shaded = False, None
    for ax, (device, scaling) in zip(axes[0], panels, strict=True):
        sel = [r for r in ok if r["device"] == device and r["scaling"] == scaling]
        many, beyond = _headline_panel(ax, sel, device, scaling, modes, controllers)
        several, shaded = several or many, beyond or shaded
    _headline_legend(fig, modes, controllers, several, shaded)
    fig.suptitle("Speedup over one device, by mode")
    fig.tight_layout()
    return _save(fig, Path(out), "headline_speedup")[0]
