"""The compute floor (`measure.floor`): the FLOPs of one field evaluation over the
batch, forward and backward, counted by XLA on loop-free programs, against the field's
own arithmetic; and the floor's arithmetic."""

import pytest

from odestudy import Scenario
from odestudy.measure.floor import STAGES_PER_STEP, evaluation_flops, floor_time
from odestudy.report.tables import render_blocks
from odestudy.study.rec import FloorCounts, LeverRecord


@pytest.mark.parametrize("width", [64])
def test_one_evaluation_counts_the_fields_matmuls_forward_and_backward(width):
    """The oscillator's field, an MLP 2 -> width -> width -> 2: `2 (2w + w^2 + 2w)`
    FLOPs forward per series; the backward pass of each matmul is two more of its
    size, so forward and backward together are about three times the forward."""
    s = Scenario(scale="smoke", width=width)
    flops = evaluation_flops(s)
    forward = 2 * (2 * width + width**2 + 2 * width) * s.batch
    assert flops["batch"] == s.batch
    assert 2.5 * forward < flops["per_evaluation"] < 4 * forward
    assert 0 <= flops["rest"] < flops["per_evaluation"]
    # The forward pass alone: about a third of forward and backward together.
    assert forward * 0.8 < flops["per_evaluation_forward"] < flops["per_evaluation"] / 2
    # The field's tanh: one per hidden unit per series and evaluation, counted apart.
    assert flops["per_evaluation_transcendentals"] >= 2 * width * s.batch
    # The least bytes: the MLP's parameters (2w + w + w^2 + w + 2w + 2 floats) read and
    # written once, and the batch read once (its series at least).
    params = 4 * (2 * width + width + width**2 + width + 2 * width + 2)
    assert flops["least_bytes"] > 2 * params + 4 * 2 * s.batch


def test_floor_time_is_the_evaluations_arithmetic_at_the_rate():
    flops = {"per_evaluation": 1e6, "rest": 2e6, "batch": 32}
    steps = 20
    expected = (2e6 + (STAGES_PER_STEP * steps + 1) * 1e6) / 1e9
    assert floor_time(flops, steps, 1e9) == pytest.approx(expected)


def test_the_reverse_pass_is_charged_for_the_steps_it_runs_and_transcendentals_at_their_rate():
    flops = {"per_evaluation": 3e6, "per_evaluation_forward": 1e6, "rest": 0.0, "batch": 32}
    flops |= {"per_evaluation_transcendentals": 1e4, "rest_transcendentals": 0.0}
    forward, reverse = STAGES_PER_STEP * 20 + 1, STAGES_PER_STEP * 15 + 1
    arithmetic = (forward * 1e6 + reverse * 2e6) / 1e9
    assert floor_time(flops, 20, 1e9, reverse_steps=15) == pytest.approx(arithmetic)
    assert floor_time(flops, 20, 1e9, 15, transcendentals_per_s=1e8) == pytest.approx(
        arithmetic + forward * 1e4 / 1e8
    )


def _lever_record(tmp_path, name: str, floor: dict | None, labels=("default", "fast")):
    """A levers record: each variant's blocks of step times, its executed solver steps
    and final loss; written at `tmp_path / name` (a floor counted in it, or none)."""
    import json

    rows = [
        {
            "label": label,
            "levers": {},
            "step_time_s": 0.010 / (i + 1),
            "step_times_runs_s": [[0.010 / (i + 1)] * 5, [0.011 / (i + 1)] * 5],
            "solver_steps_max": 20,
            "final_loss": 0.004,
        }
        for i, label in enumerate(labels)
    ]
    rec = {"rows": rows, "scenario": {"controller": "pid", "scale": "quick"}, "versions": {}}
    if floor is not None:
        rec["floor"] = floor
    path = tmp_path / name
    path.write_text(json.dumps(rec))
    return LeverRecord(rec, path=str(path))


FLOOR = {"per_evaluation": 1e6, "rest": 0.0, "batch": 32, "width": 64, "matmul_flops_per_s": 1e11}


