"""Claims as code: every sentence of the README and `docs/` that states a measured number
is written here, from the records. A claim computes its value and 95% interval, names
the machine and session it comes from, weakens its wording where the interval does not
support it ("not separable from one device"), flags a ratio of rows trained to
different losses, and says in how many of the sessions whose records answer the same
question it holds. Record text is escaped (`tables.escape`)."""

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..measure.controllers import CONTROLLERS
from ..measure.modes import MODES
from ..study.studies import Claim
from ..study.workloads import MAP_FOLDER
from . import loss, sessions
from .frames import in_scaling_matrix, read_records, scaling_rows
from .tables import escape
from .verdict import ONE_RUN, compare, exceeds_cores, one_run


def _mode(mode: str) -> str:
    """A mode as the answer names it: its class's `label`, else its name as code."""
    found = MODES.get(mode)
    return found.label if found is not None else f"`{escape(mode)}`"


def _ctrl(controller: str) -> str:
    """A controller as the answer names it: its class's `label`, else its name."""
    found = CONTROLLERS.get(controller)
    return found.label if found is not None else escape(controller)


def _x(row: dict[str, Any]) -> str:
    """`1.57x [1.49, 2.16]`, marked (`loss.MARK`) where the row and its 1-device
    baseline trained to different losses."""
    low, high = row["speedup_ci"]
    text = f"{row['speedup']:.2f}x [{low:.2f}, {high:.2f}]"
    return loss.baseline_flag(text, row)


def judge(found: dict[str, Any]) -> dict[str, Any]:
    """The rows of one comparison (`verdict.compare`, fastest first) sorted into `use`
    (faster than one device within their interval), `avoid` (slower than one device
    within their interval), `none` (not separable from one device) and `one_run` (timed
    in one run: its interval backs no verdict, `verdict.one_run`); `separable`: whether a
    `use` row's interval misses the fastest's."""
    out: dict[str, Any] = {"use": [], "avoid": [], "none": [], "one_run": [], "separable": False}
    close = [found["ranked"][0], *found["close"]] if found["ranked"] else []
    for r in found["ranked"]:
        low, high = r["speedup_ci"]
        if one_run(r):
            out["one_run"].append(r)
        elif low > 1:
            out["use"].append(r)
            out["separable"] |= not any(r is c for c in close)
        elif high < 1:
            out["avoid"].append(r)
        else:
            out["none"].append(r)
    return out


def _apart(per: dict[str, Any]) -> str:
    """Whether the intervals separate the modes faster than one device, per controller
    where the controllers differ: `(not separable from each other)`, `(fastest first;
    the intervals separate them)`, or which controller separates them."""
    seps = {c: j["separable"] for c, (_, j) in per.items() if j["use"]}
    if not any(seps.values()):
        return " (not separable from each other)"
    if all(seps.values()):
        return " (fastest first; the intervals separate them)"
    said = ", ".join(
        f"{'separated' if sep else 'not separable'} with {_ctrl(c)}" for c, sep in seps.items()
    )
    return f" (fastest first; {said})"


def _why(slow: dict[str, Any]) -> str:
    loops = slow.get("collectives_in_loops")
    if loops:
        return f": {escape(loops)} collective(s) inside its solver loops"
    return ""


def groups(rows: Sequence[dict[str, Any]], device: str = "cpu") -> dict[Any, list[dict[str, Any]]]:
    """`rows` (ok records of the scaling matrix) by session, of one device kind."""
    out: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        if r["device"] == device and r["status"] == "ok" and in_scaling_matrix(r):
            out.setdefault(sessions.session_of(r), []).append(r)
    return out


def judged_sessions(
    session_rows: dict[Any, list[dict[str, Any]]], scaling: str, n: int
) -> dict[Any, dict[str, dict[str, Any]]]:
    """Each session of `session_rows` with `scaling` rows on `n` devices: its judgement
    (`judge`) per controller it holds such rows of (timed in more than one run)."""
    out = {}
    for session, recs in session_rows.items():
        rows = scaling_rows(recs, scaling)
        per = {}
        for controller in sorted({r["controller"] for r in rows}):
            found = compare(rows, controller, scaling)
            judged = judge(found) if found["n"] == n else None
            if judged and len(judged["one_run"]) < len(found["ranked"]):
                per[controller] = judged
        if per:
            out[session] = per
    return out


