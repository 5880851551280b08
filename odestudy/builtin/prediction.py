"""The prediction study: `odestudy predict --rows` checked against the measured
multi-device rows of the quick matrix, and the machine probe of every session; its runs
are `odestudy predict`'s; its table (`prediction.md`)."""

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..measure.modes import multi_device_modes
from ..measure.probe import PROBE_FOLDER
from ..measure.scenario import Scenario
from ..report import sessions
from ..report.crossover import verdict_counts, verdict_of
from ..report.frames import read_records, scaling_rows
from ..report.heldout import Checked, checked, made_before, said
from ..report.tables import escape
from ..report.workloads import read_predictions
from ..study import records
from ..study.rec import PredictedRow, Probe, Rec
from ..study.rec import Prediction as Predicted  # a record; `Prediction` is the study
from ..study.studies import Grid, Interval, Page, ReportInputs, Study, Table, Text


def row_predictions(results: str | Path, machine: str) -> list[Predicted]:
    """The predictions of `machine`'s measured rows (`predict --rows`) in its `predict`
    folder, and the earlier ones each replaced (`records.EARLIER`)."""
    return read_predictions(Path(results) / machine)


def _where(placement: tuple[int, int, int]) -> str:
    devices, processes, nodes = placement
    text = f"{devices} devices"
    if processes > 1:
        text += f", {processes} processes"
    return text + (f", {nodes} nodes" if nodes > 1 else "")


def checked_rows(rows: Sequence[Rec], found: Sequence[dict[str, Any]]) -> list[Checked]:
    """Each measured ok row of a predicted scenario and mode against its prediction: the
    newest made before the row was measured (`heldout.made_before`), else the newest."""
    chosen: dict[str, tuple[Predicted, PredictedRow, Rec]] = {}
    for p in sorted(map(Predicted, found), key=lambda p: str(p.finished)):
        if not p.trained:
            continue  # a prediction from a model that did not train checks nothing
        target = Scenario.from_dict(p.scenario)
        for pr in p.rows:
            name = dataclasses.replace(target, mode=pr.mode).name()
            r = next(
                (r for r in rows if r.ok and (r.trained if "trained" in r else True)
                 and r.name == name),
                None,
            )  # fmt: skip
            if r is None:
                continue
            held = chosen.get(name)
            if held is None or made_before(p, [r]) or not made_before(held[0], [r]):
                chosen[name] = (p, pr, r)
    return [checked(p, pr, r) for p, pr, r in chosen.values()]


def summary_lines(checked: Sequence[Checked]) -> list[str]:
    """Per placement kind and mode: the median |error| beside its count, and how many
    measured steps fall in their predicted interval."""
    lines = []
    for where in sorted({c.placement for c in checked}):
        for mode in multi_device_modes():
            mine = [c for c in checked if c.placement == where and c.mode == mode]
            if not mine:
                continue
            median = float(np.median([abs(c.error) for c in mine])) * 100
            inside = sum(c.inside for c in mine)
            lines.append(
                f"- {escape(_where(where))}, `{escape(mode)}`: median |error| {median:.0f} % "
                f"over {len(mine)} row(s); {inside} of {len(mine)} measured inside the "
                f"predicted interval ({said(mine)})."
            )
    return lines


def checked_table(checked: Sequence[Checked]) -> Grid:
    body = [
        (
            escape(c.name),
            escape(_where(c.placement)),
            escape(c.session.label if c.session else ""),
            Interval(c.predicted_s * 1e3, c.low_s * 1e3, c.high_s * 1e3),
            f"{c.measured_s * 1e3:.2f}",
            f"{c.error * 100:+.0f} %",
        )
        for c in checked
    ]
    return Grid(
        ("Row", "Placement", "Session", "Predicted (ms) [95% interval]", "Measured (ms)",
         "Error"),
        tuple(body),
    )  # fmt: skip


