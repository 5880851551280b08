"""An answer that survives its rerun: claims made over sessions, verdicts that follow
their points, one timed quantity, a one-sided base case and held-out labels checked
against git, on planted records (no timing)."""

import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from odestudy.measure import host
from odestudy.report import heldout, loss, runs
from odestudy.report.crossover import crossing
from odestudy.report.replication import MIN_SESSIONS, replicate, sessions_said
from odestudy.study.claim import Verdict
from odestudy.study.rec import Rec


def _rec(median: float, spread: float = 0.02, runs_: int = 3, seed: int = 0) -> Rec:
    """A record of `runs_` runs of 40 steps around `median` seconds."""
    rng = np.random.default_rng(seed)
    times = [list(median * (1 + spread * rng.standard_normal(40))) for _ in range(runs_)]
    return Rec(step_times_runs_s=times, step_time_s=median)


def _pairs(speedups: list[float]) -> list[tuple[str, Rec, Rec]]:
    """One session per speedup: a base of 10 ms and a row `speedup` times faster."""
    return [
        (f"2026-11-2{i} 10:00–10:10 UTC", _rec(0.010, seed=i), _rec(0.010 / s, seed=10 + i))
        for i, s in enumerate(speedups)
    ]


def test_a_claim_over_sessions_covers_every_session_and_its_verdict_needs_all_of_it():
    found = replicate(_pairs([0.95, 1.28, 1.10]))
    assert found is not None and len(found.sessions) == 3
    low, high = found.interval
    assert low <= found.value <= high
    assert all(low <= s.value <= high for s in found.sessions)
    # Sessions that disagree across 1: not separable; one disagreeing session is named,
    # several are counted (the answer's word budget).
    assert found.verdict is Verdict.LEVEL
    said = sessions_said(found)
    assert "slower alone in 11-20 10:00" in said and "; 2 faster alone" in said
    # Every session well above 1: pays.
    assert replicate(_pairs([1.5, 1.6, 1.55])).verdict is Verdict.FASTER  # type: ignore[union-attr]
    assert replicate(_pairs([0.5, 0.6, 0.55])).verdict is Verdict.SLOWER  # type: ignore[union-attr]


def test_a_session_that_kept_one_run_counts_its_ratio_but_judges_nothing_alone():
    pairs = _pairs([1.5, 1.6, 1.55])
    when, base, row = pairs[-1]
    pairs[-1] = (when, _rec(0.010, runs_=1, seed=9), row)  # a contended base run set apart
    found = replicate(pairs)
    assert found is not None and found.verdict is Verdict.FASTER
    assert [s.verdict for s in found.sessions] == [Verdict.FASTER] * 2 + [Verdict.ONE_RUN]
    assert found.disagree() == () and "alone in" not in sessions_said(found)


def test_fewer_sessions_than_the_minimum_give_no_verdict():
    found = replicate(_pairs([1.5, 1.6][: MIN_SESSIONS - 1]))
    assert found is not None and found.verdict is Verdict.FEW_SESSIONS
    assert replicate([]) is None


@pytest.mark.parametrize(
    "points, said",
    [
        # Every interval above 1: pays over all of the span.
        ([(1.2, 1.1, 1.3), (1.3, 1.2, 1.4), (1.5, 1.3, 1.7)], "pays over all of"),
        # Every interval below 1.
        ([(0.8, 0.7, 0.9), (0.7, 0.6, 0.8), (0.6, 0.5, 0.7)], "does not pay up to"),
        # A median above 1 with a point whose interval lies below it: never "pays over all".
        ([(0.66, 0.46, 0.90), (1.3, 1.1, 1.5), (1.4, 0.9, 1.6)], None),
        # Rising through 1 with a straddling point past the crossing: not "pays from".
        ([(0.7, 0.6, 0.8), (1.05, 0.9, 1.2), (1.4, 1.2, 1.6)], "crosses 1 near"),
    ],
)
def test_a_crossing_says_no_more_than_its_points(points, said):
    text = crossing([0.1, 1.0, 5.0], points, "line").said("ms")
    if said is not None:
        assert text.startswith(said), text
    lows = [p[1] for p in points]
    if min(lows) <= 1:
        assert "pays over all" not in text, text
    if "pays from" in text:
        assert all(p[1] > 1 for p in points[1:]), text


def test_draws_with_no_crossing_stay_in_the_interval():
    # Two points barely apart around 1 with wide intervals: many draws find no crossing.
    found = crossing([4, 8, 16, 32], [(0.9, 0.5, 1.6), (1.02, 0.5, 1.9), (1.1, 0.6, 2.0),
                                      (1.2, 0.7, 2.1)], "path")  # fmt: skip
    assert found.at is not None and found.no_crossing > 0.025
    assert found.at[2] == float("inf")
    assert "no crossing in" in found.said("series") and ">32" in found.said("series")


