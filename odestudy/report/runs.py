"""Which runs of a record the report times: one quantity, the trained model's step.

A scenario's cold run trains from scratch and times its last stage while the model
still learns; its repeats time more steps from the trained state. Where a problem's
step cost changes while it trains (a flow whose solver takes more steps as it learns),
the two differ, and pooling them mixes two quantities. So wherever a record has
repeats, the report times **the trained model's step**: the repeats' steps alone, and
keeps the cold run's median apart (`cold_step_time_s`). `odestudy tune` and `odestudy
predict` time the trained state too (tests/test_rising_cost.py). A repeat carries its
steps' updates, as training does: for a trained model that moves its cost by nothing
measurable, but a model that did not train goes on learning in its repeats, and its
record says it did not train. A record of one run (the seed scale, a GPU row)
keeps its one run, said so as "one run" wherever it is used.

A run whose block the host contended (`measure.host.contended`) is left out where
others remain, and named in `contended_runs`.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..measure import host
from ..measure.timing import pooled
from ..study.rec import Rec


def trained_state(rec: Rec) -> Rec:
    """`rec` with its step times those of its trained-state, uncontended runs, the cold
    run's median apart and why each left-out run was contended; one run: unchanged."""
    runs = rec.get("step_times_runs_s") or []
    if len(runs) < 2 or any(not r for r in runs):
        return rec
    samples = list(rec.get("host_runs") or [None] * len(runs))
    samples += [None] * (len(runs) - len(samples))
    kept = list(range(1, len(runs)))
    why = {i: w for i in kept if (w := host.contended(samples[i]))}
    if len(why) < len(kept):
        kept = [i for i in kept if i not in why]
    else:
        why = {}
    rec.update(
        step_times_runs_s=[runs[i] for i in kept],
        **pooled([runs[i] for i in kept]),
        cold_step_time_s=float(np.median(runs[0])),
        contended_runs=[f"run {i + 1}: {w}" for i, w in sorted(why.items())],
    )
    return rec


def merged(recs: Sequence[Rec]) -> list[Rec]:
    """`recs` with the records of one scenario (one key) joined into one: the newest's
    fields, every record's runs (`step_times_runs_s`, as `trained_state` left them)
    pooled, so that a scenario measured twice in one session counts once with all its
    runs, never as the faster of two; it started when the first did (a prediction is
    held out from it only if made before all its runs), and `newest` is the last alone."""
    by: dict[Any, list[Rec]] = {}
    for r in recs:
        by.setdefault(r.scenario_key or id(r), []).append(r)
    out = []
    for found in by.values():
        if len(found) == 1:
            out.append(found[0])
            continue
        found = sorted(found, key=lambda r: str(r.started or ""))
        runs = [run for r in found for run in (r.step_times_runs_s or [])]
        joined = Rec(found[-1])
        joined.update(step_times_runs_s=runs, **pooled(runs), started=found[0].started)
        joined.newest = found[-1]
        out.append(joined)
    return out
