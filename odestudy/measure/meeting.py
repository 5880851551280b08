"""What N CPU devices pay to meet once inside a solver loop: the cost `predict` charges
each loop collective of a one-loop mode (`shard`, `explicit`) on CPU devices, timed
directly rather than taken from a one-float all-reduce run as a program of its own
(which also pays the program's dispatch)."""

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .compat import make_data_mesh, shard_map
from .timing import interleaved, median_interval


def _loop(n: int, arrays: int, iterations: int, meet: bool) -> Any:
    """A compiled while loop on `n` CPU devices whose body scales `arrays` floats per
    device and, with `meet`, all-reduces them as one tuple (`arrays` meetings)."""
    mesh = make_data_mesh(jax.devices("cpu")[:n])

    def body(carry: tuple) -> tuple:
        i, xs = carry
        xs = tuple(x * 0.5 + 1.0 for x in xs)
        return i + 1, jax.lax.psum(xs, "data") if meet else xs

    def loop(*xs: jax.Array) -> tuple:
        return jax.lax.while_loop(lambda c: c[0] < iterations, body, (0, xs))[1]

    specs = (P("data"),) * arrays
    xs = tuple(jnp.ones((n,)) for _ in range(arrays))
    return jax.jit(shard_map(loop, mesh, specs, specs)).lower(*xs).compile(), xs


def loop_meeting(
    n: int, arrays: int = 36, iterations: int = 100, rounds: int = 15, warmup: int = 3
) -> dict[str, Any]:
    """The time of one meeting of `n` CPU devices inside a while loop: a loop that
    all-reduces a tuple of `arrays` floats per iteration against the same loop without
    it, interleaved, per round over `iterations * arrays` meetings."""
    if len(jax.devices("cpu")) < n:
        raise ValueError(f"a meeting of {n} CPU devices needs them: {len(jax.devices('cpu'))}")
    (meets, xs), (alone, _) = (_loop(n, arrays, iterations, m) for m in (True, False))
    met, without = interleaved((lambda: meets(*xs), lambda: alone(*xs)), rounds, warmup)
    times = [max(m - w, 0.0) / (iterations * arrays) for m, w in zip(met, without, strict=True)]
    form = f"a tuple of {arrays} floats all-reduced per iteration of a {iterations}-step loop"
    return {"n": n, "form": form, **median_interval(times)}
