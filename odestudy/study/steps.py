"""Step files: the step `odestudy tune` chose for a problem (its levers as `Scenario`
fields, the measured speedup with its interval, the losses, machine and session), read
back by `--step FILE` and by `--recommended` (`recommended_step`), which falls back to
the safe levers (`recommended.safe_levers`) where nothing was measured."""

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from ..measure.recommended import recommended, safe_levers, study_measured
from ..measure.scenario import Scenario
from .records import DEFAULT_RESULTS, machine_folder

KIND = "odestudy.step"
FOLDER = "tune"
# What a step file must hold, and the scenario facts a step applies to.
REQUIRED = ("kind", "problem", "controller", "device", "scale", "fields", "levers")
MATCHED = ("problem", "controller", "device")


def step_path(s: Scenario, results: str | Path = DEFAULT_RESULTS) -> Path:
    """Where `tune` records the step of `s`'s problem, controller, device kind and scale here."""
    problem = re.sub(r"[^A-Za-z0-9_]", "_", s.problem)
    return machine_folder(results) / FOLDER / f"{s.device}-{problem}-{s.controller}-{s.scale}.json"


def read_step(path: str | Path) -> dict[str, Any]:
    """A step file; a one-line ValueError where it is missing or not one."""
    try:
        step = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read step file {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"step file {path} is not JSON: {exc}") from None
    missing = [k for k in REQUIRED if not isinstance(step, dict) or k not in step]
    if missing or step.get("kind") != KIND:
        raise ValueError(
            f"{path} is not a step file of odestudy tune (kind {KIND!r}; missing "
            f"{', '.join(missing) or 'nothing'})"
        )
    return step


def apply_step(s: Scenario, step: dict[str, Any], path: str | Path = "the step") -> Scenario:
    """`s` with the levers of `step`; a one-line ValueError where the step was tuned for
    another problem, controller or device kind, or sets what is no lever."""
    for fact in MATCHED:
        if getattr(s, fact) != step[fact]:
            raise ValueError(
                f"{path} was tuned for {fact} {step[fact]!r}; this scenario has "
                f"{getattr(s, fact)!r} (run odestudy tune for it)"
            )
    return dataclasses.replace(s, **lever_fields(step, path))


def lever_fields(step: dict[str, Any], path: str | Path = "the step") -> dict[str, Any]:
    """A step file's levers (`fields`); a one-line ValueError where one is not a lever."""
    fields = dict(step["fields"])
    others = sorted(set(fields) - set(Scenario.levers()))
    if others:
        raise ValueError(f"{path} sets {', '.join(others)}: not levers of the step")
    return fields


def recommended_step(s: Scenario, results: str | Path = DEFAULT_RESULTS) -> tuple[Scenario, str]:
    """`s` with the recommended step and why, in words: the step `tune` recorded for it,
    else the study's step for a problem it measured (`recommended.recommended`), else
    the safe levers only (`recommended.safe_levers`: none can make the step slower)."""
    path = step_path(s, results)
    if path.exists():
        step = read_step(path)
        if not step["levers"]:
            return s.default_step(), (
                f"the default step: odestudy tune measured nothing faster ({path})"
            )
        chosen = apply_step(s, step, path)
        lo, hi = step.get("speedup_ci") or (float("nan"), float("nan"))
        return chosen, (
            f"the step odestudy tune measured for it ({path}): {', '.join(step['levers'])}, "
            f"speedup {step.get('speedup', float('nan')):.2f}x [{lo:.2f}, {hi:.2f}]"
        )
    if study_measured(s):
        return recommended(s), (
            "the study's step for it, measured along its map (data/measured_steps.json; "
            "odestudy tune measures it on this machine)"
        )
    names, fields = safe_levers(s)
    chosen = dataclasses.replace(s, **fields)
    said = ", ".join(names) or "none"
    return chosen, (
        f"no tune recorded for it here ({path}): only the levers that "
        f"cannot slow it down ({said}); run odestudy tune for the fastest"
    )