def holds(
    session_rows: dict[Any, list[dict[str, Any]]],
    scaling: str,
    n: int,
    test: Any,
) -> tuple[int, int]:
    """In how many sessions of `session_rows` that hold rows of the comparison the
    predicate `test(judged per controller)` holds: `(holds, answered)`. `test` gives
    None for a session without rows of its comparison (another controller's only, say),
    which is not counted: "k of n" counts only sessions that could answer."""
    yes = answered = 0
    for per in judged_sessions(session_rows, scaling, n).values():
        verdict = test(per)
        if verdict is None:
            continue
        answered += 1
        yes += bool(verdict)
    return yes, answered


# How a session judged one mode, in words (`judge`'s kinds).
SAID = {"use": "faster", "avoid": "slower", "none": "not separable", "one_run": "one run"}


def dissent(
    session_rows: dict[Any, list[dict[str, Any]]],
    scaling: str,
    n: int,
    c: str,
    mode: str,
    kind: str,
) -> str:
    """The sessions whose judgement of `mode` under controller `c` is not `kind`, by
    what they found: `; slower in 1 (2026-11-24 18:51–20:03 UTC)`, or "" where none
    differs."""
    found: dict[str, list[str]] = {}
    for session, per in judged_sessions(session_rows, scaling, n).items():
        other = next((k for k in SAID if c in per and mode in _modes(per[c][k])), None)
        if other is not None and other != kind:
            found.setdefault(SAID[other], []).append(escape(session.when))
    return "".join(
        f"; {what} in {len(when)} ({', '.join(sorted(when))})" for what, when in found.items()
    )


def _modes(rows: Sequence[dict[str, Any]]) -> list[str]:
    return [r["mode"] for r in rows]


@dataclasses.dataclass(frozen=True)
class Answer:
    """What one machine and session's scaling rows answer (`answer`): per controller
    its comparison and judgement, the device count, where measured (`label`), what is
    held fixed (`what`), and every session's rows (`by_session`) to count in."""

    per: dict[str, tuple[dict[str, Any], dict[str, Any]]]
    n: int
    label: str
    what: str
    scaling: str
    by_session: dict[Any, list[dict[str, Any]]]

    def holds(self, test: Any) -> tuple[int, int]:
        """`holds` of `test` over every session's rows on this answer's devices."""
        return holds(self.by_session, self.scaling, self.n, test)

    def said(self, kind: str, c: str, mode: str) -> str:
        """`holds in k of n sessions with such rows` for `mode` being of `kind` under `c`,
        with the sessions that found otherwise (`dissent`)."""
        k, m = self.holds(_in(kind, c, mode))
        other = dissent(self.by_session, self.scaling, self.n, c, mode, kind)
        return f"holds in {k} of {m} sessions with such rows{other}"


def answer(
    rows: Sequence[dict[str, Any]], every: Sequence[dict[str, Any]], scaling: str, device: str
) -> Answer | None:
    """Select: the comparisons of `rows` (one machine and session) per controller, None
    where no controller has multi-device rows."""
    ok = [r for r in rows if r["status"] == "ok" and r["device"] == device]
    per = {}
    for controller in dict.fromkeys(r["controller"] for r in ok):
        found = compare(ok, controller, scaling)
        if found["n"] is not None:
            per[controller] = (found, judge(found))
    if not per:
        return None
    n = next(iter(per.values()))[0]["n"]
    where = {sessions.session_of(r) for r in ok if r["n_devices"] == n}
    return Answer(
        per=per,
        n=n,
        label="; ".join(sorted(escape(s.label) for s in where)),
        what="a fixed global batch" if scaling == "strong" else "a fixed per-device batch",
        scaling=scaling,
        by_session=groups(every, device),
    )


def _use(a: Answer) -> list[str]:
    """The bullet naming the modes faster than one device with every controller."""
    use = {c: [r["mode"] for r in j["use"]] for c, (_, j) in a.per.items()}
    modes = [m for m in next(iter(use.values())) if all(m in ms for ms in use.values())]
    if not modes:
        return []
    shown = "; ".join(
        f"{_ctrl(c)} " + ", ".join(f"{_mode(r['mode'])} {_x(r)}" for r in j["use"])
        for c, (_, j) in a.per.items()
        if j["use"]
    )
    apart = _apart(a.per) if len(modes) > 1 else ""

    def test(p: dict[str, Any]) -> bool | None:
        present = [c for c in use if c in p]  # a session without them does not answer
        if not present:
            return None
        return all(mode in _modes(p[c]["use"]) for c in present for mode in modes)

    k, m = a.holds(test)
    return [
        f"- **Use {' or '.join(_mode(x) for x in modes)}**{apart}: faster than one "
        f"device within their 95% intervals on {escape(a.n)} devices at {a.what} (every "
        f"mode that is, per controller: {shown}). "
        f"Measured on {a.label}; holds in {k} of {m} sessions with such rows."
    ]


