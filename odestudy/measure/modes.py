"""The four ways of running one training step: `single`, `pmap`, `shard`, `shard_map`.

Every mode runs the same function, `local_step`: the loss of diffrax's default adjoint,
gradients averaged over devices (never summed), and the optax update, all inside the
compiled step.
"""

import abc
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float, Int

from .compat import closure_convert_ignores_manual_sharding, make_data_mesh, shard_map
from .model import LOSSES
from .solvers import Structure

AXIS = "data"


def make_local_step(
    static: Any,
    optimiser: optax.GradientTransformation,
    controller: str,
    axis: str | None,
    solve: "str | Structure" = "per_sample",
) -> Callable:
    """The per-device training step.

    - `static`: the non-array part of the model (`eqx.partition`).
    - `optimiser`: the optax transformation.
    - `controller`: `"pid"` or `"stepto"`.
    - `axis`: the mapped axis name to average over, or `None` for no averaging.
    - `solve`: the solve's `Structure`, or just its `solve` (`"per_sample"`: vmap,
      `"within_ode"`: one ODE per local batch, `"scan"`: fixed-step `lax.scan`).

    The step maps `(params, opt_state, ts, ys)` to
    `(params, opt_state, loss, num_steps)`; `num_steps` is per sample.
    """

    structure = Structure(solve=solve) if isinstance(solve, str) else solve
    batch_loss = LOSSES[structure.solve]

    def loss_fn(params, ts, ys):
        return batch_loss(eqx.combine(params, static), ts, ys, controller, structure)

    def step(params, opt_state, ts, ys):
        (loss, num_steps), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, ts, ys)
        if axis is not None:
            # Equal per-device batches: the mean of local means is the global mean.
            loss = jax.lax.pmean(loss, axis)
            grads = jax.lax.pmean(grads, axis)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss, num_steps

    return step


def donated(donate: bool) -> tuple[int, ...]:
    """The step's arguments given to it to reuse (`donate_argnums`): the parameters and
    the optimiser state where `donate`, else none."""
    return (0, 1) if donate else ()


class AbstractMode(eqx.Module):
    """How a training step runs over devices. Abstract: one final subclass per mode
    (`Single`, `Pmap`, `Shard`, `ShardMap`) owns building the step, placing its inputs
    and reading its parameters back, and the facts the study needs about it.

    - `name`: the mode's name in scenarios, records and tables.
    - `one_loop`: one solver loop spans all devices (the compiler partitions a batched
      loop), so every device runs as many solver steps as the global batch's slowest
      sample; otherwise each device runs its own loop to its own slowest sample.
    - `multi_device`: runs on more than one device.
    - `multi_process`: runs over devices of several JAX processes (`jax.distributed`).
    """

    name: eqx.AbstractClassVar[str]
    one_loop: eqx.AbstractClassVar[bool]
    multi_device: eqx.AbstractClassVar[bool]
    multi_process: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def build(
        self, devices: tuple, local_step: Callable, donate: bool = False
    ) -> tuple[Callable, Any]:
        """The jitted step over `devices` and its mesh (None for none), from
        `local_step(axis)`: the per-device step averaging over mapped axis `axis`;
        `donate`: the step reuses its parameters' and optimiser state's buffers."""

    def place_state(self, step: "ParallelStep", params: Any, opt_state: Any) -> Any:
        """Put parameters and optimiser state on the devices (replicated)."""
        return jax.device_put((params, opt_state), NamedSharding(step.mesh, P()))

    def place_batch(self, step: "ParallelStep", ts: np.ndarray, ys: np.ndarray) -> Any:
        """Put a global batch on the devices, split along the batch axis."""
        return jax.device_put((ts, ys), NamedSharding(step.mesh, P(AXIS)))

    def unplace(self, step: "ParallelStep", params: Any) -> Any:
        """One host copy of (replicated) parameters."""
        return jax.tree.map(lambda x: to_host(x, replicated=True), params)


class Single(AbstractMode):
    """`jax.jit` on one device: the baseline."""

    name: ClassVar[str] = "single"
    one_loop: ClassVar[bool] = False  # one device: its loop is the only one
    multi_device: ClassVar[bool] = False
    multi_process: ClassVar[bool] = False

    def build(self, devices, local_step, donate=False):
        if len(devices) != 1:
            raise ValueError(f"mode 'single' runs on 1 device, got {len(devices)}")
        return jax.jit(local_step(None), donate_argnums=donated(donate)), None

    def place_state(self, step, params, opt_state):
        return jax.device_put((params, opt_state), step.devices[0])

    def place_batch(self, step, ts, ys):
        return jax.device_put((ts, ys), step.devices[0])


class Pmap(AbstractMode):
    """`jax.pmap`: one program per device, each with its own solver loop; gradients
    averaged with `pmean`."""

    name: ClassVar[str] = "pmap"
    one_loop: ClassVar[bool] = False
    multi_device: ClassVar[bool] = True
    multi_process: ClassVar[bool] = False

    def build(self, devices, local_step, donate=False):
        fn = jax.pmap(
            local_step(AXIS), axis_name=AXIS, devices=devices, donate_argnums=donated(donate)
        )
        # pmap takes arrays whose leading axis is split over this mesh.
        return fn, make_data_mesh(devices, AXIS)

    def place_state(self, step, params, opt_state):
        n = step.n_devices
        stacked = jax.tree.map(
            lambda x: np.broadcast_to(np.asarray(x), (n, *np.shape(x))), (params, opt_state)
        )
        return jax.device_put(stacked, NamedSharding(step.mesh, P(AXIS)))

    def place_batch(self, step, ts, ys):
        n = step.n_devices
        ts, ys = ts.reshape(n, -1, *ts.shape[1:]), ys.reshape(n, -1, *ys.shape[1:])
        return jax.device_put((ts, ys), NamedSharding(step.mesh, P(AXIS)))

    def unplace(self, step, params):
        return jax.tree.map(lambda x: to_host(x)[0], params)


