"""Narrow workarounds for current JAX / equinox behaviour, each documented where used."""

import contextlib
from collections.abc import Iterator, Sequence

import jax
import jax.tree_util as jtu
from jax.sharding import AbstractMesh, AxisType, Mesh


def make_data_mesh(devices: Sequence[jax.Device], axis: str = "data") -> Mesh:
    """A 1-D mesh over `devices` with an *Auto* axis.

    Since JAX 0.9 `jax.make_mesh` defaults to Explicit axis types, under which
    diffrax's solve inside a sharded `jit` fails to trace. Auto axes let the compiler
    partition the batch as in earlier JAX versions, which is what the `shard` mode
    measures.
    """
    return jax.make_mesh(
        (len(devices),), (axis,), axis_types=(AxisType.Auto,), devices=list(devices)
    )


def _is_manual_abstract(sharding) -> bool:
    mesh = getattr(sharding, "mesh", None)
    return isinstance(mesh, AbstractMesh) and all(t == AxisType.Manual for t in mesh.axis_types)


@contextlib.contextmanager
def closure_convert_ignores_manual_sharding() -> Iterator[None]:
    """Trace diffrax's default adjoint inside `jax.shard_map` / `jax.pmap`.

    With equinox 0.13.8 on JAX >= 0.8, values traced inside `shard_map` (and `pmap`,
    which is built on it) carry a `NamedSharding` on an all-Manual `AbstractMesh`;
    equinox's closure-conversion check compares it with example arguments that carry
    no sharding and raises "Closure-converted function called with different dynamic
    arguments" from inside `RecursiveCheckpointAdjoint`'s loop (diffrax issue #765,
    equinox PR #1261). While this context is active, exactly those manual-mesh
    shardings are dropped before the comparison; shapes, dtypes, other shardings and
    static arguments are still checked. Only tracing needs it: wrap `lower()`.
    """
    try:
        from equinox import _ad as eqx_ad
    except ImportError:  # pragma: no cover - layout of a future equinox
        yield
        return
    original = getattr(eqx_ad, "_strip_weak_dtype", None)
    if original is None:  # pragma: no cover - a future equinox without the check
        yield
        return

    def strip(tree):
        def one(x):
            sharding = None if _is_manual_abstract(x.sharding) else x.sharding
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

        return jtu.tree_map(one, tree)

    eqx_ad._strip_weak_dtype = strip
    try:
        yield
    finally:
        eqx_ad._strip_weak_dtype = original


def pmap_implementation() -> str:
    """What `jax.pmap` is in the running JAX: built on `shard_map`, or the legacy path."""
    try:
        from jax._src import pmap as pmap_module

        if hasattr(pmap_module, "shard_map"):
            return "jit+shard_map (jax._src.pmap)"
    except ImportError:
        pass
    return "legacy pxla pmap"


def use_compilation_cache(path: str | None) -> bool:
    """Point JAX's persistent compilation cache at folder `path` from now on (`None`:
    no cache), also in a process that compiled before. Returns whether it took.

    JAX reads the cache folder once, at the first compile of a process; a repeat
    process times several scenarios, each with the cache its cold run wrote, so the
    cache is reset (`jax._src.compilation_cache.reset_cache`, private) before the folder
    changes. Without that function the process compiles without a cache: slower,
    nothing else changes.
    """
    try:
        from jax._src import compilation_cache
    except ImportError:  # pragma: no cover - layout of a future JAX
        return False
    reset = getattr(compilation_cache, "reset_cache", None)
    if reset is None:  # pragma: no cover
        return False
    reset()
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return path is not None
