"""The report's verdict, written from the scaling rows alone: the fastest and slowest
multi-device modes within the physical cores, their speedups with 95% intervals, what
the intervals support, the measured reason for the slowest, and record text kept as
text. Synthetic records; nothing here runs JAX programs."""

import json

import pytest

from odestudy.measure.scenario import Scenario
from odestudy.report import sessions
from odestudy.report.claims import device_answer
from odestudy.report.document import write_report
from odestudy.report.frames import scaling_rows
from odestudy.report.tables import render_blocks
from odestudy.report.verdict import verdict_body
from odestudy.study import records
from odestudy.study.matrix import record_path
from odestudy.study.rec import Rec

from .helpers import record

HARDWARE = {"cpu_model": "a CPU", "physical_cores": 2, "logical_cpus": 2}
HOSTILE = "<script>alert('x')</script>"


def bullets(rows, every):
    """The CPU answer's bullets (`claims.device_answer`)."""
    return list(device_answer(rows, every).bullets)


def _rec(mode="single", n=1, step=0.02, loops=0, steps=(15.0, 12.0), jitter=0.0, seed=0):
    """A smoke-scale CPU record (PID, strong scaling) on a machine of 2 physical
    cores, with collectives inside solver loops and solver steps (max, mean)."""
    s = Scenario(scale="smoke", devices_per_process=n, mode=mode)
    return dict(
        record(s, step=step, jitter=jitter, seed=seed),
        hardware=HARDWARE,
        collectives_total=loops + (1 if n > 1 else 0),
        collectives_in_loops=loops,
        solver_steps={"max": steps[0], "mean": steps[1]},
    )


def _cpu(pmap=0.015, shard=0.04, shard_map=0.01, **over):
    """1 device at 0.02 s a step; `pmap`, `shard` (3 collectives in its loops) and
    `shard_map` on 2 devices; 4 devices beyond the 2 cores, faster than any."""
    recs = [
        _rec(),
        _rec("pmap", 2, pmap),
        _rec("shard", 2, shard, loops=3),
        _rec("shard_map", 2, shard_map),
        _rec("shard_map", 4, 0.001),
    ]
    for i, fields in over.items():
        recs[int(i[1:])] = dict(recs[int(i[1:])], **fields)
    return recs


def _line(verdict: str, what: str) -> str:
    return next(line for line in verdict.splitlines() if what in line)


def test_fastest_and_slowest_within_the_cores_with_intervals_and_reason():
    verdict = render_blocks(verdict_body(scaling_rows(_cpu()), "smoke"))
    line = _line(verdict, "fixed global batch")
    assert "2 devices: fastest **shard_map**, step-time speedup 2.00× [2.00, 2.00]" in line
    assert "faster than one device within its 95% interval" in line
    assert "Slowest **shard**, 0.50× [0.50, 0.50], slower than one device" in line
    assert "3 collective(s) inside its solver loops (**shard_map**: 0)" in line
    # The 4-device row beyond the 2 physical cores is named and left out, not ranked.
    assert "4 devices" not in line and "(†: 4 devices) are left out" in verdict
    assert "In short" not in verdict  # a tally is no answer: the claims give it


def test_the_answer_in_plain_words_names_use_and_avoid_with_intervals_and_sessions(spread_measured):
    rows = scaling_rows(_cpu())
    lines = bullets(rows, _cpu())
    use = _line("\n".join(lines), "**Use")
    assert "**Use `shard_map` or `pmap`** (fastest first; the intervals separate them)" in use
    assert "PID `shard_map` 2.00x [2.00, 2.00], `pmap` 1.33x [1.33, 1.33]" in use
    assert "holds in 1 of 1 sessions with such rows" in use
    avoid = _line("\n".join(lines), "**Avoid")
    assert "**Avoid sharded `jit` (`shard`) with PID**: 0.50x [0.50, 0.50]" in avoid
    assert "3 collective(s) inside its solver loops" in avoid
    assert "slower in 1 of 1 sessions with such rows." in avoid
    assert "(4 devices) measure overhead" in "\n".join(lines)


def test_records_made_a_second_apart_are_one_session(spread_measured):
    """Records without a session assigned (`frames.read_records` assigns one) are grouped
    among themselves: rows written across a second's boundary are still one session."""
    times = ["2026-01-01T10:00:59+00:00"] * 2 + ["2026-01-01T10:01:00+00:00"] * 3
    over = {f"r{i}": {"started": t, "finished": t} for i, t in enumerate(times)}
    recs = _cpu(**over)
    use = _line("\n".join(bullets(scaling_rows(recs), recs)), "**Use")
    assert "holds in 1 of 1 sessions with such rows" in use


