"""The ways of running one training step (`single`, `pmap`, `shard`, `shard_map`,
`explicit`) and the data-parallel step built on them (`make_params_step`). Every mode
runs the same per-device update (`local_update`): loss and gradients reduced over
devices to the global mean (never summed), then the optax update, all compiled."""

import abc
import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Int

from .compat import (
    auto_axes,
    closure_convert_ignores_manual_sharding,
    collectives_need_sync,
    explicit_axes_missing,
    make_data_mesh,
    make_explicit_mesh,
    mesh_context,
    shard_map,
)
from .loss import Mean
from .registry import Registered, lookup

AXIS = "data"

# A loss for `make_params_step`: `loss(params, static, batch[, key]) -> (value, aux)`.
Loss = Callable[..., tuple[Any, Any]]
# What a mode may apply to the loss before `local_update` differentiates it.
Wrap = Callable[[Loss], Loss]

# What an `aux` leaf is: per-sample (split like the batch) or a scalar (averaged).
PER_SAMPLE = "per_sample"
SCALAR = "scalar"
AUX_KINDS = (PER_SAMPLE, SCALAR)


class Layout(NamedTuple):
    """What a step's inputs and outputs hold beyond parameters and optimiser state:
    `aux` kinds (a pytree prefix of the loss's `aux`); `keyed`: the batch is `(batch, key)`."""

    aux: Any = PER_SAMPLE
    keyed: bool = False

    def aux_specs(self, per_sample: Any, scalar: Any) -> Any:
        """`aux` with each kind replaced by the spec given for it."""
        return jax.tree.map(lambda kind: per_sample if kind == PER_SAMPLE else scalar, self.aux)

    def batch_spec(self, batched: Any, replicated: Any) -> Any:
        """The batch argument's spec: split, with the key replicated where `keyed`."""
        return (batched, replicated) if self.keyed else batched


DEFAULT_LAYOUT = Layout()  # the study's: per-sample aux (solver steps), no key


def check_layout(layout: Layout) -> None:
    """A one-line ValueError where `layout.aux` holds a kind not in `AUX_KINDS`."""
    for kind in jax.tree.leaves(layout.aux):
        if kind not in AUX_KINDS:
            raise ValueError(f"unknown aux kind {kind!r}; valid choices: {', '.join(AUX_KINDS)}")


def _reduce_value(value: Any, axis: str | None) -> tuple[Array, Array | None]:
    """The global mean of a loss value over `axis`, and its gradient's divisor (or None)."""
    if isinstance(value, Mean):
        count = jax.lax.stop_gradient(value.count)
        if axis is not None:
            count = jax.lax.psum(count, axis)
            return jax.lax.psum(value.total, axis) / count, count
        return value.total / count, count
    return (value if axis is None else jax.lax.pmean(value, axis)), None


def _reduce_aux(aux: Any, layout: Layout, axis: str | None) -> Any:
    """Scalars of `aux` averaged over `axis`; per-sample values kept."""
    if aux is None:
        return None

    def reduce(kind, sub):
        def leaf(x):
            if kind == SCALAR:
                return x if axis is None else jax.lax.pmean(x, axis)
            if jnp.ndim(x) == 0:
                raise ValueError(
                    "an aux leaf is a scalar: declare it with make_step(aux=...) as "
                    f"{SCALAR!r} (a pytree prefix of aux)"
                )
            return x

        return jax.tree.map(leaf, sub)

    return jax.tree.map(reduce, layout.aux, aux)


def local_update(
    loss: Loss,
    static: Any,
    optimiser: optax.GradientTransformation,
    axis: str | None,
    layout: Layout = DEFAULT_LAYOUT,
) -> Callable:
    """The per-device training step of `loss`, reducing over mapped `axis` (or None)."""

    def step(params, opt_state, batch):
        extra: tuple = ()
        if layout.keyed:
            batch, key = batch
            extra = (key if axis is None else jax.random.fold_in(key, jax.lax.axis_index(axis)),)

        def objective(p):
            value, aux = loss(p, static, batch, *extra)
            # Differentiate the sum where the value is a `Mean`: its gradient is then
            # divided by the global count (a constant).
            local = value.total if isinstance(value, Mean) else value
            return local, (value, aux)

        (_, (value, aux)), grads = jax.value_and_grad(objective, has_aux=True)(params)
        value, weight = _reduce_value(value, axis)
        if weight is not None:
            grads = jax.tree.map(lambda g: g / weight, grads)
            if axis is not None:
                grads = jax.lax.psum(grads, axis)
        elif axis is not None:
            grads = jax.lax.pmean(grads, axis)
        aux = _reduce_aux(aux, layout, axis)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, value, aux

    return step


