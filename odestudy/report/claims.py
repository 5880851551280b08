"""Claims as code: every sentence of the README and `docs/` that states a measured number
is written here, from the records. A claim computes its value and 95% interval, names
the machine and session it comes from, weakens its wording where the interval does not
support it ("not separable from one device"), flags a ratio of rows trained to
different losses, and says in how many of the sessions whose records answer the same
question it holds. Record text is escaped (`tables.escape`)."""

from collections.abc import Sequence
from typing import Any

from . import loss, sessions
from .frames import in_scaling_matrix, read_records, scaling_rows
from .tables import escape
from .verdict import compare, exceeds_cores

CONTROLLER_NAME = {"pid": "PID", "stepto": "StepTo"}
MODE_NAME = {"shard": "sharded `jit` (`shard`)"}


def _mode(mode: str) -> str:
    return MODE_NAME.get(mode, f"`{escape(mode)}`")


def _ctrl(controller: str) -> str:
    return CONTROLLER_NAME.get(controller, escape(controller))


def _x(row: dict[str, Any]) -> str:
    """`1.57x [1.49, 2.16]`, marked (`loss.MARK`) where the row and its 1-device
    baseline trained to different losses."""
    low, high = row["speedup_ci"]
    text = f"{row['speedup']:.2f}x [{low:.2f}, {high:.2f}]"
    return loss.mark(
        text, row.get("final_loss"), row.get("baseline_final_loss"), loss.limit_for(row)
    )


def judge(found: dict[str, Any]) -> dict[str, Any]:
    """The rows of one comparison (`verdict.compare`, fastest first) sorted into `use`
    (faster than one device within their interval), `avoid` (slower than one device
    within their interval) and `none` (not separable from one device); `separable`:
    whether a `use` row's interval misses the fastest's."""
    out: dict[str, Any] = {"use": [], "avoid": [], "none": [], "separable": False}
    close = [found["ranked"][0], *found["close"]] if found["ranked"] else []
    for r in found["ranked"]:
        low, high = r["speedup_ci"]
        if low > 1:
            out["use"].append(r)
            out["separable"] |= not any(r is c for c in close)
        elif high < 1:
            out["avoid"].append(r)
        else:
            out["none"].append(r)
    return out


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


def holds(
    session_rows: dict[Any, list[dict[str, Any]]],
    scaling: str,
    n: int,
    test: Any,
) -> tuple[int, int]:
    """In how many sessions of `session_rows` that have `scaling` rows on `n` devices
    the predicate `test(judged per controller)` holds: `(holds, answered)`."""
    yes = answered = 0
    for recs in session_rows.values():
        rows = scaling_rows(recs, scaling)
        per = {}
        for controller in sorted({r["controller"] for r in rows}):
            found = compare(rows, controller, scaling)
            if found["n"] == n:
                per[controller] = judge(found)
        if not per:
            continue
        answered += 1
        yes += bool(test(per))
    return yes, answered


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
    ok = [r for r in rows if r["status"] == "ok" and r["device"] == device]
    per = {}
    for controller in dict.fromkeys(r["controller"] for r in ok):
        found = compare(ok, controller, scaling)
        if found["n"] is not None:
            per[controller] = (found, judge(found))
    if not per:
        return []
    n = next(iter(per.values()))[0]["n"]
    where = {sessions.session_of(r) for r in ok if r["n_devices"] == n}
    label = "; ".join(sorted(escape(s.label) for s in where))
    what = "a fixed global batch" if scaling == "strong" else "a fixed per-device batch"
    by_session = groups(every, device)
    lines = []
    use = {c: [r["mode"] for r in j["use"]] for c, (_, j) in per.items()}
    # The modes faster than one device with every controller; others are listed.
    modes = [m for m in next(iter(use.values())) if all(m in ms for ms in use.values())]
    if modes:
        shown = "; ".join(
            f"{_ctrl(c)} " + ", ".join(f"{_mode(r['mode'])} {_x(r)}" for r in j["use"])
            for c, (_, j) in per.items()
            if j["use"]
        )
        apart = ""
        if len(modes) > 1:
            apart = (
                " (fastest first; the intervals separate them)"
                if any(j["separable"] for _, j in per.values())
                else " (not separable from each other)"
            )
        k, m = holds(
            by_session,
            scaling,
            n,
            lambda p: all(
                mode in [r["mode"] for r in p[c]["use"]] for c in use for mode in modes if c in p
            ),
        )
        lines.append(
            f"- **Use {' or '.join(_mode(x) for x in modes)}**{apart}: faster than one "
            f"device within their 95% intervals on {escape(n)} devices at {what} (every "
            f"mode that is, per controller: {shown}). "
            f"Measured on {label}; holds in {k} of {m} sessions with such rows."
        )
    for c, (_, j) in per.items():
        for r in j["avoid"]:
            k, m = holds(
                by_session,
                scaling,
                n,
                lambda p, c=c, mode=r["mode"]: (
                    c in p and mode in [x["mode"] for x in p[c]["avoid"]]
                ),
            )
            lines.append(
                f"- **Avoid {_mode(r['mode'])} with {_ctrl(c)}**: {_x(r)} of one device's "
                f"speed{_why(r)}. Measured on {label}; holds in {k} of {m} sessions."
            )
        for r in j["none"]:
            lines.append(
                f"- {_mode(r['mode'])} with {_ctrl(c)} gains nothing measurable: {_x(r)}, "
                f"not separable from one device. Measured on {label}."
            )
    beyond = sorted({r["n_devices"] for r in ok if exceeds_cores(r)})
    if beyond:
        lines.append(
            f"- Rows with more virtual devices than physical cores "
            f"({escape(', '.join(map(str, beyond)))} devices) "
            "measure overhead and are left out of this answer."
        )
    if any(loss.MARK in line for line in lines):
        lines.append(f"- {loss.NOTE}")
    return lines


def scale_claims(
    results: str, scale: str, rows: Sequence[dict[str, Any]], scaling: str = "strong"
) -> list[str]:
    """`verdict_claims` of `rows` per device kind against every ok scaling record of
    `scale` under `results` (each session of each machine); a device kind without
    multi-device rows gets one line saying so."""
    every = [r for r in read_records(results, scale, current=True) if r["status"] == "ok"]
    lines = []
    for device in ("cpu", "gpu"):
        found = verdict_claims(rows, every, scaling, device)
        name = device.upper()
        if found:
            lines += [f"**{name}**", "", *found, ""]
        else:
            lines += [
                f"**{name}**: no multi-device {name} row of the current protocol at the "
                f"{escape(scale)} scale.",
                "",
            ]
    return lines
