"""A lever of the training step as a type: what it sets of a scenario, what it applies
to, and whether it can slow a step down. Adding a lever is one file: a final subclass of
`AbstractLever` that sets fields of the scenario (`odestudy/measure/levers/`), or of
`AbstractAddedLever`, a lever with no field of its own that configures the step itself
(its compile options, the model's form)."""

import abc
import dataclasses
from typing import Any, ClassVar, NamedTuple, Protocol

from .problem import _import
from .registry import Registered, lookup


class ScenarioLike(Protocol):
    """What a lever reads of a scenario (`scenario.Scenario` imports this module)."""

    @property
    def controller(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def added_levers(self) -> tuple[str, ...]: ...

    @property
    def stepsize_controller(self) -> Any: ...

    def default_step(self) -> Any: ...


def _replace(s: Any, **fields: Any) -> Any:
    """`s` with `fields` (a scenario checks itself: a ValueError where they are not valid)."""
    return dataclasses.replace(s, **fields)


# Every lever by name, in the order defined (`Registered`).
LEVERS: dict[str, type["AbstractLever"]] = {}


class Facts(NamedTuple):
    """What `odestudy tune` measured of the trained model (None: not measured): the most
    `solver_steps` it took on a batch, and a `max_steps` bound the records measured it
    under (used in place of one from `solver_steps`)."""

    solver_steps: int | None = None
    max_steps: int | None = None


class AbstractLever(Registered, abc.ABC, registry=LEVERS):
    """A lever of the training step: it changes how one step computes, not the model it
    trains; each final subclass is one lever, registered by `name` (`LEVERS`).

    - `help`: one line saying what it does.
    - `controllers`, `devices`: the controllers and device kinds it applies to (None: all).
    - `faster_on`: the device kinds where the records measured it faster (None: every
      kind it applies to); the recommended step takes it there only.
    - `safe`: it cannot make a step slower; `--recommended` applies it before `tune`
      (`safe_on` may narrow it per scenario).
    - `fused_loop`: the recommended step takes it with the fused solve only.
    - `sets`: the fields it sets whatever the scenario (`fields`' default).
    """

    name: ClassVar[str]
    help: ClassVar[str] = ""
    fused_loop: ClassVar[bool] = False
    controllers: ClassVar[tuple[str, ...] | None] = None
    devices: ClassVar[tuple[str, ...] | None] = None
    faster_on: ClassVar[tuple[str, ...] | None] = None
    safe: ClassVar[bool] = False
    sets: ClassVar[dict[str, Any]] = {}

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        """The `Scenario` fields the lever sets on `s` (a ValueError for a missing fact)."""
        return dict(self.sets)

    def check(self, s: ScenarioLike) -> str | None:
        """Why the lever does not apply to `s`'s controller and device kind, or None."""
        if self.controllers is not None and s.controller not in self.controllers:
            return f"{self.name} applies to controller {', '.join(self.controllers)} only"
        if self.devices is not None and s.device not in self.devices:
            return f"{self.name} applies to device {', '.join(self.devices)} only"
        return None

    def refusal(self, s: ScenarioLike, facts: Facts | None = None) -> str | None:
        """Why the lever does not apply to `s`: `check`, then the scenario's own checks."""
        why = self.check(s)
        if why is not None:
            return why
        try:
            _replace(s, **self.fields(s, facts or Facts()))
        except ValueError as exc:
            return f"{self.name}: {exc}"
        return None

    def safe_on(self, s: ScenarioLike) -> bool:
        """Whether it cannot slow `s`'s step down (default: `safe`)."""
        return self.safe

    def tag(self, s: ScenarioLike, facts: Facts | None = None) -> str:
        """Its tag in a scenario's name (`Scenario.step_tag`)."""
        fields = self.fields(s, facts or Facts())
        return _replace(s.default_step(), **fields).step_tag()


class AbstractAddedLever(AbstractLever):
    """A lever with no scenario field of its own, named in `added_levers` (`spec`), its
    tag in scenario names `short`; it configures the step's compiler options and the
    model's form."""

    short: ClassVar[str]

    @classmethod
    def spec(cls) -> str:
        """How a scenario names it: `name` for the package's, else `module:Class`."""
        if cls.__module__.startswith("odestudy."):
            return cls.name
        return f"{cls.__module__}:{cls.__qualname__}"

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        added = s.added_levers
        return {"added_levers": added if self.spec() in added else (*added, self.spec())}

    def compiler_options(self) -> dict[str, Any]:
        """XLA options the step is compiled with (default: none)."""
        return {}

    def model(self, model: Any) -> Any:
        """The model the step trains, in the lever's form (default: `model`)."""
        return model


def resolve_lever(spec: str) -> AbstractAddedLever:
    """The added lever a scenario names: a registered name or `module:Class`."""
    module, sep, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if sep:
        try:
            found: Any = getattr(_import(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot load lever {spec!r}: {type(exc).__name__}: {exc}") from None
    else:
        added = {n: c for n, c in LEVERS.items() if issubclass(c, AbstractAddedLever)}
        found = lookup(added, "added lever", spec)
    if not (isinstance(found, type) and issubclass(found, AbstractAddedLever)):
        raise ValueError(f"lever {spec!r} is not an odestudy AbstractAddedLever")
    return found()


def get_lever(name: str) -> AbstractLever:
    """The registered lever `name`; a one-line ValueError naming the valid ones."""
    return lookup(LEVERS, "lever", name)()


def combine(
    s: ScenarioLike, levers: list[AbstractLever], facts: Facts | None = None
) -> dict[str, Any]:
    """The fields of `levers` together on `s` (a ValueError where they conflict)."""
    out: dict[str, Any] = {}
    for lever in levers:
        fields = lever.fields(_replace(s, **out), facts or Facts())
        for k, v in fields.items():
            if k in out and out[k] != v and k != "added_levers":
                raise ValueError(f"{lever.name} sets {k}={v!r}, another lever {k}={out[k]!r}")
            out[k] = v
    _replace(s, **out)  # validated
    return out
