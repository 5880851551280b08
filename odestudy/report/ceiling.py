"""The machine's weak-scaling ceiling in the tables: its interval, the ceiling record
that goes with a scenario record, and a mode's efficiency against it (the runs are made
by `study.ceiling`)."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..measure.scenario import Scenario
from ..study import records
from ..study.rec import Ceiling, Fields, Rec
from ..study.records import ceiling_path
from .intervals import bootstrap_medians, central, ratio_interval, step_time_runs


def ceiling_interval(rec: Ceiling, seed: int = 0) -> dict[str, Any]:
    """The ceiling `t(alone) / t(paired)` of a ceiling record and `t(one_core) /
    t(alone)`, each `(estimate, low, high)` with a 95% hierarchical bootstrap interval
    (`intervals`; each process's phase is one run)."""
    ok = [r for r in rec.runs if r.status == "ok"]

    def as_record(phase: str) -> Rec:
        runs = [t for r in ok for t in r.get(phase, [])]
        return Rec(
            step_times_runs_s=runs,
            step_time_s=float(np.median(np.concatenate(runs))) if runs else None,
        )

    if not ok:
        return {"runs": 0}
    alone, paired, one = (as_record(p) for p in ("alone", "paired", "one_core"))
    return {
        "runs": len(ok),
        "ceiling": ratio_interval(alone, paired, seed=seed),
        "one_core_vs_alone": ratio_interval(one, alone, seed=seed),
        "alone_s": alone.step_time_s,
        "paired_s": paired.step_time_s,
        "one_core_s": one.step_time_s,
    }


def ceiling_for(record: Mapping[str, Any]) -> Ceiling | None:
    """The ceiling record that goes with 1-device scenario record `record` (read from
    its `path`'s scale folder): same controller and step (`Scenario.step_tag`),
    machine, package versions, protocol and measurement environment, made on the
    1-device record that is there now (the same cold run: `probe_run_id`); None where
    there is none."""
    rec = Rec(record)  # a copy `claims.related_records` makes is a plain dict
    if not rec.path:
        return None
    step = _step(rec.fields)
    folder = Path(rec.path).parent.parent
    path = ceiling_path(folder, rec.get("controller", ""), step)
    read = records.read_or(path)
    if read is None:
        return None
    ceiling = Ceiling(read)
    keys = ("machine_id", "versions", "protocol", "measurement_env")
    if any(ceiling.get(k) != rec.get(k) for k in keys) or _step(ceiling.fields) != step:
        return None
    if "probe_run_id" in ceiling:  # ceilings before it was recorded: not checked
        probe = folder / ceiling.get("name", "") / records.RECORD_NAME
        if Rec(records.read_or(probe, {}, records.read_record)).run_id != ceiling.probe_run_id:
            return None
    return ceiling


def _step(scenario: Fields) -> str:
    """The lever tags of a record's step (`""`: the default step, or no scenario)."""
    return Scenario.from_dict(scenario).step_tag() if scenario else ""


def efficiency_against_ceiling(
    base: dict[str, Any], rec: dict[str, Any], ceiling: Ceiling, seed: int = 0
) -> tuple[float, float, float] | None:
    """A weak-scaling row's efficiency `t(base) / t(rec)` divided by the machine's
    ceiling `t(alone) / t(paired)`: 1 means as good as two independent trainings side by
    side. `(estimate, low, high)` with a 95% interval, both ratios bootstrapped
    independently (`intervals.bootstrap_medians`); None without ceiling runs."""
    ok = [r for r in ceiling.runs if r.status == "ok"]
    alone = [np.asarray(t, float) for r in ok for t in r.alone or []]
    paired = [np.asarray(t, float) for r in ok for t in r.paired or []]
    if not alone or not paired:
        return None
    b, r = step_time_runs(base), step_time_runs(rec)

    def med(runs: list[np.ndarray]) -> float:
        return float(np.median(np.concatenate(runs)))

    estimate = (med(b) / med(r)) / (med(alone) / med(paired))
    rng = np.random.default_rng(seed)
    samples = (bootstrap_medians(b, rng) / bootstrap_medians(r, rng)) / (
        bootstrap_medians(alone, rng) / bootstrap_medians(paired, rng)
    )
    return estimate, *central(samples)
