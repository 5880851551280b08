"""One timed quantity, timed twice: on a problem whose step costs more as it trains
(`tests/problems.Spiral`: its trained solve takes about twice the solver steps of its
untrained one), `odestudy run`'s reported step (its repeat from the trained state the
cold run saved) and `odestudy tune`'s default step (timed blocks from the trained
state), in interleaved pairs, each command in its own process, one at a time. Each
pair gives the ratio run / tune with its 95% interval (a bootstrap over runs or blocks,
then steps); the record keeps every step time, each command's solver steps per sample
and the cold run's step apart. A benchmark of the timed quantity, not a test.

    .venv/bin/python benchmarks/rising_cost.py --pairs 6   # make rising-cost

(default `--out`: results/<machine>/rising_cost/cpu-spiral-<scale>.json)
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PROBLEM = "tests.problems:RISING"
ROOT = Path(__file__).resolve().parent.parent


def _tune_worker(scale: str, blocks: int, steps: int) -> None:
    """`tune`'s default step (`tune.Tuner`: trained with the default step, then the
    default candidate compiled, checked and timed as tune times it); prints JSON."""
    import os

    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as odestudy tune runs (cli.TIMED_HERE)
    import numpy as np

    import odestudy

    odestudy.configure_devices("cpu", 1)
    from odestudy.tune import Candidate, Tuner

    s = odestudy.Scenario(scale=scale).for_problem(PROBLEM)
    tuner = Tuner(s, blocks, steps, lambda line: None)
    trial = tuner.compile(Candidate("default", (), s))
    tuner.check(trial)
    runs = tuner.time([trial])["default"]
    # Beside it, in this process, on the same batches: blocks whose steps carry their
    # updates (as run's repeat and tune time them) interleaved with blocks whose every
    # step starts from the trained state, with each step's most solver steps of a sample
    # (what a batched solve's loop runs to): what training on adds to the step's cost.
    from odestudy.measure.modes import to_host
    from odestudy.measure.timing import copy_arrays, run_steps

    side: dict[str, dict[str, list]] = {k: {"times": [], "most": []} for k in ("true", "false")}
    for _ in range(blocks):
        for carry in (False, True):
            p, o = copy_arrays((trial.params, trial.opt_state))
            done = run_steps(trial.compiled, p, o, trial.repeat, len(trial.repeat),
                             len(trial.repeat) - steps, carry=carry)  # fmt: skip
            side[str(carry).lower()]["times"].append(done.times)
            side[str(carry).lower()]["most"] += [float(np.max(to_host(n))) for n in done.num_steps]
    print(json.dumps({
        "carry_false_runs_s": side["false"]["times"],
        "carry_true_runs_s": side["true"]["times"],
        "carry_false_most_solver_steps": float(np.mean(side["false"]["most"])),
        "carry_true_most_solver_steps": float(np.mean(side["true"]["most"])),
        "eqx_on_error": os.environ["EQX_ON_ERROR"],
        "step_times_runs_s": [list(map(float, r)) for r in runs],
        "solver_steps": float(np.mean(tuner.solver_steps["default"])),
        "host_blocks": tuner.host_blocks["default"],
        "trained": bool(tuner.record["trained"]),
        "final_loss": float(tuner.record["final_loss"]),
    }))  # fmt: skip


def _run_once(scale: str, folder: Path) -> dict[str, Any]:
    """`odestudy run` with a cold run and one repeat; its reported step is the repeat's."""
    cmd = [sys.executable, "-m", "odestudy.cli", "run", "--scale", scale, "--problem",
           PROBLEM, "--runs", "2", "--out", str(folder)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    rec = json.loads((folder / "metrics.json").read_text())
    cold, repeat = rec["step_times_runs_s"]
    return {
        "step_times_runs_s": [repeat],
        "cold_step_times_s": cold,
        "solver_steps": rec["solver_steps_runs"][1],
        "cold_solver_steps": rec["solver_steps_runs"][0],
        "host": rec["host_runs"][1],
        "trained": bool(rec["trained"]),
        "final_loss": float(rec["final_loss"]),
    }


def _tune_once(scale: str, blocks: int, steps: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--scale", scale, "--blocks", str(blocks),
           "--steps-per-block", str(steps), "--worker"]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(next(x for x in out.splitlines() if x.startswith("{")))


def _summary(timed: dict[str, Any]) -> dict[str, Any]:
    """A command's median step with its 95% interval (runs or blocks, then steps)."""
    import numpy as np

    from odestudy.report.intervals import bootstrap_medians

    runs = [np.asarray(r) for r in timed["step_times_runs_s"]]
    draws = bootstrap_medians(runs, np.random.default_rng(0))
    low, high = np.percentile(draws, [2.5, 97.5])
    return {"step_time_s": float(np.median(np.concatenate(runs))),
            "step_time_ci_s": [float(low), float(high)]}  # fmt: skip


def _pair(k: int, scale: str, blocks: int, steps: int) -> dict[str, Any]:
    """One pair, `run` first in even pairs and `tune` first in odd ones."""
    from odestudy.report.intervals import ratio_interval

    with tempfile.TemporaryDirectory(prefix="odestudy-rising-") as tmp:
        order = ("run", "tune") if k % 2 == 0 else ("tune", "run")
        got = {
            name: _run_once(scale, Path(tmp)) if name == "run" else _tune_once(scale, blocks, steps)
            for name in order
        }
    ratio, low, high = ratio_interval(got["run"], got["tune"])
    for name in order:
        got[name].update(_summary(got[name]))
    return {"order": list(order), **got, "ratio_run_over_tune": [ratio, low, high]}


def between_pairs(pairs: list[dict[str, Any]], draws: int = 4000) -> list[float]:
    """run / tune over pairs: the median of the pairs' ratios with its 95% bootstrap
    interval over pairs (each pair two processes: what a reader's rerun sees)."""
    import numpy as np

    ratios = np.array([p["ratio_run_over_tune"][0] for p in pairs])
    rng = np.random.default_rng(0)
    boot = np.median(ratios[rng.integers(0, len(ratios), (draws, len(ratios)))], axis=1)
    return [float(np.median(ratios)), *map(float, np.percentile(boot, [2.5, 97.5]))]


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scale", default="smoke")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--blocks", type=int, default=5)  # tune's BLOCKS
    p.add_argument("--steps-per-block", type=int, default=40)  # tune's, run's REPEAT_STEPS
    p.add_argument("--out", help="output JSON file (default: see above)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--summary", metavar="RECORD", help="print a record's run / tune over pairs")
    a = p.parse_args()
    if a.summary:
        rec = json.loads(Path(a.summary).read_text())
        mid, low, high = between_pairs(rec["pairs"])
        print(f"{a.summary}: run/tune {mid:.3f} [{low:.3f}, {high:.3f}] over "
              f"{len(rec['pairs'])} pairs, {rec['started']} to {rec['finished']}")  # fmt: skip
        return None
    if a.worker:
        return _tune_worker(a.scale, a.blocks, a.steps_per_block)
    import os

    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as every timing process (recorded)
    import odestudy
    from odestudy.measure.environment import now
    from odestudy.measure.training import environment
    from odestudy.report.intervals import ratio_interval

    started, pairs = now(), []
    for k in range(a.pairs):
        pairs.append(_pair(k, a.scale, a.blocks, a.steps_per_block))
        r, t = pairs[-1]["run"], pairs[-1]["tune"]
        ratio, low, high = pairs[-1]["ratio_run_over_tune"]
        carry, *_ = ratio_interval({"step_times_runs_s": t["carry_true_runs_s"]},
                                   {"step_times_runs_s": t["carry_false_runs_s"]})  # fmt: skip
        print(f"  tune's process: carried / not carried {carry:.3f}; most solver steps "
              f"{t['carry_true_most_solver_steps']:.2f} / {t['carry_false_most_solver_steps']:.2f}",
              flush=True)  # fmt: skip
        print(f"pair {k}: run {r['step_time_s'] * 1e3:.3f} ms, tune {t['step_time_s'] * 1e3:.3f}"
              f" ms, run/tune {ratio:.3f} [{low:.3f}, {high:.3f}]; solver steps "
              f"{r['solver_steps']:.1f} / {t['solver_steps']:.1f} (cold run "
              f"{r['cold_solver_steps']:.1f})", flush=True)  # fmt: skip
    odestudy.configure_devices("cpu", 1)
    s = odestudy.Scenario(scale=a.scale).for_problem(PROBLEM)
    from odestudy.study.records import machine_folder

    out = a.out or machine_folder() / "rising_cost" / f"cpu-spiral-{a.scale}.json"
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    odestudy.write_json_atomic(out, {
        "kind": "rising_cost",
        "run_over_tune": between_pairs(pairs),
        "method": "odestudy run (a cold run and one repeat; its step the repeat's) and "
        "tune's default step (tune.Tuner), each in its own process, in interleaved "
        "pairs; ratio run / tune with its 95% bootstrap interval",
        "pairs": pairs,
        "started": started,
        "finished": now(),
        **environment(s),
    })  # fmt: skip


if __name__ == "__main__":
    if "--worker" in sys.argv or "--summary" in sys.argv:
        main()
    else:
        from odestudy.study.lock import run_measuring

        run_measuring(main, f"benchmarks/{__file__.rsplit('/', 1)[-1]}")
