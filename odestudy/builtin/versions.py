"""The version study (`make versions`): the core rows under each JAX release
(`grid.versions_scenarios`), one run each, in an environment per release
(`study.versions`); its table and figure."""

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..measure.controllers import CONTROLLERS
from ..measure.modes import MODES
from ..report import loss, sessions
from ..report.comparisons import OWN_STEP, ratio_claim
from ..report.document import write_tables
from ..report.frames import read_records, scaling_rows
from ..report.intervals import METHOD, fmt_interval, ratio_interval
from ..report.plots import MODE_STYLE
from ..report.tables import escape, fmt, render_blocks
from ..study.claim import Claim
from ..study.grid import versions_scenarios
from ..study.rec import Rec
from ..study.studies import Block, Grid, Page, ReportInputs, Study, Table, Text
from ..study.versions import FOLDER, RESULTS, VERSION_SETS

# Where the version study's claims are stated (`Claim.where`).
VERSIONS_WHERE = "the version study (versions.md)"

TABLE_HEADER = (
    "JAX / diffrax / equinox / optax",
    "Mode",
    "Controller",
    "Devices",
    "Runs",
    "Step time median (ms)",
    "Speedup [95% CI]",
    "Compile (s)",
    "Final loss",
    "Collectives total / in loops",
    "pmap is",
    "Session",
)


def _stack(rec: Rec) -> str:
    v = rec.versions or {}
    return " / ".join(str(v.get(k)) for k in ("jax", "diffrax", "equinox", "optax"))


def version_rows(results: str | Path = RESULTS, scale: str = "quick") -> dict[str, list[Rec]]:
    """Each version set's core rows with speedups (`frames.scaling_rows`), ok or not."""
    keys = {s.key() for s in versions_scenarios(scale)}
    out = {}
    for name in VERSION_SETS:
        recs = [
            r
            for r in read_records(Path(results) / name, scale, current=False)
            if r.scenario_key in keys
        ]
        if recs:
            out[name] = scaling_rows(recs, "strong")
    return out


def _one_device(rows: list[Rec], controller: str) -> Rec | None:
    return next((r for r in rows if r.n_devices == 1 and r.controller == controller and r.ok), None)


def versions_body(by_set: dict[str, list[Rec]]) -> list[Block]:
    """The version table, and what it says with intervals (`_sentences`)."""
    if not by_set:
        return [Text("No records of the version study (`make versions`).")]
    sentences = _sentences(by_set, list(by_set)[-1])
    body: list[Block] = [
        Text(
            "Core rows of the quick scale (strong scaling, CPU, one machine) under each JAX "
            "release, each release in its own environment (`make versions`); speedups are "
            "against the same release's 1-device row. Rows with more devices than physical "
            "cores (8) measure overhead, as in the reference. " + METHOD
        ),
        Text(_where(by_set)),
        *([Text("\n".join(sentences))] if sentences else []),
        Grid(TABLE_HEADER, tuple(_table(by_set))),
    ]
    return body + [Text(n) for n in loss.notes(render_blocks(body))]


def _sentences(by_set: dict[str, list[Rec]], current: str) -> list[str]:
    """Each release's 1-device step against the `current` release's, and at each release
    the speedup of each mode with one solver loop (`AbstractMode.one_loop`)."""
    lines = []
    for controller in CONTROLLERS:
        base = _one_device(by_set[current], controller)
        for name, rows in by_set.items():
            one = _one_device(rows, controller)
            if base is None or one is None or name == current:
                continue
            est, lo, hi = ratio_interval(one, base)
            lines.append(
                f"- {escape(controller)}, 1 device: the step on {escape(_stack(one))} takes "
                f"{loss.pair_mark(fmt_interval(est, lo, hi), one, base)} times as long as on "
                f"{escape(_stack(base))}."
            )
    for rows in by_set.values():
        for mode in (m for m in MODES.values() if m.one_loop):
            text = _speedups(_stated([r for r in rows if r.mode == mode.name]))
            if text:
                stack = escape(_stack(rows[0]))
                lines.append(f"- {mode.label} speedup over 1 device, {stack}: {text}.")
    return lines


def _stated(rows: list[Rec]) -> list[Rec]:
    """The rows whose speedup the page states: those of a mode with one solver loop
    (`AbstractMode.one_loop`) with a speedup."""
    return [r for r in rows if r.mode in MODES and MODES[r.mode].one_loop and r.speedup is not None]


def _speedups(rows: list[Rec]) -> str:
    """Each row's speedup with its interval, by controller and devices (`; `-joined)."""
    return "; ".join(
        f"{escape(r.controller)} on {r.n_devices} devices {loss.speedup_cell(r)}" for r in rows
    )


