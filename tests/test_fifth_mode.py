"""A fifth mode needs only its class: defining a final `AbstractMode` registers it, and
the report (tables, the answer's sentences, the figures) and `predict` take its label,
colour and whether it runs one loop over the global batch from the class, with no
KeyError anywhere. Synthetic records; nothing here compiles a step."""

from typing import ClassVar

import pytest

from odestudy import cli, predict
from odestudy.measure.modes import MODES, AbstractMode
from odestudy.measure.scenario import Scenario
from odestudy.report import workloads
from odestudy.report.claims import device_answer
from odestudy.report.frames import scaling_rows
from odestudy.report.heldout import Checked
from odestudy.report.plots import MODE_STYLE, scaling_figures
from odestudy.report.tables import render_blocks
from odestudy.report.verdict import verdict_body
from odestudy.study.rec import Rec

from .helpers import record


def bullets(rows, every):
    """The CPU answer's bullets (`claims.device_answer`)."""
    return list(device_answer(rows, every).bullets)


@pytest.fixture
def fifth():
    class Fifth(AbstractMode):
        """A mode that exists only in this test."""

        name: ClassVar[str] = "fifth"
        label: ClassVar[str] = "the fifth mode (`fifth`)"
        colour: ClassVar[str] = "tab:purple"
        one_loop: ClassVar[bool] = True
        multi_device: ClassVar[bool] = True
        multi_process: ClassVar[bool] = False
        twin_mode: ClassVar[str | None] = "shard_map"

        def build(self, devices, local_step, donate=False, layout=None):
            raise NotImplementedError("never compiled here")

    try:
        yield Fifth
    finally:
        MODES.pop("fifth", None)


def _records(mode: str) -> list[dict]:
    hardware = {"cpu_model": "a CPU", "physical_cores": 2, "logical_cpus": 2}
    out = []
    for m, n, step in (("single", 1, 0.02), ("shard_map", 2, 0.01), ("shard", 2, 0.04)):
        s = Scenario(scale="smoke", devices_per_process=n, mode=m)
        out.append(
            dict(
                record(s, step=step),
                hardware=hardware,
                collectives_total=1 if n > 1 else 0,
                collectives_in_loops=3 if m == "shard" else 0,
                solver_steps={"max": 15.0, "mean": 12.0},
            )
        )
    # The record of `mode`, also of one no class names (a scenario refuses such a mode).
    out[-1] = dict(out[-1], mode=mode, name=out[-1]["name"].replace("shard", mode))
    return out


def test_defining_the_class_registers_the_mode(fifth):
    assert MODES["fifth"] is fifth and list(MODES)[-1] == "fifth"
    assert MODE_STYLE["fifth"] == "tab:purple" and MODE_STYLE["unknown"] == "tab:gray"


def test_the_fifth_mode_is_a_choice_of_scenarios_and_the_command_line(fifth):
    s = Scenario(scale="smoke", devices_per_process=2, mode="fifth")
    assert isinstance(s.parallel, fifth) and s.name().startswith("cpu-2dev-fifth-pid")
    args = cli.parser().parse_args(["run", "--out", "x", "--mode", "fifth", "--devices", "2"])
    assert cli.scenario_from_args(args) == Scenario(mode="fifth", devices_per_process=2)
    with pytest.raises(
        ValueError, match="valid choices: single, pmap, shard, shard_map, explicit, fifth"
    ):
        Scenario(mode="sixth")


def test_predict_takes_the_fifth_mode_from_its_class(fifth):
    target = Scenario(scale="smoke", devices_per_process=2, mode="shard_map")
    assert "fifth" in predict.predicted_modes(target)
    terms = {"per_iteration_s": 1e-4, "iterations_step": 20.0}
    one_loop = predict.mode_time("fifth", terms, 1e-5, 2e-6, 3)
    assert one_loop["in_loop_s"] == pytest.approx(3 * 20 * 2e-6)
    assert predict.mode_time("shard_map", terms, 1e-5, 2e-6, 3)["in_loop_s"] == 0


def test_the_report_takes_the_fifth_mode_from_its_class(fifth, tmp_path):
    rows = scaling_rows(_records("fifth"))
    verdict = render_blocks(verdict_body(rows, "smoke"))
    assert "Slowest **fifth**" in verdict and "3 collective(s) inside its solver loops" in verdict
    claims = "\n".join(bullets(rows, _records("fifth")))
    assert "**Avoid the fifth mode (`fifth`) with PID**" in claims
    assert scaling_figures(rows, tmp_path, "cpu", 2)
    errors = [Checked(measured_s=0.04, predicted_s=0.03, in_loop_s=0.01, error=-0.25)]
    assert "`fifth`'s solver loop" in workloads._wrong_term(errors, "fifth")


def test_the_explain_and_version_pages_take_the_fifth_mode_s_facts(fifth):
    """Explain's collectives table sets a mode's step against its `twin_mode`'s (the
    fifth's, as `shard`'s: `shard_map`), and the version page gives the speedup of
    every mode that runs `one_loop`, named by its `label`."""
    from odestudy.builtin.explain import collectives
    from odestudy.builtin.versions import _sentences

    recs = [Rec(r, collectives={"total": 4, "in_loops": 3}) for r in _records("fifth")]
    grid = collectives(recs)[1]
    share = {row[0]: row[8] for row in grid.rows}  # the share of the step against the twin's
    assert share["fifth"] == "0.75" and share["shard_map"] == "–"  # 1 - 0.01 / 0.04
    lines = _sentences({"jax": scaling_rows(_records("fifth"))}, "jax")
    assert len(lines) == 1 and lines[0].startswith("- the fifth mode (`fifth`) speedup over 1")


def test_a_mode_no_class_names_is_drawn_and_named_without_a_key_error(tmp_path):
    recs = _records("retired")
    rows = scaling_rows(recs)
    assert "`retired`" in "\n".join(bullets(rows, recs))
    assert scaling_figures(rows, tmp_path, "cpu", 2)