class Shard(AbstractMode):
    """Sharded `jax.jit`: the batch is split over a mesh and the compiler partitions the
    vmapped solve; one solver loop spans all devices, no explicit collective."""

    name: ClassVar[str] = "shard"
    one_loop: ClassVar[bool] = True
    multi_device: ClassVar[bool] = True
    multi_process: ClassVar[bool] = True

    def build(self, devices, local_step, donate=False):
        mesh = make_data_mesh(devices, AXIS)
        replicated, batched = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
        fn = jax.jit(
            local_step(None),
            in_shardings=(replicated, replicated, batched, batched),
            out_shardings=(replicated, replicated, replicated, batched),
            donate_argnums=donated(donate),
        )
        return fn, mesh


class ShardMap(AbstractMode):
    """`jax.shard_map` under `jax.jit`: each device runs its own solver loop on its
    shard; gradients averaged with `pmean`."""

    name: ClassVar[str] = "shard_map"
    one_loop: ClassVar[bool] = False
    multi_device: ClassVar[bool] = True
    multi_process: ClassVar[bool] = True

    def build(self, devices, local_step, donate=False):
        mesh = make_data_mesh(devices, AXIS)
        # Without the replication check (`compat.shard_map`): diffrax's while loops mix
        # per-device and replicated carries.
        fn = jax.jit(
            shard_map(
                local_step(AXIS),
                mesh=mesh,
                in_specs=(P(), P(), P(AXIS), P(AXIS)),
                out_specs=(P(), P(), P(), P(AXIS)),
            ),
            donate_argnums=donated(donate),
        )
        return fn, mesh


# Every mode by name, in the order of the tables.
MODES: dict[str, type[AbstractMode]] = {m.name: m for m in (Single, Pmap, Shard, ShardMap)}


def parse_mode(mode: "str | AbstractMode") -> AbstractMode:
    """The mode named `mode` (an `AbstractMode` passes through); a ValueError naming the valid
    choices if there is none."""
    if isinstance(mode, AbstractMode):
        return mode
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid choices: {', '.join(MODES)}")
    return MODES[mode]()


class ParallelStep(eqx.Module):
    """A training step for one mode on a set of devices.

    Use `place_state` and `place_batch` to put host values where the mode wants them,
    `compile` for the AOT executable, and `unplace` to read parameters back as one host
    copy.
    """

    mode: AbstractMode = eqx.field(static=True)
    devices: tuple = eqx.field(static=True)
    fn: Callable = eqx.field(static=True)
    mesh: Any = eqx.field(static=True)

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def place_state(self, params, opt_state):
        """Put parameters and optimiser state on the devices (replicated)."""
        return self.mode.place_state(self, params, opt_state)

    def place_batch(
        self, ts: Float[np.ndarray, "batch times"], ys: Float[np.ndarray, "batch times 2"]
    ) -> tuple[Float[Array, "batch times"], Float[Array, "batch times 2"]]:
        """Put a global batch on the devices, split along the batch axis (`pmap`: a
        leading device axis)."""
        return self.mode.place_batch(self, ts, ys)

    def lower(self, params, opt_state, ts, ys):
        """AOT-lower the step for these (placed) arguments (`jax.stages.Lowered`)."""
        with closure_convert_ignores_manual_sharding():
            return self.fn.lower(params, opt_state, ts, ys)

    def compile(self, params, opt_state, ts, ys):
        """AOT-lower and compile the step for these (placed) arguments."""
        return self.lower(params, opt_state, ts, ys).compile()

    def unplace(self, params):
        """One host copy of (replicated) parameters."""
        return self.mode.unplace(self, params)

    def per_sample(self, values: Int[Array, "..."]) -> Int[np.ndarray, "devices local"]:
        """A per-sample output as a host array of shape `(n_devices, local_batch)`."""
        return to_host(values).reshape(self.n_devices, -1)


def to_host(x, replicated: bool = False) -> np.ndarray:
    """A host copy of `x`, also when it spans devices of other processes.

    - `replicated`: `x` holds the same value on every device; read a local copy.
    """
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    if replicated:
        return np.asarray(x.addressable_data(0))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def make_parallel_step(
    mode: "str | AbstractMode",
    devices: Sequence[jax.Device],
    static: Any,
    optimiser: optax.GradientTransformation,
    controller: str,
    solve: "str | Structure" = "per_sample",
    donate: bool = False,
) -> ParallelStep:
    """Build the training step of `mode` over `devices`.

    - `mode`: an `AbstractMode`, or its name (one of `MODES`).
    - `devices`: the devices to use (exactly one for `single`).
    - `static`, `optimiser`, `controller`, `solve`: as in `make_local_step`.
    - `donate`: the step reuses the buffers of the parameters and optimiser state it
      is given (they are gone after the call).
    """
    mode = parse_mode(mode)
    devices = tuple(devices)

    def local_step(axis: str | None) -> Callable:
        return make_local_step(static, optimiser, controller, axis, solve)

    fn, mesh = mode.build(devices, local_step, donate)
    return ParallelStep(mode, devices, fn, mesh)


def tree_max_rel_diff(a, b) -> float:
    """Largest relative difference between two pytrees of arrays (max-abs scaled)."""
    diffs = [
        float(jnp.max(jnp.abs(x - y)) / jnp.maximum(jnp.max(jnp.abs(y)), 1e-30))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    ]
    return max(diffs)