def probes_table(results: str | Path, machine: str) -> Grid | Text:
    """Every machine probe recorded for `machine` under `results`."""
    paths = sorted(Path(results).glob(f"**/{machine}/{PROBE_FOLDER}/*.json"))
    body = []
    for path in paths:
        p = Probe(records.read_json(path))
        one = {a.n_devices: a.latency_s for a in p.allreduce if a.size == 1}
        body.append((
            escape(p.finished),
            escape(Path(path).relative_to(results).as_posix()),
            escape(", ".join(f"{n}: {v * 1e6:.3g}" for n, v in sorted(one.items())) or "none"),
            f"{p.matmul[0].flops_per_s / 1e9:.3g}",
            f"{p.loop_iteration_s * 1e9:.3g}",
        ))  # fmt: skip
    if not body:
        return Text(
            "No machine probe recorded on this machine yet (every timing session runs one)."
        )
    return Grid(
        ("Finished", "Probe", "All-reduce of one float (devices: us)",
         "Matmul at 32x64 (GFLOP/s)", "Empty loop iteration (ns)"),
        tuple(body),
    )  # fmt: skip


def prediction_body(results: str | Path, machine: str) -> tuple[Text | Grid, ...]:
    """The page: the current rows checked, per placement and mode, then the probes."""
    recs = [r for r in read_records(results, "quick") if r.machine_id == machine]
    rows = scaling_rows(recs)
    checked = checked_rows(rows, row_predictions(results, machine))
    intro = (
        f"Machine {escape(machine)}. Each row of its quick matrix on several devices "
        "(one process, several processes, several nodes) against its prediction from the "
        "1-device row and this machine's `cpu` profile in place of a probe (`odestudy "
        "predict --rows --profile cpu`; on CPU devices it still times a device's "
        "neighbours on the devices predicted, and in one process the gradient all-reduce "
        "and a loop meeting). "
        + sessions.sessions_line([r for r in recs if r.ok], recs)
        + " A predicted interval covers the 1-device sweep's timing noise (its timed steps "
        "resampled) and the profile's stated range, not the model's own error: the errors "
        "below measure that."
    )
    return (
        Text(intro),
        Text("\n".join(summary_lines(checked) or ["No measured row has a prediction yet."])),
        *([checked_table(checked)] if checked else []),
        *own_problem_section(results, machine),
        *gpu_prediction_section(results),
        Text("## The machine probe of every session"),
        probes_table(results, machine),
        Text(""),  # the file ends with a blank line
    )


# `make own-predict` and `make own-rows`: the example problem written outside the package
# (examples/own_problem.py), its records under RESULTS/own (apart from the study's rows).
OWN_FOLDER = "own"


def own_problem_section(
    results: str | Path, machine: str, scale: str = "quick"
) -> list[Text | Grid]:
    """The section on a problem written outside the package: `machine`'s 2-device rows
    of the example against `predict --record`'s predictions, speedup against speedup,
    then each other machine's that checked it (a check is of one machine's sessions)."""
    root = Path(results) / OWN_FOLDER
    head = Text("## A problem written outside the package")
    every = _every_own_record(root, scale)
    others = sorted({str(r.machine_id) for r in every} - {machine})
    parts: list[Text | Grid] = []
    for m in [machine, *others]:
        recs = [r for r in every if r.machine_id == m]
        checked = _own_checked(recs, row_predictions(root, m))
        if checked:
            parts += [*([] if m == machine else [Text(f"### Machine {escape(m)}")]),
                      Text(own_said(checked, recs, scale)), own_table(checked)]  # fmt: skip
    if not parts:
        return [head, Text("No checked row of the example yet: `make own-predict`, then "
                           "`make own-rows`.")]  # fmt: skip
    return [head, *parts]


def _own_checked(recs: Sequence[Rec], found: Sequence[dict[str, Any]]) -> list[Checked]:
    """The example's 2-device rows against their predictions, session by session."""
    return [
        c for session in _by_session(recs) for c in checked_rows(scaling_rows(session), found)
        if c.predicted_speedup and c.measured_speedup
    ]  # fmt: skip


def _every_own_record(root: Path, scale: str) -> list[Rec]:
    """Every machine's records of the example under `root`, those measured again included."""
    folders = [root, *records.replaced_folders(root)]
    return [r for f in folders for r in read_records(f, scale, current=False)]


