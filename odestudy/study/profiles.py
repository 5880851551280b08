"""Hardware profiles: per placement (devices, processes, nodes), what an all-reduce of
one float costs and a bandwidth that prices a gradient's size, each value with its
source. Two sources: a **file** (`data/profiles/<name>.json`, or any path in that
format: cited values with a stated range), or **this machine's probes** (`cpu`: every
machine probe recorded here and the cross-process all-reduces of multi-process rows, the
median central and the range their spread over sessions).

`mode_time` prices a mode's step from measured terms and these costs: the one formula
both `odestudy predict` and the report's projection use.
"""

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..measure import environment
from ..measure.modes import MODES
from ..measure.probe import PROBE_FOLDER
from . import records

# The profile built from this machine's probes (`machine_profile`).
HERE = "cpu"
# 4 bytes per float32, moved 2 (n - 1) / n times by a ring all-reduce over n devices.
FLOAT_BYTES = 4


class ProfileError(ValueError):
    """A profile that does not exist, or lacks the placement asked for."""


@dataclasses.dataclass(frozen=True)
class Value:
    """One profiled quantity (seconds, or bytes/s): its central value, stated range and
    `source` (a citation, or its records), whether `measured` here, and the `samples` it
    was measured from where kept (a prediction's draws resample them)."""

    central: float
    low: float
    high: float
    source: str
    measured: bool = False
    samples: tuple[float, ...] = dataclasses.field(default=(), repr=False)

    def __post_init__(self):
        # The range stated holds the value used: a session's own probe outside the range
        # of the machine's other sessions widens it (a prediction's draws, uniform over
        # the range, would otherwise all fall on one side of its central value).
        object.__setattr__(self, "low", min(self.low, self.central))
        object.__setattr__(self, "high", max(self.high, self.central))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "samples"}


Placement = tuple[int, int, int]  # (devices in all, processes, nodes)


@dataclasses.dataclass(frozen=True)
class HardwareProfile:
    """What collectives cost on one kind (`device`) of hardware: per placement, one
    float's `allreduce` and the added seconds `per_float` of a larger one (else from the
    bus `bandwidth`, bytes/s)."""

    name: str
    device: str
    description: str
    allreduce: dict[Placement, Value]
    per_float: dict[Placement, Value] = dataclasses.field(default_factory=dict)
    bandwidth: Value | None = None

    def placements(self) -> list[Placement]:
        """The placements it has values for, sorted."""
        return sorted(self.allreduce)

    def latency(self, devices: int, processes: int = 1, nodes: int = 1) -> Value:
        """One float's all-reduce over `devices` devices in `processes` processes on
        `nodes` nodes; ProfileError naming the placements it has otherwise."""
        key = (devices, processes, nodes)
        if key not in self.allreduce:
            have = ", ".join(_placement(p) for p in self.placements()) or "none"
            raise ProfileError(
                f"profile {self.name!r} has no all-reduce for {_placement(key)}; it has: {have}"
            )
        return self.allreduce[key]

    def gradient(self, floats: int, devices: int, processes: int = 1, nodes: int = 1) -> Value:
        """An all-reduce of `floats` float32s: one float's latency plus their per-float cost."""
        base = self.latency(devices, processes, nodes)
        extra = self.per_float.get((devices, processes, nodes))
        if extra is None and self.bandwidth is not None:
            moved = 2 * (devices - 1) / devices * FLOAT_BYTES
            bw = self.bandwidth
            extra = Value(moved / bw.central, moved / bw.high, moved / bw.low, bw.source)
        if extra is None:
            return base
        return Value(
            base.central + floats * extra.central,
            base.low + floats * extra.low,
            base.high + floats * extra.high,
            f"{base.source}; size: {extra.source}",
            base.measured and extra.measured,
        )


def mode_time(
    mode: str, terms: dict[str, float], gradient_s: float, loop_s: float, in_loop: float
) -> dict[str, float]:
    """One mode's step and its parts (seconds) from the measured `terms` (a device's
    `per_iteration_s`, the step's `iterations_step`), the gradient all-reduce and, in a
    mode with one loop over the global batch, `in_loop` collectives per iteration at
    `loop_s`."""
    compute = terms["per_iteration_s"] * terms["iterations_step"]
    loop = in_loop * terms["iterations_step"] * loop_s if MODES[mode].one_loop else 0.0
    total = compute + gradient_s + loop
    return {"step_time_s": total, "compute_s": compute, "allreduce_s": gradient_s,
            "in_loop_s": loop}  # fmt: skip


def _placement(p: Placement) -> str:
    devices, processes, nodes = p
    where = f" in {processes} processes" if processes > 1 else ""
    return f"{devices} devices{where}" + (f" on {nodes} nodes" if nodes > 1 else "")