def test_an_answer_not_supported_by_its_interval_is_weakened():
    recs = [
        _rec(jitter=0.3, seed=1),
        _rec("pmap", 2, 0.02, jitter=0.3, seed=2),
        _rec("shard_map", 2, 0.019, jitter=0.3, seed=3),
    ]
    text = "\n".join(bullets(scaling_rows(recs), recs))
    assert "**Use" not in text and "not separable from one device" in text


def test_a_claim_counts_the_sessions_it_holds_in_and_marks_unequal_losses(spread_measured):
    earlier = [
        dict(r, started="2026-01-01T00:00:00+00:00", finished="2026-01-01T00:10:00+00:00")
        for r in _cpu(shard=0.01)  # an earlier session where `shard` was fast
    ]
    later = [
        dict(r, started="2026-01-02T00:00:00+00:00", finished="2026-01-02T00:10:00+00:00")
        for r in _cpu(r3={"final_loss": 0.001})
    ]
    for r in [*earlier, *later]:
        r["session"] = None
    found = sessions.assign([*earlier, *later])
    for r, s in zip([*earlier, *later], found, strict=True):
        r["session"] = s
    assert len(set(found)) == 2
    lines = "\n".join(bullets(scaling_rows(later), [*earlier, *later]))
    said = "slower in 1 of 2 sessions with such rows; faster in 1 (2026-01-01 00:00–00:10 UTC)."
    assert said in _line(lines, "**Avoid")
    assert "2026-01-02 00:00–00:10 UTC" in lines
    assert "`shard_map` 2.00x [2.00, 2.00] ‡" in lines and "‡: the two rows' final losses" in lines


def test_a_speedup_over_a_baseline_trained_to_another_loss_is_flagged(spread_measured):
    recs = _cpu(r0={"final_loss": 0.0029}, r3={"final_loss": 0.0002})
    line = _line(render_blocks(verdict_body(scaling_rows(recs), "smoke")), "fixed global batch")
    assert "trained to final loss 0.0002 against one device's 0.0029" in line
    assert "not the same model" in line
    same = _line(render_blocks(verdict_body(scaling_rows(_cpu()), "smoke")), "fixed global batch")
    assert "not the same model" not in same


def test_an_interval_that_spans_one_says_no_faster():
    recs = [
        _rec(jitter=0.3, seed=1),
        _rec("pmap", 2, 0.02, jitter=0.3, seed=2),
        _rec("shard_map", 2, 0.019, jitter=0.3, seed=3),
    ]
    line = _line(render_blocks(verdict_body(scaling_rows(recs), "smoke")), "fixed global batch")
    assert "no faster than one device within its interval" in line
    assert "the data do not separate them" in line


def test_lock_step_waste_and_overhead_are_the_reasons_without_collectives_in_loops():
    # shard slower, no collectives in its loops, solver steps 20 max against 10 mean
    waste = _cpu(r2={"collectives_in_loops": 0, "solver_steps": {"max": 20.0, "mean": 10.0}})
    line = _line(render_blocks(verdict_body(scaling_rows(waste), "smoke")), "fixed global batch")
    assert "lock-step waste: its batched loops run 20 solver steps per sample against a " in line
    assert "mean of 10 (50% of iterations wait, against 20% for **shard_map**)" in line
    same = _cpu(r2={"collectives_in_loops": 0})
    line = _line(render_blocks(verdict_body(scaling_rows(same), "smoke")), "fixed global batch")
    assert "measured reason: overhead" in line


def test_no_gpu_rows_is_said_plainly():
    verdict = render_blocks(verdict_body(scaling_rows(_cpu()), "smoke"))
    assert "**GPU: no GPU rows at the smoke scale.**" in verdict
    gpu = record(Scenario(scale="smoke", device="gpu"), status="not_run")
    gpu = dict(gpu, error="needs 1 GPU(s), 0 present", step_time_s=None)
    verdict = render_blocks(verdict_body(scaling_rows([*_cpu(), gpu]), "smoke"))
    assert "**GPU: no GPU measurements at the smoke scale.**" in verdict
    assert "The matrix's 1 GPU row is not_run: needs 1 GPU(s), 0 present." in verdict


