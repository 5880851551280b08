"""Scenario parameters, study scales, and validation before anything is compiled."""

import dataclasses
import hashlib
import json
import math
from typing import Any

from .modes import MODES, check_mode
from .solvers import check_controller

DEVICES = ("cpu", "gpu")
SCALINGS = ("strong", "weak")
BATCHINGS = ("random", "grouped")
SOLVES = ("per_sample", "within_ode")
OPTIMISER_STATES = ("fresh", "carry")

# Study sizes. `batch` is the global batch under strong scaling and the per-device
# batch under weak scaling. `seed` is the reference study's configuration.
SCALES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        dataset_size=64,
        batch=8,
        steps_per_stage=4,
        warmup_steps=1,
        length_fractions=(0.1, 1.0),
        eval_size=32,
        learning_rate=3e-3,
        optimiser_state="fresh",
    ),
    # The reference's staged strategy, shortened: 10 % then 100 % of each series, 100
    # steps each, so that the last stage times the solver steps of a trained field.
    # One adabelief state carried across the stages (the reference starts a fresh one
    # per stage): with a fresh state at learning rate 1e-2 the first full-length steps
    # of the larger weak-scaling batches overshoot, and global batches 64 and 128 ended
    # at evaluation loss 0.043 and 0.157; carried, 0.0068 and 0.0054 (1 device, PID).
    # At batch 32 both end near 0.004 (results/<machine>/optimiser_pair).
    "quick": dict(
        dataset_size=256,
        batch=32,
        steps_per_stage=100,
        warmup_steps=5,
        length_fractions=(0.1, 1.0),
        eval_size=128,
        learning_rate=1e-2,
        optimiser_state="carry",
    ),
    "seed": dict(
        dataset_size=2048,
        batch=32,
        steps_per_stage=1000,
        warmup_steps=10,
        length_fractions=(0.1, 0.5, 1.0),
        eval_size=256,
        learning_rate=3e-3,
        optimiser_state="fresh",
    ),
}


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One scenario of the study.

    - `device`: `"cpu"` or `"gpu"`.
    - `n_devices`: devices per process (virtual CPU devices on a CPU).
    - `mode`: `"single"`, `"pmap"`, `"shard"` or `"shard_map"`.
    - `controller`: `"pid"` (adaptive) or `"stepto"` (one step per observation).
    - `scaling`: `"strong"` (fixed global batch) or `"weak"` (fixed per-device batch).
    - `scale`: `"smoke"`, `"quick"` or `"seed"`; fills the sizes below when not given.
    - `batch`: global batch (strong) or per-device batch (weak).
    - `spread`: the data's complexity knob (0 = the reference data).
    - `batching`: `"random"` batches, or `"grouped"` by solver cost.
    - `solve`: `"per_sample"` (vmap, one step size each) or `"within_ode"` (one ODE
      whose state is the whole local batch, one shared step size).
    - `processes`: number of JAX processes (multi-process runs on `jax.distributed`).
    - `lr_scaling`: `"fixed"` learning rate, or `"linear"` in the global batch
      relative to the scale's batch.
    - `eval_every`: evaluate every this many steps (outside the timed region) for
      time-to-target-loss curves; 0 evaluates only at the end.
    - `trace`: write a Perfetto-readable profiler trace of extra, untimed steps.
    - `optimiser_state`: `"fresh"` (a new adabelief state at each length stage, as the
      reference does) or `"carry"` (one state across stages); the scale's by default.
    """

    device: str = "cpu"
    n_devices: int = 1
    mode: str = "single"
    controller: str = "pid"
    scaling: str = "strong"
    scale: str = "quick"
    dataset_size: int | None = None
    batch: int | None = None
    steps_per_stage: int | None = None
    warmup_steps: int | None = None
    length_fractions: tuple[float, ...] | None = None
    eval_size: int | None = None
    learning_rate: float | None = None
    lr_scaling: str = "fixed"
    seed: int = 5678
    spread: float = 0.0
    batching: str = "random"
    solve: str = "per_sample"
    processes: int = 1
    eval_every: int = 0
    trace: bool = False
    optimiser_state: str | None = None

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ValueError(f"unknown scale {self.scale!r}; valid choices: {', '.join(SCALES)}")
        for name, value in SCALES[self.scale].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "length_fractions", tuple(self.length_fractions))

    @property
    def total_devices(self) -> int:
        """Devices over all processes."""
        return self.n_devices * self.processes

    @property
    def global_batch(self) -> int:
        """Samples per optimiser step over all devices."""
        if self.scaling == "weak":
            return self.batch * self.total_devices
        return self.batch

    @property
    def lr(self) -> float:
        """The learning rate used, after `lr_scaling`."""
        if self.lr_scaling == "linear":
            return self.learning_rate * self.global_batch / SCALES[self.scale]["batch"]
        return self.learning_rate

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["length_fractions"] = list(self.length_fractions)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Scenario":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(
                f"unknown scenario parameter(s) {sorted(unknown)}; valid: {sorted(names)}"
            )
        data = dict(data)
        if data.get("length_fractions") is not None:
            data["length_fractions"] = tuple(data["length_fractions"])
        return cls(**data)

    def key(self) -> str:
        """A short hash of every parameter: the scenario's identity for resuming."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def name(self) -> str:
        """A readable, file-system safe name."""
        parts = [
            self.device,
            f"{self.processes}x{self.n_devices}" if self.processes > 1 else f"{self.n_devices}dev",
            self.mode,
            self.controller,
            self.scaling,
            self.scale,
        ]
        if self.spread:
            parts.append(f"spread{self.spread:g}")
        if self.batching != "random":
            parts.append(self.batching)
        if self.solve != "per_sample":
            parts.append(self.solve)
        if self.lr_scaling != "fixed":
            parts.append(f"lr{self.lr_scaling}")
        if self.optimiser_state != SCALES[self.scale]["optimiser_state"]:
            parts.append(f"opt{self.optimiser_state}")
        if self.batch != SCALES[self.scale]["batch"]:
            parts.append(f"b{self.batch}")
        short = {
            "dataset_size": "n",
            "steps_per_stage": "steps",
            "warmup_steps": "warm",
            "length_fractions": "len",
            "eval_size": "eval",
            "learning_rate": "lr",
        }
        for field, tag in short.items():
            value = getattr(self, field)
            if value != SCALES[self.scale][field]:
                text = (
                    "_".join(f"{v:g}" for v in value)
                    if field == "length_fractions"
                    else f"{value:g}"
                )
                parts.append(f"{tag}{text}")
        for field, tag in (("eval_every", "every"), ("seed", "seed")):
            if getattr(self, field) != Scenario.__dataclass_fields__[field].default:
                parts.append(f"{tag}{getattr(self, field)}")
        if self.trace:
            parts.append("trace")
        return "-".join(parts)


