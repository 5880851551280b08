"""Narrow workarounds for JAX / equinox behaviour, each documented where used: current
releases, and the older ones the version study runs (back to the reference's jax 0.4.34)."""

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.tree_util as jtu
import numpy as np
from jax.sharding import Mesh

# Mesh axis types arrived in JAX 0.5 (`jax.sharding.AxisType`, Explicit by default
# since 0.9); before them every mesh axis was what is now called Auto.
AxisType: Any = getattr(jax.sharding, "AxisType", None)
AbstractMesh: Any = getattr(jax.sharding, "AbstractMesh", None)


def make_data_mesh(devices: Sequence[jax.Device], axis: str = "data") -> Mesh:
    """A 1-D mesh over `devices` with an *Auto* axis.

    Since JAX 0.9 `jax.make_mesh` defaults to Explicit axis types, under which
    diffrax's solve inside a sharded `jit` fails to trace. Auto axes let the compiler
    partition the batch as in earlier JAX versions, which is what the `shard` mode
    measures. JAX before axis types: a plain mesh, whose axes behave as Auto.
    """
    if AxisType is None:
        return Mesh(np.array(list(devices)), (axis,))
    return jax.make_mesh(
        (len(devices),), (axis,), axis_types=(AxisType.Auto,), devices=list(devices)
    )


# What `jit` under Explicit mesh axes (the `explicit` mode) needs of JAX, and the first
# release with all of it: `AxisType.Explicit` (0.5), `jax.sharding.auto_axes` (public
# since 0.7.0) and `jax.set_mesh` (0.7.1).
EXPLICIT_AXES_JAX = "0.7.1"


def explicit_axes_missing() -> str | None:
    """Why the running JAX cannot run a step under Explicit mesh axes (one line naming
    the release it needs), or None where it can."""
    found = (
        getattr(AxisType, "Explicit", None) is not None
        and hasattr(jax.sharding, "auto_axes")
        and hasattr(jax, "set_mesh")
    )
    if found:
        return None
    return (
        f"mode 'explicit' needs JAX {EXPLICIT_AXES_JAX} or later (Explicit mesh axes, "
        f"jax.sharding.auto_axes, jax.set_mesh); this is JAX {jax.__version__}"
    )


def make_explicit_mesh(devices: Sequence[jax.Device], axis: str = "data") -> Mesh:
    """A 1-D mesh over `devices` with an *Explicit* axis: arrays placed on it carry
    their sharding in their types (`jax.typeof`), and `jit` under it (`mesh_context`)
    types every operation's sharding. Needs `explicit_axes_missing()` None."""
    return jax.make_mesh(
        (len(devices),), (axis,), axis_types=(AxisType.Explicit,), devices=list(devices)
    )


@contextlib.contextmanager
def mesh_context(mesh: Mesh) -> Iterator[None]:
    """`mesh` set as the current mesh while the context is active, as tracing `jit`
    under Explicit axes needs. `jax.set_mesh` sets the mesh as soon as it is called
    (its `with` only restores the previous one), so it is called here, on entry."""
    with jax.set_mesh(mesh):
        yield


def auto_axes(f: Callable, out_sharding: Any) -> Callable:
    """`f` traced with the mesh's axes Auto (`jax.sharding.auto_axes`): inside it the
    compiler partitions the computation as under `jit` on an Auto mesh, and its outputs
    come back to Explicit types with `out_sharding` (PartitionSpecs, a pytree prefix of
    the outputs).

    A diffrax solve needs it under Explicit axes (jax 0.10.2, equinox 0.13.8, diffrax
    0.7.2): `jax.vmap` asks the type (`jax.typeof`) of its unmapped arguments, and an
    equinox model that holds functions (its activation) fails with "TypeError: Argument
    '<PjitFunction of softplus>' ... is not a valid JAX type"; with the model closed
    over instead, diffrax's inner `eqx.filter_jit` fails with "ValueError: Resource
    axis: data of P('data',) is not found in mesh: ()". Only the loss runs under it:
    the gradients' reduction and the optimiser's update keep their Explicit types.

    So the parameters stay replicated, not cast to `reduced` over the batch axis (JAX's
    data-parallel recipe, which keeps weight gradients unreduced through loops): in
    jax 0.10.2 a `reduced` input of this region gets a wrong gradient once the region
    holds a loop (2x with one iteration, more with several), and inside it the axes are
    Auto, so the gradients' all-reduce stays in the loop. The recipe needs the solve
    traced under Explicit types, which the fused PID solve also fails (lineax's norm:
    "Contracting dimensions are sharded"; a hand-written backward's weight-gradient
    product over the batch needs its `out_sharding` too).
    """
    return jax.sharding.auto_axes(f, out_sharding=out_sharding)


def shard_map(f: Callable, mesh: Mesh, in_specs: Any, out_specs: Any) -> Callable:
    """`jax.shard_map` without its replication check (`check_vma=False`: diffrax's while
    loops mix per-device and replicated carries). JAX before 0.6 has it only as
    `jax.experimental.shard_map.shard_map`, whose check is `check_rep`."""
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    from jax.experimental.shard_map import shard_map as experimental

    return experimental(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def _is_manual_abstract(sharding) -> bool:
    mesh = getattr(sharding, "mesh", None)
    if AbstractMesh is None or AxisType is None:  # JAX before abstract meshes
        return False
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


def pmap_is_shard_map() -> bool:
    """Whether `jax.pmap` is `jit` of `shard_map` in the running JAX (0.8 and later),
    rather than the legacy path."""
    try:
        from jax._src import pmap as pmap_module
    except ImportError:
        return False
    return hasattr(pmap_module, "shard_map")


def pmap_implementation() -> str:
    """What `jax.pmap` is in the running JAX: built on `shard_map`, or the legacy path."""
    return "jit+shard_map (jax._src.pmap)" if pmap_is_shard_map() else "legacy pxla pmap"


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


def collectives_need_sync(devices: tuple) -> bool:
    """Whether a step with collectives over `devices` must be waited for before the next
    is dispatched: on several CPU devices (virtual ones included), XLA:CPU's collectives
    deadlock when many steps are in flight (jax 0.10.2: a `shard_map` step called 200
    times without waiting stalled in an all-reduce rendezvous and aborted; waited for,
    it ran). GPUs keep asynchronous dispatch."""
    return len(devices) > 1 and all(d.platform == "cpu" for d in devices)


# Pallas on an NVIDIA GPU lowers `pallas_call` by Mosaic GPU, not Triton, unless told
# (`jax_pallas_use_mosaic_gpu`, on by default in jax 0.10): Mosaic GPU's lowering
# refuses the kernel solve's kernels (it estimates no resources for `custom_jvp_call`,
# which `jax.nn`'s activations are, nor its warp-level loops). The kernels are written for
# Triton's model (a block of rows per program instance), so they name it.
def triton_params() -> Any:
    """Compiler parameters that make a `pallas_call` on a GPU lower by Triton; None where
    this JAX has no Triton backend (the CPU's interpret mode needs none)."""
    try:
        from jax.experimental.pallas import triton as pltriton
    except ImportError:  # pragma: no cover - a JAX built without it
        return None
    return pltriton.CompilerParams()