def test_the_report_times_the_trained_model_and_leaves_contended_runs_out():
    cold, warm, busy = [0.004] * 10, [0.003] * 10, [0.006] * 10
    quiet = {"steal": 0.0, "probe_before_ms": 1.0, "probe_after_ms": 1.0}
    stolen = {"steal": 0.2, "probe_before_ms": 1.0, "probe_after_ms": 1.0}
    rec = runs.trained_state(
        Rec(step_times_runs_s=[cold, warm, busy], host_runs=[quiet, quiet, stolen])
    )
    assert rec.step_time_s == pytest.approx(0.003) and rec.cold_step_time_s == pytest.approx(0.004)
    assert rec.contended_runs and "run 3: steal 20%" in rec.contended_runs[0]
    # One run: kept as it is.
    one = runs.trained_state(Rec(step_times_runs_s=[cold], step_time_s=0.004))
    assert one.step_time_s == 0.004 and one.cold_step_time_s is None
    assert host.contended(stolen) and not host.contended(quiet) and not host.contended(None)


def test_the_host_watch_samples_a_block():
    watch = host.Watch()
    watch.start()
    sum(range(10_000))
    sample = watch.stop()
    assert sample["probe_before_ms"] > 0 and sample["probe_after_ms"] > 0
    assert sample["steal"] is None or 0.0 <= sample["steal"] <= 1.0


def _running_threads() -> set[str]:
    """This process's threads other than the caller that are running or runnable."""
    me = str(threading.get_native_id())
    tasks = Path("/proc/self/task").iterdir()
    return {t.name for t in tasks if t.name != me and _state(t) == "R"}


def _state(task: Path) -> str:
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_the_host_probe_leaves_no_thread_spinning():
    # The probe runs just before a timed block's first step; a thread it leaves busy
    # (OpenBLAS's pool spins about 0.1 s after a matrix product) takes a core from it.
    time.sleep(0.3)  # what an earlier test's matrix product left spinning stops first
    host.probe_ms()
    spinning = _running_threads()
    for _ in range(3):
        time.sleep(0.01)
        spinning &= _running_threads()
    assert not spinning


def test_the_base_case_rule_is_one_sided(monkeypatch):
    monkeypatch.setattr(loss, "limit_for", lambda rec: 1.1)
    default = {"final_loss": 0.0042}
    assert not loss.worse({"final_loss": 0.0019}, default)  # trains better: qualifies
    assert not loss.worse({"final_loss": 0.0045}, default)  # within the margin
    assert loss.worse({"final_loss": 0.0050}, default)
    assert loss.differs({"final_loss": 0.0019}, default)  # the symmetric rule would refuse


def _head() -> tuple[str, str]:
    out = subprocess.run(
        ["git", "log", "-1", "--format=%H %cI"], capture_output=True, text=True, check=True
    )
    commit, when = out.stdout.split()
    return commit, when


def test_made_before_the_rows_needs_the_code_committed_before_them():
    commit, when = _head()
    rows = [{"started": "2099-01-01T00:00:00+00:00"}]
    made = {"finished": "2098-01-01T00:00:00+00:00"}
    assert heldout.made_before({**made, "git_commit": commit}, rows) is True
    assert heldout.made_before({**made, "git_commit": commit + "-dirty"}, rows) is False
    # Rows measured before the commit the prediction's code was made at: not held out.
    early = [{"started": "2000-01-01T00:00:00+00:00"}]
    assert heldout.made_before({"finished": "1999-01-01T00:00:00+00:00",
                                "git_commit": commit}, early) is False  # fmt: skip
    assert heldout.made_before({**made, "git_commit": "0" * 40}, rows) is False


def test_non_inferiority_over_paired_seeds():
    from odestudy.study.rec import LossSpread

    seeds = [5678, 1, 2, 3]
    losses = [0.004, 0.006, 0.003, 0.0042]
    default = LossSpread(
        rows=[{"seed": s, "final_loss": x} for s, x in zip(seeds, losses, strict=True)]
    )

    def variant(factors):
        rows = default.rows[: len(factors)]
        return LossSpread(
            rows=[{"seed": r["seed"], "final_loss": r["final_loss"] * f}
                  for r, f in zip(rows, factors, strict=True)]
        )  # fmt: skip

    assert loss.non_inferior(variant([0.5, 0.6, 0.4, 0.5]), default) is True  # trains better
    assert loss.non_inferior(variant([1.02, 0.99, 1.03, 1.0]), default) is True  # within margin
    assert loss.non_inferior(variant([1.3, 1.25, 1.4, 1.35]), default) is False
    assert loss.non_inferior(variant([1.0, 1.0, 1.0]), LossSpread(rows=default.rows[:3])) is None


def test_the_newest_session_is_checked_against_the_sessions_before_it():
    inside = replicate(_pairs([1.40, 1.50, 1.45, 1.47]))
    assert inside is not None and inside.before is not None and inside.held_out is True
    outside = replicate(_pairs([1.40, 1.42, 1.41, 0.80]))
    assert outside is not None and outside.held_out is False
    assert replicate(_pairs([1.4, 1.5, 1.45])).held_out is None  # type: ignore[union-attr]


def test_the_machines_table_marks_a_speedup_of_one_run():
    """A row beside another machine's: its interval from one run is said to be one."""
    from odestudy.report.machines import _speedup_cell

    row = Rec(speedup=1.31, speedup_ci=(1.22, 1.36), step_time_runs_s=[0.0039], baseline_runs=1)
    assert _speedup_cell(row).endswith("(one run)")
    row = Rec(
        speedup=1.31, speedup_ci=(1.22, 1.36), step_time_runs_s=[0.0039, 0.004], baseline_runs=2
    )
    assert "one run" not in _speedup_cell(row)