def _in(kind: str, c: str, mode: str) -> Any:
    """A test of one session's judgement: `mode` is among its `kind` rows of `c`; None
    where the session holds no row of `mode` under `c` (it does not answer)."""

    def test(p: dict[str, Any]) -> bool | None:
        if c not in p or not any(mode in _modes(p[c][k]) for k in SAID):
            return None
        return mode in _modes(p[c][kind])

    return test


def _avoid_and_level(a: Answer) -> list[str]:
    """A bullet per mode slower than one device, and per mode not separable from it."""
    lines = []
    for c, (_, j) in a.per.items():
        for r in j["avoid"]:
            lines.append(
                f"- **Avoid {_mode(r['mode'])} with {_ctrl(c)}**: {_x(r)} of one device's "
                f"speed{_why(r)}. Measured on {a.label}; {a.said('avoid', c, r['mode'])}."
            )
        for r in j["none"]:
            lines.append(
                f"- {_mode(r['mode'])} with {_ctrl(c)} gains nothing measurable: {_x(r)}, "
                f"not separable from one device. Measured on {a.label}; "
                f"{a.said('none', c, r['mode'])}."
            )
    return lines


def _one_run(a: Answer) -> list[str]:
    """The bullet listing rows timed in one run, which back no verdict."""
    single = {c: j["one_run"] for c, (_, j) in a.per.items() if j["one_run"]}
    if not single:
        return []
    shown = "; ".join(
        f"{_ctrl(c)} " + ", ".join(f"{_mode(r['mode'])} {_x(r)}" for r in rs)
        for c, rs in single.items()
    )
    return [
        f"- One run each on {escape(a.n)} devices at {a.what} ({shown}): {ONE_RUN}, so "
        f"these rows call no mode faster or slower than one device, nor separate two "
        f"modes. Measured on {a.label}."
    ]


def verdict_claims(
    rows: Sequence[dict[str, Any]],
    every: Sequence[dict[str, Any]],
    scaling: str = "strong",
    device: str = "cpu",
) -> list[str]:
    """The answer in plain words, as markdown bullets, from the scaling rows of one
    machine and session (`rows`, `frames.scaling_rows`): which mode to use and which
    to avoid, per controller, with intervals and the measured reason, the machine and
    session named; each says in how many sessions of `every` (ok records of the same
    scale, every machine) that answer it, it holds."""
    found = answer(rows, every, scaling, device)
    if found is None:
        return []
    lines = _use(found) + _avoid_and_level(found) + _one_run(found)
    ok = [r for r in rows if r["status"] == "ok" and r["device"] == device]
    beyond = sorted({r["n_devices"] for r in ok if exceeds_cores(r)})
    if beyond:
        lines.append(
            f"- Rows with more virtual devices than physical cores "
            f"({escape(', '.join(map(str, beyond)))} devices) "
            "measure overhead and are left out of this answer."
        )
    lines += [f"- {n}" for n in loss.notes("\n".join(lines))]
    return lines


def answer_claims(
    results: str | Path, scale: str, rows: Sequence[dict[str, Any]], scaling: str = "strong"
) -> list[Claim]:
    """The answer per device kind (`Claim`): `verdict_claims` of `rows` against every ok
    scaling record of `scale` under `results` (each session of each machine, and the
    records that repeat them elsewhere, `related_records`); a device kind without
    multi-device rows says so."""
    every = [r for r in read_records(results, scale, current=True) if r["status"] == "ok"]
    every += related_records(results, scale, every)
    out = []
    for device in ("cpu", "gpu"):
        found = verdict_claims(rows, every, scaling, device)
        name = device.upper()
        missing = (
            f"no multi-device {name} row of the current protocol at the {escape(scale)} scale."
        )
        out.append(Claim(device, tuple(found), "" if found else missing))
    return out


def render_claims(claims: Sequence[Claim]) -> list[str]:
    """`claims` as markdown lines: per device kind its name in bold, then its bullets,
    or its name and why it has none."""
    lines = []
    for claim in claims:
        name = claim.device.upper()
        if claim.bullets:
            lines += [f"**{name}**", "", *claim.bullets, ""]
        else:
            lines += [f"**{name}**: {claim.missing}", ""]
    return lines