def test_a_rows_ratio_to_its_floor_is_its_median_over_the_floor(tmp_path):
    from odestudy.report.floor import floor_cells, floor_ratio, row_floor_s

    rec = _lever_record(tmp_path, "cpu-pid.json", FLOOR)
    default = rec.rows[0]
    floor = (6 * 20 + 1) * 1e6 / 1e11  # 121 evaluations at 1e11 FLOP/s: 1.21 ms
    assert row_floor_s(rec, default) == pytest.approx(floor)
    ratio, low, high = floor_ratio(rec, default)
    assert low <= ratio <= high
    assert ratio == pytest.approx(default["step_time_s"] / floor, rel=0.1)
    assert floor_cells(rec, default)[0] == "1.21"


def test_the_rates_of_every_round_widen_the_ratios_interval(tmp_path):
    """A record that measured the floor's rate in every round of blocks takes its median
    for the floor, and the ratio's interval covers the rounds' spread; a record with one
    probe's rate, the step's alone."""
    from odestudy.report.floor import floor_ratio, row_floor_s

    rounds = [0.8e11, 0.9e11, 1.0e11, 1.1e11, 1.2e11]
    spread = {**FLOOR, "matmul_flops_per_s_rounds": rounds}
    one = _lever_record(tmp_path, "one.json", FLOOR)
    many = _lever_record(tmp_path, "many.json", spread)
    row = many.rows[0]
    assert row_floor_s(many, row) == pytest.approx(row_floor_s(one, row))
    ratio, low, high = floor_ratio(many, row)
    ratio1, low1, high1 = floor_ratio(one, one.rows[0])
    assert ratio == pytest.approx(ratio1)
    assert low < low1 <= high1 < high


def test_a_record_without_a_floor_reads_its_sidecar_or_says_none(tmp_path):
    import json

    from odestudy.report.floor import SIDECAR, floor_cells, gpu_lever_section, row_counts

    rec = _lever_record(tmp_path, "gpu-pid-quick.json", None)
    assert floor_cells(rec, rec.rows[0]) == ["–", "–"]
    machine = tmp_path / "results" / "m" / "levers"
    machine.mkdir(parents=True)
    (machine / "gpu-pid-quick.json").write_text(json.dumps({**rec, "machine_id": "m"}))
    sidecar = {**FLOOR, "tree_commit": "abc1234def"}
    (machine / ("gpu-pid-quick" + SIDECAR)).write_text(json.dumps(sidecar))
    text = render_blocks(gpu_lever_section(tmp_path / "results"))
    assert "commit abc1234" in text
    fast = next(line for line in text.splitlines() if line.startswith("| fast "))
    cells = [c.strip() for c in fast.strip("|").split("|")]
    assert cells[1] == "5.00"  # its step
    # On a GPU no floor from the launch-bound probe: its counts (the sidecar's) feed the
    # roofline, which this machine has not read.
    assert "Floor (ms)" not in text and "No roofline was read on this machine" in text
    stored = LeverRecord(rec, path=str(machine / "gpu-pid-quick.json"))
    assert row_counts(stored, rec.rows[1])["tree_commit"] == "abc1234def"


def test_the_map_fused_section_shows_each_gpus_records_and_what_it_did_not_measure(tmp_path):
    """A GPU's `gpu_session.sh mapfused` records get their own table, with the machine,
    the session and the commit named, and the workload pairs not measured there listed;
    a CPU machine's map records do not."""
    import json

    from odestudy.report.floor import fused_machines, fused_section
    from odestudy.study.workloads import WORKLOADS

    labels = ("default", "recommended", "recommended-fused")
    w = WORKLOADS[0]
    for machine, device in (("gpu-box", "gpu"), ("cpu-box", "cpu")):
        folder = tmp_path / "map" / machine / "fused"
        folder.mkdir(parents=True)
        rec = _lever_record(tmp_path, "x.json", FLOOR, labels)
        rec.update(
            workload=w.name,
            machine_id=machine,
            scenario={"controller": "pid", "scale": "quick", "device": device},
            versions={"jax": "0.11.2"},
            probe={"device_kind": "Some GPU"},
            started="2026-11-26T05:55:00+00:00",
            finished="2026-11-26T05:57:00+00:00",
            git_commit="abcdef1234",
        )
        (folder / f"{w.slug()}-pid.json").write_text(json.dumps(rec))
    assert fused_machines(tmp_path, "gpu") == ["gpu-box"]
    text = render_blocks(fused_section(tmp_path, "cpu-box"))
    gpu = text[text.index("### On one GPU: gpu-box (Some GPU)") :]
    # A commit this repository does not hold is said so (`sessions.UNKNOWN`).
    assert "Session: gpu-box, 2026-11-26 05:55–05:57 UTC (commit abcdef1" in gpu
    assert f"{w.name} stepto" in gpu and f"{w.name} pid," not in gpu  # measured: not listed
    assert gpu.count(f"| {w.name} ") == 1
    assert "cpu-box" not in gpu


