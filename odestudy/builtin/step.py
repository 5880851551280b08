"""The step study: what bounds one training step and the levers on it, from each
machine's lever and loss-spread records (`benchmarks/levers.py`, `report.step`)."""

from pathlib import Path
from typing import Any, ClassVar

from ..report import sessions
from ..report.floor import gpu_lever_section
from ..report.plots import step_cost_figure
from ..report.projection import all_sweeps
from ..report.step import step_table
from ..study import records
from ..study.rec import Rec
from ..study.studies import Page, ReportInputs, Study, Table

# A machine's folder of lever and loss-spread records (`benchmarks/levers.py`).
LEVERS_FOLDER = "levers"
# Its CPU lever records (one per controller) and its loss spreads (one per controller).
LEVER_RECORDS = "cpu-*.json"
LOSS_SPREADS = "loss-spread-*.json"


class Step(Study):
    """What bounds one training step, and the levers on it: no matrix scenarios (its runs
    are `benchmarks/levers.py`'s and `benchmarks/step_cost.py`'s)."""

    name: ClassVar[str] = "step"
    order: ClassVar[int] = 8
    title: ClassVar[str] = "The step: what bounds it, and the levers"
    page: ClassVar[Page | None] = Page(
        "step", title, ("step",), ("cpu_step_cost",), readme="the step"
    )

    def scenarios(self, scale, device="auto", full=False):
        return [], []

    def lever_records(self, results: str | Path, machine: str) -> list[dict[str, Any]]:
        """`machine`'s CPU lever records under `results`, each with its `path`."""
        paths = records.side_study_paths(Path(results) / machine, LEVERS_FOLDER, LEVER_RECORDS)
        return [{**records.read_json(p), "path": str(p)} for p in paths]

    def loss_spreads(self, results: str | Path, machine: str) -> dict[str, dict[str, Any]]:
        """`machine`'s run-to-run loss spreads of the default, by controller."""
        paths = records.side_study_paths(Path(results) / machine, LEVERS_FOLDER, LOSS_SPREADS)
        return {r["scenario"]["controller"]: r for p in paths if (r := records.read_json(p))}

    def records(self, results: str | Path, scale: str) -> list[Rec]:
        """Every machine's CPU lever records under `results` (any scale)."""
        paths = records.every_machines(results, LEVERS_FOLDER, LEVER_RECORDS)
        return [Rec({**records.read_json(p), "path": str(p)}) for p in paths]

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """The step page's table of the CPU table's machine, then the GPU levers' lines;
        with `inputs.draw`, the CPU step-cost figure."""
        results, machine = inputs.results, inputs.machines["cpu"]
        cpu_sweeps = all_sweeps(results / machine, "cpu")
        levers = self.lever_records(results, machine)
        found = sessions.index(results)
        for side in [*cpu_sweeps, *levers]:
            side["session"] = found.get(str(Path(side["path"]).resolve()))
        spreads = self.loss_spreads(results, machine)
        drawn = cpu_sweeps and inputs.draw
        figs = step_cost_figure(cpu_sweeps, inputs.figures, "cpu_step_cost") if drawn else []
        body = (*step_table(cpu_sweeps, levers, spreads), *gpu_lever_section(results))
        title = "What bounds a training step, and the levers on it"
        return [Table("step", title, body, tuple(figs))]