def donated(donate: bool) -> tuple[int, ...]:
    """`donate_argnums`: the parameters and optimiser state where `donate`."""
    return (0, 1) if donate else ()


# Every mode by name, in the tables' order (`Registered`).
MODES: dict[str, type["AbstractMode"]] = {}


class AbstractMode(Registered, eqx.Module, registry=MODES):
    """How a training step runs over devices: builds the step, places its inputs,
    reads its parameters back, and holds the facts the study needs.

    - `label`, `colour`: how sentences (markdown) and figures show it.
    - `one_loop`: one solver loop spans all devices: each runs as many solver steps as
      the global batch's slowest sample.
    - `twin_mode`: the same step with a loop per device and collectives written out, to
      show what the compiler's partitioning costs.
    - `core`: one of the reference study's four modes (explain, versions, seed run those).
    """

    name: eqx.AbstractClassVar[str]
    label: eqx.AbstractClassVar[str]
    colour: eqx.AbstractClassVar[str]
    one_loop: eqx.AbstractClassVar[bool]
    multi_device: eqx.AbstractClassVar[bool]
    multi_process: eqx.AbstractClassVar[bool]
    twin_mode: ClassVar[str | None] = None
    core: ClassVar[bool] = False

    @abc.abstractmethod
    def build(
        self,
        devices: tuple,
        local_step: Callable,
        donate: bool = False,
        layout: Layout = DEFAULT_LAYOUT,
    ) -> tuple[Callable, Any]:
        """The jitted step over `devices` from `local_step(axis, wrap=None)`, and its mesh."""

    def why_not_here(self) -> str | None:
        """Why the running JAX cannot run this mode (one line), or None."""
        return None

    def context(self, step: "ParallelStep") -> contextlib.AbstractContextManager:
        """The context that calling, lowering and compiling `step` need."""
        return contextlib.nullcontext()

    def sharding(self, step: "ParallelStep", split: bool = False) -> Any:
        """Where values go: replicated, or (`split`) split along every leaf's first axis."""
        return NamedSharding(step.mesh, P(AXIS) if split else P())

    def place_state(self, step: "ParallelStep", params: Any, opt_state: Any) -> Any:
        """Put parameters and optimiser state on the devices (replicated)."""
        return jax.device_put((params, opt_state), self.sharding(step))

    def place_batch(self, step: "ParallelStep", batch: Any) -> Any:
        """Put a global batch on the devices, split along every leaf's first axis."""
        return jax.device_put(batch, self.sharding(step, split=True))

    def place_key(self, step: "ParallelStep", key: Any) -> Any:
        """Put a step's key on the devices (replicated)."""
        return jax.device_put(key, self.sharding(step))

    def unplace(self, step: "ParallelStep", params: Any) -> Any:
        """One host copy of (replicated) parameters."""
        return jax.tree.map(lambda x: to_host(x, replicated=True), params)

    def place_args(
        self, step: "ParallelStep", params: Any, opt_state: Any, batch: Any, key: Any
    ) -> tuple:
        """The step's arguments, placed, from values as one device holds them."""
        return (*self.place_state(step, params, opt_state), step.place_batch(batch, key))

    def without_device_axis(self, step: "ParallelStep", out: tuple) -> tuple:
        """The step's outputs shaped as on one device (no leading device axis)."""
        return out


class Single(AbstractMode):
    """`jax.jit` on one device: the baseline."""

    name: ClassVar[str] = "single"
    label: ClassVar[str] = "`single`"
    colour: ClassVar[str] = "k"
    one_loop: ClassVar[bool] = False  # one device: its loop is the only one
    multi_device: ClassVar[bool] = False
    multi_process: ClassVar[bool] = False
    core: ClassVar[bool] = True

    def build(self, devices, local_step, donate=False, layout=DEFAULT_LAYOUT):
        if len(devices) != 1:
            raise ValueError(f"mode 'single' runs on 1 device, got {len(devices)}")
        return jax.jit(local_step(None), donate_argnums=donated(donate)), None

    def sharding(self, step, split=False):
        return step.devices[0]