def test_record_text_in_the_verdict_is_escaped():
    rows = scaling_rows(_cpu())
    rows = [
        Rec(r, mode=HOSTILE if r["mode"] == "shard" else r["mode"], controller="*pid*")
        for r in rows
    ]
    verdict = render_blocks(verdict_body(rows, "smoke"))
    assert "<script>" not in verdict and "&lt;script&gt;" in verdict
    assert "\\*pid\\*" in verdict


@pytest.mark.long  # about 10 s here
def test_doctored_records_change_the_verdict(tmp_path):
    """Write the records, render the report; make `pmap` faster than `shard_map` in its
    record, render again: the verdict names the new fastest mode and its speedup."""
    results = tmp_path / "results"
    recs = _cpu()
    for rec in recs:
        records.write_json_atomic(record_path(Scenario.from_dict(rec["scenario"]), results), rec)
    before = write_report(results, "smoke", tmp_path / "before", draw=False)
    assert before["tables"]["verdict"].read_text().endswith(before["verdict"])
    line = _line(before["verdict"], "fixed global batch")
    assert "fastest **shard_map**, step-time speedup 2.00× [2.00, 2.00]" in line

    pmap = record_path(Scenario.from_dict(recs[1]["scenario"]), results)
    rec = json.loads(pmap.read_text())
    rec["step_times_runs_s"] = [[t / 3 for t in run] for run in rec["step_times_runs_s"]]
    rec["step_time_s"] /= 3  # 0.005 s: 4x one device
    records.write_json_atomic(pmap, rec)
    after = write_report(results, "smoke", tmp_path / "after", draw=False)
    line = _line(after["verdict"], "fixed global batch")
    assert "fastest **pmap**, step-time speedup 4.00× [4.00, 4.00]" in line
    assert "Slowest **shard**, 0.50× [0.50, 0.50]" in line
    assert after["verdict"] != before["verdict"]


def test_one_run_rows_back_no_verdict_and_are_labelled_one_run():
    recs = [dict(r, step_time_runs_s=r["step_time_runs_s"][:1]) for r in _cpu()]
    rows = scaling_rows(recs)
    claims = "\n".join(bullets(rows, recs))
    assert "**Use" not in claims and "**Avoid" not in claims
    assert "One run each on 2 devices" in claims and "separate" not in claims.replace(
        "nor separate two modes", ""
    )
    verdict = render_blocks(verdict_body(rows, "smoke"))
    assert "(one run each)" in verdict and "one run: its interval" in verdict
    assert "within its 95% interval" not in verdict and "do not separate" not in verdict


def test_the_loss_rule_reads_the_spread_of_the_rows_own_machine_and_workload(tmp_path):
    from odestudy.report import loss

    spread = {"kind": "loss_spread", "spread_relative": 0.25, "machine_id": "machine-a"}
    spread["scenario"] = {"scale": "quick", "controller": "pid", "width": 64}
    spread["rows"] = [{"seed": k, "final_loss": 0.01} for k in range(loss.MIN_SEEDS)]
    folder = tmp_path / "results" / "machine-a" / "levers"
    folder.mkdir(parents=True)
    (folder / "loss-spread-pid.json").write_text(json.dumps(spread))
    path = tmp_path / "results" / "machine-a" / "quick" / "x" / "metrics.json"
    row = {"path": str(path), "scale": "quick", "controller": "pid", "width": 64}
    row.update(machine_id="machine-a", final_loss=0.013)
    assert loss.limit_for(row) == 1.25
    assert loss.verdict(row, 0.01) is loss.Verdict.DIFFERENT
    assert loss.baseline_flag("1.5x", dict(row, baseline_final_loss=0.01)).endswith(loss.MARK)
    assert loss.same(dict(row, final_loss=0.012), 0.01)
    # Another controller, workload or machine: no spread measured for it, so not
    # said to be the same model nor a different one.
    for other in ({"controller": "stepto"}, {"width": 16}, {"machine_id": "machine-b"}):
        assert loss.verdict(dict(row, **other), 0.01) is loss.Verdict.UNMEASURED
        assert loss.flag("1.5x", dict(row, **other), 0.01) == f"1.5x {loss.UNMEASURED}"
    # A spread over fewer seeds than `MIN_SEEDS` does not count.
    spread["rows"] = spread["rows"][:-1]
    (folder / "loss-spread-pid.json").write_text(json.dumps(spread))
    loss._tree_spreads.cache_clear()
    assert loss.verdict(row, 0.01) is loss.Verdict.UNMEASURED
