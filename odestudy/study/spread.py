"""The run-to-run spread of a problem's final loss on this machine: its default step
trained from `SEEDS` (data, initial model and batches), one after another in this
process. The equal-loss rule (`report.loss.verdict`) reads it for every pair of rows of
that problem, controller and scale here; `odestudy tune` measures it where none was
(`benchmarks/loss_spread.py` measures it for the map's workloads)."""

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..measure.scenario import Scenario

# The seeds a spread is measured over (the first is the scenarios' default seed).
SEEDS = (5678, 1, 2, 3)
METHOD = (
    "the default scenario trained from each seed, one after another; spread = (max - min) "
    "/ median of the final evaluation losses"
)


def spread_path(folder: str | Path, s: Scenario) -> Path:
    """Where machine folder `folder` keeps the spread of `s`'s problem, width,
    controller and scale."""
    name = f"loss-spread-{s.problem_object.name}-w{s.width}-{s.controller}-{s.scale}.json"
    return Path(folder) / "levers" / name.replace(":", "_")


def measure_spread(
    s: Scenario, first_loss: float | None = None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """The spread record of `s`'s default step over `SEEDS`; `first_loss`: the final loss
    already trained from `s`'s own seed (trained again where None)."""
    # JAX's training starts devices: only once a spread is measured (the report reads
    # this module's names without it).
    from ..measure.training import environment, scenario_devices, train

    rows = []
    for seed in (s.seed, *(k for k in SEEDS if k != s.seed))[: len(SEEDS)]:
        if seed == s.seed and first_loss is not None:
            loss = first_loss
        else:
            run = dataclasses.replace(s.default_step(), seed=seed)
            loss = float(train(run, scenario_devices(run))["final_loss"])
        rows.append({"seed": seed, "final_loss": loss})
        log(f"  seed {seed}: final loss {loss:.4g}")
    losses = np.asarray([r["final_loss"] for r in rows])
    return {
        "scenario": s.default_step().to_dict(),
        "kind": "loss_spread",
        "method": METHOD,
        "rows": rows,
        "median_loss": float(np.median(losses)),
        "spread_relative": float(np.ptp(losses) / np.median(losses)),
        "workload": None,
        **environment(s),
    }