def _by_session(recs: Sequence[Rec]) -> list[list[Rec]]:
    """`recs` by session, in time order (a speedup joins rows of one session only), a
    scenario measured twice in one session by its newest record."""
    groups: dict[str, dict[Any, Rec]] = {}
    for r in sorted(recs, key=lambda r: str(r.finished or "")):  # undated: oldest
        groups.setdefault(r.session.label if r.session else "", {})[r.scenario_key] = r
    return [list(groups[k].values()) for k in sorted(groups)]


def _speedups(c: Checked) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """A checked row's predicted and measured speedups, each `(estimate, low, high)`."""
    assert c.predicted_speedup is not None and c.measured_speedup is not None
    return c.predicted_speedup, c.measured_speedup


def speedup_error(c: Checked) -> float:
    """The predicted speedup's relative error against the measured one."""
    predicted, measured = _speedups(c)
    return predicted[0] / measured[0] - 1


def _within_25(checked: Sequence[Checked]) -> int:
    """How many predicted speedups lie within 25 % of the measured one."""
    return sum(abs(speedup_error(c)) <= 0.25 for c in checked)


def _protocols_of(c: Checked) -> tuple[int, ...]:
    """The measurement protocols of a checked row's session (`timing.PROTOCOL`)."""
    return c.session.protocols if c.session else ()


def _row_medians_within_25(mine: Sequence[Checked]) -> int:
    """How many measured speedups lie within 25 % of their row's median over `mine`'s
    sessions: what a prediction of each row at that median, known only afterwards, hits."""
    by_row: dict[str, list[float]] = {}
    for c in mine:
        by_row.setdefault(str(c.name), []).append(_speedups(c)[1][0])
    return sum(abs(s / float(np.median(v)) - 1) <= 0.25 for v in by_row.values() for s in v)


def _model_said(model: Any, protocols: tuple[int, ...], mine: Sequence[Checked]) -> str:
    """One prediction model's rows of one measurement protocol: how many within 25 %,
    the measured speedup inside the predicted interval, the predicted inside the
    measured row's (its runs' spread: a miss there is the model's, not the row's noise),
    and the rows' own spread between sessions (`_row_medians_within_25`)."""
    pairs = [_speedups(c) for c in mine]
    covered = sum(pred[1] <= meas[0] <= pred[2] for pred, meas in pairs)
    within_row = sum(meas[1] <= pred[0] <= meas[2] for pred, meas in pairs)
    return (
        f"model {model}, {sessions.protocol_names(protocols)}: "
        f"{_within_25(mine)} of {len(mine)} within 25 %, "
        f"the measured speedup inside the predicted interval at {covered}, "
        f"the predicted speedup inside the measured row's interval at {within_row}, "
        f"each row's median over these sessions (known only afterwards) within 25 % of "
        f"its measured speedup at {_row_medians_within_25(mine)}"
    )


def own_said(checked: Sequence[Checked], recs: Sequence[Rec], scale: str = "quick") -> str:
    """What the example's check found: speedups within 25 %, and verdicts."""
    within = _within_25(checked)
    pairs = [(verdict_of(pred), verdict_of(meas)) for pred, meas in map(_speedups, checked)]
    same, opposite = verdict_counts(pairs)
    labels = sorted({c.session.label for c in checked if c.session})
    per_session = "; ".join(
        f"{label}: {_within_25(mine)} of {len(mine)}"
        for label in labels
        if (mine := [c for c in checked if c.session and c.session.label == label])
    )
    groups = sorted({(c.model, _protocols_of(c)) for c in checked}, key=str)
    by_model = "; ".join(
        _model_said(m, p, [c for c in checked if (c.model, _protocols_of(c)) == (m, p)])
        for m, p in groups
    )
    return (
        "`examples/own_problem.py` (a time-dependent field that is not a plain MLP, on "
        f"irregular grids), run as `examples.own_problem:PROBLEM` at the {escape(scale)} "
        "scale, PID, with the default step and the step its `odestudy tune` chose (`make "
        "own-predict`, `make own-rows`; records under `results/own/`). Each 2-device row "
        "against the speedup `odestudy "
        "predict --record` predicted from the trained 1-device row, over that row's step "
        f"(the same step on 1 device). {within} of {len(checked)} predicted speedups lie "
        f"within 25 % of the measured one; the verdict (pays, does not, or undecided where "
        f"the interval straddles 1) is the measured one at {same} of {len(checked)}, the "
        f"opposite at {opposite} ({said(checked)}). "
        + (f"Within 25 %, per session: {escape(per_session)}. " if per_session else "")
        + f"Per prediction model: {by_model}. "
        + sessions.sessions_line([r for r in recs if r.ok], recs)
    )