def test_the_map_fused_section_shows_every_cpu_machines_records_the_pages_first(tmp_path):
    """Each CPU machine that ran `make map-fused` gets its own table (the page's machine
    first), with what it did not measure: none is hidden behind the page's machine."""
    import json

    from odestudy.report.floor import fused_machines, fused_section
    from odestudy.study.workloads import WORKLOADS

    labels = ("default", "recommended", "recommended-fused")
    for machine, workloads in (("cpu-a", WORKLOADS[:1]), ("cpu-b", WORKLOADS[:2])):
        folder = tmp_path / "map" / machine / "fused"
        folder.mkdir(parents=True)
        for w in workloads:
            rec = _lever_record(tmp_path, "x.json", FLOOR, labels)
            rec.update(
                workload=w.name,
                machine_id=machine,
                scenario={"controller": "pid", "scale": "quick", "device": "cpu"},
                started="2026-11-26T05:55:00+00:00",
                finished="2026-11-26T05:57:00+00:00",
            )
            (folder / f"{w.slug()}-pid.json").write_text(json.dumps(rec))
    assert fused_machines(tmp_path, "cpu", "cpu-b") == ["cpu-b", "cpu-a"]
    text = render_blocks(fused_section(tmp_path, "cpu-b"))
    b, a = text.index("### On cpu-b"), text.index("### On cpu-a")
    assert b < a and "holds no such records" not in text
    assert text[a:].count(f"| {WORKLOADS[0].name} ") == 1
    assert text[b:a].count("| ") > text[a:].count("| ")  # cpu-b measured more rows
    assert f"{WORKLOADS[1].name} pid" in text[a:]  # cpu-a did not measure it: said


@pytest.mark.parametrize("taken", [False, True])
def test_records_of_an_older_recommended_step_say_what_it_lacked(taken):
    """A map record made before a lever joined the recommended step (a GPU's, say) is
    shown with the levers it lacks named; one of today's step, with nothing."""
    from odestudy.measure.recommended import diffrax_levers
    from odestudy.report.floor import older_step

    scenario = {"controller": "pid", "problem": "oscillator", "width": 16}
    now = diffrax_levers(Scenario(**scenario))
    levers = now if taken else {k: v for k, v in now.items() if k != "fast_activations"}
    rec = {"scenario": scenario, "rows": [{"label": "recommended-diffrax", "levers": levers}]}
    said = older_step([LeverRecord(rec)])
    assert (said == "") if taken else ("without `fast_activations=True`" in said)
    # On a GPU today's step does not take the faster activations (`FASTER_ON`): a GPU
    # record made with them says so.
    on_gpu = {"scenario": {**scenario, "device": "gpu"}, "rows": rec["rows"]}
    said = older_step([LeverRecord(on_gpu, rows=[{"label": "recommended-diffrax", "levers": now}])])
    assert "with `fast_activations=True`, which today's does not take" in said
    # A record of a problem this process cannot make says nothing, and does not fail.
    unknown = {**rec, "scenario": {**scenario, "problem": "nowhere:PROBLEM"}}
    assert older_step([LeverRecord(unknown)]) == ""


def test_a_gpu_rows_roofline_is_read_from_its_machines_roofline_record(tmp_path):
    import json

    from odestudy.report.roofline import roofline_cells, row_roofline_s

    (tmp_path / "levers").mkdir()
    rec = _lever_record(tmp_path / "levers", "gpu-pid-quick.json", {**FLOOR, "least_bytes": 0})
    default = rec.rows[0]
    assert roofline_cells(rec, default, FloorCounts(FLOOR)) == ["–", "–"]  # no roofline yet
    (tmp_path / "roofline").mkdir()
    probe = {
        "peak_flops_per_s": 1.21e13,
        "bandwidth_bytes_per_s": 1e12,
        "kernel_s": 5e-6,
        "least_kernels": 2,
    }
    (tmp_path / "roofline" / "gpu.json").write_text(json.dumps(probe))
    # 121 evaluations of 1e6 FLOPs at 1.21e13 FLOP/s: 10 us, and two launches of 5 us.
    assert row_roofline_s(rec, default, rec.floor) == pytest.approx(20e-6)
    roof, ratio = roofline_cells(rec, default, rec.floor)
    assert roof == "20.0"
    assert f"{ratio.value:.0f}" == "525"  # the median of its blocks, 10.5 ms, over 20 us


