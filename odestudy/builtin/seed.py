"""The reference configuration (`make seed`): the scaling rows of the seed scale and
their time-to-target rows at its batch, one run each; its table, ours beside the
reference's rows (`report.reference`)."""

from typing import ClassVar

from ..measure.scenario import SCALES, Scenario
from ..report.reference import REFERENCE_CSV, comparison_table, reference_rows, seed_rows
from ..study.grid import KINDS, scaling_plan, target_scenarios
from ..study.studies import THIS_MACHINE, Page, ReportInputs, Study, Table
from .scaling import Scaling

# The seed study's scale: the reference's configuration.
SEED_SCALE = "seed"


class Seed(Study):
    """The reference's configuration (`make seed`); at any other scale, none."""

    name: ClassVar[str] = "seed"
    order: ClassVar[int] = 7
    title: ClassVar[str] = "The reference configuration"
    scaling_table: ClassVar[bool] = True
    page: ClassVar[Page | None] = Page(
        "seed",
        "The reference configuration (`make seed`)",
        ("reference", "cpu", "gpu", "explain", "skipped"),
        ("headline_speedup", "time_to_target", "gpu_step_cost"),
        scales=(SEED_SCALE,),
        answer=True,
    )

    def scenarios(self, scale, device="auto", full=False):
        return self.planned(scale, device, full)

    def planned(self, scale, device="auto", full=False, sizing=THIS_MACHINE):
        """Whole at its scale: `sizing` says only which GPUs are present."""
        if scale != SEED_SCALE:
            return [], []
        runnable, not_run = scaling_plan(scale, device, full, sizing)
        if "cpu" in KINDS[device]:
            batch = SCALES[scale]["batch"]
            runnable += [s for s in target_scenarios(scale) if s.batch == batch]
        return runnable, not_run

    def matrix(self, scale: str) -> list[Scenario]:
        return Scaling().matrix(scale) if scale == SEED_SCALE else []

    def current(self, scale: str, problem: str) -> list[Scenario]:
        return Scaling().current(scale, problem) if scale == SEED_SCALE else []

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Ours beside the reference's rows, from the seed scale's records."""
        reference = reference_rows(inputs.reference or REFERENCE_CSV)
        body = comparison_table(seed_rows(inputs.results), reference)
        return [Table("reference", "Ours beside the reference", tuple(body))]
