"""The data-parallel training step of an equinox model, filter-style (`make_step`): the
study's generic step (`measure.modes.make_params_step`) of the model split as
`eqx.filter_value_and_grad` splits it, made once per rest of the model (as
`eqx.filter_jit` compiles once per static part)."""

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import numpy as np
import optax

from .measure.compat import collectives_need_sync
from .measure.loss import Mean
from .measure.modes import (
    PER_SAMPLE,
    AbstractMode,
    Layout,
    Loss,
    ParallelStep,
    check_here,
    check_layout,
    make_params_step,
    parse_mode,
)

if TYPE_CHECKING:
    from .study.steps import Step

# A loss for `make_step`: `loss(model, batch, key) -> value`, or `-> (value, aux)` where
# `make_step(aux=...)` says what `aux` holds. `key` is None in a step called without one.
ModelLoss = Callable[[Any, Any, Any], Any]


def params_loss(loss: ModelLoss, has_aux: bool) -> Loss:
    """`loss` as `make_params_step` takes it, on the model put back together; a one-line
    ValueError while the step traces where its output does not match `has_aux`."""

    def wrapped(params, static, batch, key=None):
        out = loss(eqx.combine(params, static), batch, key)
        if not has_aux and isinstance(out, tuple):
            raise ValueError(
                "the loss returned a tuple: return its value alone, or (value, aux) with "
                "make_step(aux=...) saying what aux holds"
            )
        if has_aux and not (isinstance(out, tuple) and len(out) == 2):
            raise ValueError(
                "make_step(aux=...) says the loss returns (value, aux); it returned a "
                f"{type(out).__name__}"
            )
        value, aux = out if has_aux else (out, None)
        if not isinstance(value, Mean) and np.ndim(value) != 0:
            raise ValueError(
                "the loss value must be a scalar (a mean) or an odestudy.Mean, got shape "
                f"{np.shape(value)}"
            )
        return value, aux

    return wrapped


def check_batch(batch: Any, n_devices: int) -> None:
    """A one-line ValueError unless `batch`'s leaves share a first axis that splits over
    `n_devices` devices."""
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree.leaves(batch)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(f"every batch leaf needs the batch on its first axis, got {sizes}")
    size = int(next(iter(sizes)) or 0)
    if size % n_devices:
        raise ValueError(f"the batch of {size} does not split over {n_devices} devices")


