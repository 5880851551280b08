"""Levers on one training step of the trained quick model (1 device: the first CPU, or the
first GPU with `--device gpu`), each against today's default at equal work and at equal
final loss, and each step's compute floor (`floor_of`). A benchmark, not a test.

A variant is a set of levers (`VARIANTS`): `Scenario` fields (the solve's structure,
`solvers.Structure`: per-sample vmap, within-ODE batching or a fixed-step `lax.scan`;
where it saves; its adjoint; its step bound `max_steps`, which also sizes diffrax's
default checkpointing, about sqrt(2 max_steps) checkpoints: 90 at 4096, 10 at 64;
Tsit5's stage loop; the package's fused solve, `integrator=fused`, and its reverse
modes (`accepted_steps`: its own reverse loop, `measure/replay.py`, each step's reverse
by hand for an MLP field with `mlp_reverse`, `measure/mlp_reverse.py`); the kernel
solve, `integrator=kernel`, `measure/kernel.py`, a GPU's; and buffer
donation; the model's activations by their faster equivalents, `fast_activations`),
JAX's default matmul precision, and XLA flags (the CPU backend's legacy
runtime instead of thunks, single-threaded Eigen, XNNPACK). Flags are read once when
JAX starts, so every variant runs in a worker process of its own:

1. Workers start one at a time (never two measuring at once). Each trains the scenario
   from scratch under its own levers (its final evaluation loss says whether the lever
   trains the same model), then loads the *default's* trained parameters and optimiser
   state and compiles the full-length step on them.
2. The parent then asks the workers in turn for a block of timed steps on the same
   batches (A B C A B C ...), so that a slow spell of the machine hits every variant
   alike; each variant's first step from the shared state is compared with the
   default's (loss and parameters), and the loop bodies and conditionals of one
   untimed step are counted (`measure.loops.count_loops`). In every round a worker of
   its own also measures the floor's rate (the probe's matmul-and-tanh loop at the
   step's shapes, `_rate_worker`), so that the floor's spread over the run is recorded
   beside the steps' (`floor_of`).

    .venv/bin/python benchmarks/levers.py --controller pid \
        --out results/<machine>/levers/cpu-pid.json

On a workload of the map (`--workload`, `study.workloads.WORKLOADS`; `make map-levers`)
the scenario is the workload's: the variants `recommended-unrolled` and
`recommended-diffrax` are its recommended step run by diffrax's loop
(`recommended.diffrax_levers`) without and with its Tsit5 stages as straight-line code
(`stages=loop` against `stages=unrolled`), `recommended-fused` that step run by the fused
solve (`recommended.recommended_fused_levers`: with the fused solve's own levers where the
problem takes them, `mlp_reverse`), and `recommended` the recommended step itself
(`recommended.recommended_levers`: one of the two, as the problem says).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# label -> levers: `Scenario` fields (the solve's structure, `solvers.Structure`, and
# buffer donation), XLA flags (as XLA's CPU backend names them, xla/debug_options_flags.cc;
# a flag this jaxlib does not know stops the worker) or JAX's default matmul precision.
# XLA's GPU command buffers including while loops (the flag's full list of kinds, as
# jaxlib 0.11 names them).
CMDBUF_WHILE = (
    "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE"
)
VARIANTS = {
    "default": {},
    "within_ode": {"solve": "within_ode"},
    # PID: the solve's step bound; diffrax's default adjoint keeps floor(sqrt(2
    # max_steps)) checkpoints: 90 at 4096, 10 at 64 (fewer than the ~22 steps a trained
    # field takes: recomputation).
    "max_steps=64": {"max_steps": 64},
    "thunk_runtime_off": {"xla_flags": "--xla_cpu_use_thunk_runtime=false"},
    "eigen_1_thread": {"xla_flags": "--xla_cpu_multi_thread_eigen=false"},
    "xnnpack": {"xla_flags": "--xla_cpu_use_xnnpack=true"},
    "matmul_bf16": {"matmul_precision": "bfloat16"},
    # The solve's structure: no inner save loop; a checkpoint per step (no backward
    # conditional, no recomputation); DirectAdjoint; Tsit5's stages as a bounded scan.
    "dense": {"saveat": "dense"},
    "steps": {"saveat": "steps"},
    "all_steps": {"adjoint": "all_steps"},
    "all_steps(64)": {"adjoint": "all_steps", "max_steps": 64},
    "direct": {"adjoint": "direct"},
    "direct(64)": {"adjoint": "direct", "max_steps": 64},
    "stages=bounded": {"stages": "bounded"},
    # Tsit5's stages as straight-line code (`StraightTsit5`): no stage loop.
    "stages=unrolled": {"stages": "unrolled"},
    "donate": {"donate": True},
    "steps+all_steps": {"saveat": "steps", "adjoint": "all_steps"},
    "dense+all_steps(64)": {"saveat": "dense", "adjoint": "all_steps", "max_steps": 64},
    "within_ode+dense+all_steps(64)": {
        "solve": "within_ode",
        "saveat": "dense",
        "adjoint": "all_steps",
        "max_steps": 64,
    },
    "within_ode+dense+all_steps(64)+unrolled": {
        "solve": "within_ode",
        "saveat": "dense",
        "adjoint": "all_steps",
        "max_steps": 64,
        "stages": "unrolled",
    },
    "within_ode+all_steps(64)": {"solve": "within_ode", "adjoint": "all_steps", "max_steps": 64},
    "within_ode+all_steps": {"solve": "within_ode", "adjoint": "all_steps"},
    "within_ode+steps+all_steps": {
        "solve": "within_ode",
        "saveat": "steps",
        "adjoint": "all_steps",
    },
    "within_ode+steps+all_steps+unrolled": {
        "solve": "within_ode",
        "saveat": "steps",
        "adjoint": "all_steps",
        "stages": "unrolled",
    },
    # The fused solve (`measure/fused.py`): Tsit5 and the controller as one loop carrying
    # only what a step needs, each of its reverse modes (a checkpoint per step, diffrax's
    # default checkpoints, a checkpointed scan), per sample and within-ODE.
    "fused": {"integrator": "fused", "adjoint": "all_steps"},
    "fused(64)": {"integrator": "fused", "adjoint": "all_steps", "max_steps": 64},
    "fused_recursive(64)": {"integrator": "fused", "adjoint": "recursive", "max_steps": 64},
    "fused_scan(64)": {"integrator": "fused", "adjoint": "scan", "max_steps": 64},
    "within_ode+fused(64)": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "all_steps",
        "max_steps": 64,
    },
    "within_ode+fused_scan(64)": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "scan",
        "max_steps": 64,
    },
    "within_ode+fused_recursive(64)": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "recursive",
        "max_steps": 64,
    },
    "within_ode+fused_checkpointed_scan(64)": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "checkpointed_scan",
        "max_steps": 64,
    },
    "within_ode+fused": {"solve": "within_ode", "integrator": "fused", "adjoint": "all_steps"},
    # The fused solve with its own reverse loop (`measure/replay.py`): a checkpoint per
    # accepted step, only the accepted steps replayed, the observation times
    # interpolated once after the loop.
    "fused_accepted(64)": {"integrator": "fused", "adjoint": "accepted_steps", "max_steps": 64},
    "within_ode+fused_accepted(64)": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "accepted_steps",
        "max_steps": 64,
    },
    "within_ode+fused_accepted": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "accepted_steps",
    },
    # The model's activations by their faster equivalents (`measure/activations.py`:
    # softplus from one tanh and one log), alone and on each controller's fastest step.
    "fastact": {"fast_activations": True},
    "within_ode+dense+all_steps(64)+unrolled+fastact": {
        "solve": "within_ode",
        "saveat": "dense",
        "adjoint": "all_steps",
        "max_steps": 64,
        "stages": "unrolled",
        "fast_activations": True,
    },
    "within_ode+fused_accepted(64)+fastact": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "accepted_steps",
        "max_steps": 64,
        "fast_activations": True,
    },
    # The recommended PID step with each step's reverse written by hand for an MLP field
    # (`measure/mlp_reverse.py`: the six stages' forward pass as one batch, input
    # gradients stage by stage, one weight-gradient product per layer).
    "within_ode+fused_accepted(64)+fastact+mlprev": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "accepted_steps",
        "max_steps": 64,
        "fast_activations": True,
        "mlp_reverse": True,
    },
    # The same step compiled with 512-bit vectors (`measure/vectors.py`: a compile
    # option of the step's executable), and the default step so compiled.
    "within_ode+fused_accepted(64)+fastact+mlprev+vw512": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "accepted_steps",
        "max_steps": 64,
        "fast_activations": True,
        "mlp_reverse": True,
        "vector_width": 512,
    },
    "vw512": {"vector_width": 512},
    # The recommended PID step with one Eigen thread (XLA's intra-op parallelism off):
    # on a 2-core machine a small step's kernels may cost more split over two threads.
    "within_ode+fused_accepted(64)+fastact+eigen_1_thread": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "accepted_steps",
        "max_steps": 64,
        "fast_activations": True,
        "xla_flags": "--xla_cpu_multi_thread_eigen=false",
    },
    "within_ode+steps+all_steps+unrolled+fastact": {
        "solve": "within_ode",
        "saveat": "steps",
        "adjoint": "all_steps",
        "stages": "unrolled",
        "fast_activations": True,
    },
    "within_ode+fused+fastact": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "all_steps",
        "fast_activations": True,
    },
    "within_ode+fused_checkpointed_scan": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "checkpointed_scan",
    },
    # On a GPU: XLA's command buffers with while loops (the solver loop's body is then
    # launched as one CUDA graph), on the recommended step and on the fused solve.
    "within_ode+dense+all_steps(64)+unrolled+cmdbuf": {
        "solve": "within_ode",
        "saveat": "dense",
        "adjoint": "all_steps",
        "max_steps": 64,
        "stages": "unrolled",
        "xla_flags": CMDBUF_WHILE,
    },
    "within_ode+fused(64)+cmdbuf": {
        "solve": "within_ode",
        "integrator": "fused",
        "adjoint": "all_steps",
        "max_steps": 64,
        "xla_flags": CMDBUF_WHILE,
    },
    "within_ode+fused_scan": {"solve": "within_ode", "integrator": "fused", "adjoint": "scan"},
    # The kernel solve (`measure/kernel.py`): the solve and its reverse pass as one Pallas
    # kernel each, a block of series per program instance (per sample) or the batch as
    # one (within-ODE). For a GPU: on a CPU it runs in Pallas's interpret mode.
    "kernel(64)": {"integrator": "kernel", "adjoint": "accepted_steps", "max_steps": 64},
    "within_ode+kernel(64)": {
        "solve": "within_ode",
        "integrator": "kernel",
        "adjoint": "accepted_steps",
        "max_steps": 64,
    },
    "within_ode+kernel(64)+fastact": {
        "solve": "within_ode",
        "integrator": "kernel",
        "adjoint": "accepted_steps",
        "max_steps": 64,
        "fast_activations": True,
    },
    # The floor: StepTo's Tsit5 arithmetic as a lax.scan over the grid (no diffrax loop).
    "scan": {"solve": "scan"},
    "scan(unroll=2)": {"solve": "scan", "unroll": 2},
}
# What `--variants` defaults to, per controller: the structure levers of the solve.
DEFAULT_VARIANTS = {
    "pid": [
        "default",
        "within_ode",
        "dense",
        "all_steps(64)",
        "direct(64)",
        "stages=bounded",
        "stages=unrolled",
        "donate",
        "dense+all_steps(64)",
        "within_ode+dense+all_steps(64)",
        "within_ode+dense+all_steps(64)+unrolled",
        "fused(64)",
        "within_ode+fused(64)",
        "within_ode+fused_recursive(64)",
        "within_ode+fused_scan(64)",
        "within_ode+fused_checkpointed_scan(64)",
        "fused_accepted(64)",
        "within_ode+fused_accepted(64)",
        "fastact",
        "within_ode+dense+all_steps(64)+unrolled+fastact",
        "within_ode+fused_accepted(64)+fastact",
        "eigen_1_thread",
        "within_ode+fused_accepted(64)+fastact+eigen_1_thread",
        "within_ode+fused_accepted(64)+fastact+mlprev",
        "vw512",
        "within_ode+fused_accepted(64)+fastact+mlprev+vw512",
    ],
    "stepto": [
        "default",
        "within_ode",
        "dense",
        "steps",
        "all_steps",
        "direct",
        "stages=bounded",
        "stages=unrolled",
        "donate",
        "steps+all_steps",
        "within_ode+steps+all_steps",
        "within_ode+steps+all_steps+unrolled",
        "scan",
        "scan(unroll=2)",
        "fused",
        "within_ode+fused",
        "within_ode+fused_checkpointed_scan",
        "within_ode+fused_accepted",
        "fastact",
        "within_ode+steps+all_steps+unrolled+fastact",
        "within_ode+fused+fastact",
    ],
}
# Levers that are not `Scenario` fields.
PROCESS_LEVERS = ("xla_flags", "matmul_precision")
# Variants whose levers depend on the scenario's problem: its recommended step
# (`recommended.recommended_levers`: run by the fused solve where the problem says so),
# that step run by diffrax's loop (`recommended.diffrax_levers`, Tsit5's stages
# unrolled), the diffrax step with its stage loop instead, and the diffrax step run by
# the fused solve (`recommended.fused_levers`: the controller's reverse mode, saving and stages
# its own).
RECOMMENDED_VARIANTS = (
    "recommended-unrolled",
    "recommended-diffrax",
    "recommended",
    "recommended-fused",
    "recommended-vw0",
    "recommended-vw512",
)
# The recommended step compiled with XLA's default vector width and with 512-bit vectors
# (`measure/vectors.py`), whatever its own width.
WIDTH_VARIANTS = {"recommended-vw0": 0, "recommended-vw512": 512}


def lever_variant(label: str, s) -> dict | None:
    """The fields of variant `label` where it names levers (`measure.lever`): registered
    lever names, or `module:Class` naming one defined outside the package, joined by
    `+` (`fused+fast_activations`), set on `s` together; None where it names none."""
    from odestudy.measure import levers as _shipped  # noqa: F401 - registers them
    from odestudy.measure.lever import LEVERS, combine, resolve_lever

    names = label.split("+")
    if not all(n in LEVERS or ":" in n for n in names):
        return None
    chosen = [LEVERS[n]() if n in LEVERS else resolve_lever(n) for n in names]
    return combine(s, chosen)


def levers_of(label: str, s) -> dict:
    """The levers of variant `label` for scenario `s` (its problem and controller)."""
    if label not in RECOMMENDED_VARIANTS:
        if label in VARIANTS:
            return VARIANTS[label]
        found = lever_variant(label, s)
        if found is None:
            raise ValueError(f"unknown variant {label!r}")
        return found
    from odestudy.measure.recommended import (
        diffrax_levers,
        recommended_fused_levers,
        recommended_levers,
    )

    if label == "recommended":
        return recommended_levers(s)
    if label in WIDTH_VARIANTS:
        return {**recommended_levers(s), "vector_width": WIDTH_VARIANTS[label]}
    if label == "recommended-fused":
        return recommended_fused_levers(s)
    levers = diffrax_levers(s)
    return {**levers, "stages": "loop"} if label == "recommended-unrolled" else levers


def _names_levers(label: str) -> bool:
    """Whether variant `label` names levers (`lever_variant`)."""
    from odestudy.measure import levers as _shipped  # noqa: F401 - registers them
    from odestudy.measure.lever import LEVERS

    return all(n in LEVERS or ":" in n for n in label.split("+"))


def _worker(args: argparse.Namespace) -> None:
    """One variant: train, compile the step on the default's state, serve timed blocks."""
    levers = json.loads(args.levers)
    import odestudy

    base = json.loads(args.fields or "{}")  # the workload's fields (and the device)
    odestudy.configure_devices(base.get("device", "cpu"), 1)
    import time

    import equinox as eqx
    import jax
    import numpy as np

    from odestudy.measure.floor import reverse_steps
    from odestudy.measure.loops import count_loops
    from odestudy.measure.problem import stage_lengths
    from odestudy.measure.state import load_state, save_state
    from odestudy.measure.step import make_parallel_step
    from odestudy.measure.timing import copy_arrays, run_steps, time_call
    from odestudy.measure.training import prepare, scenario_devices, step_key, train

    if "matmul_precision" in levers:
        jax.config.update("jax_default_matmul_precision", levers["matmul_precision"])
    fields = {k: v for k, v in levers.items() if k not in PROCESS_LEVERS}
    s = odestudy.Scenario(controller=args.controller, scale=args.scale, **base, **fields)
    devices = scenario_devices(s)
    state: dict = {}
    trained = train(s, devices, state_out=state)
    work = Path(args.work)
    shared = work / "default_state.npz"
    if args.first:
        save_state(shared, state["params"], state["opt_state"])
    setup = prepare(s, devices)  # fresh model and optimiser: the tree structure
    params, opt_state = load_state(shared, setup.params, setup.opt_state)
    static, optimiser = setup.static, setup.optimiser
    problem = setup.problem
    n_times = np.shape(problem.times(setup.data))[1]
    last = stage_lengths(n_times, s.length_fractions)[-1]
    data = problem.truncate(setup.data, last, last)
    batches = np.load(work / "batches.npy")
    step = make_parallel_step(s, devices, static, optimiser, problem=problem)
    p0, o0 = step.place_state(params, opt_state)
    placed = [
        step.place_batch(problem.take(data, idx), step_key(s, i) if problem.needs_key else None)
        for i, idx in enumerate(batches)
    ]
    t0 = time.perf_counter()
    compiled = step.compile(p0, o0, placed[0])
    compile_s = time.perf_counter() - t0
    # A donating step consumes its inputs: every call off the blocks gets copies.
    first, _ = time_call(compiled, *copy_arrays((p0, o0)), placed[0])
    loops = count_loops(compiled, *copy_arrays((p0, o0)), placed[0])  # untimed
    # The steps its reverse pass replays on the first block's batch (untimed; None:
    # every step taken), for the floor's reverse charge.
    key = step_key(s, 0) if problem.needs_key else None
    model = eqx.combine(params, static)
    reversed_max = reverse_steps(s, problem, model, problem.take(data, batches[0]), key)
    save_state(work / f"first_{args.index}.npz", step.unplace(first[0]), step.unplace(o0))
    print(
        json.dumps(
            {
                "ready": True,
                "final_loss": trained["final_loss"],
                "train_step_time_s": trained["step_time_s"],
                "compile_time_s": compile_s,
                "loss": float(np.asarray(first[2]).reshape(-1)[0]),
                "solver_steps_max": int(np.max(np.asarray(first[3]))),
                "solver_steps_mean": float(np.mean(np.asarray(first[3]))),
                "solver_steps_reversed_max": reversed_max,
                "loops": loops,
            }
        ),
        flush=True,
    )
    for line in sys.stdin:
        if line.strip() != "block":
            break
        run = run_steps(
            compiled,
            p0,
            o0,
            placed,
            len(placed),
            carry=False,
            where="lever block, step",
            copy_state=s.donate,
        )
        print(json.dumps({"times": run.times}), flush=True)