def _choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(map(str, choices))}")


def validate(s: Scenario, available_devices: int | None = None) -> None:
    """Check a scenario before anything is compiled; raise ValueError saying why not.

    - `available_devices`: devices this process can see of `s.device`'s kind, or
      `None` to skip that check (for example before the devices are created).
    """
    _choice("device", s.device, DEVICES)
    for name in ("spread", "learning_rate", "length_fractions"):
        values = getattr(s, name)
        for v in values if isinstance(values, tuple) else (values,):
            if not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {values!r}")
    check_mode(s.mode)
    check_controller(s.controller)
    _choice("scaling", s.scaling, SCALINGS)
    _choice("batching", s.batching, BATCHINGS)
    _choice("solve", s.solve, SOLVES)
    _choice("lr_scaling", s.lr_scaling, ("fixed", "linear"))
    _choice("optimiser_state", s.optimiser_state, OPTIMISER_STATES)
    if not isinstance(s.n_devices, int) or s.n_devices < 1:
        raise ValueError(f"n_devices must be a whole number >= 1, got {s.n_devices!r}")
    if not isinstance(s.processes, int) or s.processes < 1:
        raise ValueError(f"processes must be a whole number >= 1, got {s.processes!r}")
    if available_devices is not None and s.n_devices > available_devices:
        valid = f"1..{available_devices}" if available_devices else "none: no such device"
        raise ValueError(
            f"{s.n_devices} {s.device} device(s) requested but only "
            f"{available_devices} exist; valid: {valid}"
        )
    if s.mode == "single" and s.total_devices != 1:
        raise ValueError(
            f"mode 'single' runs on exactly 1 device, got {s.total_devices}; "
            f"for more devices use one of: {', '.join(m for m in MODES if m != 'single')}"
        )
    if s.processes > 1 and s.mode not in ("shard", "shard_map"):
        raise ValueError(f"multi-process runs support modes shard, shard_map; got {s.mode!r}")
    if s.batch < 1:
        raise ValueError(f"batch must be >= 1, got {s.batch}")
    if s.global_batch % s.total_devices:
        raise ValueError(
            f"global batch {s.global_batch} is not divisible by the device count "
            f"{s.total_devices}; choose a batch that is a multiple of {s.total_devices}"
        )
    if s.global_batch > s.dataset_size:
        raise ValueError(
            f"global batch {s.global_batch} exceeds the data set size {s.dataset_size}"
        )
    if not s.length_fractions or any(not 0 < f <= 1 for f in s.length_fractions):
        raise ValueError(f"length_fractions must be in (0, 1], got {list(s.length_fractions)}")
    if s.steps_per_stage <= s.warmup_steps:
        raise ValueError(
            f"steps_per_stage ({s.steps_per_stage}) must exceed warmup_steps "
            f"({s.warmup_steps}) so that some steps are timed"
        )
    if s.spread < 0:
        raise ValueError(f"spread must be >= 0, got {s.spread}")
