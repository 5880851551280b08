"""A lever of the training step as a type: what it sets of a scenario, what it applies
to (with a one-line refusal before anything compiles), and whether it can slow a step
down. `odestudy tune` tries each registered lever on a researcher's problem
(`odestudy/tune.py`); `--recommended` applies the safe ones before any tune
(`recommended.safe_levers`). Adding a lever is one file: a final subclass of
`AbstractLever` (the shipped ones are in `odestudy/measure/levers/`)."""

import abc
import dataclasses
from typing import Any, ClassVar, NamedTuple

from .registry import Registered, lookup
from .scenario import Scenario

# Every lever by name, in the order defined: each final subclass of `AbstractLever`
# registers itself here when its class is defined.
LEVERS: dict[str, type["AbstractLever"]] = {}


class Facts(NamedTuple):
    """What `odestudy tune` measured of the trained model, that a lever may read.

    - `solver_steps`: the most solver steps the trained field took on a batch (None:
      not measured, as before any tune).
    """

    solver_steps: int | None = None


class AbstractLever(Registered, abc.ABC, registry=LEVERS):
    """A lever of the training step: it changes how one step computes, not the model it
    trains. Abstract: each final subclass is one lever, registered by `name` (`LEVERS`).

    - `name`: its name in `tune`'s table, step files and the levers benchmark.
    - `controllers`: the controllers it applies to (None: all).
    - `devices`: the device kinds it applies to (None: all).
    - `safe`: it cannot make a step slower (the same arithmetic, less control flow, no
      unbounded buffer); `--recommended` applies it before `tune` has measured the
      problem. `safe_on` may narrow it per scenario.
    """

    name: ClassVar[str]
    help: ClassVar[str] = ""
    controllers: ClassVar[tuple[str, ...] | None] = None
    devices: ClassVar[tuple[str, ...] | None] = None
    safe: ClassVar[bool] = False

    @abc.abstractmethod
    def fields(self, s: Scenario, facts: Facts) -> dict[str, Any]:
        """The `Scenario` fields the lever sets on `s`, with those it needs (the fused
        solve's reverse loop for `mlp_reverse`, say); a ValueError (one line) where it
        cannot say without a fact `facts` lacks."""

    def refusal(self, s: Scenario, facts: Facts | None = None) -> str | None:
        """Why the lever does not apply to `s` (one line), or None where it does: its
        controllers and device kinds, then the scenario's own checks of its fields
        (`scenario.validate`), all before anything compiles."""
        facts = facts or Facts()
        if self.controllers is not None and s.controller not in self.controllers:
            return f"{self.name} applies to controller {', '.join(self.controllers)} only"
        if self.devices is not None and s.device not in self.devices:
            return f"{self.name} applies to device {', '.join(self.devices)} only"
        try:
            dataclasses.replace(s, **self.fields(s, facts))
        except ValueError as exc:
            return f"{self.name}: {exc}"
        return None

    def safe_on(self, s: Scenario) -> bool:
        """Whether it cannot slow `s`'s step down (default: `safe`)."""
        return self.safe

    def tag(self, s: Scenario, facts: Facts | None = None) -> str:
        """Its tag in a scenario's name: the tags of the fields it sets
        (`Scenario.step_tag`)."""
        fields = self.fields(s, facts or Facts())
        return dataclasses.replace(s.default_step(), **fields).step_tag()


def get_lever(name: str) -> AbstractLever:
    """The registered lever `name`; a one-line ValueError naming the valid ones."""
    return lookup(LEVERS, "lever", name)()


def combine(s: Scenario, levers: list[AbstractLever], facts: Facts | None = None) -> dict[str, Any]:
    """The fields of `levers` together on `s`; a ValueError (one line) where two set a
    field to different values or the combination is not a valid scenario."""
    out: dict[str, Any] = {}
    for lever in levers:
        for k, v in lever.fields(s, facts or Facts()).items():
            if k in out and out[k] != v:
                raise ValueError(f"{lever.name} sets {k}={v!r}, another lever {k}={out[k]!r}")
            out[k] = v
    dataclasses.replace(s, **out)  # validated
    return out
