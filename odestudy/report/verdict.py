"""The report's answer first: which way of splitting the batch over devices trains fastest,
and the measured reason the slowest is slow, written from the scaling rows
(`frames.scaling_rows`) alone. Every number and name comes from a row and goes through
`tables.escape`: records are data, not markup."""

from collections.abc import Sequence
from typing import NamedTuple

from ..study.rec import Rec
from ..study.studies import Block, Text
from . import loss, sessions
from .best import DEFAULT_STEP
from .tables import escape, fmt, render_blocks

SCALINGS = {
    "strong": ("fixed global batch (strong scaling)", "step-time speedup"),
    "weak": ("fixed per-device batch (weak scaling)", "throughput speedup"),
}
# Lock-step waste (1 - mean / max solver steps) must exceed the fastest mode's by this
# much to be named as the reason a mode is slow.
WASTE_MARGIN = 0.02


def unequal_loss(row: Rec) -> str | None:
    """A note where `row` and its 1-device baseline trained to different losses
    (`loss.differs`: its speedup then compares different models); else None."""
    a, b = row.final_loss, row.baseline_final_loss
    if not loss.differs(row, b):
        return None
    return (
        f"trained to final loss {escape(fmt(a))} against one device's {escape(fmt(b))}, "
        f"more than {escape(f'{loss.limit_for(row):.2g}')}x apart: not the same model "
        f"{loss.MARK}"
    )


def one_run(row: Rec) -> bool:
    """Whether `row` or its 1-device baseline was timed in one run only (seed-scale and
    GPU rows): its interval then holds the spread of steps within that run, not the
    run-to-run spread, and backs no verdict ("one run", never "separate")."""
    runs = len(row.step_time_runs_s or [])
    base = row.baseline_runs
    return runs <= 1 or (base is not None and base <= 1)


ONE_RUN = (
    "one run: its interval holds only the spread of steps within that run and backs no verdict"
)


def exceeds_cores(row: Rec) -> bool:
    """Whether `row` runs more virtual CPU devices than physical cores (a † row: it
    measures overhead, not parallel speedup); the row's own `exceeds_cores` first."""
    if row.exceeds_cores is not None:
        return bool(row.exceeds_cores)
    cores = row.hardware.physical_cores or 0
    return row.device == "cpu" and bool(cores) and row.n_devices > cores


def support(row: Rec) -> str:
    """What the 95% interval of `row`'s speedup supports against one device."""
    low, high = row.speedup_ci or (None, None)
    if low is None or high is None:
        return "without an interval"
    if one_run(row):
        return ONE_RUN
    if low > 1 or high < 1:
        return f"{'faster' if low > 1 else 'slower'} than one device within its 95% interval"
    return "no faster than one device within its interval"


def _speedup(row: Rec, flagged: bool = True) -> str:
    """`1.30× [1.18, 1.47]`, flagged where the row and its baseline trained to different
    losses (unless `flagged` is false: a sentence that says so in words)."""
    low, high = row.speedup_ci or (None, None)
    text = f"{row.speedup:.2f}×"
    if low is not None and high is not None:
        text += f" [{low:.2f}, {high:.2f}]"
    return loss.baseline_flag(escape(text), row) if flagged else escape(text)


def _label(row: Rec) -> str:
    """The mode of `row`, bold, with its process layout where it has several."""
    text = f"**{escape(row.mode)}**"
    if (row.processes or 1) > 1:
        text += f" ({escape(row.processes)} processes)"
    return text


def _waste(row: Rec) -> float | None:
    """Lock-step waste, 1 - mean / max solver steps: the share of executed solver
    iterations that only wait for the batch's slowest sample."""
    high, mean = row.solver_steps.max, row.solver_steps.mean
    if not high or mean is None:
        return None
    return 1 - mean / high


