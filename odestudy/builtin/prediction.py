"""The prediction study: `odestudy predict --rows` checked against the measured rows,
and the machine probes; its runs are `odestudy predict`'s; its table
(`report.prediction`)."""

from typing import ClassVar

from ..report.prediction import prediction_table
from ..study.studies import Page, ReportInputs, Study, Table


class Prediction(Study):
    """The prediction (`odestudy predict --rows`) checked against the measured rows, and
    the machine probes: no matrix scenarios (its runs are `odestudy predict`'s)."""

    name: ClassVar[str] = "prediction"
    order: ClassVar[int] = 9
    title: ClassVar[str] = "The prediction checked"
    page: ClassVar[Page | None] = Page(
        "prediction",
        "The prediction (`odestudy predict`) checked, and the machine probes",
        ("prediction",),
    )

    def scenarios(self, scale, device="auto", full=False):
        return [], []

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its table, for the CPU table's machine."""
        return [prediction_table(inputs.results, inputs.machines["cpu"])]
