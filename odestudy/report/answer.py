"""The README's answer, short enough to read in two minutes: per device kind and
controller, each mode's speedup over the best 1-device step (`best.py`), and when
splitting the batch pays (`crossover.py`); every number from the records, with its
interval, machine and session."""

import dataclasses
import os
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..measure.controllers import CONTROLLERS
from ..measure.modes import MODES
from ..study import records
from ..study.claim import Claim, Verdict
from ..study.rec import Rec, Sweep
from . import sessions
from .best import Best, best_for, best_steps, family_key, levers_in_words, step_of
from .claims import groups
from .comparisons import BEST_STEP, REFERENCE_STEP, ratio_claim, render_x
from .crossover import by_session, points_of, work_crossing
from .frames import scaling_rows
from .gpu import gpu_predictions
from .intervals import ratio_interval
from .loss import MARGIN, MARK, MIN_SEEDS, differs, trained
from .replication import MIN_SESSIONS, Replicated, replicate, sessions_said
from .runs import merged
from .tables import escape, markdown_table
from .verdict import exceeds_cores, one_run

# The scale whose answer the README gives (`pages.update_readme`).
README_SCALE = "quick"

# The mode the answer states the crossover of: one solver loop per device, one
# collective per step (the mode that pays first on the map).
CROSSOVER_MODE = "shard_map"


def _x(p: tuple[float, float, float]) -> str:
    return f"{p[0]:.2f}x [{p[1]:.2f}, {p[2]:.2f}]"


def _on_best(rows: Sequence[Rec], best: Best, n: int) -> list[Rec]:
    """The one-process rows on `n` devices that run the best step, fastest first."""
    found = [
        r
        for r in rows
        if r.n_devices == n
        and (r.processes or 1) == 1
        and r.speedup_best_ci
        and step_of(r) == best.step
    ]
    return sorted(found, key=lambda r: -(r.speedup_best or 0.0))  # every one is set


def _over_best(r: Rec) -> tuple[float, float, float]:
    """`r`'s speedup over the best 1-device step, with its interval."""
    assert r.speedup_best is not None and r.speedup_best_ci is not None
    return (r.speedup_best, *r.speedup_best_ci)


# Where the README's answer states its claims (`Claim.where`).
README_WHERE = "the README's answer"


@dataclasses.dataclass(frozen=True)
class ControllerAnswer:
    """One controller's part of the README's answer: each mode's claim over the best
    1-device step (`modes`, fastest first; `rows` in step), the fastest's over the
    reference's step (or None), and each mode's claim over sessions (`over_sessions`)."""

    controller: str
    best: Best
    n: int
    batch: int
    modes: tuple[Claim, ...]
    reference: Claim | None
    one_run: bool
    rows: tuple[Rec, ...] = ()
    over_sessions: tuple[Replicated | None, ...] = ()
    refused: tuple[str, ...] = ()

    def judged(self) -> list[tuple[Claim, Replicated | None]]:
        """Each mode's claim beside its claim over sessions (None where not made)."""
        return list(zip(self.modes, self.over_sessions or [None] * len(self.modes), strict=True))


# Per session, oldest first: its own answer per controller (`session_answers`).
PerSession = list[tuple[Any, dict[str, ControllerAnswer]]]


def controller_answer(rows: Sequence[Rec], controller: str) -> ControllerAnswer | None:
    """One controller's answer on the most devices within the cores, or None."""
    mine = [r for r in rows if r.controller == controller and r.scaling == "strong"]
    n = max((r.n_devices for r in mine if r.n_devices > 1 and not exceeds_cores(r)), default=None)
    ones = [r for r in mine if r.n_devices == 1 and r.ok]
    best = best_for(ones[0], best_steps(ones), "strong") if ones else None
    if n is None or best is None:
        return None
    found = _on_best(mine, best, n)
    if not found:
        return None
    modes = tuple(
        ratio_claim(r, best.record, BEST_STEP, _over_best(r), README_WHERE,
                    bool(r.best_differs))
        for r in found
    )  # fmt: skip
    top, default, reference = found[0], best.default, None
    if default is not None and default is not best.record and trained(default):
        over = ratio_interval(default, top)
        reference = ratio_claim(
            top, default, REFERENCE_STEP, over, README_WHERE, differs(top, default)
        )
    return ControllerAnswer(
        controller, best, n, top.global_batch // n, modes, reference, one_run(top), tuple(found),
        refused=_refused(ones, best),
    )  # fmt: skip