def reason(slow: Rec, fast: Rec) -> str:
    """The measured reason `slow` is slower than `fast`: collectives inside the solver
    loops, else lock-step waste (solver steps max against mean), else overhead."""
    loops, fast_loops = slow.collectives_in_loops, fast.collectives_in_loops
    steps = slow.solver_steps
    if loops and loops > (fast_loops or 0):
        return (
            f"it runs {escape(fmt(loops))} collective(s) inside its solver loops "
            f"({_label(fast)}: {escape(fmt(fast_loops or 0))})"
        )
    waste, fast_waste = _waste(slow), _waste(fast)
    if waste is not None and fast_waste is not None and waste - fast_waste > WASTE_MARGIN:
        return (
            f"lock-step waste: its batched loops run {escape(fmt(steps.max, 3))} solver "
            f"steps per sample against a mean of {escape(fmt(steps.mean, 3))} "
            f"({escape(f'{waste:.0%}')} of iterations wait, against "
            f"{escape(f'{fast_waste:.0%}')} for {_label(fast)})"
        )
    return (
        "overhead: it has no more collectives inside its solver loops "
        f"({escape(fmt(loops))}) and no more lock-step waste (solver steps max / mean "
        f"{escape(fmt(steps.max, 3))} / {escape(fmt(steps.mean, 3))}) "
        f"than {_label(fast)}"
    )


def _overlaps(a: Rec, b: Rec) -> bool:
    assert a.speedup_ci is not None and b.speedup_ci is not None
    (alo, ahi), (blo, bhi) = a.speedup_ci, b.speedup_ci
    return alo <= bhi and blo <= ahi


class Compared(NamedTuple):
    """The device count `n` (None without rows), the rows there fastest first, those whose
    interval overlaps the fastest's (`close`), and whether every row is beyond the cores."""

    n: int | None
    ranked: list[Rec]
    close: list[Rec]
    beyond: bool


def compare(
    rows: Sequence[Rec], controller: str, scaling: str, step: str = DEFAULT_STEP
) -> Compared:
    """The multi-device rows of `controller`, `scaling` and `step` at the largest device
    count within the physical cores (one process where there are such rows)."""
    sel = [
        r
        for r in rows
        if (r.step or DEFAULT_STEP, r.controller, r.scaling) == (step, controller, scaling)
        and r.ok
        and r.n_devices > 1
        and r.speedup is not None
        and r.speedup_ci
    ]
    inside = [r for r in sel if not exceeds_cores(r)]
    if not inside:
        return Compared(None, [], [], bool(sel))
    n = max(r.n_devices for r in inside)
    at = [r for r in inside if r.n_devices == n]
    at = [r for r in at if (r.processes or 1) == 1] or at
    ranked = sorted(at, key=lambda r: -(r.speedup or 0.0))  # every speedup is set
    close = [r for r in ranked[1:] if _overlaps(ranked[0], r)]
    return Compared(n, ranked, close, False)


def group_sentence(found: Compared, controller: str, scaling: str) -> str | None:
    """`compare`'s result as a bullet: the fastest mode, and the slowest with its reason."""
    what, metric = SCALINGS[scaling]
    head = f"- **{escape(controller)}, {what}**"
    if found.n is None:
        if found.beyond:
            return (
                f"{head}: every multi-device row has more virtual devices than physical "
                "cores (†): they measure overhead, not parallel speedup."
            )
        return None
    ranked, close = found.ranked, found.close
    fast, slow = ranked[0], ranked[-1]
    single = any(one_run(r) for r in ranked)
    text = (
        f"{head}, {escape(found.n)} devices{' (one run each)' if single else ''}: "
        f"fastest {'measured ' if single else ''}{_label(fast)}, {metric} "
        f"{_speedup(fast, False)} over one device, {support(fast)}"
    )
    if note := unequal_loss(fast):
        text += f" (but {note})"
    if single and len(ranked) > 2:
        text += "; the others: " + ", ".join(f"{_label(r)} ({_speedup(r)})" for r in ranked[1:-1])
    elif close:
        text += "; the data do not separate them from " + ", ".join(
            f"{_label(r)} ({_speedup(r)})" for r in close
        )
    text += "."
    if slow is fast:
        return text
    text += f" Slowest {'measured ' if single else ''}{_label(slow)}, {_speedup(slow, False)}"
    if not single:
        text += f", {support(slow)}"
    if note := unequal_loss(slow):
        text += f" ({note})"
    if not single and _overlaps(fast, slow):
        return text + "; within the fastest's interval."
    return text + f"; measured reason: {reason(slow, fast)}."


