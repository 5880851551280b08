"""A device's roofline: the least time a training step can take on it, from readings of
the device itself (peak matmul rate, bandwidth, and the time one more kernel adds)
rather than from a loop at the step's small shapes: on a GPU such a loop is bound by
kernel launches, so a floor from its rate says nothing of the arithmetic.

A step's roofline adds `LEAST_KERNELS` launches: the kernel solve (`kernel.py`) shows a
step can run its solve in one kernel and its reverse pass in another.
"""

import re
import time
from typing import Any

import jax
import jax.numpy as jnp

from .timing import median_time

# What the roofline's record means; a change of what it measures bumps it.
ROOFLINE_VERSION = 1
# The kernels a training step must launch at the least: the solve and its reverse pass.
LEAST_KERNELS = 2
# One kernel in a compiled program's text: a fusion or a library call (cuBLAS, Triton).
_KERNEL = re.compile(r"\s(fusion|custom-call)\(")


def count_kernels(compiled: Any) -> int:
    """The kernels a compiled program launches outside loops: its fusions and library
    calls (on a CPU, fusions and calls into its libraries)."""
    return len(_KERNEL.findall(compiled.as_text()))


def peak_flops(n: int = 4096, repeats: int = 5) -> float:
    """Float32 FLOP/s of one `n x n` by `n x n` product (`2 n**3` FLOPs)."""
    key = jax.random.PRNGKey(0)
    a = jax.random.normal(key, (n, n), jnp.float32)
    fn = jax.jit(lambda a: a @ a).lower(a).compile()
    return 2.0 * n**3 / median_time(fn, a, repeats=repeats)


def bandwidth(floats: int = 1 << 26, repeats: int = 5) -> float:
    """Bytes per second read and written by `x + 1` over `floats` float32 elements."""
    x = jnp.zeros(floats, jnp.float32)
    fn = jax.jit(lambda x: x + 1.0).lower(x).compile()
    return 2.0 * 4 * floats / median_time(fn, x, repeats=repeats)


def _chain(length: int, width: int) -> Any:
    """A program of `length` dependent `width x width` products, compiled."""

    def f(x, w):
        for _ in range(length):
            x = jnp.sin(x @ w)
        return x

    x = jnp.ones((width, width), jnp.float32)
    return jax.jit(f).lower(x, x).compile(), x


def kernel_time(lengths: tuple[int, int] = (16, 256), width: int = 8, repeats: int = 7):
    """Seconds one more kernel adds to a program: chains of dependent small products
    timed at two lengths, over the difference of their counted kernels; and the readings."""
    readings = []
    for length in lengths:
        fn, x = _chain(length, width)
        readings.append(
            {
                "length": length,
                "kernels": count_kernels(fn),
                "s": median_time(fn, x, x, repeats=repeats),
            }
        )
    short, long = readings
    extra = long["kernels"] - short["kernels"]
    per = (long["s"] - short["s"]) / extra if extra > 0 else None
    return per, readings


def roofline_probe() -> dict[str, Any]:
    """The three readings of this process's default device (see the module doc)."""
    start = time.perf_counter()
    per_kernel, chain = kernel_time()
    return {
        "roofline_version": ROOFLINE_VERSION,
        "device_kind": jax.devices()[0].device_kind,
        "platform": jax.default_backend(),
        "peak_flops_per_s": peak_flops(),
        "bandwidth_bytes_per_s": bandwidth(),
        "kernel_s": per_kernel,
        "kernel_chain": chain,
        "least_kernels": LEAST_KERNELS,
        "probe_s": time.perf_counter() - start,
    }


def roofline_s(flops: float, bytes_moved: float, probe: dict[str, Any]) -> float | None:
    """The least time a step of `flops` moving `bytes_moved` takes on the probed device
    (None where the probe read no kernel time)."""
    if probe.get("kernel_s") is None:
        return None
    work = max(flops / probe["peak_flops_per_s"], bytes_moved / probe["bandwidth_bytes_per_s"])
    return float(work + probe["least_kernels"] * probe["kernel_s"])