def _rate_worker(args: argparse.Namespace) -> None:
    """The floor's rates, measured between the timed blocks: at each `block` line, the
    rate of the probe's matmul-and-tanh loop at the step's per-device batch and width
    (`probe.matmul_rate`) and of its transcendentals (`probe.transcendental_rate`),
    printed as JSON."""
    import odestudy

    fields = json.loads(args.fields or "{}")
    odestudy.configure_devices(fields.get("device", "cpu"), 1)
    from odestudy.measure.probe import matmul_rate, transcendental_rate

    batch, width = json.loads(args.rate_worker)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() == "block":
            rate = matmul_rate(batch, width)["flops_per_s"]
            other = transcendental_rate(batch, width)["transcendentals_per_s"]
            print(json.dumps({"flops_per_s": rate, "transcendentals_per_s": other}), flush=True)


def _read_json(proc: subprocess.Popen) -> dict:
    """The next JSON line a worker prints (other lines, e.g. warnings, are skipped)."""
    for line in proc.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"worker exited with {proc.wait()}")


def _block(proc: subprocess.Popen) -> dict:
    """Ask a worker for its next block and wait for its answer (`_read_json`)."""
    proc.stdin.write("block\n")
    proc.stdin.flush()
    return _read_json(proc)


def main() -> None:
    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as in scenario kernels (recorded)
    from odestudy.measure.controllers import CONTROLLERS

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--controller", choices=tuple(CONTROLLERS), default="pid")
    p.add_argument("--scale", default="quick")
    p.add_argument(
        "--device",
        choices=("cpu", "gpu"),
        default="cpu",
        help="the one device the step runs on (the machine's first GPU with gpu)",
    )
    p.add_argument(
        "--variants",
        help="comma-separated labels, the first the baseline (default: the controller's "
        f"structure levers, DEFAULT_VARIANTS); valid: {', '.join(VARIANTS)}",
    )
    p.add_argument(
        "--workload",
        help="a workload of the map (its slug, `Workload.slug`): its problem, width and "
        "training instead of the quick model's",
    )
    p.add_argument(
        "--map",
        action="store_true",
        help="every workload of the map with both controllers (`make map-levers`), each "
        "to results/map/<machine>/levers/<workload>-<controller>.json; a record there "
        "that stands for the run (`why_rerun`) is kept",
    )
    p.add_argument(
        "--map-folder",
        default="levers",
        help="with --map: the folder of results/map/<machine>/ the records go to (levers: "
        "the unrolled stages' comparison; vectors: 512-bit vectors'; fused: the fused "
        "solve's)",
    )
    p.add_argument("--blocks", type=int, default=8, help="interleaved blocks per variant")
    p.add_argument("--steps-per-block", type=int, default=15)
    p.add_argument("--out", help="output JSON file (required unless --worker or --map)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rate-worker", help=argparse.SUPPRESS)  # "[batch, width]"
    p.add_argument("--levers", help=argparse.SUPPRESS)
    p.add_argument("--fields", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, help=argparse.SUPPRESS)
    p.add_argument("--first", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return _worker(a)
    if a.rate_worker:
        return _rate_worker(a)
    if a.blocks < 1 or a.steps_per_block < 1:
        p.error("--blocks and --steps-per-block must be at least 1")
    if not a.out and not a.map:
        p.error("--out is required (or --map)")
    if a.map and not a.variants:
        p.error("--map needs --variants (the same for both controllers)")
    labels = a.variants.split(",") if a.variants else DEFAULT_VARIANTS[a.controller]
    unknown = [
        x
        for x in labels
        if x not in VARIANTS and x not in RECOMMENDED_VARIANTS and not _names_levers(x)
    ]
    if unknown:
        valid = ", ".join([*VARIANTS, *RECOMMENDED_VARIANTS])
        p.error(
            f"unknown variant(s) {unknown}; valid choices: {valid}, or levers by name or "
            "module:Class joined by + (odestudy.measure.lever)"
        )
    from odestudy.study.workloads import WORKLOADS

    slugs = {w.slug(): w for w in WORKLOADS}
    if a.workload and a.workload not in slugs:
        p.error(f"unknown workload {a.workload!r}; valid choices: {', '.join(slugs)}")
    if not a.map:
        runs = [(a.controller, slugs.get(a.workload), Path(a.out))]
    else:
        from odestudy.study.records import DEFAULT_RESULTS, machine_folder
        from odestudy.study.workloads import MAP_FOLDER

        folder = machine_folder(Path(DEFAULT_RESULTS) / MAP_FOLDER) / a.map_folder
        runs = [(c, w, folder / f"{w.slug()}-{c}.json") for w in WORKLOADS for c in CONTROLLERS]
    checked = [(w, out, _scenario(a, c, w, labels, p)) for c, w, out in runs]
    from odestudy.study.probing import session_probe
    from odestudy.study.records import DEFAULT_RESULTS, machine_folder

    with session_probe(a.device, 1, machine_folder(DEFAULT_RESULTS)):
        # Every run's workers start from this environment, the probe's named (the
        # parent's later changes to its own, such as its device set-up for the record,
        # are not passed on).
        start_env = dict(os.environ)
        _measure_all(a, checked, labels, start_env)


def _measure_all(a: argparse.Namespace, checked: list, labels: list[str], start_env: dict) -> None:
    """Measure each of `checked` (workload, output, scenario), keeping a map record that
    stands for its run."""
    for workload, out, s in checked:  # every scenario checked before any run
        if a.map:
            why = why_rerun(out, s, labels, a.blocks, a.steps_per_block)
            if why is None:
                print(f"kept: {out} (made here, with these variants, versions and protocol)")
                continue
            print(f"{s.name()}: measuring ({why})", flush=True)
        measure(a, s, labels, workload, out, start_env)


def floor_of(s, rates: list[dict]) -> dict:
    """What `s`'s step must compute (`measure.floor.evaluation_flops`: FLOPs of one field
    evaluation over the batch, forward and backward, and of the rest of the step, and
    the transcendentals apart) and the rates this device sustains at its shapes:
    `rates`, the probe's matmul-and-tanh loop and its transcendentals at the per-device
    batch and the field's width (`probe.matmul_rate`, `probe.transcendental_rate`)
    measured in each round of timed blocks, and their medians. A row's floor is
    `floor.floor_time` of these and its executed solver steps."""
    from odestudy.measure.floor import evaluation_flops

    return {**evaluation_flops(s), **rates_of(s, rates)}


def rates_of(s, rates: list[dict]) -> dict:
    """The floor's rates over the rounds of blocks (`floor_of`), with their medians."""
    import numpy as np

    from odestudy.measure.vectors import probed_options

    matmul = [r["flops_per_s"] for r in rates]
    other = [r["transcendentals_per_s"] for r in rates if "transcendentals_per_s" in r]
    out = {
        "width": s.width,
        # The compile options the probe's loop was timed with, the faster counting.
        "rate_compile_options": probed_options("cpu" if s.device == "cpu" else "gpu"),
        "matmul_flops_per_s": float(np.median(matmul)),
        "matmul_flops_per_s_rounds": matmul,
    }
    if other:
        out |= {"transcendentals_per_s": float(np.median(other)), "transcendentals_rounds": other}
    return out


def variant_floor(s, levers: dict, rates: list[dict]) -> dict | None:
    """What variant `levers` of `s` must compute, counted on its own program
    (`floor_of` of its scenario), or None where its program cannot be counted so."""
    import dataclasses

    from odestudy.measure.floor import evaluation_flops

    fields = {k: v for k, v in levers.items() if k not in PROCESS_LEVERS}
    try:
        return {**evaluation_flops(dataclasses.replace(s, **fields)), **rates_of(s, rates)}
    except (ValueError, TypeError, NotImplementedError) as exc:
        print(f"floor of {levers}: not counted on its own program ({exc})", flush=True)
        return None


def _base(a: argparse.Namespace, workload) -> dict:
    """The `Scenario` fields every variant shares: the workload's, and the device."""
    return {**(workload.fields() if workload else {}), "device": a.device}


def _scenario(a: argparse.Namespace, controller: str, workload, labels: list[str], p):
    """The scenario of `controller` on `workload` (None: the quick model), each variant
    checked on it (a bad combination stops here, before any worker compiles)."""
    import odestudy

    base = _base(a, workload)
    s = odestudy.Scenario(controller=controller, scale=a.scale, **base)
    for label in labels:
        try:
            fields = {k: v for k, v in levers_of(label, s).items() if k not in PROCESS_LEVERS}
            odestudy.Scenario(controller=controller, scale=a.scale, **base, **fields)
        except ValueError as exc:
            p.error(f"variant {label!r} with controller {controller!r}: {exc}")
    return s


def _set(levers: dict | None) -> dict | None:
    """`levers` without those at their default (`solve=per_sample` is no lever)."""
    from odestudy import Scenario

    fields = Scenario.__dataclass_fields__
    if levers is None:
        return None
    return {
        k: v
        for k, v in levers.items()
        if k not in fields or fields[k].default is None or fields[k].default != v
    }


def why_rerun(path: Path, s, labels: list[str], blocks: int, steps: int) -> str | None:
    """Why the record at `path` cannot stand for a run of `labels` on scenario `s`, or
    None if it can: the same scenario, variants (each label with the levers it stands
    for now: `recommended-fused`'s follow `recommended.recommended_fused_levers`) and
    blocks, made here (`plan.why_not_here`: this machine, versions, protocol and
    measurement environment)."""
    from odestudy import Scenario
    from odestudy.measure.timing import measurement_env
    from odestudy.study.plan import why_not_here

    try:
        old = json.loads(Path(path).read_text())
        key = Scenario.from_dict(old["scenario"]).key()
    except (OSError, ValueError, KeyError, TypeError):
        return "no record to keep"
    checks = (
        ("scenario", key, s.key()),
        ("variants", [r.get("label") for r in old.get("rows", [])], labels),
        (
            "levers",
            [_set(r.get("levers")) for r in old.get("rows", [])],
            [_set(levers_of(label, s)) for label in labels],
        ),
        ("blocks", [old.get("blocks"), old.get("steps_per_block")], [blocks, steps]),
    )
    for what, have, want in checks:
        if have != want:
            return f"{what} differs: record {have!r}, here {want!r}"
    return why_not_here(old, measurement_env())


def measure(
    a: argparse.Namespace, s, labels: list[str], workload, out: Path, start_env: dict
) -> None:
    """Train and time `labels` on scenario `s` (of `workload`, or None), interleaved,
    from workers started in `start_env`, and write the record to `out`."""
    import numpy as np

    import odestudy
    from odestudy.report.intervals import ratio_interval

    base = _base(a, workload)
    chosen = {label: levers_of(label, s) for label in labels}
    from odestudy.measure.environment import now

    started = now()
    with tempfile.TemporaryDirectory(prefix="odestudy-levers-") as tmp:
        rng = np.random.default_rng(0)
        np.save(
            Path(tmp) / "batches.npy",
            np.stack(
                [
                    rng.choice(s.dataset_size, s.global_batch, replace=False)
                    for _ in range(a.steps_per_block)
                ]
            ),
        )
        env = {**start_env, "ODESTUDY_DATA_CACHE": str(Path(tmp) / "data")}
        workers, ready = {}, {}
        for i, label in enumerate(labels):  # one at a time: training is measured work
            levers = chosen[label]
            wenv = dict(env)
            if levers.get("xla_flags"):
                wenv["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {levers['xla_flags']}"
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--levers",
                json.dumps(levers),
                "--fields",
                json.dumps(base),
                "--work",
                tmp,
                "--index",
                str(i),
                "--controller",
                s.controller,
                "--scale",
                a.scale,
            ] + (["--first"] if i == 0 else [])
            workers[label] = subprocess.Popen(
                cmd, env=wenv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            ready[label] = _read_json(workers[label])
            print(
                f"{label}: trained to {ready[label]['final_loss']:.4g}, "
                f"compiled in {ready[label]['compile_time_s']:.1f} s",
                flush=True,
            )
        # The floor's rate, measured in every round beside the variants' blocks.
        shape = [s.global_batch // s.total_devices, s.width]
        cmd = [sys.executable, __file__, "--rate-worker", json.dumps(shape)]
        rater = subprocess.Popen(
            [*cmd, "--fields", json.dumps(base)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        _read_json(rater)
        runs = {label: [] for label in labels}
        rates = []
        for _ in range(a.blocks):  # interleaved, one worker measuring at a time
            for label, w in workers.items():
                runs[label].append(_block(w)["times"])
            rates.append(_block(rater))
        for w in [*workers.values(), rater]:
            w.stdin.close()
            w.wait()
        from odestudy.measure.modes import tree_max_rel_diff

        def first_params(i):
            with np.load(Path(tmp) / f"first_{i}.npz") as f:
                return [f[k] for k in sorted(f.files, key=lambda k: int(k[4:]))]

        base_params = first_params(0)
        default = {
            "step_time_runs_s": [float(np.median(t)) for t in runs[labels[0]]],
            "step_times_runs_s": runs[labels[0]],
        }
        rows = []
        for i, label in enumerate(labels):
            record = {
                "step_time_runs_s": [float(np.median(t)) for t in runs[label]],
                "step_times_runs_s": runs[label],
            }
            ratio, lo, hi = ratio_interval(default, record)
            rows.append(
                {
                    "label": label,
                    "levers": chosen[label],
                    **ready[label],
                    "step_time_s": float(np.median(np.concatenate(runs[label]))),
                    "speedup_vs_default": ratio,
                    "speedup_ci": [lo, hi],
                    "first_step_params_rel_diff_vs_default": tree_max_rel_diff(
                        first_params(i), base_params
                    ),
                    **record,
                }
            )
            r = rows[-1]
            print(
                f"{label:28s} step {r['step_time_s'] * 1e3:6.2f} ms, speedup "
                f"{ratio:.2f} [{lo:.2f}, {hi:.2f}], trained to {r['final_loss']:.4g}, "
                f"first-step params rel. diff {r['first_step_params_rel_diff_vs_default']:.1e}"
            )
    odestudy.configure_devices(s.device, 1)
    record = {
        "scenario": s.to_dict(),
        "workload": workload.name if workload else None,
        "started": started,
        "blocks": a.blocks,
        "steps_per_block": a.steps_per_block,
        "method": "one worker process per variant; interleaved blocks; speedup = "
        "default median step / variant median step, 95% bootstrap over blocks "
        "and steps; every variant timed from the default's trained state on the "
        "same batches; final_loss from the variant's own training",
        "rows": rows,
    }
    # The timed rows are written before the floor is counted: counting compiles each
    # variant's program again (a GPU kernel's took minutes), and a run cut off there
    # once lost every finished row.
    _write(out, s, {**record, "finished": now(), "floor": None})
    floor = floor_of(s, rates)
    for row in rows:  # each variant's own program counted (`report.floor.row_counts`)
        row["floor"] = variant_floor(s, row["levers"], rates)
    _write(out, s, {**record, "finished": now(), "floor": floor})


def _write(out: Path, s, record: dict) -> None:
    """Write `record` to `out` (atomically), with the environment of `s`."""
    import odestudy
    from odestudy.measure.training import environment

    odestudy.write_json_atomic(out, {**record, **environment(s)})


if __name__ == "__main__":
    from odestudy.study.lock import run_measuring

    run_measuring(main, f"benchmarks/{__file__.rsplit('/', 1)[-1]}")