@dataclasses.dataclass(frozen=True)
class Step:
    """The step `odestudy tune` chose (`load_step`), for a researcher's own loop:
    its levers as `Scenario` `fields`, the step file as `measured`, and its `mode` on
    `devices` devices. In the loop: `step.model(model)`, `step.solve(problem)` (the
    solve your loss calls) and `odestudy.make_step(loss, optimiser, step=step)`.
    """

    problem: str
    controller: str
    device: str
    scale: str
    fields: dict[str, Any]
    measured: dict[str, Any]
    mode: str = "single"
    devices: int = 1

    def scenario(self, **fields: Any) -> Scenario:
        """The scenario the step runs: its levers in its mode on its devices (`fields`
        set beside or instead of them: another mode, a schedule)."""
        facts = dict(
            problem=self.problem,
            controller=self.controller,
            device=self.device,
            scale=self.scale,
            mode=self.mode,
            devices_per_process=self.devices,
        )
        return Scenario(**{**facts, **self.fields, **fields})

    def solve(self, problem: Any = None, **facts: Any) -> Any:
        """The batched solve (`model.BatchSolve`) a problem's loss receives with this step,
        `solve(field, ts, y0, args)`: for `problem` (default the one tuned for), or for a
        loss without a problem class its facts alone (`problem.GivenFacts`); a one-line
        ValueError where the step cannot solve such a problem (one ODE, uneven grids)."""
        from ..measure.model import BatchSolve  # JAX loads with a solve only
        from ..measure.problem import GivenFacts  # JAX loads with a problem only

        s = self.scenario()
        if not facts:
            return BatchSolve(s.ode_solve(problem))
        if problem is not None:
            raise ValueError("give a problem or its facts, not both")
        names = [f.name for f in dataclasses.fields(GivenFacts) if f.name != "name"]
        unknown = sorted(set(facts) - set(names))
        missing = [n for n in ("time_dependent", "uniform_grid") if n not in facts]
        if unknown or missing:
            raise ValueError(
                f"a problem's facts are {', '.join(names)} (time_dependent and uniform_grid "
                f"required); got {', '.join(unknown) or 'none'} unknown, "
                f"{', '.join(missing) or 'none'} missing"
            )
        given = GivenFacts(**facts)
        if s.structure.solve_kind.one_ode and not given.uniform_grid:
            raise ValueError(
                f"the step's solve {s.solve!r} batches the series as one ODE and needs "
                "evenly spaced grids; uniform_grid=False"
            )
        # The solve reads only a problem's facts (its tolerances, `time_dependent`).
        return BatchSolve(dataclasses.replace(s.ode_solve(), problem=given))  # type: ignore[arg-type]

    def model(self, model: Any, problem: Any = None) -> Any:
        """`model` as the step trains it (`training.step_model`: faster activations, the
        added levers' changes); a `ProblemError` where a lever refuses it. `problem`:
        named in that error (default the one the step was tuned for)."""
        from ..measure.problem import as_ode_problem  # JAX loads with a model only
        from ..measure.training import step_model

        s = self.scenario()
        return step_model(s, s.ode_problem if problem is None else as_ode_problem(problem), model)

    @property
    def donate(self) -> bool:
        """Whether the step reuses its parameters' and optimiser state's buffers."""
        return bool(self.scenario().donate)

    def compiler_options(self) -> dict[str, Any] | None:
        """The XLA options the step is compiled with (`step.step_options`), or None."""
        from ..measure.step import step_options  # JAX loads with a step only

        return step_options(self.scenario())


def load_step(path: str | Path) -> Step:
    """The step file `odestudy tune` wrote at `path` as a `Step`; a one-line ValueError
    where it is not one (`read_step`) or its levers are not valid fields."""
    return step_of_tune(read_step(path), path)


def step_of_tune(found: dict[str, Any], path: str | Path = "the step") -> Step:
    """What `tune` found (a step file's content) as a `Step` (validated, as `load_step`)."""
    step = Step(found["problem"], found["controller"], found["device"], found["scale"],
                lever_fields(found, path), found, found.get("mode", "single"),
                int(found.get("devices", 1)))  # fmt: skip
    step.scenario()  # validated: a one-line ValueError where the levers do not fit
    return step