class Pmap(AbstractMode):
    """`jax.pmap`: one program and solver loop per device."""

    name: ClassVar[str] = "pmap"
    label: ClassVar[str] = "`pmap`"
    colour: ClassVar[str] = "tab:blue"
    one_loop: ClassVar[bool] = False
    multi_device: ClassVar[bool] = True
    multi_process: ClassVar[bool] = False
    core: ClassVar[bool] = True

    def build(self, devices, local_step, donate=False, layout=DEFAULT_LAYOUT):
        # Every input and output has a leading device axis, split over the mesh.
        fn = jax.pmap(
            local_step(AXIS), axis_name=AXIS, devices=devices, donate_argnums=donated(donate)
        )
        return fn, make_data_mesh(devices, AXIS)

    def place_state(self, step, params, opt_state):
        return self._copies(step, (params, opt_state))

    def place_key(self, step, key):
        return self._copies(step, key)

    def _copies(self, step, tree):
        n = step.n_devices
        stacked = jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n, *np.shape(x))), tree)
        return jax.device_put(stacked, NamedSharding(step.mesh, P(AXIS)))

    def place_batch(self, step, batch):
        n = step.n_devices
        split = jax.tree.map(lambda x: np.reshape(x, (n, -1, *np.shape(x)[1:])), batch)
        return jax.device_put(split, NamedSharding(step.mesh, P(AXIS)))

    def unplace(self, step, params):
        return jax.tree.map(lambda x: to_host(x)[0], params)

    def place_args(self, step, params, opt_state, batch, key):
        # Placed as every other mode places them, then given the device axis on device.
        replicated = jax.device_put((params, opt_state, key), NamedSharding(step.mesh, P()))
        split = jax.device_put(batch, NamedSharding(step.mesh, P(AXIS)))
        (params, opt_state, key), batch = _with_device_axis(step.mesh)(replicated, split)
        return params, opt_state, (batch, key) if step.layout.keyed else batch

    def without_device_axis(self, step, out):
        # Every device's copy of the replicated outputs is kept as the replicated value.
        specs = (P(), P(), P(), step.layout.aux_specs(P(AXIS), P()))
        leaves, tree = jax.tree.flatten(out)
        flat_specs = tuple(jax.tree.leaves(jax.tree.broadcast(specs, out)))
        return jax.tree.unflatten(tree, _without_device_axis(step.mesh, flat_specs)(leaves))


@functools.cache
def _with_device_axis(mesh: Any) -> Callable:
    """Gives replicated values and a split batch the leading device axis `pmap` takes."""

    def add_axis(replicated, split):
        return jax.tree.map(lambda x: x[None], (replicated, split))

    return jax.jit(shard_map(add_axis, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS)))


@functools.cache
def _without_device_axis(mesh: Any, specs: tuple) -> Callable:
    """Takes `pmap` outputs to each device's entry, placed as `specs` (one per leaf)."""

    def drop_axis(leaves):
        return [x[0] for x in leaves]

    return jax.jit(shard_map(drop_axis, mesh=mesh, in_specs=(P(AXIS),), out_specs=list(specs)))


def sharded_jit(step: Callable, mesh: Any, donate: bool, layout: Layout) -> Callable:
    """`jax.jit` of `step` over `mesh`: batch and per-sample `aux` split, else replicated."""
    replicated, batched = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
    return jax.jit(
        step,
        in_shardings=(replicated, replicated, layout.batch_spec(batched, replicated)),
        out_shardings=(
            replicated,
            replicated,
            replicated,
            layout.aux_specs(batched, replicated),
        ),
        donate_argnums=donated(donate),
    )


class Shard(AbstractMode):
    """Sharded `jax.jit`: the compiler partitions the vmapped solve (one solver loop)."""

    name: ClassVar[str] = "shard"
    label: ClassVar[str] = "sharded `jit` (`shard`)"
    colour: ClassVar[str] = "tab:red"
    one_loop: ClassVar[bool] = True
    multi_device: ClassVar[bool] = True
    multi_process: ClassVar[bool] = True
    twin_mode: ClassVar[str | None] = "shard_map"
    core: ClassVar[bool] = True

    def build(self, devices, local_step, donate=False, layout=DEFAULT_LAYOUT):
        mesh = make_data_mesh(devices, AXIS)
        return sharded_jit(local_step(None), mesh, donate, layout), mesh