def shipped_profiles() -> dict[str, Path]:
    """The profile files the package ships, name -> path."""
    folder = environment.shipped("data", "profiles")
    return {p.stem: p for p in sorted(Path(folder).glob("*.json"))}


def profile_from_file(path: str | os.PathLike) -> HardwareProfile:
    """A profile from a JSON file in the shipped format (see `data/profiles/`)."""
    data = json.loads(Path(path).read_text())
    allreduce = {
        (int(a["devices"]), int(a.get("processes", 1)), int(a.get("nodes", 1))): _cited(a, "_s")
        for a in data["allreduce"]
    }
    bw = data.get("bandwidth")
    bandwidth = _cited(bw, "_bytes_per_s") if bw else None
    return HardwareProfile(
        data["name"], data["device"], data.get("description", ""), allreduce, bandwidth=bandwidth
    )


def _cited(entry: dict[str, Any], unit: str) -> Value:
    """A profile file's cited value: its central, low and high (names ending in `unit`)."""
    return Value(
        entry[f"central{unit}"], entry[f"low{unit}"], entry[f"high{unit}"], entry["source"]
    )


def load_profile(
    name: str, results: str | os.PathLike = records.DEFAULT_RESULTS
) -> HardwareProfile:
    """The profile `name`: `cpu` (this machine's probes under `results`), a shipped
    profile's name, or a file's path; ProfileError naming the choices otherwise."""
    if name == HERE:
        return machine_profile(results)
    shipped = shipped_profiles()
    if name in shipped:
        return profile_from_file(shipped[name])
    if Path(name).is_file():
        return profile_from_file(name)
    choices = ", ".join([HERE, *shipped])
    raise ProfileError(f"unknown profile {name!r}; valid choices: {choices}, or a profile file")


def _probe_points(results: Path, machine: str) -> dict[Placement, list[tuple[int, float, str]]]:
    """Every all-reduce this machine's probes and multi-process records measured:
    placement -> [(floats, seconds, the file it was measured in)]."""
    points: dict[Placement, list[tuple[int, float, str]]] = {}
    for path, probe in records.readable(
        sorted(results.glob(f"**/{machine}/{PROBE_FOLDER}/*.json"))
    ):
        for a in probe.get("allreduce", []):
            key = (int(a["n_devices"]), int(a.get("processes", 1)), 1)
            points.setdefault(key, []).append((int(a["size"]), float(a["latency_s"]), str(path)))
    for path, rec in records.readable(
        sorted(results.glob(f"**/{machine}/*/*/{records.RECORD_NAME}"))
    ):
        nodes = int((rec.get("scenario") or {}).get("nodes", 1))
        for a in rec.get("probe_processes") or []:
            key = (int(a["n_devices"]), int(a["processes"]), nodes)
            points.setdefault(key, []).append((int(a["size"]), float(a["latency_s"]), str(path)))
    return points


def _value(seconds: list[float], files: list[str], results: Path) -> Value:
    """Median and range of `seconds`, citing the records they were measured in."""
    named = sorted({os.path.relpath(f, results) for f in files})
    more = f" and {len(named) - 3} more" if len(named) > 3 else ""
    return Value(
        float(np.median(seconds)),
        float(np.min(seconds)),
        float(np.max(seconds)),
        f"measured here: {len(seconds)} probe(s), {', '.join(named[:3])}{more}",
        measured=True,
    )


def machine_profile(results: str | os.PathLike = records.DEFAULT_RESULTS) -> HardwareProfile:
    """The profile of this machine from what its probes measured (see the module doc);
    ProfileError where this machine has no probe yet."""
    results = Path(results)
    machine = environment.machine_id(environment.this_machine())
    points = _probe_points(results, machine)
    if not points:
        raise ProfileError(
            f"no machine probe recorded for {machine} under {results}: run a timing session "
            "here first (for example `make all`), or name a profile file"
        )
    allreduce, per_float = {}, {}
    for key, rows in points.items():
        one = [(s, f) for n, s, f in rows if n == 1]
        big = [(n, s, f) for n, s, f in rows if n > 1]
        if not one:
            continue
        allreduce[key] = _value([s for s, _ in one], [f for _, f in one], results)
        if big:
            base = allreduce[key].central
            slopes = [max(0.0, (s - base) / n) for n, s, _ in big]
            per_float[key] = _value(slopes, [f for *_, f in big], results)
    description = f"this machine ({machine}): its CPU cores as virtual devices"
    return HardwareProfile(HERE, "cpu", description, allreduce, per_float)


def machine_profile_if_any(
    results: str | os.PathLike = records.DEFAULT_RESULTS,
) -> HardwareProfile | None:
    """`machine_profile(results)`, or None where this machine has no probe yet."""
    try:
        return machine_profile(results)
    except ProfileError:
        return None