def _refused(ones: Sequence[Rec], best: Best) -> tuple[str, ...]:
    """The trained steps of `best`'s family faster on one device that the loss rule
    refused as the base case (not shown to train as well as the default step)."""
    family = family_key(best.record, int(best.record.global_batch))
    faster = {
        step_of(r)
        for r in ones
        if family_key(r, int(r.global_batch)) == family
        and trained(r)
        and (r.step_time_s or 0.0) < best.step_s
        and r not in best.candidates
    }
    return tuple(sorted(faster))


# The modes whose claims the README's bullets list session by session, the mode JAX keeps
# first: those with a solver loop per device (`AbstractMode.one_loop` false); the others
# are summed up in a range of their values.
LEAD_MODES = tuple(
    sorted(
        (name for name, m in MODES.items() if m.multi_device and not m.one_loop),
        key=lambda name: name != CROSSOVER_MODE,
    )
)


def _base_said(a: ControllerAnswer) -> str:
    """The best 1-device step, its levers and its time (a range over sessions)."""
    times = sorted({s.base_s for r in a.over_sessions if r for s in r.sessions})
    words = a.best.words()
    plain = words == levers_in_words({"scenario": {}}, short=True)  # no lever: in words
    levers = words if plain else ", ".join(f"`{escape(w)}`" for w in words.split(", "))
    if len(times) > 1:
        return f"{escape(a.best.step)} ({levers}), {times[0] * 1e3:.3g}–{times[-1] * 1e3:.3g} ms"
    return f"{escape(a.best.said())} ({levers})"