def _count(k: int, word: str) -> str:
    """`1 row is`, `4 rows are`."""
    return f"{escape(k)} {word}{' is' if k == 1 else 's are'}"


def _why(rows: Sequence[Rec]) -> str:
    """`not_run: needs 2 GPU(s), 0 present`: the statuses of `rows` and their errors."""
    by_status: dict[str, set[str]] = {}
    for r in rows:
        by_status.setdefault(str(r.status), set()).add(str(r.error or ""))
    return "; ".join(
        escape(status)
        + (f": {escape('; '.join(sorted(e for e in errors if e)))}" if any(errors) else "")
        for status, errors in sorted(by_status.items())
    )


def device_verdict(rows: Sequence[Rec], device: str, scale: str | None) -> list[Block]:
    """The verdict's lines for one device kind."""
    sel = [r for r in rows if r.device == device]
    name = escape(device.upper())
    at_scale = f" at the {escape(scale)} scale" if scale else ""
    ok = [r for r in sel if r.ok]
    if not ok:
        if not sel:
            return [Text(f"**{name}: no {name} rows{at_scale}.**")]
        return [
            Text(
                f"**{name}: no {name} measurements{at_scale}.** The matrix's "
                f"{_count(len(sel), f'{name} row')} {_why(sel)}."
            )
        ]
    cores = next((r.hardware.physical_cores for r in ok if r.hardware), None)
    machines = sorted({escape(r.machine_id) for r in ok})
    where = f"machine {', '.join(machines)}"
    if device == "cpu" and cores:
        where += f", {escape(cores)} physical cores"
    labels = sorted({sessions.session_of(r).label for r in ok})
    where += f"; session{'s' if len(labels) > 1 else ''} {escape('; '.join(labels))}"
    controllers = list(dict.fromkeys(r.controller for r in ok))
    groups = [
        (compare(ok, controller, scaling), controller, scaling)
        for scaling in SCALINGS
        for controller in controllers
    ]
    bullets = [line for g in groups if (line := group_sentence(*g))]
    if not bullets:
        many = [r for r in sel if r.n_devices > 1]
        bullets.append(
            f"- No multi-device {name} measurement{at_scale}, only 1-device rows"
            + (f": the {_count(len(many), 'multi-device row')} {_why(many)}." if many else ".")
        )
    lines: list[Block] = [Text(f"**{name}** ({where}):"), Text("\n".join(bullets))]
    beyond = sorted({r.n_devices for r in ok if exceeds_cores(r)})
    if beyond:
        lines.append(
            Text(
                f"Rows with more virtual devices than the {escape(cores)} physical cores (†: "
                f"{escape(', '.join(map(str, beyond)))} devices) are left out of this "
                "verdict: they measure overhead, not parallel speedup."
            )
        )
    return lines


def verdict_body(rows: Sequence[Rec], scale: str) -> list[Block]:
    """The verdict from the report's scaling rows (`group_sentence` per comparison)."""
    body = [b for device in ("cpu", "gpu") for b in device_verdict(rows, device, scale)]
    body.append(
        Text(
            "Speedup: the 1-device median step time over the mode's (weak scaling: x "
            "devices), both with the default step (the reference's); against the best "
            "1-device step: the README and `docs/results/crossover.md`."
        )
    )
    return body + [Text(n) for n in loss.notes(render_blocks(body))]
