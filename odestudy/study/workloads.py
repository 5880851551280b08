"""The workload map (`make map`): the same rows on workloads of different cost per solver
step, to find where the answer (which mode, whether the recommended step helps) changes
(`map_scenarios`); and the per-device batch axis (`crossover_scenarios`, `make
crossover`): where splitting the batch starts to pay. A workload is a problem at a field
width, trained as chosen before its runs (its own scenario fields, so that its records
name them)."""

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from ..measure.controllers import CONTROLLERS
from ..measure.modes import multi_device_modes
from ..measure.recommended import recommended
from ..measure.scenario import Scenario

MAP_DEVICES = 2  # this machine's physical cores: more would measure overhead
# The multi-device modes, in the order of every table (also the scaling matrix's,
# `matrix`); the controllers are every registered one (`controllers.CONTROLLERS`).
MULTI_MODES = multi_device_modes()
# Where the map's records live under a results folder (its own machine folders), apart
# from the quick matrix's rows, so that every row of the map comes from one `make map`.
MAP_FOLDER = "map"


@dataclasses.dataclass(frozen=True)
class Workload:
    """One workload of the map: a problem at a field `width`, with the `Scenario` fields
    that train it where the scale's defaults do not (`training`, chosen before the map's
    runs; `note` says why)."""

    name: str
    problem: str
    width: int
    training: tuple[tuple[str, Any], ...] = ()
    note: str = "the quick scale's training"

    def slug(self) -> str:
        """Its name as a file name and command-line value (`oscillator_w16`)."""
        return re.sub(r"[^A-Za-z0-9]+", "_", self.name).strip("_")

    def fields(self) -> dict[str, Any]:
        """The `Scenario` fields every row of this workload sets."""
        return {"problem": self.problem, "width": self.width, **dict(self.training)}

    def scenario(self, **identity: Any) -> Scenario:
        """This workload's scenario with the `identity` fields given (mode, devices...)."""
        return Scenario(**self.fields(), **identity)

    def matches(self, scenario: Mapping[str, Any]) -> bool:
        """Whether a record's scenario (`Scenario.to_dict`) is a row of this workload."""
        return all(_same(scenario.get(k), v) for k, v in self.fields().items())


def _same(have: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(have, int | float):
        return abs(have - want) <= 1e-12 * max(1.0, abs(want))
    return have == want


# The map's workloads, lightest first. Trainings were chosen from one 1-device PID probe
# each before the map (quick scale, 2 x 100 steps):
# - width 16 at the quick scale's learning rate 1e-2 ends at 0.011 (trained);
# - width 256 at 1e-2 ends at 0.21 (untrained); at 3e-3 it trains (see its note);
# - the oscillator bank (state 16, `problem.OscillatorBank`) at width 16 ends at 0.011
#   (trained; at width 64 at 0.0025, at about three times the step time);
# - the latent ODE (`problems.latent`) and the forced oscillator, a controlled ODE
#   (`problems.controlled`), at width 64 with their own schedules: one 1-device probe
#   per controller, each trained.
WORKLOADS: tuple[Workload, ...] = (
    Workload("oscillator w16", "oscillator", 16),
    Workload("oscillator w64", "oscillator", 64),
    Workload(
        "oscillator w256",
        "oscillator",
        256,
        (("learning_rate", 3e-3),),
        "learning rate 3e-3: at the quick scale's 1e-2 width 256 ended at evaluation "
        "loss 0.21 (untrained)",
    ),
    Workload("bank w16 (state 16)", "oscillator_bank", 16),
    Workload("latent ODE w64", "latent_ode", 64),
    Workload("forced oscillator w64 (controlled)", "forced_oscillator", 64),
)


def workload_of(scenario: Mapping[str, Any]) -> Workload | None:
    """The workload a record's scenario belongs to, or None."""
    return next((w for w in WORKLOADS if w.matches(scenario)), None)


def placements(one: Scenario) -> list[Scenario]:
    """`one` (a 1-device scenario) and its strong-scaling rows on `MAP_DEVICES` devices
    in every multi-device mode, at the same global batch."""
    return [one] + [
        dataclasses.replace(one, mode=m, devices_per_process=MAP_DEVICES) for m in MULTI_MODES
    ]


def map_scenarios(scale: str = "quick", workloads: tuple[Workload, ...] = WORKLOADS) -> list:
    """The map's rows: per workload and controller, 1 device and `MAP_DEVICES` devices in
    every multi-device mode, with the default and with the recommended step (every
    multi-device speedup's base case); and the recommended step on 1 device at the
    per-device batch (the weak-scaling base); strong scaling, CPU."""
    out: list[Scenario] = []
    for w in workloads:
        for controller in CONTROLLERS:
            rows = placements(w.scenario(scale=scale, controller=controller, device="cpu"))
            share = dataclasses.replace(rows[0], batch=rows[0].batch // MAP_DEVICES)
            out += rows + [recommended(r) for r in (*rows, share)]
    return out


# The per-device batch axis: series per device, from a share too small to pay for a
# device's fixed costs to one that fills it (at most half the quick scale's 256 series,
# so that `MAP_DEVICES` devices hold the global batch).
CROSSOVER_BATCHES = (4, 16, 64, 128)
# Its workloads: the lightest and the heaviest of the map per solver iteration (the
# map's 1-device rows on the 2-core machines of the committed records).
CROSSOVER_WORKLOADS = ("oscillator w16", "oscillator w256")


def crossover_scenarios(scale: str = "quick") -> list[Scenario]:
    """The per-device batch axis: per workload of `CROSSOVER_WORKLOADS`, controller and
    per-device batch `b` of `CROSSOVER_BATCHES`, the recommended step on 1 device at `b`
    and, with its rows in every mode (`placements`), at `MAP_DEVICES * b` (where the
    data set holds it); strong scaling, CPU; each row once."""
    out: dict[str, Scenario] = {}
    for w in (w for w in WORKLOADS if w.name in CROSSOVER_WORKLOADS):
        for controller in CONTROLLERS:
            at = dict(scale=scale, controller=controller, device="cpu")
            size = w.scenario(**at).dataset_size  # a smaller scale holds fewer series
            for b in (b for b in CROSSOVER_BATCHES if MAP_DEVICES * b <= size):
                rows = [
                    w.scenario(batch=b, **at),
                    *placements(w.scenario(batch=MAP_DEVICES * b, **at)),
                ]
                out.update((s.key(), s) for s in map(recommended, rows))
    return list(out.values())