class ShardMap(AbstractMode):
    """`jax.shard_map` under `jax.jit`: a solver loop per device."""

    name: ClassVar[str] = "shard_map"
    label: ClassVar[str] = "`shard_map`"
    colour: ClassVar[str] = "tab:green"
    one_loop: ClassVar[bool] = False
    multi_device: ClassVar[bool] = True
    multi_process: ClassVar[bool] = True
    core: ClassVar[bool] = True

    def build(self, devices, local_step, donate=False, layout=DEFAULT_LAYOUT):
        mesh = make_data_mesh(devices, AXIS)
        # Without the replication check (`compat.shard_map`): diffrax's while loops mix
        # per-device and replicated carries.
        fn = jax.jit(
            shard_map(
                local_step(AXIS),
                mesh=mesh,
                in_specs=(P(), P(), layout.batch_spec(P(AXIS), P())),
                out_specs=(P(), P(), P(), layout.aux_specs(P(AXIS), P())),
            ),
            donate_argnums=donated(donate),
        )
        return fn, mesh


def auto_axes_loss(layout: Layout) -> Wrap:
    """The `Wrap` that runs a loss under `compat.auto_axes`. The model's static part is
    closed over: it holds functions, which have no sharded type."""
    out_sharding = (P(), layout.aux_specs(P(AXIS), P()))

    def wrap(loss: Loss) -> Loss:
        def wrapped(params, static, batch, *key):
            def inner(p, b, *k):
                value, aux = loss(p, static, b, *k)
                # `_reduce_aux`'s one-line error before `auto_axes` fails to split a scalar.
                return value, _reduce_aux(aux, layout, None)

            return auto_axes(inner, out_sharding)(params, batch, *key)

        return wrapped

    return wrap


class Explicit(AbstractMode):
    """`jax.jit` under an Explicit mesh axis; the loss runs under `auto_axes` (diffrax's
    solve fails to trace under Explicit axes). Needs JAX 0.7.1 or later."""

    name: ClassVar[str] = "explicit"
    label: ClassVar[str] = "`jit` with Explicit mesh axes (`explicit`)"
    colour: ClassVar[str] = "tab:purple"
    one_loop: ClassVar[bool] = True
    multi_device: ClassVar[bool] = True
    multi_process: ClassVar[bool] = False  # not tested over processes
    twin_mode: ClassVar[str | None] = "shard_map"

    def why_not_here(self) -> str | None:
        return explicit_axes_missing()

    def build(self, devices, local_step, donate=False, layout=DEFAULT_LAYOUT):
        mesh = make_explicit_mesh(devices, AXIS)
        return sharded_jit(local_step(None, auto_axes_loss(layout)), mesh, donate, layout), mesh

    def context(self, step: "ParallelStep") -> contextlib.AbstractContextManager:
        return mesh_context(step.mesh)


def check_here(mode: AbstractMode) -> None:
    """A one-line ValueError where the running JAX cannot run `mode`."""
    why = mode.why_not_here()
    if why is not None:
        raise ValueError(why)


def multi_device_modes() -> tuple[str, ...]:
    """The registered multi-device modes' names, in the tables' order."""
    return tuple(name for name, m in MODES.items() if m.multi_device)


def modes_here(multi_device: bool = False) -> tuple[str, ...]:
    """The registered modes the running JAX can run (`multi_device`: only those)."""
    return tuple(
        name
        for name, m in MODES.items()
        if (m.multi_device or not multi_device) and m().why_not_here() is None
    )


def mode_facts(name: str) -> type[AbstractMode] | None:
    """The registered mode class named `name`, None for a mode since removed."""
    return MODES.get(name)


def parse_mode(mode: "str | AbstractMode") -> AbstractMode:
    """The mode named `mode` (an `AbstractMode` passes through)."""
    if isinstance(mode, AbstractMode):
        return mode
    return lookup(MODES, "mode", mode)()


