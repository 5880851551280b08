"""The machine probe: a few seconds at the start of every timing session measuring what
the predictions are made of (all-reduce latencies, matmul rates, an empty loop's
iteration). A session runs it once in a process of its own and names its file in
`PROBE_VARIABLE`, inherited by its processes; `session_probe()` reads it back.
"""

import json
import os
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from . import environment
from .compat import make_data_mesh, shard_map
from .timing import median_time
from .vectors import probed_options

PROBE_VARIABLE = "ODESTUDY_PROBE"  # the file of this session's probe
PROBE_FOLDER = "probes"  # beside the records of a machine
# The gradient size the probe reduces (float32 elements): between the study's smallest
# model (oscillator width 16) and its widest (width 256); sizes between are
# interpolated linearly, as a latency plus a size over a bandwidth.
GRADIENT_FLOATS = 16384
# What the probe's record means; a change of what it measures bumps it.
# 2: the matmul rate is the faster over the compile options a step may take
# (`vectors.probed_options`), not XLA's defaults alone.
PROBE_VERSION = 2


def collective_latency(
    n_devices: int, iterations: int = 2000, size: int = 1, repeats: int = 7
) -> dict[str, Any]:
    """Seconds per all-reduce (`psum`) of `size` floats over `n_devices` devices inside a
    loop: a loop with the `psum` against the same arithmetic without."""
    devices = jax.devices()[:n_devices]
    if len(devices) < n_devices:
        raise ValueError(f"{n_devices} devices requested, {len(devices)} present")
    mesh = make_data_mesh(devices)
    axis = mesh.axis_names[0]

    def program(with_psum: bool) -> Any:
        def local(x: Any) -> Any:
            def body(i: Any, c: Any) -> Any:
                return (jax.lax.psum(c, axis) if with_psum else c * n_devices) * 0.5 + 1.0

            return jax.lax.fori_loop(0, iterations, body, x)

        return jax.jit(shard_map(local, mesh=mesh, in_specs=P(axis), out_specs=P(axis)))

    x = jax.make_array_from_callback(
        (n_devices * size,),
        jax.sharding.NamedSharding(mesh, P(axis)),
        lambda index: np.ones((n_devices * size,), np.float32)[index],
    )
    medians = {
        with_psum: median_time(program(with_psum).lower(x).compile(), x, repeats=repeats)
        for with_psum in (False, True)
    }
    return {
        "n_devices": n_devices,
        "processes": jax.process_count(),
        "iterations": iterations,
        "size": size,
        "loop_s": medians[False],
        "loop_with_psum_s": medians[True],
        "latency_s": max(0.0, (medians[True] - medians[False]) / iterations),
        "platform": jax.default_backend(),
    }


def matmul_rate(batch: int, width: int, iterations: int = 200, repeats: int = 7) -> dict:
    """Float32 FLOP/s of one device on a loop of `batch` x `width` by `width` x `width`
    matmuls, the fastest over the compile options a step may take."""
    rng = np.random.default_rng(0)
    w = jax.device_put(rng.standard_normal((width, width), np.float32) / np.sqrt(width))
    y = jax.device_put(rng.standard_normal((batch, width), np.float32))
    fn = jax.jit(
        lambda y, w: jax.lax.fori_loop(0, iterations, lambda i, c: jax.numpy.tanh(c @ w), y)
    )
    lowered = fn.lower(y, w)
    seconds = min(
        median_time(lowered.compile(options), y, w, repeats=repeats)
        for options in probed_options(jax.default_backend())
    )
    return {
        "batch": batch,
        "width": width,
        "flops_per_s": 2.0 * batch * width**2 * iterations / seconds,
    }


def transcendental_rate(
    batch: int, width: int, iterations: int = 200, repeats: int = 7
) -> dict[str, Any]:
    """Transcendental functions per second of one device on a loop of softplus steps of
    a `batch` x `width` state (a field's activations apart from its matmuls)."""
    y = jax.device_put(np.random.default_rng(0).standard_normal((batch, width), np.float32))
    body = lambda i, c: jax.numpy.log1p(jax.numpy.exp(0.5 * c))  # noqa: E731
    fn = jax.jit(lambda y: jax.lax.fori_loop(0, iterations, body, y))
    seconds = median_time(fn.lower(y).compile(), y, repeats=repeats)
    return {
        "batch": batch,
        "width": width,
        "transcendentals_per_s": 2.0 * batch * width * iterations / seconds,
    }


