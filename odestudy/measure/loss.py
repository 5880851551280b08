"""A loss value that reduces exactly over devices (`Mean`)."""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float


class Mean(eqx.Module):
    """A mean given as its sum and its count: `total / count`.

    A loss returned as a `Mean` is reduced over devices by adding every device's
    `total` and `count` before dividing, so the loss and its gradients are those of the
    global mean whatever each device holds (a masked loss whose observed points differ
    between devices included). A plain scalar is averaged over devices instead: exact
    only where every device's mean weighs the same.

    - `total`: the sum of what is averaged (a scalar).
    - `count`: how many terms it sums (a scalar; it carries no gradient).
    """

    total: Float[Array, ""]
    count: Float[Array, ""]


def mean_value(value: Any) -> Float[Array, ""]:
    """The scalar a loss value stands for: `total / count` of a `Mean`, else `value`."""
    if isinstance(value, Mean):
        return value.total / value.count
    return jnp.asarray(value)