class ParallelStep(eqx.Module):
    """A data-parallel training step for one mode on a set of devices. Calling, lowering
    and compiling run in the mode's context with the equinox workaround
    (`compat.closure_convert_ignores_manual_sharding`); only `compile` applies
    `compiler_options`."""

    mode: AbstractMode = eqx.field(static=True)
    devices: tuple = eqx.field(static=True)
    fn: Callable = eqx.field(static=True)
    mesh: Any = eqx.field(static=True)
    layout: Layout = eqx.field(static=True, default=DEFAULT_LAYOUT)
    compiler_options: dict[str, Any] | None = eqx.field(static=True, default=None)

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def place_state(self, params, opt_state):
        """Put parameters and optimiser state on the devices (replicated)."""
        return self.mode.place_state(self, params, opt_state)

    def place_batch(self, batch: Any, key: Any = None) -> Any:
        """Put a global batch (and a keyed step's `key`) on the devices."""
        if self.layout.keyed != (key is not None):
            raise ValueError(
                "a keyed step takes place_batch(batch, key); an unkeyed one takes no key"
            )
        placed = self.mode.place_batch(self, batch)
        return (placed, self.mode.place_key(self, key)) if self.layout.keyed else placed

    def __call__(self, params, opt_state, batch):
        """One training step on placed arguments."""
        with self.mode.context(self), closure_convert_ignores_manual_sharding():
            out = self.fn(params, opt_state, batch)
        return jax.block_until_ready(out) if collectives_need_sync(self.devices) else out

    def lower(self, params, opt_state, batch):
        """AOT-lower the step for these (placed) arguments."""
        with self.mode.context(self), closure_convert_ignores_manual_sharding():
            return self.fn.lower(params, opt_state, batch)

    def compile(self, params, opt_state, batch):
        """AOT-lower and compile the step with `compiler_options`."""
        return self.lower(params, opt_state, batch).compile(self.compiler_options)

    def unplace(self, params):
        """One host copy of (replicated) parameters."""
        return self.mode.unplace(self, params)

    def place_args(self, params, opt_state, batch, key=None) -> tuple:
        """The step's arguments, placed (`AbstractMode.place_args`)."""
        return self.mode.place_args(self, params, opt_state, batch, key)

    def without_device_axis(self, out: tuple) -> tuple:
        """The step's outputs shaped as on one device."""
        return self.mode.without_device_axis(self, out)

    def per_sample(self, values: Int[Array, "..."]) -> Int[np.ndarray, "devices local"]:
        """A per-sample output as a host array of shape `(n_devices, local_batch)`."""
        return to_host(values).reshape(self.n_devices, -1)


def to_host(x, replicated: bool = False) -> np.ndarray:
    """A host copy of `x`, also when it spans devices of other processes."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    if replicated:
        return np.asarray(x.addressable_data(0))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def make_params_step(
    loss: Loss,
    optimiser: optax.GradientTransformation,
    mode: "str | AbstractMode",
    devices: Sequence[jax.Device],
    *,
    static: Any = None,
    donate: bool = False,
    aux: Any = PER_SAMPLE,
    keyed: bool = False,
    compiler_options: dict[str, Any] | None = None,
) -> ParallelStep:
    """A data-parallel training step of any loss on a model split by `eqx.partition`
    (`odestudy.make_step` is built on it).

    - `loss`: `loss(params, static, batch[, key]) -> (value, aux)`. `value`: a scalar
      mean (averaged over devices) or a `Mean(total, count)` (sums and counts added over
      devices first, so a masked loss gets the global mean's gradients).
    - `mode`: an `AbstractMode` or its name; `static`: passed to `loss` unchanged.
    - `donate`: reuse the buffers of the parameters and optimiser state given.
    - `aux`: `"per_sample"` (split like the batch), `"scalar"` (a batch mean, averaged
      over devices), or a pytree prefix of `aux` made of these.
    - `keyed`: the loss takes a random key, given per call as
      `step.place_batch(batch, key)` and folded with each device's index.
    - `compiler_options`: XLA options `compile` applies (None: XLA's defaults).

    The batch is split along its leaves' first axis. The step returns `(params,
    opt_state, loss, aux)`; under `pmap` every output has a leading device axis:
    `unplace`, `place_args` and `without_device_axis` give every mode's values as one
    device's.
    """
    mode = parse_mode(mode)
    check_here(mode)
    devices = tuple(devices)
    layout = Layout(aux, keyed)
    check_layout(layout)

    def local_step(axis: str | None, wrap: Wrap | None = None) -> Callable:
        return local_update(loss if wrap is None else wrap(loss), static, optimiser, axis, layout)

    fn, mesh = mode.build(devices, local_step, donate, layout)
    return ParallelStep(mode, devices, fn, mesh, layout, compiler_options)


def tree_max_rel_diff(a, b) -> float:
    """Largest relative difference between two pytrees of arrays (max-abs scaled)."""
    diffs = [
        float(jnp.max(jnp.abs(x - y)) / jnp.maximum(jnp.max(jnp.abs(y)), 1e-30))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    ]
    return max(diffs)