def scale_claims(
    results: str | Path, scale: str, rows: Sequence[dict[str, Any]], scaling: str = "strong"
) -> list[str]:
    """The answer of `scale` as markdown lines: `render_claims(answer_claims(...))`."""
    return render_claims(answer_claims(results, scale, rows, scaling))


def related_records(
    results: str | Path, scale: str, rows: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The ok records of the workload map's and the version study's folders under
    `results` that repeat a scenario of `rows` (its key) under the same protocol and JAX
    release: the sessions a claim counts besides the scale's own."""
    same = {(r.get("scenario_key"), r.get("protocol"), _jax(r)) for r in rows}
    folders = [Path(results) / MAP_FOLDER]
    versions = Path(results) / "versions"
    folders += sorted(p for p in versions.iterdir() if p.is_dir()) if versions.is_dir() else []
    out = []
    for folder in folders:
        for r in read_records(folder, scale, current=False):
            if r["status"] == "ok" and (r.get("scenario_key"), r.get("protocol"), _jax(r)) in same:
                out.append({**r, "source": folder.name})
    return out


def _jax(rec: dict[str, Any]) -> str | None:
    return (rec.get("versions") or {}).get("jax")


def _source(rec: dict[str, Any]) -> str:
    return str(rec.get("source") or rec.get("scale"))


def probe_said(probe: dict[str, Any] | None, n: int) -> str:
    """What a session's machine probe measured, in words (the all-reduce of one float on
    `n` devices, the matmul rate at a step's shape, an empty loop iteration), or that
    the session ran none."""
    if not probe:
        return "no probe (measured before sessions ran one)"
    latency = next(
        (a["latency_s"] for a in probe.get("allreduce", [])
         if a["n_devices"] == n and a["size"] == 1),
        None,
    )  # fmt: skip
    small = (probe.get("matmul") or [{}])[0]
    said = f"all-reduce of one float on {n} devices {latency * 1e6:.3g} us" if latency else ""
    return (
        (said + "; " if said else "")
        + f"matmul {small.get('flops_per_s', 0) / 1e9:.3g} GFLOP/s at "
        f"{small.get('batch')}x{small.get('width')}; empty loop iteration "
        f"{probe.get('loop_iteration_s', 0) * 1e9:.3g} ns"
    )


def across_sessions(
    every: Sequence[dict[str, Any]],
    mode: str = "shard",
    controller: str = "pid",
    n: int = 2,
    device: str = "cpu",
) -> list[str]:
    """One row (`mode`, `controller`, `n` devices, strong scaling) in every session that
    holds it and its 1-device baseline: its speedup with interval, where the session's
    records come from (the scale, the map, a version set), what the session's probe
    measured, and the in-loop collective cost the probe's latency gives (collectives in
    its loops x solver iterations x latency) against its measured step."""
    lines = []
    for session, recs in sorted(groups(every, device).items(), key=lambda kv: kv[0].label):
        rows = scaling_rows(recs, "strong")
        row = next(
            (r for r in rows if r["mode"] == mode and r["controller"] == controller
             and r["n_devices"] == n and r.get("processes", 1) == 1
             and r.get("speedup_ci")),
            None,
        )  # fmt: skip
        if row is None:
            continue
        probe = row.get("probe")
        runs = " (one run)" if one_run(row) else ""
        line = f"- {escape(session.label)} ({escape(_source(row))}): {_x(row)}{runs}; " + escape(
            probe_said(probe, n)
        )
        latency = next(
            (a["latency_s"] for a in (probe or {}).get("allreduce", [])
             if a["n_devices"] == n and a["size"] == 1),
            None,
        )  # fmt: skip
        steps = (row.get("solver_steps") or {}).get("executed_per_device")
        loops = row.get("collectives_in_loops")
        if latency and steps and loops:
            cost = loops * steps * latency
            line += (
                f"; in-loop collectives at that latency: {escape(loops)} x {steps:.0f} "
                f"iterations x {latency * 1e6:.3g} us = {cost * 1e3:.3g} ms of its "
                f"{row['step_time_s'] * 1e3:.3g} ms step"
            )
        lines.append(line + ".")
    if not lines:
        return []
    head = (
        f"**{_mode(mode)} with {_ctrl(controller)} on {n} devices, session by session** "
        f"(every session holding the row and its 1-device baseline, {len(lines)} in all; "
        "speedup over one device with its 95% interval; the probe is the machine probe "
        "run at the session's start):"
    )
    return [head, "", *lines, ""]
