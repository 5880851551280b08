"""Scenario parameters, study scales, and validation before anything is compiled."""

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Collection
from typing import Any

from .controllers import CONTROLLERS, AbstractController
from .lever import AbstractAddedLever, resolve_lever
from .model import Solve
from .modes import MODES, AbstractMode, check_here, multi_device_modes
from .problem import (
    DEFAULT_PROBLEM,
    AbstractODEProblem,
    AnyProblem,
    as_ode_problem,
    problem_spec,
    resolve_problem,
)
from .solvers import (
    ADJOINTS,
    INTEGRATORS,
    MAX_STEPS,
    SAVEATS,
    SOLVES,
    STAGES,
    Structure,
    check_structure,
)
from .vectors import APPLIES_ON, VECTOR_WIDTHS

DEVICES = ("cpu", "gpu")
SCALINGS = ("strong", "weak")
BATCHINGS = ("random", "grouped")
OPTIMISER_STATES = ("fresh", "carry")

# Study sizes (`batch`: global under strong scaling, per device under weak); `seed` is
# the reference study's configuration.
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
    # steps each (the last stage times a trained field's solver steps). One adabelief
    # state across the stages (the reference: fresh per stage): fresh at 1e-2, global
    # batches 64 and 128 overshoot and end at evaluation loss 0.043 and 0.157; carried,
    # 0.0068 and 0.0054 (1 device, PID; batch 32: both near 0.004; results/<machine>/
    # optimiser_pair).
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


# Training for heterogeneous data (`spread` > 0) in the explain study, chosen before
# its runs: at the quick scale's 2 x 100 steps and 1e-2, spread 0.5 and 1 ended at
# evaluation loss 0.10-0.46 (untrained). A probe (1 device, PID, carried state) brought
# spread 0.5 to 0.0051 with 300 steps per stage at 3e-3; spread 1 did not train (0.127
# at 300 steps and 3e-3, 0.69 at 1000 steps, inf at 300 steps and 1e-2).
HETEROGENEOUS_TRAINING: dict[str, dict[str, Any]] = {
    "quick": dict(steps_per_stage=300, learning_rate=3e-3),
}
HETEROGENEOUS_NOTE = (
    "heterogeneous data (spread > 0) trains longer and slower than the scale's default "
    "(300 steps per stage at learning rate 3e-3, against 100 at 1e-2): with the "
    "default, spread 0.5 and 1 stayed untrained (evaluation loss 0.10-0.46)"
)


def scale_defaults(scale: str, problem: AnyProblem) -> dict[str, Any]:
    """The fields left None at `scale`: the scale's, replaced by `problem.schedule`."""
    return {**SCALES[scale], **problem.schedule(scale)}


def heterogeneous_training(scale: str) -> dict[str, Any]:
    """The fields that train heterogeneous data at `scale` (`HETEROGENEOUS_TRAINING`)."""
    return dict(HETEROGENEOUS_TRAINING.get(scale, {}))


# Scenario fields renamed after records were made: old name -> new name (`n_devices`
# now means all devices everywhere).
LEGACY_NAMES = {"n_devices": "devices_per_process"}


