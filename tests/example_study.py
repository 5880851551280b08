"""A study defined in one file, outside the package: its scenarios (one smoke row), one
table and its page. `odestudy matrix --study tests.example_study:TinyStudy` runs it and
`odestudy report --study tests.example_study:TinyStudy` writes its table and page, with
no edit to the package (tests/test_studies.py)."""

from typing import ClassVar

from odestudy.measure.scenario import Scenario
from odestudy.study.studies import Grid, ReportInputs, Study, Table, Text


class TinyStudy(Study):
    """The 1-device StepTo row at a scale, once."""

    name: ClassVar[str] = "tiny"
    title: ClassVar[str] = "A tiny study"
    repeated: ClassVar[bool] = False

    def scenarios(self, scale, device="auto", full=False):
        return [Scenario(scale=scale, mode="single", controller="stepto")], []

    def tables(self, inputs: ReportInputs) -> list[Table]:
        rows = tuple(
            (
                r["name"],
                r["status"],
                f"{r['step_time_s'] * 1e3:.3g}" if r.get("step_time_s") else "–",
            )
            for r in inputs.records
        )
        header = ("Scenario", "Status", "Step time (ms)")
        body = (Grid(header, rows), Text("One run each."))
        return [Table("tiny", "Step time of the tiny study", body)]

    def intro(self, scale: str) -> str:
        return f"The 1-device StepTo row at the {scale} scale."
