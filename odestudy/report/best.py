"""The base case of every multi-device speedup: the best measured 1-device step that trains
the same model, with its absolute time (a speedup over a slower serial step overstates
what splitting the batch gives: Bailey 1991; Hoefler and Belli 2015, rule 1).

Records form families: the same problem, training, controller, device kind, batch,
machine, versions, protocol and measurement environment (every scenario field but the
placement and the step's levers, `Scenario.levers`). A family's best 1-device step is its
fastest ok 1-device record that trained and whose final loss is not worse than the
family's default-step 1-device record's (`loss.worse`, one-sided); where no default-step
record is there, the fastest that trained. Every speedup over it names it and its time
(`Best.said`); the speedup over the default step stays beside it, labelled as over the
reference's step.
"""

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..measure.lever import LEVERS, Facts
from ..measure.recommended import recommended
from ..measure.scenario import Scenario
from ..study.rec import Rec
from .intervals import ratio_interval
from .loss import differs, paired_verdict, trained, worse

# A row's placement over devices: what a multi-device row and its 1-device base differ in.
PLACEMENT = ("mode", "devices_per_process", "processes", "nodes", "scaling", "batch")

DEFAULT_STEP = "the default step"
RECOMMENDED_STEP = "the recommended step"


def step_of(rec: Mapping[str, Any]) -> str:
    """Which step a record timed: `RECOMMENDED_STEP` where its scenario is its own
    recommended form (`recommended.recommended`), `DEFAULT_STEP` where every lever is at
    its default, else the levers it sets (`a=b, ...`). Computed once per scenario."""
    return _step_of(json.dumps(rec["scenario"], sort_keys=True, default=str))


@functools.lru_cache(maxsize=4096)
def _step_of(scenario: str) -> str:
    s = Scenario.from_dict(json.loads(scenario))
    if s.default_step() == s:
        return DEFAULT_STEP
    if recommended(s) == s:
        return RECOMMENDED_STEP
    return ", ".join(f"{k}={getattr(s, k)}" for k in s.levers() if getattr(s, k) != s.default(k))


def shared_key(rec: Rec, free: Iterable[str], *extra: Any) -> str:
    """What records set against one another share: every scenario field but `free`,
    `extra`, the machine, versions, protocol and measurement environment."""
    fields = {k: v for k, v in rec.fields.items() if k not in free}
    env = [rec.machine_id, rec.versions, rec.protocol, rec.measurement_env]
    return json.dumps([fields, *extra, *env], sort_keys=True, default=str)


def family_key(rec: Rec, size: int) -> str:
    """What a record shares with every step of its model and placement's 1-device base
    at `size` series (its global batch under strong scaling, its per-device batch under
    weak): `shared_key` but `PLACEMENT` and the levers."""
    return shared_key(rec, {*PLACEMENT, *Scenario.levers()}, size)