class FilterStep(eqx.Module):
    """A data-parallel training step of an equinox model (`make_step`):
    `step(model, opt_state, batch, key=None) -> (model, opt_state, loss, aux)`, shaped as
    on one device in every mode (the model's arrays replicated over the devices, the
    loss a scalar, `aux` along the global batch). `batch` is the global batch."""

    loss: ModelLoss = eqx.field(static=True)
    optimiser: optax.GradientTransformation = eqx.field(static=True)
    mode: AbstractMode = eqx.field(static=True)
    devices: tuple = eqx.field(static=True)
    aux: Any = eqx.field(static=True, default=None)
    donate: bool = eqx.field(static=True, default=False)
    # XLA options every call's step is compiled with (a loaded step's), or None: a plain
    # jitted call with XLA's defaults.
    compiler_options: dict[str, Any] | None = eqx.field(static=True, default=None)
    # The params-style steps made so far, each with the rest of the model it was made for.
    steps: list[tuple[Any, ParallelStep]] = eqx.field(static=True, default_factory=list)
    # With `compiler_options`: each step's executables, by its arguments' structure.
    compiled: dict[Any, Any] = eqx.field(static=True, default_factory=dict)

    @staticmethod
    def partition(model: Any) -> tuple[Any, Any]:
        """`(trained, rest)` of `model`: its floating-point arrays, and everything else."""
        return eqx.partition(model, eqx.is_inexact_array)

    def init(self, model: Any) -> Any:
        """The optimiser's state for what the step trains of `model`."""
        return self.optimiser.init(self.partition(model)[0])

    def parallel_step(self, rest: Any, keyed: bool) -> ParallelStep:
        """The params-style step for a model whose untrained part is `rest`, made at its
        first use and reused while `rest` is equal (`eqx.tree_equal`)."""
        for known, step in self.steps:
            if step.layout.keyed == keyed and bool(eqx.tree_equal(known, rest)):
                return step
        step = make_params_step(
            params_loss(self.loss, self.aux is not None),
            self.optimiser,
            self.mode,
            self.devices,
            static=rest,
            donate=self.donate,
            aux=PER_SAMPLE if self.aux is None else self.aux,
            keyed=keyed,
            compiler_options=self.compiler_options,
        )
        self.steps.append((rest, step))
        return step

    def run(self, step: ParallelStep, args: tuple) -> tuple:
        """`step` on its placed `args`: called, or with `compiler_options` its executable
        (compiled once per argument structure)."""
        if self.compiler_options is None:
            return step(*args)
        leaves, tree = jax.tree.flatten(args)
        at = (
            id(step),
            tree,
            tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves),
        )
        if at not in self.compiled:
            self.compiled[at] = step.compile(*args)
        out = self.compiled[at](*args)
        return jax.block_until_ready(out) if collectives_need_sync(step.devices) else out

    def __call__(self, model: Any, opt_state: Any, batch: Any, key: Any = None) -> tuple:
        """One training step: `(model, opt_state, loss, aux)` (see the class)."""
        check_batch(batch, len(self.devices))
        params, rest = self.partition(model)
        step = self.parallel_step(rest, keyed=key is not None)
        out = self.run(step, step.place_args(params, opt_state, batch, key))
        params, opt_state, value, aux = step.without_device_axis(out)
        return eqx.combine(params, rest), opt_state, value, aux


def make_step(
    loss: ModelLoss,
    optimiser: optax.GradientTransformation,
    mode: "str | AbstractMode | None" = None,
    devices: Sequence[jax.Device] | None = None,
    *,
    aux: Any = None,
    donate: bool | None = None,
    step: "Step | None" = None,
) -> FilterStep:
    """The data-parallel training step of an equinox model in any mode, the optax
    update inside the compiled step (`FilterStep`).

    - `loss`: `loss(model, batch, key) -> value` (or `(value, aux)`) on the device's
      share of the batch, `key` folded with the device's index where the loss runs per
      device. `value` is a scalar mean, averaged over devices, or an `odestudy.Mean`,
      whose sums and counts are added over devices first (exact for a masked loss).
    - `mode`: an `AbstractMode` or its name; `devices`: exactly one for `single`.
    - `aux`: None: the loss returns its value alone; else what `aux` holds:
      `"per_sample"`, `"scalar"` (averaged over devices) or a pytree prefix of these.
    - `donate`: reuse the buffers of the model's arrays and optimiser state.
    - `step`: a `Step` of `odestudy tune` (`load_step`): its compile options, and its
      donation, mode and devices where none are given.

    The model's floating-point arrays are trained, the rest kept; a model whose rest
    changes gets a step compiled for it, as `eqx.filter_jit` does.
    """
    options = None
    if step is not None:
        mode = step.mode if mode is None else mode
        devices = jax.local_devices()[: step.devices] if devices is None else devices
        donate = step.donate if donate is None else donate
        options = step.compiler_options()
    if mode is None or devices is None:
        raise ValueError("make_step needs a mode and devices, or a step= that names them")
    mode = parse_mode(mode)
    check_here(mode)
    devices = tuple(devices)
    if not mode.multi_device and len(devices) != 1:
        raise ValueError(f"mode {mode.name!r} runs on 1 device, got {len(devices)}")
    if not callable(loss):
        raise ValueError(f"the loss must be callable as loss(model, batch, key), got {loss!r}")
    if not (hasattr(optimiser, "init") and hasattr(optimiser, "update")):
        raise ValueError(f"the optimiser must be an optax transformation, got {optimiser!r}")
    if aux is not None:
        check_layout(Layout(aux))
    return FilterStep(loss, optimiser, mode, devices, aux, bool(donate), options)
