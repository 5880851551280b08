"""What `odestudy predict` prints (`prediction_lines`), and the sample of it that
`docs/own_model.md` shows (`predict_sample`)."""

from pathlib import Path
from typing import Any

from ..measure.scenario import Scenario
from ..study import records
from .crossover import Crossing
from .tables import escape

# The example's predictions (`make own-predict`: examples/own_problem.py), any machine.
EXAMPLE = "own/*/predict/*-pexamples_own_problem_PROBLEM*.json"


def _head(out: dict[str, Any], target: Scenario) -> list[str]:
    """The placement, the profile and the 1-device step every speedup is over."""
    where = (
        f"{out['n_devices']} {target.device} devices"
        + (f" in {out['processes']} processes" if out["processes"] > 1 else "")
        + (f" on {out['nodes']} nodes" if out["nodes"] > 1 else "")
    )
    prof = out["profile"]
    lines = [
        f"{target.problem_object.name}, {target.controller}, global batch "
        f"{target.global_batch}, {where}, profile {prof['name']} ({prof['device']})"
        + (" (more than this machine's cores: overhead, not speedup)" if out["exceeds_cores"]
           else "")
    ]  # fmt: skip
    if prof["device"] != target.device:
        lines.append(
            f"  note: the compute terms are measured on {target.device} here, the collective "
            f"costs profiled for {prof['device']}: for {prof['device']} compute, run this on "
            f"one {prof['device']} device"
        )
    trained = "trained" if out["trained"] else f"NOT trained (above {out['trained_loss']:g})"
    lines.append(
        f"measured here: 1-device step of {out.get('step', 'the step')} "
        f"{out['one_device_step_s'] * 1e3:.3g} ms (final loss {out['final_loss']:.3g}, "
        f"{trained}): every speedup below is over it"
    )
    return lines


def _row(r: dict[str, Any], trained: bool) -> str:
    """One mode's predicted step, speedup and terms."""
    lo, hi = r["step_time_interval_s"]
    slo, shi = r["speedup_interval"]
    # A model that did not train gets step times, never a speedup.
    speedup = (
        f"speedup {r['speedup']:.2f}x [{slo:.2f}, {shi:.2f}]"
        + (": does not pay" if shi < 1 else "")
        if trained
        else "no speedup (not trained)"
    )
    parts = (
        f"its own program {r['compute_s'] * 1e3:.3g} ms, all-reduce inside"
        if r.get("own_program")  # model 16 on
        else f"compute {r['compute_s'] * 1e3:.3g} ms, all-reduce {r['allreduce_s'] * 1e3:.3g} "
        f"ms, in-loop {r['in_loop_s'] * 1e3:.3g} ms"
    )
    return (
        f"  {r['mode']:10s} predicted step {r['step_time_s'] * 1e3:8.3g} ms "
        f"[{lo * 1e3:.3g}, {hi * 1e3:.3g}], {speedup}  ({parts})"
    )


def crossover_lines(along: dict[str, Any]) -> list[str]:
    """Where each mode starts to pay along the predicted per-device batches."""
    lines = [f"where splitting starts to pay on {along['devices']} devices (strong scaling):"]
    for mode, found in along["modes"].items():
        said = Crossing(**found["batch"]).said("series per device")
        work = found.get("work_s")
        if work:
            e, lo, hi = (w * 1e3 for w in work)
            said += f", a per-device work of {e:.3g} ms per solver iteration [{lo:.3g}, {hi:.3g}]"
        speedups = ", ".join(
            f"{p['per_device_batch']}: {p['speedup']:.2f}x" for p in found["points"]
        )
        lines.append(f"  {mode:10s} {said}  ({speedups})")
    return lines


def prediction_lines(out: dict[str, Any], target: Scenario) -> list[str]:
    """The prediction `out` of `target` as the command's lines."""
    lines = [*_head(out, target), *(_row(r, out["trained"]) for r in out["rows"])]
    lines.append(
        f"  pmap is {out['pmap_implementation']} in this JAX: "
        + ("`pmap` and `shard_map` are one program here, predicted as one"
           if out["pmap_is_shard_map"]
           else "the legacy `pmap` runs apart; its own dispatch is not modelled")
    )  # fmt: skip
    if out["trained"] and out.get("crossover"):
        lines += crossover_lines(out["crossover"])
    lines.append("terms:")
    for t in out["terms"]:
        how = "measured" if t["measured"] else "profiled"
        value = f" {t['value_s'] * 1e6:.3g} us" if "value_s" in t else ""
        lines.append(f"  - {t['term']}{value}: {how}, {t['source']}")
    return [*lines, "assumptions:", *(f"  - {line}" for line in out["assumptions"])]


def predict_sample(results: str | Path) -> list[str]:
    """`docs/own_model.md`'s sample: the example's latest prediction of a tuned step, printed
    as the command printed it after a line naming its machine, time and commit."""
    found = [(p, records.read_json(p)) for p in sorted(Path(results).glob(EXAMPLE))]
    tuned = [(p, out) for p, out in found if Scenario.from_dict(out["scenario"]).step_tag()]
    if not tuned:
        return ["No prediction of the example yet: run `make own-predict`."]
    path, out = max(tuned, key=lambda po: (po[1].get("finished") or "", str(po[0])))
    target = Scenario.from_dict(out["scenario"])
    took = f", in {out['wall_time_s']:.0f} s" if out.get("wall_time_s") else ""
    head = (
        f"`odestudy predict --problem examples.own_problem:PROBLEM --scale "
        f"{escape(target.scale)} --devices {escape(out['n_devices'])} --record --step FILE` "
        f"on {escape(out.get('machine_id'))}, finished {escape(out.get('finished'))}{took}, "
        f"at {escape(str(out.get('git_commit'))[:7])} "
        f"(`{Path(path).relative_to(results).as_posix()}` under `results/`), printed:"
    )
    return [head, "", "```text", *prediction_lines(out, target), "```"]