def batch_size(rec: Rec, scaling: str) -> int:
    """A record's batch as its baselines share it: global (strong), per device (weak)."""
    if scaling == "strong":
        return int(rec.global_batch)
    return int(rec.per_device_batch or rec.global_batch // rec.n_devices)


@dataclasses.dataclass(frozen=True)
class Best:
    """One family's best 1-device step (`record`), its default-step 1-device record
    (`default`, None where not measured) and every 1-device record that qualified
    (`candidates`, fastest first)."""

    record: Rec
    default: Rec | None
    candidates: tuple[Rec, ...]

    @property
    def step(self) -> str:
        """Which step it is (`step_of`)."""
        return step_of(self.record)

    @property
    def step_s(self) -> float:
        """Its median step time (s)."""
        return float(self.record.step_time_s)  # type: ignore[arg-type]

    def said(self) -> str:
        """`the recommended step, 3.77 ms`: the base case in words."""
        return f"{self.step}, {self.step_s * 1e3:.3g} ms"

    def words(self, short: bool = True) -> str:
        """Its levers (`levers_in_words`): by name where `short`, else each in words."""
        return levers_in_words(self.record, short)


def levers_in_words(rec: Mapping[str, Any], short: bool = False) -> str:
    """The registered levers a record's step applies, each in its own words
    (`AbstractLever.help`) or, where `short`, by name; joined; `diffrax's defaults`
    where it applies none."""
    s = Scenario.from_dict(rec["scenario"])
    base, facts = s.default_step(), Facts(max_steps=s.max_steps)
    said = []
    for lever in LEVERS.values():
        try:
            fields = lever().fields(base, facts)
        except ValueError:
            continue
        if all(
            set(v) <= set(s.added_levers) if k == "added_levers" else getattr(s, k) == v
            for k, v in fields.items()
        ) and any(getattr(base, k) != v for k, v in fields.items()):
            said.append(lever.name if short else lever.help)
    return ("; " if not short else ", ").join(said) or "diffrax's defaults"


def _qualifies(rec: Rec, default: Rec | None) -> bool:
    """An ok 1-device record that trained, to a model not worse than the default step's
    where that was measured: for the recommended step, by the non-inferiority check over
    paired seeds where it was measured (`loss.paired_verdict`), else by the one-sided
    rule on the two rows (`loss.worse`: a step that trains better qualifies)."""
    if not rec.ok or not trained(rec):
        return False
    if default is None or rec is default:
        return True
    paired = paired_verdict(rec) if step_of(rec) == RECOMMENDED_STEP else None
    return paired if paired is not None else not worse(rec, default)


def best_steps(recs: Iterable[Mapping[str, Any]]) -> dict[str, Best]:
    """Each family's best 1-device step among `recs`, by `family_key` at its global
    batch; families where no 1-device record qualifies are left out. A record that is
    not a `Rec` (a copy `claims.related_records` makes) is read as one; a `Rec` is kept
    as it is, so that `Best.record` is the caller's own record."""
    ones: dict[str, list[Rec]] = {}
    for r in (x if isinstance(x, Rec) else Rec(x) for x in recs):
        if r.n_devices == 1 and r.ok:
            ones.setdefault(family_key(r, int(r.global_batch)), []).append(r)
    out = {}
    for key, found in ones.items():
        default = next((r for r in found if step_of(r) == DEFAULT_STEP), None)
        fit = sorted((r for r in found if _qualifies(r, default)), key=lambda r: r.step_time_s)  # type: ignore[arg-type, return-value]
        if fit:
            out[key] = Best(fit[0], default, tuple(fit))
    return out


def best_for(rec: Rec, bests: dict[str, Best], scaling: str) -> Best | None:
    """The best 1-device step a record of `scaling` is set against: its family's at its
    global (strong) or per-device (weak) batch; None where there is none."""
    return bests.get(family_key(rec, batch_size(rec, scaling)))


class Over(NamedTuple):
    """A multi-device record against the best 1-device step (`over_best`): `speedup`
    and `efficiency`, each `(estimate, low, high)`."""

    speedup: tuple[float, float, float]
    efficiency: tuple[float, float, float]


def over_best(rec: Rec, best: Best, scaling: str) -> Over | None:
    """A multi-device record against the best 1-device step: `speedup` (strong: step
    time ratio; weak: throughput ratio, devices x step time ratio) and `efficiency`
    (speedup per device), each `(estimate, low, high)` with its 95% interval; None
    where the record failed or did not train."""
    if not rec.ok or not trained(rec):
        return None
    n = int(rec.n_devices)
    ratio, low, high = ratio_interval(best.record, rec)
    weak = n if scaling == "weak" else 1
    speedup = (ratio * weak, low * weak, high * weak)
    return Over(speedup, (speedup[0] / n, speedup[1] / n, speedup[2] / n))


def attach_best(rows: Sequence[Rec], recs: Sequence[Mapping[str, Any]]) -> None:
    """Give every row of `rows` (`frames.scaling_rows`) its best 1-device step among
    `recs` (`best_*`), and each multi-device row its speedup and efficiency over it."""
    bests = best_steps(recs)
    for row in rows:
        row.update(best_step=None, best_step_s=None, best_final_loss=None, speedup_best=None,
                   speedup_best_ci=None, efficiency_best=None, efficiency_best_ci=None,
                   best_differs=False)  # fmt: skip
        best = best_for(row, bests, row.scaling)
        if best is None:
            continue
        row.update(
            best_step=best.step, best_step_s=best.step_s,
            best_final_loss=best.record.final_loss,
        )  # fmt: skip
        if row.n_devices == 1:
            continue
        found = over_best(row, best, row.scaling)
        if found is None:
            continue
        (s, slo, shi), (e, elo, ehi) = found.speedup, found.efficiency
        row.update(
            speedup_best=s, speedup_best_ci=(slo, shi), efficiency_best=e,
            efficiency_best_ci=(elo, ehi), best_differs=differs(row, best.record),
        )  # fmt: skip
