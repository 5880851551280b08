"""The four ways of running one training step: `single`, `pmap`, `shard`, `shard_map`.

Every mode runs the same function, `local_step`: the loss of diffrax's default adjoint,
gradients averaged over devices (never summed), and the optax update, all inside the
compiled step.
"""

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .compat import closure_convert_ignores_manual_sharding, make_data_mesh
from .model import LOSSES

MODES = ("single", "pmap", "shard", "shard_map")
AXIS = "data"


def check_mode(mode: str) -> None:
    """Raise a ValueError naming the valid choices if `mode` is unknown."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid choices: {', '.join(MODES)}")


def make_local_step(
    static: Any,
    optimiser: optax.GradientTransformation,
    controller: str,
    axis: str | None,
    solve: str = "per_sample",
) -> Callable:
    """The per-device training step.

    - `static`: the non-array part of the model (`eqx.partition`).
    - `optimiser`: the optax transformation.
    - `controller`: `"pid"` or `"stepto"`.
    - `axis`: the mapped axis name to average over, or `None` for no averaging.
    - `solve`: `"per_sample"` (vmap) or `"within_ode"` (one ODE per local batch).

    The step maps `(params, opt_state, ts, ys)` to
    `(params, opt_state, loss, num_steps)`; `num_steps` is per sample.
    """

    batch_loss = LOSSES[solve]

    def loss_fn(params, ts, ys):
        return batch_loss(eqx.combine(params, static), ts, ys, controller)

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


class ParallelStep(eqx.Module):
    """A training step for one mode on a set of devices.

    Use `place` to put host values where the mode wants them, `compile` for the AOT
    executable, and `unplace` to read parameters back as one host copy.
    """

    mode: str = eqx.field(static=True)
    devices: tuple = eqx.field(static=True)
    fn: Callable = eqx.field(static=True)
    mesh: Any = eqx.field(static=True)

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def place_state(self, params, opt_state):
        """Put parameters and optimiser state on the devices (replicated)."""
        if self.mode == "single":
            return jax.device_put((params, opt_state), self.devices[0])
        if self.mode == "pmap":
            n = self.n_devices
            stacked = jax.tree.map(
                lambda x: np.broadcast_to(np.asarray(x), (n, *np.shape(x))),
                (params, opt_state),
            )
            return jax.device_put(stacked, NamedSharding(self.mesh, P(AXIS)))
        return jax.device_put((params, opt_state), NamedSharding(self.mesh, P()))

    def place_batch(self, ts: np.ndarray, ys: np.ndarray):
        """Put a global batch on the devices, split along the batch axis."""
        if self.mode == "single":
            return jax.device_put((ts, ys), self.devices[0])
        n = self.n_devices
        if self.mode == "pmap":
            ts, ys = ts.reshape(n, -1, *ts.shape[1:]), ys.reshape(n, -1, *ys.shape[1:])
        return jax.device_put((ts, ys), NamedSharding(self.mesh, P(AXIS)))

    def lower(self, params, opt_state, ts, ys):
        """AOT-lower the step for these (placed) arguments (`jax.stages.Lowered`)."""
        with closure_convert_ignores_manual_sharding():
            return self.fn.lower(params, opt_state, ts, ys)

    def compile(self, params, opt_state, ts, ys):
        """AOT-lower and compile the step for these (placed) arguments."""
        return self.lower(params, opt_state, ts, ys).compile()

    def unplace(self, params):
        """One host copy of (replicated) parameters."""
        if self.mode == "pmap":
            return jax.tree.map(lambda x: to_host(x)[0], params)
        return jax.tree.map(lambda x: to_host(x, replicated=True), params)

    def per_sample(self, values) -> np.ndarray:
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
    mode: str,
    devices: Sequence[jax.Device],
    static: Any,
    optimiser: optax.GradientTransformation,
    controller: str,
    solve: str = "per_sample",
) -> ParallelStep:
    """Build the training step of `mode` over `devices`.

    - `mode`: one of `MODES`.
    - `devices`: the devices to use (exactly one for `single`).
    - `static`, `optimiser`, `controller`, `solve`: as in `make_local_step`.
    """
    check_mode(mode)
    devices = tuple(devices)
    if mode == "single":
        if len(devices) != 1:
            raise ValueError(f"mode 'single' runs on 1 device, got {len(devices)}")
        fn = jax.jit(make_local_step(static, optimiser, controller, None, solve))
        return ParallelStep(mode, devices, fn, None)
    if mode == "pmap":
        fn = jax.pmap(
            make_local_step(static, optimiser, controller, AXIS, solve),
            axis_name=AXIS,
            devices=devices,
        )
        # pmap takes arrays whose leading axis is split over this mesh.
        return ParallelStep(mode, devices, fn, make_data_mesh(devices, AXIS))
    mesh = make_data_mesh(devices, AXIS)
    replicated, batched = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
    if mode == "shard":
        # The compiler partitions the vmapped solve; no explicit collective.
        fn = jax.jit(
            make_local_step(static, optimiser, controller, None, solve),
            in_shardings=(replicated, replicated, batched, batched),
            out_shardings=(replicated, replicated, replicated, batched),
        )
        return ParallelStep(mode, devices, fn, mesh)
    # shard_map: each device runs its own solver loop; check_vma=False because
    # diffrax's while loops mix per-device and replicated carries.
    fn = jax.jit(
        jax.shard_map(
            make_local_step(static, optimiser, controller, AXIS, solve),
            mesh=mesh,
            in_specs=(P(), P(), P(AXIS), P(AXIS)),
            out_specs=(P(), P(), P(), P(AXIS)),
            check_vma=False,
        )
    )
    return ParallelStep(mode, devices, fn, mesh)


def tree_max_rel_diff(a, b) -> float:
    """Largest relative difference between two pytrees of arrays (max-abs scaled)."""
    diffs = [
        float(jnp.max(jnp.abs(x - y)) / jnp.maximum(jnp.max(jnp.abs(y)), 1e-30))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    ]
    return max(diffs)