def loop_iteration_s(iterations: int = 20000, repeats: int = 7) -> float:
    """Seconds per iteration of an empty compiled loop (a solver loop's cost per step)."""
    fn = jax.jit(lambda x: jax.lax.fori_loop(0, iterations, lambda i, c: c + 1.0, x))
    x = jax.numpy.float32(0.0)
    return median_time(fn.lower(x).compile(), x, repeats=repeats) / iterations


def device_counts(n_devices: int) -> list[int]:
    """The device counts the probe reduces over: powers of 2 and `n_devices`."""
    counts = [n for n in (2**k for k in range(1, 12)) if n <= n_devices]
    return sorted({*counts, n_devices} - {1})


def probe(gradient_floats: int = GRADIENT_FLOATS) -> dict[str, Any]:
    """Measure this process's devices; the probe record without its environment."""
    start = time.perf_counter()
    allreduce = []
    for n in device_counts(len(jax.devices())):
        for size, iterations in ((1, 2000), (gradient_floats, 200)):
            allreduce.append(collective_latency(n, iterations=iterations, size=size))
    return {
        "probe_version": PROBE_VERSION,
        "device_kind": jax.devices()[0].device_kind,
        "platform": jax.default_backend(),
        "n_devices": len(jax.devices()),
        "allreduce": [
            {k: a[k] for k in ("n_devices", "processes", "size", "latency_s")} for a in allreduce
        ],
        "matmul": [matmul_rate(32, 64), matmul_rate(1024, 1024, iterations=4)],
        "loop_iteration_s": loop_iteration_s(),
        "probe_s": time.perf_counter() - start,
    }


def record_probe(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with the machine, versions, commit and time it was measured at."""
    return {
        **values,
        "machine_id": environment.machine_id(environment.this_machine()),
        "hardware": environment.cpu_info(),
        "versions": environment.versions(),
        **environment.provenance(),
        "finished": environment.now(),
    }


def read_probe(path: str | os.PathLike) -> dict[str, Any]:
    """A probe record from its file, with its `path`."""
    return {**json.loads(Path(path).read_text()), "path": str(path)}


def session_probe() -> dict[str, Any] | None:
    """This session's probe (the file `PROBE_VARIABLE` names), or None."""
    path = os.environ.get(PROBE_VARIABLE)
    if not path:
        return None
    try:
        return read_probe(path)
    except (OSError, ValueError):
        return None


def allreduce_s(p: dict[str, Any], n_devices: int, size: int = 1) -> float | None:
    """The probe's all-reduce latency over `n_devices` devices of `size` floats,
    interpolated linearly in size; None for a device count not measured."""
    rows = sorted(
        (a["size"], a["latency_s"]) for a in p.get("allreduce", []) if a["n_devices"] == n_devices
    )
    if not rows:
        return None
    sizes, latencies = zip(*rows, strict=True)
    if len(rows) == 1:
        return float(latencies[0])
    slope = (latencies[-1] - latencies[0]) / (sizes[-1] - sizes[0])
    return float(max(latencies[0], latencies[0] + slope * (size - sizes[0])))


def summary(p: dict[str, Any]) -> str:
    """The probe as one line."""
    reduce = ", ".join(
        f"{a['n_devices']} devices {a['latency_s'] * 1e6:.3g} us"
        for a in p.get("allreduce", [])
        if a["size"] == 1
    )
    small = p["matmul"][0]
    return (
        f"machine probe ({p['probe_s']:.1f} s): all-reduce of one float: {reduce or 'n/a'}; "
        f"matmul {small['flops_per_s'] / 1e9:.3g} GFLOP/s at {small['batch']}x"
        f"{small['width']}; empty loop iteration {p['loop_iteration_s'] * 1e9:.3g} ns"
    )