def _span(values: Sequence[float]) -> str:
    """The range of `values` to two decimals, one number where both ends read alike."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low}–{high}"


def _judged(c: Claim, r: Replicated | None) -> str:
    """A claim's verdict with its sessions: `pays (3 sessions: 1.4–1.9x)`, or `not judged
    (1 session; 3 needed)`."""
    if r is None:
        return verdict_words(c.verdict)
    if c.verdict is Verdict.FEW_SESSIONS:
        return f"not judged ({sessions_said(r)}; {MIN_SESSIONS} needed)"
    return f"{verdict_words(c.verdict)} ({sessions_said(r)})"


def render_controller(a: ControllerAnswer) -> str:
    """`a` as one bullet."""
    lead = [(c, r) for c, r in a.judged() if c.comparison.mode in LEAD_MODES]
    rest = [c for c in a.modes if c.comparison.mode not in LEAD_MODES]
    modes = "; ".join(
        f"`{escape(c.comparison.mode)}` {render_x(c)} {_judged(c, r)}" for c, r in lead
    )
    if rest:
        names = " and ".join(f"`{escape(c.comparison.mode)}`" for c in rest)
        modes += f"; {names} {_span([c.value for c in rest])}x"
    text = (
        f"- **{escape(a.controller)}**, over the best 1-device step, {_base_said(a)}: "
        f"{modes}" + (" (one run)" if a.one_run else "") + "."
    )
    if a.refused:
        text += (
            f" Faster on one device but not shown to train as well ({MIN_SEEDS} paired "
            f"seeds, margin {MARGIN:.0%}): {escape(', '.join(a.refused))}."
        )
    return text


def session_table(answers: Sequence[ControllerAnswer]) -> list[str]:
    """The quick page's lines on each session's ratio behind the answer's claims."""
    body = [
        [escape(a.controller), escape(c.comparison.mode), escape(s.when),
         f"{s.base_s * 1e3:.3g}", _x((s.value, *s.interval)), s.verdict.value,
         escape("; ".join(s.left_out)) or "none"]
        for a in answers
        for c, r in a.judged()
        if r is not None
        for s in r.sessions
    ]  # fmt: skip
    if not body:
        return []
    lines = [
        "**Each session's ratio** (its row over its own best 1-device step, within that session):",
        "",
        markdown_table(
            (
                "Controller",
                "Mode",
                "Session",
                "Best 1-device step (ms)",
                "Speedup [95%, within the session]",
                "Its verdict",
                "Runs left out (host contended)",
            ),
            body,
        ),  # fmt: skip
        "",
    ]
    for a in answers:
        for c, r in a.judged():
            if r is not None and r.held_out is not None and r.before is not None:
                newest = r.sessions[-1]
                lines += [
                    f"Held out in time ({escape(a.controller)}, `{escape(c.comparison.mode)}`): "
                    f"the newest session ({escape(newest.when)}) read {newest.value:.2f}x, "
                    f"{'inside' if r.held_out else 'outside'} the interval the sessions "
                    f"before it gave, [{r.before[0]:.2f}, {r.before[1]:.2f}].",
                    "",
                ]
        if a.reference is not None and a.best.default is not None:
            lines += [
                f"Over the reference's step ({escape(a.controller)}, the default step on one "
                f"device, {a.best.default['step_time_s'] * 1e3:.3g} ms, "
                f"{escape(sessions.session_of(a.best.default).label)}): "
                f"`{escape(a.reference.comparison.mode)}` {render_x(a.reference)}.",
                "",
            ]
    return lines


def verdict_words(v: Verdict) -> str:
    """What a claim's verdict says of splitting."""
    return {
        Verdict.FASTER: "pays",
        Verdict.SLOWER: "does not pay",
        Verdict.FEW_SESSIONS: f"not judged (fewer than {MIN_SESSIONS} sessions)",
        Verdict.ONE_RUN: "not judged (one run)",
    }.get(v, "not separable")


def controller_answers(
    rows: Sequence[Rec],
    device: str = "cpu",
    every: Sequence[Rec] = (),
) -> tuple[ControllerAnswer, ...]:
    """Each controller's answer for one device kind; with `every`, made over its sessions."""
    answers = tuple(_answers([r for r in rows if r.device == device and r.ok]).values())
    if not every:
        return answers
    judged = session_answers(every, device)
    return tuple(over_sessions(a, judged) for a in answers)


def session_answers(every: Sequence[Rec], device: str) -> PerSession:
    """Per session of `every`, oldest first: its own answer per controller."""
    found = groups(every, device)
    oldest_first = sorted(found, key=lambda s: s.start.isoformat() if s.start else "")
    return [(s, _answers(scaling_rows(merged(found[s])))) for s in oldest_first]


def _answers(rows: Sequence[Rec]) -> dict[str, ControllerAnswer]:
    """Each controller's answer that `rows` give."""
    return {c: a for c in CONTROLLERS if (a := controller_answer(rows, c)) is not None}


def session_pairs(claim: Claim, controller: str, judged: PerSession) -> list[tuple[str, Rec, Rec]]:
    """`(when, base, row)` of each session that measured `claim`'s comparison, over its own
    best 1-device step of the same levers."""
    c = claim.comparison
    pairs = []
    for session, answers in judged:
        a = answers.get(controller)
        if a is None or (a.n, a.best.step, session.machine) != (c.devices, c.step, c.machine):
            continue
        row = next((r for r in a.rows if r.mode == c.mode), None)
        if row is not None:
            pairs.append((session.when, a.best.record, row))
    return pairs


def over_sessions(a: ControllerAnswer, judged: PerSession) -> ControllerAnswer:
    """`a` with each mode's claim made over the sessions that measured it, by value."""
    made: list[tuple[Claim, Replicated | None]] = []
    for claim in a.modes:
        found = replicate(session_pairs(claim, a.controller, judged))
        if found is not None:
            claim = dataclasses.replace(
                claim,
                value=found.value,
                interval=found.interval,
                verdict=found.verdict,
                sessions=tuple(s.when for s in found.sessions),
            )
        made.append((claim, found))
    made.sort(key=lambda m: -m[0].value)
    return dataclasses.replace(
        a, modes=tuple(c for c, _ in made), over_sessions=tuple(r for _, r in made)
    )


def readme_claims(answers: Sequence[ControllerAnswer]) -> list[Claim]:
    """Every claim of the README's answer (`controller_answers`)."""
    return [c for a in answers for c in (*a.modes, a.reference) if c is not None]


def quick_lines(
    rows: Sequence[Rec],
    device: str,
    answers: Sequence[ControllerAnswer] | None = None,
) -> list[str]:
    """The answer's bullets for one device kind, or why there are none."""
    answers = controller_answers(rows, device) if answers is None else answers
    lines = [render_controller(a) for a in answers]
    name = device.upper()
    if not lines:
        return [f"**{name}**: no multi-device {name} row of the best step measured here yet.", ""]
    machines = sorted({escape(a.best.record.machine_id) for a in answers})
    whens = sorted(
        {s.when for a in answers for r in a.over_sessions if r for s in r.sessions},
    ) or sorted({sessions.session_of(a.best.record).when for a in answers})
    span = whens[0][:16] + (f" to {whens[-1][:16]} UTC" if len(whens) > 1 else " UTC")
    return [
        f"**{name}** on {', '.join(machines)}, strong scaling, {len(whens)} session(s) from "
        f"{escape(span)}"
        + ("; intervals hold a new session's ratio." if len(whens) >= MIN_SESSIONS else "."),
        "",
        *lines,
        "",
    ]


def _pmap_said(rows: Sequence[Rec]) -> str:
    """How this JAX runs `pmap`, as the newest record says."""
    found = sorted(
        (r for r in rows if r.get("pmap_implementation")),
        key=lambda r: str(r.started or ""),
    )
    return str(found[-1]["pmap_implementation"]) if found else "its own program"


def in_short(answers: Sequence[ControllerAnswer]) -> str:
    """The CPU answer in one sentence: per controller, what to do by the claim of the mode
    JAX keeps (`LEAD_MODES[0]`), and how many sessions agree on their own."""
    said = []
    for a in answers:
        lead = [(c, r) for c, r in a.judged() if c.comparison.mode in LEAD_MODES]
        if not lead:
            continue
        c, r = min(lead, key=lambda cr: LEAD_MODES.index(cr[0].comparison.mode))
        agree = ""
        if r is not None and c.verdict is not Verdict.FEW_SESSIONS:
            alike = sum(s.verdict is c.verdict for s in r.sessions)
            agree = f"; {alike} of {len(r.sessions)} sessions agree on their own"
        mode = f"`{escape(c.comparison.mode)}`"
        do = {
            Verdict.FASTER: f"split the batch with {mode}",
            Verdict.SLOWER: "keep one device",
            Verdict.FEW_SESSIONS: f"{mode} is {verdict_words(c.verdict)}",
        }.get(c.verdict, f"{mode} is {verdict_words(c.verdict)}: one device does as well")
        over = (
            " over the default step, a faster one not shown to train as well" if a.refused else ""
        )
        said.append(f"with {escape(a.controller)}, {do} ({render_x(c)}{over}{agree})")
    if not answers:
        return "**In short, CPU**: no multi-device CPU row of the best step measured yet."
    a = answers[0]
    cores = a.best.record.hardware.physical_cores
    rest = [c for x in answers for c in x.modes if c.comparison.mode not in LEAD_MODES]
    slow = ""
    if rest:
        names = " and ".join(sorted({f"`{escape(c.comparison.mode)}`" for c in rest}))
        slow = f" {names}: {_span([c.value for c in rest])}x of it."
    return (
        f"**In short, CPU** ({a.n} virtual devices on {escape(cores)} cores, {a.batch} series "
        "per device, against the best 1-device step): " + "; ".join(said) + "." + slow
    )


def crossover_lines(results: str | Path) -> list[str]:
    """`CROSSOVER_MODE`'s crossover in the per-device work, per controller and session."""
    found = by_session(points_of(results, "quick")[1])
    said = []
    for controller in CONTROLLERS:
        per = [
            work.said("ms")
            for _, pts in found
            if (work := work_crossing(pts, controller, CROSSOVER_MODE)) is not None
        ]
        if per:
            said.append(f"{escape(controller)}, {len(per)} sessions: " + "; ".join(per))
    if not said:
        return ["**When splitting pays**: not measured yet (`make map`, `make crossover`).", ""]
    return [
        f"**When splitting pays** (`{CROSSOVER_MODE}`, the map's workloads, 2 CPU devices; "
        "*work*: the best 1-device step's time per solver iteration at the per-device "
        "batch; each session fitted alone, oldest first"
        + _older([s for s, _ in found])
        + "): "
        + ". ".join(said)
        + ".",
        "",
    ]


def _older(found: Sequence[sessions.Session]) -> str:
    """`; measurement protocol 2 (now 3)` where a session of `found` is of an older one."""
    text = sessions.older_than_now(p for s in found for p in s.protocols)
    return f"; {text}" if text else ""


def gpu_lines(results: str | Path) -> list[str]:
    """The GPU answer: the best step's one-GPU bound where swept, else the predictions."""
    head = "**In short, GPU**: no multi-GPU row is measured yet."
    best = [s for s in gpu_sweeps(results) if s.label == "recommended"]
    if best and (line := best_bound(best[0], 4)):
        return [f"{head} {line}", ""]
    found = sorted(
        (p for p in gpu_predictions(results, README_SCALE) if p.trained and p.rows),
        key=lambda p: (p.fields.controller, p.n_devices),
    )
    if not found:
        return [head, ""]
    p0 = found[0]
    parts = "; ".join(
        f"{p.n_devices} GPUs "
        + _x(next((r.speedup, *r.speedup_interval) for r in p.rows
                  if r.mode == CROSSOVER_MODE))
        + f" over {p.one_device_step_s * 1e3:.3g} ms"
        for p in found
        if any(r.mode == CROSSOVER_MODE for r in p.rows)
    )  # fmt: skip
    return [
        f"{head} `odestudy predict` (`{escape(p0.profile.name)}`), from a one-GPU sweep of "
        f"{escape(step_of(Rec(scenario=p0.scenario)))} on {escape(p0.machine)}, global "
        f"batch {escape(p0.fields.batch)}, predicts `{CROSSOVER_MODE}` {parts}.",
        "",
    ]


def gpu_sweeps(results: str | Path) -> list[Sweep]:
    """The one-GPU step-cost sweeps under `results`, each with its `machine` and `path`."""
    found = []
    for path, read in records.readable(records.every_machines(results, "step_cost", "gpu-*.json")):
        sweep = Sweep(read, path=str(path), machine=path.parent.parent.name)
        if sweep.rows and sweep.label in ("default", "recommended"):
            found.append(sweep)
    return found


def ideal_speedups(sweep: dict[str, Any], n: int) -> list[tuple[int, float]]:
    """What `n` devices could give at most at each per-device batch `b`: one device's step
    at `n * b` over its step at `b` (no communication or lock-step waste: a bound)."""
    steps = {int(r.batch): float(r.step_time_s) for r in Sweep(sweep).rows}
    return [(b, steps[n * b] / steps[b]) for b in sorted(steps) if n * b in steps]


def _bounds(sweep: Sweep, n: int) -> tuple[list[tuple[int, float]], str] | None:
    """`ideal_speedups` on `n` GPUs and `N GPUs at most low–high at b0–b1 series per GPU`,
    each end with its interval over the sweep's timed steps; None under two batches."""
    found = ideal_speedups(sweep, n)
    if len(found) < 2:
        return None
    rows = {int(r.batch): r for r in sweep.rows}

    def bound(b: int) -> str:
        wide, narrow = ({"step_times_runs_s": [rows[k].step_times_s or [rows[k].step_time_s]]}
                        for k in (n * b, b))  # fmt: skip
        return _x(ratio_interval(wide, narrow))

    low = bound(min(found, key=lambda f: f[1])[0])
    high = bound(max(found, key=lambda f: f[1])[0])
    return found, f"{n} GPUs at most {low}–{high} at {found[0][0]}–{found[-1][0]} series per GPU"


def best_bound(sweep: Sweep, n: int) -> str | None:
    """`_bounds` of the best step's one-GPU sweep, over its step at the same global batch."""
    if (bounds := _bounds(sweep, n)) is None:
        return None
    found, said = bounds
    rows = {int(r.batch): r for r in sweep.rows}
    over = [rows[n * b].step_time_s * 1e3 for b, _ in found]
    when = escape(sweep.started[:10]) if sweep.started else "its session not recorded"
    return (
        f"The best step's one-GPU sweep ({escape(sweep.fields.controller)}, "
        f"{escape(sweep.machine)}, one sweep, {when}) bounds {said}, over one GPU's "
        f"step at the same global batch ({min(over):.3g}–{max(over):.3g} ms): no "
        "communication counted, a bound, not a prediction."
    )


def gpu_bound_line(results: str | Path) -> list[str]:
    """Per GPU sweep, the range of `ideal_speedups` on the device counts it allows."""
    parts, machines = [], set()
    for sweep in gpu_sweeps(results):
        for n in (2, 4, 8):
            if (bounds := _bounds(sweep, n)) is not None:
                label = f"{escape(sweep.fields.controller)}, {escape(sweep.label)} step"
                parts.append(f"{label}: {bounds[1]}")
                machines.add(escape(sweep.machine))
    if not parts:
        return []
    return [
        "Splitting on GPUs is bounded by one GPU's own step at N times the batch over its "
        "step at the batch (a bound, not a measurement: no communication counted; one "
        "sweep each on "
        f"{', '.join(sorted(machines))}): " + "; ".join(parts) + ".",
        "",
    ]


def readme_answer(
    results: str | Path,
    rows: Sequence[Rec],
    figure: Path,
    base: Path,
    answers: Sequence[ControllerAnswer],
) -> list[str]:
    """The README's answer as markdown lines, `figure` linked relative to `base`."""
    lines = [
        in_short(answers),
        "",
        "*Your own model*: `odestudy tune`, then `odestudy predict` ([how](docs/own_model.md)).",
        "",
        "*Session*: one machine's measurements with no gap over an hour. *Not "
        "separable*: the interval holds 1. *Best 1-device step*: the fastest measured "
        "1-device step training a model not worse than the default step's (the "
        f"*reference's step*). Intervals 95%; {MARK}: rows trained to different losses. "
        f"`pmap` runs here as {escape(_pmap_said(rows))}.",
        "",
        *quick_lines(rows, "cpu", answers),
        *crossover_lines(results),
    ]
    if figure.exists():
        rel = Path(os.path.relpath(figure.resolve(), base.resolve())).as_posix()
        lines += [f"![Speedup over the best 1-device step against per-device work]({rel})", ""]
    found = lines + gpu_lines(results)
    return [w for line in found for w in wrapped(line)]


# Lines of the generated answer are wrapped to this width (a bullet's continuation
# indented), so that the README reads in a terminal and no line runs on.
WIDTH = 100
# What opens a markdown list item where it starts a line.
LIST_MARKER = r"\d+[.)]|[-+*]"


def wrapped(line: str) -> list[str]:
    """`line` wrapped to `WIDTH` (an image or a blank line kept whole)."""
    if not line or line.startswith("!["):
        return [line]
    indent = "  " if line.startswith("- ") else ""
    lines: list[str] = []
    for piece in textwrap.wrap(
        line, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    ):
        head, _, rest = piece.strip().partition(" ")
        if lines and rest and re.fullmatch(LIST_MARKER, head):
            lines[-1] += " " + head  # a line opening `1. ` would render as a list
            piece = indent + rest
        lines.append(piece)
    return lines