def _table(by_set: dict[str, list[Rec]]) -> list[list[Any]]:
    """The version table's cells, a row per record."""
    table = []
    for rows in by_set.values():
        for r in sorted(rows, key=lambda r: (r.controller, r.n_devices, r.mode)):
            ok = r.ok
            # Cells are escaped when rendered: record text enters as it is.
            table.append(
                [
                    _stack(r),
                    r.mode,
                    r.controller,
                    r.n_devices,
                    len(r.step_time_runs_s or []) if ok else 0,
                    fmt(r.step_time_s and r.step_time_s * 1e3, 3) if ok else r.status,
                    loss.speedup_cell(r) if r.speedup else "–",
                    fmt(r.compile_time_s, 3),
                    fmt(r.final_loss, 3),
                    f"{fmt(r.collectives_total)} / {fmt(r.collectives_in_loops)}",
                    r.pmap_implementation or "–" if r.mode == "pmap" else "",
                    sessions.session_of(r).label,
                ]
            )
    return table


def _where(by_set: dict[str, list[Rec]]) -> str:
    """The machine(s) and session(s) of the version study's rows."""
    rows = [r for rows in by_set.values() for r in rows]
    machines = sorted({str(r.machine_id) for r in rows})
    return escape(f"Machine: {', '.join(machines)}. " + sessions.sessions_line(rows, rows))


def _figure_row(rows: list[Rec], mode: str, controller: str) -> Rec | None:
    """The ok row of `mode` and `controller` on at most 2 devices, if any."""
    found = (r for r in rows if r.mode == mode and r.ok and r.controller == controller)
    return next((r for r in found if r.n_devices <= 2), None)


def versions_figure(by_set: dict[str, list[Rec]], out: str | Path) -> list[Path]:
    """Step time per mode against the JAX release, a panel per controller (bars: the
    25th to the 75th percentile)."""
    import matplotlib.pyplot as plt

    if not by_set:
        return []
    names = list(by_set)
    fig, axes = plt.subplots(1, len(CONTROLLERS), figsize=(11, 4), sharey=False)
    for ax, controller in zip(axes, CONTROLLERS, strict=True):
        for mode, facts in MODES.items():
            found = [
                (i, r)
                for i, name in enumerate(names)
                if (r := _figure_row(by_set[name], mode, controller)) is not None
            ]
            if not found:
                continue
            ms = np.array([[r.step_time_s, r.step_time_p25_s, r.step_time_p75_s] for _, r in found])
            t, p25, p75 = (ms * 1e3).T
            label = f"{mode} (2 devices)" if facts.multi_device else f"{mode} (1 device)"
            ax.errorbar(
                [i for i, _ in found],
                t,
                yerr=[t - p25, p75 - t],
                marker="o",
                capsize=3,
                label=label,
                color=MODE_STYLE.get(mode, "tab:gray"),
            )
        ax.set_xticks(range(len(names)), [n.removeprefix("jax-") for n in names])
        ax.set(xlabel="JAX release", ylabel="step time (ms), median", title=controller)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.suptitle("Training step per mode across JAX releases (quick scale, CPU)")
    fig.tight_layout()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "versions.png", out / "versions.svg"]
    for p in paths:
        fig.savefig(p, dpi=120)
    plt.close(fig)
    return paths


def versions_table(by_set: dict[str, list[Rec]]) -> Table:
    """The version study's table (`versions`)."""
    return Table("versions", "The core rows across JAX releases", tuple(versions_body(by_set)))


def write_versions(
    results: str | Path = RESULTS, figures: str | Path = "figures", scale: str = "quick"
) -> dict[str, Any]:
    """Write `figures/tables/versions.md` and `figures/versions.png` from the records."""
    by_set = version_rows(results, scale)
    return {
        "table": write_tables([versions_table(by_set)], Path(figures))["versions"],
        "figures": versions_figure(by_set, figures),
        "sets": list(by_set),
        "rows": sum(len(v) for v in by_set.values()),
    }


class Versions(Study):
    """The core rows `make versions` runs under each JAX release (one run each)."""

    name: ClassVar[str] = "versions"
    order: ClassVar[int] = 4
    title: ClassVar[str] = "The core rows across JAX releases"
    repeated: ClassVar[bool] = False
    page: ClassVar[Page | None] = Page(
        "versions", "JAX releases (`make versions`)", ("versions",), ("versions",)
    )

    def scenarios(self, scale, device="auto", full=False):
        return versions_scenarios(scale), []

    def _rows(self, inputs: ReportInputs) -> dict[str, list[Rec]] | None:
        """Its rows where its page is one of the scale's (None at another scale)."""
        if self.page is None or inputs.scale not in self.page.scales:
            return None
        return version_rows(inputs.results / FOLDER, inputs.scale)

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its table where its page is one of the scale's."""
        by_set = self._rows(inputs)
        return [] if by_set is None else [versions_table(by_set)]

    def claims(self, inputs: ReportInputs) -> list[Claim]:
        """The speedups its page states, each over its own step on one device under the
        same release (the release named in the comparison's baseline)."""
        rows = [r for rows in (self._rows(inputs) or {}).values() for r in _stated(rows)]
        return [_claim(r) for r in rows]


def _claim(r: Rec) -> Claim:
    """A stated speedup (`_stated`) as a claim."""
    assert r.speedup is not None and r.speedup_ci is not None
    baseline = f"{OWN_STEP} under {TABLE_HEADER[0]} {_stack(r)}"
    flagged = loss.differs(r, r.baseline_final_loss)
    return ratio_claim(r, None, baseline, (r.speedup, *r.speedup_ci), VERSIONS_WHERE, flagged)
