"""The scaling study: every mode and controller on the device counts of a machine
(`grid.scaling_plan`), its records the rows of the scaling tables; its page's tables and
figures, and the scale's claims (`findings.findings`)."""

from pathlib import Path
from typing import ClassVar

from ..measure.recommended import recommended as apply
from ..measure.scenario import Scenario
from ..report.best import DEFAULT_STEP
from ..report.device_tables import device_table, no_rows
from ..report.findings import findings
from ..report.frames import in_scaling_matrix, scaling_rows
from ..report.gpu import gpu_extra, gpu_predictions, headline_figure, predicted_section
from ..report.machines import machines_table, skipped_table
from ..report.plots import scaling_figures, step_cost_figure
from ..report.projection import all_sweeps, projection_table
from ..report.provenance import provenance_table
from ..report.reference import REFERENCE_CSV, reference_rows
from ..report.verdict import verdict_body
from ..study.claim import Claim
from ..study.grid import KINDS, for_problem, node_scenarios, scaling_plan, scenarios
from ..study.rec import Rec
from ..study.studies import THIS_MACHINE, Block, Page, ReportInputs, Study, Table, Text


class Scaling(Study):
    """The scaling tables: every mode and controller on the device counts here."""

    name: ClassVar[str] = "scaling"
    order: ClassVar[int] = 1
    title: ClassVar[str] = "Quick scaling"
    ceiling: ClassVar[bool] = True
    recommendable: ClassVar[bool] = True
    scaling_table: ClassVar[bool] = True
    sized: ClassVar[bool] = True
    page: ClassVar[Page | None] = Page(
        "quick",
        "Quick scaling (`make all`)",
        ("cpu", "gpu", "machines", "projection", "skipped", "provenance"),
        ("headline_speedup", "cpu_strong_scaling", "cpu_weak_scaling"),
        answer=True,
        readme="quick scaling",
    )

    def scenarios(self, scale, device="auto", full=False):
        return scaling_plan(scale, device, full)

    def planned(self, scale, device="auto", full=False, sizing=THIS_MACHINE):
        return scaling_plan(scale, device, full, sizing)

    def matrix(self, scale: str) -> list[Scenario]:
        return [s for d in KINDS["auto"] for s in scenarios(scale, d)]

    def current(self, scale: str, problem: str) -> list[Scenario]:
        """Its matrix, the same with the recommended levers (`odestudy matrix
        --recommended`) and the rows over several hosts (`node_scenarios`)."""
        found = for_problem(self.matrix(scale), problem)
        return found + [apply(s) for s in found] + for_problem(node_scenarios(scale), problem)

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """The projection, the CPU and GPU tables, the verdict, the machines compared,
        the records left out and their provenance."""
        devices = device_tables(inputs)
        verdict = tuple(verdict_body(inputs.rows, inputs.scale))
        drawn = headline_figure(_by_scaling(inputs.rows), inputs.figures) if inputs.draw else None
        headline = (drawn,) if drawn else ()
        machines = tuple(machines_table(list(inputs.records), inputs.machines))
        skipped = (skipped_table(list(inputs.skipped)),)
        return [
            *devices,
            Table("verdict", f"Verdict ({inputs.scale} scale)", verdict, headline),
            Table("machines", "Machines compared", machines),
            Table("skipped", "Records left out of the report", skipped),
            Table("provenance", "Provenance", tuple(provenance_table(inputs.results))),
        ]

    def claims(self, inputs: ReportInputs) -> list[Claim]:
        """The scale's claims (`findings.findings`)."""
        return findings(inputs.results, inputs.scale, list(inputs.rows)).claims()


def _by_scaling(rows: tuple[Rec, ...]) -> list[Rec]:
    """The figures' rows: the default step's ok rows, each mode over its 1 device."""
    recs = [r for r in rows if r.ok and r.step == DEFAULT_STEP]
    return [r for k in ("strong", "weak") for r in scaling_rows(recs, k)]


def _figures(inputs: ReportInputs, device: str) -> list[Path]:
    """With `inputs.draw`, the scaling figures of `device` (and for GPUs, the step-cost
    figure of every GPU machine's sweeps); else none."""
    if not inputs.draw:
        return []
    sel = [r for r in _by_scaling(inputs.rows) if r["device"] == device]
    cores = next(((r.get("hardware") or {}).get("physical_cores") for r in sel), None)
    figs = scaling_figures(sel, inputs.figures, device, cores)
    if device == "gpu":
        machines = sorted({r["machine_id"] for r in inputs.records if r["device"] == "gpu"})
        sweeps = [s for m in machines for s in all_sweeps(inputs.results / m, "gpu")]
        figs += step_cost_figure(sweeps, inputs.figures, "gpu_step_cost") if sweeps else []
    return figs


def device_tables(inputs: ReportInputs) -> list[Table]:
    """The projection and the device tables (`cpu`, `gpu`), each with its figures."""
    every, rows = list(inputs.records), list(inputs.rows)
    results, scale = inputs.results, inputs.scale
    reference = reference_rows(inputs.reference or REFERENCE_CSV)
    cpu_machines = sorted({r["machine_id"] for r in every if r["device"] == "cpu"})
    cpu = [r for r in every if r["device"] == "cpu" and in_scaling_matrix(r)]
    by_machine = {m: scaling_rows([r for r in cpu if r["machine_id"] == m]) for m in cpu_machines}
    gpu_rows = [r for r in rows if r["device"] == "gpu"]
    cpu_rows = [r for r in rows if r["device"] == "cpu"]
    projection, projected = projection_table(
        results, by_machine, gpu_rows, inputs.machines["gpu"], cpu_rows
    )
    # The GPU rows predicted from one GPU, beside the measured ones (or alone).
    gpu_predicted = predicted_section(gpu_predictions(results, scale), every)
    predicted: dict[str, list[Block]] = {"cpu": [], "gpu": gpu_predicted}
    out, guide = [projection], True  # how to read the tables: once, in the first with rows
    for device in ("cpu", "gpu"):
        if not any(r["device"] == device and r["status"] == "ok" for r in rows):
            body = [Text(no_rows(rows, results, device, scale)), *predicted[device]]
        else:
            extra = gpu_extra(gpu_rows, projected, reference) if device == "gpu" else []
            body = device_table(rows, device, predicted[device] + extra, guide)
            guide = False
        out.append(
            Table(device, f"{device.upper()} table", tuple(body), tuple(_figures(inputs, device)))
        )
    return out