def own_table(checked: Sequence[Checked]) -> Grid:
    body = [
        (
            f"`{escape(c.mode)}`",
            escape(c.name),
            *(Interval(*v) for v in _speedups(c)),
            f"{speedup_error(c) * 100:+.0f} %",
            {True: "yes", False: "no", None: "unknown"}[c.before],
            escape(c.session.label if c.session else ""),
        )
        for c in sorted(checked, key=lambda c: (c.session.label if c.session else "", c.name))
    ]
    return Grid(
        ("Mode", "Row", "Predicted speedup [95%]", "Measured speedup [95%]", "Error",
         "Predicted before the row", "Session"),
        tuple(body),
    )  # fmt: skip


def gpu_prediction_section(results: str | Path) -> list[Text | Grid]:
    """The section on GPUs predicted from one: every machine's GPU predictions, unchecked."""
    found = records.every_machines(results, "predictions", "gpu-*.json")
    head = Text("## GPUs predicted from one")
    if not found:
        return [head, Text("No GPU prediction records (`benchmarks/gpu_session.sh predict`).")]
    body = []
    for path in found:
        rec = Predicted(records.read_json(path))
        for r in rec.rows:
            lo, hi = r.step_time_interval_s
            body.append(
                (
                    escape(path.parent.parent.name),
                    escape(rec.profile.name),
                    str(rec.n_devices),
                    escape(r.mode),
                    f"{rec.one_device_step_s * 1e3:.1f}",
                    Interval(r.step_time_s * 1e3, lo * 1e3, hi * 1e3, 1),
                    Interval(r.speedup, *r.speedup_interval),
                    "yes" if rec.trained else "no",
                    escape(path.stem),
                )
            )
    said = (
        "`odestudy predict --device gpu --devices N --profile h100-nvlink` on one GPU "
        "(the quick PID model, `benchmarks/gpu_session.sh predict`): the 1-device sweep "
        "measured on that GPU, the collective costs from the cited profile. One GPU's "
        "session per record (its probe in the record); no machine measured several GPUs "
        "under the current protocol, so these predictions are not checked."
    )
    header = ("Machine", "Profile", "GPUs", "Mode", "1 GPU measured (ms)", "Predicted step (ms)",
              "Predicted speedup", "Trained", "Record")  # fmt: skip
    return [head, Text(said), Grid(header, tuple(body))]


def prediction_table(results: str | Path, machine: str | None) -> Table:
    """The prediction's table (`prediction`) for `machine` (the report's CPU machine)."""
    body = prediction_body(results, machine) if machine else (Text("No CPU rows."),)
    return Table("prediction", "The prediction against measured rows, and the machine probes", body)


class Prediction(Study):
    """The prediction (`odestudy predict --rows`) checked against the measured rows, and
    the machine probes: no matrix scenarios (its runs are `odestudy predict`'s)."""

    name: ClassVar[str] = "prediction"
    order: ClassVar[int] = 9
    title: ClassVar[str] = "The prediction checked"
    page: ClassVar[Page | None] = Page(
        "prediction",
        "The prediction (`odestudy predict`) checked, and the machine probes",
        ("prediction",),
    )

    def scenarios(self, scale, device="auto", full=False):
        return [], []

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its table, for the CPU table's machine."""
        return [prediction_table(inputs.results, inputs.machines["cpu"])]
