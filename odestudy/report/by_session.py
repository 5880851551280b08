"""One row in every session that holds it: the `shard` PID row on 2 devices over its
1-device row, session by session (`session_rows`), each with where its records come
from, what the session's machine probe measured and the in-loop collective cost that
probe gives (`render_sessions`)."""

from collections.abc import Sequence
from typing import Any

from ..study.claim import Verdict
from ..study.rec import Matmul, Probe, Rec
from .claims import controller_label, groups, mode_label
from .comparisons import own_claim, render_x
from .frames import scaling_rows
from .tables import escape


def _one_float(probe: Probe, n: int) -> float | None:
    """The probe's latency of an all-reduce of one float on `n` devices, if timed."""
    return next((a.latency_s for a in probe.allreduce if a.n_devices == n and a.size == 1), None)


def probe_said(probe: dict[str, Any] | None, n: int) -> str:
    """What a session's machine probe measured, in words (the all-reduce of one float on
    `n` devices, the matmul rate at a step's shape, an empty loop iteration), or that
    the session ran none."""
    if not probe:
        return "no probe (measured before sessions ran one)"
    found = Probe(probe)
    latency = _one_float(found, n)
    small = (found.matmul or [Matmul()])[0]
    said = f"all-reduce of one float on {n} devices {latency * 1e6:.3g} us" if latency else ""
    return (
        (said + "; " if said else "") + f"matmul {(small.flops_per_s or 0) / 1e9:.3g} GFLOP/s at "
        f"{small.batch}x{small.width}; empty loop iteration "
        f"{(found.loop_iteration_s or 0) * 1e9:.3g} ns"
    )


# Where the session-by-session claims are stated (`Claim.where`).
SESSIONS_WHERE = "session by session"


def session_rows(
    every: Sequence[Rec],
    mode: str = "shard",
    controller: str = "pid",
    n: int = 2,
    device: str = "cpu",
) -> list[tuple[Any, Rec]]:
    """One row (`mode`, `controller`, `n` devices, one process, strong scaling) in every
    session of `every` that holds it and its 1-device baseline, with its session, by
    the session's label."""
    out = []
    for session, recs in sorted(groups(every, device).items(), key=lambda kv: kv[0].label):
        row = next(
            (r for r in scaling_rows(recs, "strong") if r.mode == mode
             and r.controller == controller and r.n_devices == n
             and (r.processes or 1) == 1 and r.speedup_ci),
            None,
        )  # fmt: skip
        if row is not None:
            out.append((session, row))
    return out


def _collective_cost(row: Rec, n: int) -> str:
    """`; in-loop collectives at that latency: ...`: collectives in its loops x solver
    iterations x the probe's all-reduce latency, against its step; "" where unknown."""
    latency = _one_float(Probe(row.probe or {}), n)
    steps = row.solver_steps.executed_per_device
    loops = row.collectives_in_loops
    if not (latency and steps and loops):
        return ""
    cost = loops * steps * latency
    return (
        f"; in-loop collectives at that latency: {escape(loops)} x {steps:.0f} "
        f"iterations x {latency * 1e6:.3g} us = {cost * 1e3:.3g} ms of its "
        f"{(row.step_time_s or 0) * 1e3:.3g} ms step"
    )


def render_sessions(
    found: Sequence[tuple[Any, Rec]], mode: str, controller: str, n: int
) -> list[str]:
    """One line per session of a row found in each (`session_rows`): its claim, where its
    records come from, its probe (`probe_said`) and in-loop collective cost."""
    lines = []
    for session, row in found:
        claim = own_claim(row, SESSIONS_WHERE)
        runs = " (one run)" if claim.verdict is Verdict.ONE_RUN else ""
        source = escape(str(row.source or row.scale))
        line = f"- {escape(session.label)} ({source}): {render_x(claim)}{runs}; "
        line += escape(probe_said(row.probe, n)) + _collective_cost(row, n)
        lines.append(line + ".")
    if not lines:
        return []
    head = (
        f"**{mode_label(mode)} with {controller_label(controller)} on {n} devices, session by "
        f"session** (every session holding the row and its 1-device baseline, {len(lines)} in "
        "all; speedup over one device with its 95% interval; the probe is the machine probe run "
        "at the session's start):"
    )
    return [head, "", *lines, ""]
