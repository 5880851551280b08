"""What `odestudy tune` prints (`tune_lines`), and the sample of it that
`docs/own_model.md` shows: the example problem's latest tune record, printed as the
command printed it, with where and when it ran (`tune_sample`)."""

from pathlib import Path
from typing import Any

from ..study import records
from .intervals import fmt_interval
from .tables import escape

# The example's tune records (`make own-loop`: examples/own_problem.py), any machine.
EXAMPLE = "*/tune/*-own_problem_PROBLEM-*.json"


def _row(r: dict[str, Any]) -> str:
    ms = f"{r['step_time_s'] * 1e3:7.2f}" if "step_time_s" in r else f"{'-':>7s}"
    ratio = fmt_interval(r.get("speedup"), *(r.get("speedup_ci") or (None, None)))
    loss = f"{r['check_loss']:9.3g}" if "check_loss" in r else f"{'-':>9s}"
    return f"{r['phase']:9s} {r['label'][:46]:46s} {ms}  {ratio:20s} {loss}  {r['verdict']}"


def tune_lines(out: dict[str, Any]) -> list[str]:
    """The table of what a tune (its step file, `out`) tried, and what it chose."""
    split = out.get("split") or {}
    lines = [f"{'phase':9s} {'step':46s} {'ms':>7s}  {'speedup [95%]':20s} {'loss':>9s}  verdict"]
    lines += [_row(r) for r in [*out["tried"], *split.get("rows", [])]]
    lo, hi = out["speedup_ci"]
    losses = out["losses"]
    if out["levers"]:
        lines.append(
            f"chosen: {', '.join(out['levers'])}: speedup {out['speedup']:.2f}x "
            f"[{lo:.2f}, {hi:.2f}] at equal loss ({losses['chosen_check']:.3g} against "
            f"the default's {losses['default_check']:.3g})"
        )
    else:
        lines.append("chosen: the default step (nothing measured was faster at equal loss)")
    if split:
        lines.append(f"split: {split['said']}")
    if not losses["trained_ok"]:
        lines.append(
            f"note: the default trained to {losses['trained']:.3g}, above "
            f"{losses['trained_loss']:g}: timings of an untrained model"
        )
    lines.append(f"wall time {out['wall_time_s']:.0f} s (training {out['train_time_s']:.0f} s)")
    return lines


def tune_sample(results: str | Path) -> list[str]:
    """`docs/own_model.md`'s sample: the example's latest tune (`EXAMPLE`) as the
    command printed it, after a line naming its machine, session and commit."""
    found = [(p, records.read_json(p)) for p in sorted(Path(results).glob(EXAMPLE))]
    latest = max(found, key=lambda pr: (pr[1].get("finished") or "", str(pr[0])), default=None)
    if latest is None:
        return ["No tune of the example yet: run `make own-loop`."]
    path, out = latest
    where = (out.get("hardware") or {}).get("cpu_model") or out.get("device")
    # Text from the record, outside the code block below, escaped (`tables.escape`).
    head = (
        f"`odestudy tune --problem own_problem:PROBLEM --scale {escape(out['scale'])}` on "
        f"{escape(out.get('machine_id'))} ({escape(where)}), {escape(out['started'])} to "
        f"{escape(out['finished'])}, at {escape(str(out.get('git_commit'))[:7])} "
        f"(`{Path(path).relative_to(results).as_posix()}` under `results/`), printed:"
    )
    return [head, "", "```text", *tune_lines(out), "```"]