def _name_text(value: Any) -> str:
    """A field value as it appears in a scenario name."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, tuple):
        return "_".join(f"{v:g}" for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return re.sub(r"[^A-Za-z0-9_]", "_", str(value))  # file-system safe (module:object)


def _field(
    default: Any,
    help: str,
    *,
    role: str = "config",
    tag: str | None = None,
    choices: Collection | None = None,
    option: str | None = None,
    keyed_at_default: bool = False,
    lever: bool = False,
    text: Any = None,
) -> Any:
    """A `Scenario` field and what the rest of the study reads from it.

    - `default`: None takes the scale's (`SCALES`); `help`: one line for the command
      line and the notebook; `option`: the command-line option, if not `--<field>`.
    - `role`: `"identity"` (the first part of every name), `"size"` (named where not
      default) or `"config"` (named where not default, and part of `default_config`).
    - `tag`: the prefix of the field's part of `Scenario.name()` (`"b"` gives `b64`);
      `text`: how its value reads there (default `_name_text`).
    - `choices`: a tuple, or a registry asked at every check (a class defined later
      is a valid choice).
    - `keyed_at_default`: `Scenario.key()` hashes the field also at its default (the
      first fields; a later one is hashed only where not default, so that adding it
      leaves every record its scenario's).
    - `lever`: it changes how one step computes, not the model it trains.
    """
    meta: dict[str, Any] = dict(help=help, role=role, tag=tag, choices=choices, option=option)
    meta.update(keyed=keyed_at_default, lever=lever, text=text or _name_text)
    return dataclasses.field(default=default, metadata=meta)


def _first_field(default: Any, help: str, **meta: Any) -> Any:
    """A field of the first records, hashed by `Scenario.key()` also at its default."""
    return _field(default, help, keyed_at_default=True, **meta)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One scenario of the study; it checks itself at construction (`validate`). Each
    field's meaning is its `help`; fields left None take the scale's value. The fields
    drive the command line, the scenario notebook, `name()` and `default_config`:
    adding a field is one edit here.
    """

    device: str = _first_field("cpu", "cpu or gpu", role="identity", choices=DEVICES)
    devices_per_process: int = _first_field(
        1, "devices per process (virtual CPU devices on a CPU)", role="identity", option="--devices"
    )
    processes: int = _first_field(1, "JAX processes joined by jax.distributed", role="identity")
    mode: str = _first_field(
        "single", "how the step runs over devices", role="identity", choices=MODES
    )
    controller: str = _first_field(
        "pid",
        "pid (adaptive) or stepto (one step per observation)",
        role="identity",
        choices=CONTROLLERS,
    )
    scaling: str = _first_field(
        "strong",
        "strong (fixed global batch) or weak (fixed per-device batch)",
        role="identity",
        choices=SCALINGS,
    )
    scale: str = _first_field(
        "quick", "study size; fills the sizes left None", role="identity", choices=tuple(SCALES)
    )
    spread: float = _first_field(
        0.0, "the data's complexity knob (0: the reference data)", tag="spread"
    )
    batching: str = _first_field(
        "random", "random batches, or grouped by solver cost", tag="", choices=BATCHINGS
    )
    solve: str = _first_field(
        "per_sample",
        "per_sample (vmap, one step size each), within_ode (one ODE per local batch) or "
        "scan (StepTo's steps as a fixed-step lax.scan)",
        tag="",
        choices=SOLVES,
        lever=True,
    )
    lr_scaling: str = _first_field(
        "fixed",
        "fixed learning rate, or linear in the global batch relative to the scale's",
        tag="lr",
        choices=("fixed", "linear"),
    )
    optimiser_state: str = _first_field(
        None,
        "fresh (a new adabelief state per length stage, as the reference) or "
        "carry (one state across stages)",
        tag="opt",
        choices=OPTIMISER_STATES,
    )
    batch: int = _first_field(
        None, "global batch (strong) or per-device batch (weak)", role="size", tag="b"
    )
    dataset_size: int = _first_field(None, "series in the data set", tag="n")
    steps_per_stage: int = _first_field(None, "training steps per length stage", tag="steps")
    warmup_steps: int = _first_field(None, "untimed steps at the start of each stage", tag="warm")
    length_fractions: tuple[float, ...] = _first_field(
        None, "the stages' fractions of each series' length", tag="len"
    )
    eval_size: int = _first_field(None, "series in the evaluation set", tag="eval")
    learning_rate: float = _first_field(None, "adabelief's learning rate", tag="lr")
    eval_every: int = _first_field(
        0,
        "evaluate every this many steps (outside the timed "
        "region) for time to target; 0: only at the end",
        tag="every",
    )
    seed: int = _first_field(5678, "random seed of data, model and batches", tag="seed")
    trace: bool = _first_field(
        False, "write a Perfetto trace of 3 extra, untimed steps", tag="trace"
    )
    # Fields added after the first records: hashed by `key()` only where not default.
    problem: str = _field(
        DEFAULT_PROBLEM,
        "what is trained: a shipped problem's name (oscillator, oscillator_bank, "
        "latent_ode, forced_oscillator), module:object naming an odestudy."
        "AbstractODEProblem or AbstractProblem in an importable module, or a registered "
        "problem's name (odestudy.register_problem)",
        role="size",
        tag="p",
    )
    width: int = _field(64, "hidden units per layer of the vector field's MLP", tag="w")
    # The solve's structure (`solvers.Structure`) and the step's buffers.
    saveat: str = _field(
        "ts",
        "ts (an inner save loop per solver step), dense (interpolate afterwards) or "
        "steps (StepTo: save every step)",
        tag="save",
        choices=SAVEATS,
        lever=True,
    )
    adjoint: str = _field(
        "recursive",
        "recursive (diffrax's default checkpointing), all_steps (a checkpoint per step) "
        "direct (DirectAdjoint) or, with integrator=fused only, scan (a checkpointed scan)",
        tag="adj",
        choices=ADJOINTS,
        lever=True,
    )
    max_steps: int = _field(
        MAX_STEPS,
        "the PID solve's step bound (StepTo with a structure lever: its own steps)",
        tag="maxsteps",
        lever=True,
    )
    unroll: int = _field(1, "lax.scan's unroll with solve=scan", tag="unroll", lever=True)
    stages: str = _field(
        "loop",
        "Tsit5's stages as diffrax's checkpointed loop, bounded (a scan) or unrolled (no loop)",
        tag="stages",
        choices=STAGES,
        lever=True,
    )
    integrator: str = _field(
        "diffrax",
        "diffrax (diffeqsolve), fused (Tsit5 and the controller as one loop carrying "
        "only what a step needs; adjoint all_steps, recursive or scan) or kernel (the "
        "solve and its reverse as one Pallas kernel each, for an MLP field; adjoint "
        "accepted_steps; interpret mode on a CPU)",
        tag="int",
        choices=INTEGRATORS,
        lever=True,
    )
    mlp_reverse: bool = _field(
        False,
        "the fused solve's reverse loop (PID, adjoint accepted_steps, within_ode) "
        "differentiates each step by hand for a field that is an MLP of the state and "
        "of inputs of the time and args (odestudy.AbstractMLPField; mlp_reverse.py) "
        "instead of by jax.vjp",
        tag="mlprev",
        lever=True,
    )
    donate: bool = _field(
        False,
        "the step reuses the parameters' and optimiser state's buffers",
        tag="donate",
        lever=True,
    )
    fast_activations: bool = _field(
        False,
        "the model's activation functions by their faster equivalents (activations."
        "FASTER: jax.nn.softplus from one tanh and one log)",
        tag="fastact",
        lever=True,
    )
    vector_width: int = _field(
        0,
        "bits of the vectors XLA's CPU compiler prefers for the step (0: its default, 256; "
        "512 on AVX-512 CPUs): a compile option of the step's executable (vectors.py)",
        tag="vw",
        lever=True,
    )
    added_levers: tuple[str, ...] = _field(
        (),
        "levers with no field of their own (odestudy.AbstractAddedLever), by name or "
        "module:Class: each configures the step's compile options or the model's form",
        tag="",
        lever=True,
        text=lambda specs: "-".join(resolve_lever(spec).short for spec in specs),
    )
    # Where the processes run: more than one host needs a cluster (`--executor slurm`).
    nodes: int = _field(
        1, "hosts the processes are spread over, evenly (>1: SLURM jobs only)", role="identity"
    )

    def __post_init__(self):
        # A problem object (from a notebook) is named as scenarios name problems.
        object.__setattr__(self, "problem", problem_spec(self.problem))
        _choice("scale", self.scale, tuple(SCALES))
        for name, value in scale_defaults(self.scale, resolve_problem(self.problem)).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        for name in ("length_fractions", "added_levers"):
            if isinstance(getattr(self, name), list | tuple):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        # The mode's and controller's types, parsed once (validate names valid choices).
        object.__setattr__(self, "_parallel", MODES[self.mode]() if self.mode in MODES else None)
        found = CONTROLLERS.get(self.controller)
        object.__setattr__(self, "_controller", found() if found is not None else None)
        validate(self)

    def for_problem(self, problem: str) -> "Scenario":
        """This scenario training `problem`: fields at the scale's default take the new one's."""
        values = self.to_dict()
        for field in self.fields():
            if field.default is None and getattr(self, field.name) == self.default(field.name):
                values[field.name] = None
        values["problem"] = problem
        return Scenario.from_dict(values)

    @classmethod
    def fields(cls) -> tuple[dataclasses.Field, ...]:
        """The scenario's fields, each with its metadata (`_field`)."""
        return dataclasses.fields(cls)

    @classmethod
    def levers(cls) -> tuple[str, ...]:
        """The names of the step's levers (`_field`'s `lever`)."""
        return tuple(f.name for f in cls.fields() if f.metadata["lever"])

    def default_step(self) -> "Scenario":
        """This scenario with every lever of the step at its default."""
        return dataclasses.replace(self, **{name: self.default(name) for name in self.levers()})

    def step_tag(self) -> str:
        """The `name()` tags of the levers set away from their defaults (`""`: none)."""
        return "-".join(
            f.metadata["tag"] + f.metadata["text"](getattr(self, f.name))
            for f in self.fields()
            if f.metadata["lever"] and getattr(self, f.name) != self.default(f.name)
        )

    def training_note(self) -> str | None:
        """Why this scenario trains unlike its scale's default, or None."""
        chosen = heterogeneous_training(self.scale)
        if self.spread > 0 and chosen and all(getattr(self, k) == v for k, v in chosen.items()):
            return HETEROGENEOUS_NOTE
        return None

    @property
    def structure(self) -> Structure:
        """How the step's solve is built (`solvers.Structure`)."""
        # Each of its fields is the scenario's field of the same name.
        return Structure(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Structure)})

    @property
    def added(self) -> tuple[AbstractAddedLever, ...]:
        """The added levers (`added_levers`) as their types."""
        return tuple(resolve_lever(spec) for spec in self.added_levers)

    @property
    def problem_object(self) -> AnyProblem:
        """What is trained, as the user wrote it, resolved from `problem`."""
        return resolve_problem(self.problem)

    @property
    def ode_problem(self) -> AbstractODEProblem:
        """What is trained, as the study runs it (`problem.as_ode_problem`)."""
        return as_ode_problem(self.problem_object)

    @property
    def parallel(self) -> AbstractMode:
        """The mode as its type (`modes.AbstractMode`), parsed once."""
        return self._parallel  # type: ignore[attr-defined]

    @property
    def stepsize_controller(self) -> AbstractController:
        """The controller as its type (`controllers.AbstractController`), parsed once."""
        return self._controller  # type: ignore[attr-defined]

    def ode_solve(self, problem: AnyProblem | None = None) -> Solve:
        """How the step solves the ODE of `problem` (default `ode_problem`)."""
        chosen = self.ode_problem if problem is None else problem
        return Solve(self.stepsize_controller, self.structure, chosen)

    def default(self, name: str) -> Any:
        """Field `name`'s default for this scenario's scale."""
        field = Scenario.__dataclass_fields__[name]
        if field.default is None:
            return scale_defaults(self.scale, self.problem_object)[name]
        return field.default

    @property
    def total_devices(self) -> int:
        """Devices over all processes."""
        return self.devices_per_process * self.processes

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
            return self.learning_rate * self.global_batch / self.default("batch")
        return self.learning_rate

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["length_fractions"] = list(self.length_fractions)
        out["added_levers"] = list(self.added_levers)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Scenario":
        """The scenario of `to_dict`'s output, also under `LEGACY_NAMES`."""
        data = {LEGACY_NAMES.get(k, k): v for k, v in data.items()}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(
                f"unknown scenario parameter(s) {sorted(unknown)}; valid: {sorted(names)}"
            )
        if data.get("length_fractions") is not None:
            data["length_fractions"] = tuple(data["length_fractions"])
        return cls(**data)

    def key(self) -> str:
        """A short hash of every parameter: the scenario's identity for resuming. Renamed
        fields are hashed under their old names, and later fields only where not default
        (`keyed_at_default`), so that neither makes a record another scenario's."""
        old = {new: old for old, new in LEGACY_NAMES.items()}
        values = self.to_dict()
        fields = {
            old.get(f.name, f.name): values[f.name]
            for f in self.fields()
            if f.metadata["keyed"] or getattr(self, f.name) != self.default(f.name)
        }
        text = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def name(self) -> str:
        """A readable, file-system safe name: the identity fields, then every other
        field that differs from its default, as its tag and value, in field order."""
        devices = (
            f"{self.processes}x{self.devices_per_process}"
            if self.processes > 1
            else f"{self.devices_per_process}dev"
        )
        parts = [self.device, devices, self.mode, self.controller, self.scaling, self.scale]
        if self.nodes > 1:
            parts.append(f"{self.nodes}nodes")
        for field in self.fields():
            if field.metadata["role"] == "identity":
                continue
            value = getattr(self, field.name)
            if value != self.default(field.name):
                parts.append(field.metadata["tag"] + field.metadata["text"](value))
        return "-".join(parts)