def test_a_gpu_table_uses_the_roofline_read_nearest_its_own_session(tmp_path):
    """A machine read twice: each levers record is set against the reading nearest in
    time to it, and the line under its table gives the range over the readings."""
    import json

    from odestudy.report.roofline import roofline_record, roofline_said

    (tmp_path / "levers").mkdir()
    rec = _lever_record(tmp_path / "levers", "gpu-pid-quick.json", FLOOR)
    (tmp_path / "roofline").mkdir()
    for stamp, peak in (("20261127T1428", 2.7e14), ("20261127T1728", 2.1e14)):
        probe = {"peak_flops_per_s": peak, "bandwidth_bytes_per_s": 1e12, "kernel_s": 2e-6}
        at = f"2026-11-27T{stamp[9:11]}:{stamp[11:]}:00+00:00"
        (tmp_path / "roofline" / f"gpu-{stamp}.json").write_text(
            json.dumps(probe | {"finished": at})
        )
    rec["finished"] = "2026-11-27T17:31:48+00:00"
    assert roofline_record(rec)["peak_flops_per_s"] == 2.1e14
    rec["finished"] = "2026-11-27T14:40:00+00:00"
    assert roofline_record(rec)["peak_flops_per_s"] == 2.7e14
    line = roofline_said(rec)
    assert "matmul peak 270 TFLOP/s" in line and "span 210–270 TFLOP/s" in line


def test_a_variant_gets_a_floor_only_from_its_own_programs_count(tmp_path):
    """An older record counted the default's program once: its default row keeps that
    floor, a variant with levers of its own gets none (not another program's count); a
    record that counted each variant sets each against its own."""
    from odestudy.report.floor import floor_cells, row_floor_s

    rec = _lever_record(tmp_path, "cpu-pid.json", FLOOR)
    default, fast = rec.rows
    fast["levers"] = {"fast_activations": True}
    assert row_floor_s(rec, default) == pytest.approx(1.21e-3)
    assert row_floor_s(rec, fast) is None and floor_cells(rec, fast) == ["–", "–"]
    fast["floor"] = {**FLOOR, "per_evaluation": 5e5}
    assert row_floor_s(rec, fast) == pytest.approx(0.605e-3)


@pytest.mark.long  # a scenario's model and one solve compiled: about 10 s
def test_the_reverse_charge_counts_the_steps_the_own_reverse_loop_replays():
    """`reverse_steps`: the fused solve's own reverse loop (`accepted_steps`) under PID
    replays at most the steps taken; every other reverse pass runs back through all of
    them (None)."""
    import equinox as eqx
    import jax
    import numpy as np

    from odestudy.measure.floor import reverse_steps
    from odestudy.measure.model import BatchSolve
    from odestudy.measure.training import prepare

    fields = dict(integrator="fused", adjoint="accepted_steps", max_steps=64)
    s = Scenario(scale="smoke", **fields)
    setup = prepare(s, jax.devices()[:1], check=False)
    model = eqx.combine(setup.step.unplace(setup.params), setup.static)
    batch = setup.problem.take(setup.data, np.arange(s.batch))
    replayed = reverse_steps(s, setup.problem, model, batch)

    def taken(m, b):
        solve = BatchSolve(s.ode_solve(setup.problem))
        setup.problem.loss(m, b, None, solve)
        return solve.steps()

    most = int(np.max(eqx.filter_jit(taken)(model, batch)))
    assert replayed is not None and 1 <= replayed <= most
    assert reverse_steps(Scenario(scale="smoke"), setup.problem, model, batch) is None
    own_loop = dict(integrator="fused", adjoint="accepted_steps")
    stepto = Scenario(scale="smoke", controller="stepto", **own_loop)
    assert reverse_steps(stepto, setup.problem, model, batch) is None