def default_config(scale: str) -> dict[str, Any]:
    """Every `"config"` field's default at `scale`: the main tables' rows match it."""
    base = Scenario(scale=scale)
    return {
        f.name: base.default(f.name) for f in Scenario.fields() if f.metadata["role"] == "config"
    }


def _choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(map(str, choices))}")


def validate(s: Scenario, available_devices: int | None = None) -> None:
    """A ValueError saying why `s` cannot run (`available_devices`: of its kind here)."""
    for field in Scenario.fields():
        if field.metadata["choices"] is not None:
            _choice(field.name, getattr(s, field.name), field.metadata["choices"])
    for name in ("spread", "learning_rate", "length_fractions"):
        values = getattr(s, name)
        for v in values if isinstance(values, tuple) else (values,):
            if not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {values!r}")
    for name in ("devices_per_process", "processes", "nodes"):
        value = getattr(s, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if s.nodes > 1 and s.processes == 1:
        raise ValueError(f"{s.nodes} nodes need several processes (one or more per node)")
    if s.processes % s.nodes:
        raise ValueError(
            f"nodes ({s.nodes}) must divide processes ({s.processes}): each node runs as "
            "many processes"
        )
    if available_devices is not None and s.devices_per_process > available_devices:
        valid = f"1..{available_devices}" if available_devices else "none: no such device"
        raise ValueError(
            f"{s.devices_per_process} {s.device} device(s) requested but only "
            f"{available_devices} exist; valid: {valid}"
        )
    mode = s.parallel
    if not mode.multi_device and s.total_devices != 1:
        raise ValueError(
            f"mode {mode.name!r} runs on exactly 1 device, got {s.total_devices}; for more "
            f"devices use one of: {', '.join(multi_device_modes())}"
        )
    if s.processes > 1 and not mode.multi_process:
        raise ValueError(
            "multi-process runs support modes "
            f"{', '.join(n for n, m in MODES.items() if m.multi_process)}; got {s.mode!r}"
        )
    check_here(mode)  # a mode the running JAX lacks (`explicit` before JAX 0.7.1)
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
    check_structure(s.structure, s.stepsize_controller)
    check_problem(s)
    if not isinstance(s.donate, bool):
        raise ValueError(f"donate must be true or false, got {s.donate!r}")
    _check_vector_width(s.vector_width, s.device)
    check_added_levers(s)


def _check_vector_width(width: Any, device: str) -> None:
    """Refuse an unknown width, or a non-default one where the compiler does not take it."""
    if isinstance(width, bool) or width not in VECTOR_WIDTHS:
        valid = ", ".join(map(str, VECTOR_WIDTHS))
        raise ValueError(f"unknown vector_width {width!r}; valid choices: {valid} (bits)")
    if width and device not in APPLIES_ON:
        raise ValueError(
            f"vector_width is an option of XLA's CPU compiler; device {device!r} takes 0, "
            f"got {width}"
        )


def check_added_levers(s: Scenario) -> None:
    """Refuse an added lever that cannot be found, is named twice, or does not apply."""
    if not isinstance(s.added_levers, tuple) or len(set(s.added_levers)) != len(s.added_levers):
        raise ValueError(f"added_levers must name each lever once, got {s.added_levers!r}")
    for lever in s.added:
        why = lever.check(s)
        if why is not None:
            raise ValueError(why)


def check_problem(s: Scenario) -> None:
    """Refuse what the scenario's problem cannot train correctly, saying why."""
    problem = s.problem_object
    if s.spread and not problem.has_spread:
        raise ValueError(
            f"problem {problem.name!r} has no complexity knob: spread must be 0, got {s.spread}"
        )
    if s.solve == "within_ode" and not problem.uniform_grid:
        raise ValueError(
            f"solve='within_ode' rescales each series' time by its grid step and needs "
            f"evenly spaced grids; problem {problem.name!r} says uniform_grid=False: use "
            "solve per_sample or scan"
        )
