"""Tsit5 for every solve that writes it out: its tableau and error order (diffrax's), a
step as straight-line code (`stages`) and its reverse (`reverse`), its interpolant's
weights, and `StraightTsit5`, diffrax's `Tsit5` with its stages written out."""

from collections.abc import Callable
from typing import Any, ClassVar, cast

import diffrax
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array

_TABLEAU = diffrax.Tsit5.tableau
A_LOWER = [[float(a) for a in row] for row in _TABLEAU.a_lower]  # stage i+1 from stages 0..i
C = [float(c) for c in _TABLEAU.c]  # stage i+1 at time t + c[i] h
_B_ERROR = [float(b) for b in _TABLEAU.b_error]
STAGES = len(_TABLEAU.c) + 1  # stage values per step (the first is the FSAL stage)
# The error estimate's order, as diffrax's PID controller takes it from the solver.
ERROR_ORDER = cast(int, diffrax.Tsit5().error_order(diffrax.ODETerm(lambda t, y, args: y)))


def stage_state(y: Array, row: list[float], ks: list[Array]) -> Array:
    """A stage's state `y + sum(a_j k_j)` over the nonzero coefficients `row`."""
    return y + sum(a * k for a, k in zip(row, ks, strict=False) if a != 0.0)


def stage_time(t: Array, tnext: Array, h: Array, c: float) -> Array:
    """The time of the stage at node `c` of the step `h` from `t` to `tnext` (`tnext`
    itself at `c` = 1)."""
    return tnext if c == 1.0 else t + c * h


def stages(
    field: Callable[..., Any], t: Array, tnext: Array, y: Array, f: Array, args: Any
) -> tuple[Array, Array, list[Array], list[Array]]:
    """One Tsit5 step from `(t, y)` to `tnext`, `f` the field at `(t, y)` (FSAL):
    `(y1, error, fs, ks)`, the 7 stages' field values (`fs[-1]` the next step's first)
    and the same times the step (diffrax's `k`)."""
    h = tnext - t
    fs, ks = [f], [f * h]
    fi = yi = f
    for row, c in zip(A_LOWER, C, strict=True):
        yi = stage_state(y, row, ks)
        fi = field(stage_time(t, tnext, h, c), yi, args)
        fs.append(fi)
        ks.append(fi * h)
    error = cast(Array, sum(b * k for b, k in zip(_B_ERROR, ks, strict=True)))
    return yi, error, fs, ks  # Tsit5's last stage state is the step's result


def reverse(
    h: Array, y1_bar: Array, fs_bar: list[Array], state_bar: Callable[[int, Array], Array]
) -> tuple[Array, Array]:
    """The cotangents of a Tsit5 step's start state and first stage value from those of
    its end state and 7 stage values, the stages walked last to first; `state_bar(i,
    value_bar)`: the field's reverse at stage `i` (1 to 6)."""
    k_bar = list(fs_bar)
    y_bar = jnp.zeros_like(y1_bar)
    for i in range(len(A_LOWER), 0, -1):
        g = state_bar(i, k_bar[i])
        if i == len(A_LOWER):  # Tsit5's last stage state is the step's end state
            g = g + y1_bar
        y_bar = y_bar + g
        for j, a in enumerate(A_LOWER[i - 1]):
            if a != 0.0:
                k_bar[j] = k_bar[j] + (a * h) * g
    return y_bar, k_bar[0]


def rescale(t: Array, tnext: Array, ts: Array) -> Array:
    """Where each of `ts` lies in the step `[t, tnext]`, 0 to 1 (diffrax's
    `linear_rescale`)."""
    same = t == tnext
    return jnp.where(same, 0, ts - t) / jnp.where(same, 1, tnext - t)


def interpolation_weights(t: Array) -> list[Array]:
    """The 7 stages' weights in Tsit5's interpolant at `t` (0 to 1), as diffrax's
    `_Tsit5Interpolation.evaluate` has them."""
    return [
        -1.0530884977290216
        * t
        * (t - 1.3299890189751412)
        * (t**2 - 1.4364028541716351 * t + 0.7139816917074209),
        0.1017 * t**2 * (t**2 - 2.1966568338249754 * t + 1.2949852507374631),
        2.490627285651252793 * t**2 * (t**2 - 2.38535645472061657 * t + 1.57803468208092486),
        -16.54810288924490272 * (t - 1.21712927295533244) * (t - 0.61620406037800089) * t**2,
        47.37952196281928122 * (t - 1.203071208372362603) * (t - 0.658047292653547382) * t**2,
        -34.87065786149660974 * (t - 1.2) * (t - 0.666666666666666667) * t**2,
        2.5 * (t - 1) * (t - 0.6) * t**2,
    ]


def _combine(y0: Any, coefficients: np.ndarray, ks: Any) -> Any:
    """`y0 + coefficients . ks` leaf by leaf, as diffrax computes a stage's state (`ks`
    holds all stages, the ones not yet evaluated zero)."""
    num_stages = jtu.tree_leaves(ks)[0].shape[0]
    padded = np.zeros(num_stages)
    padded[: len(coefficients)] = coefficients

    def leaf(y, k):
        a = jnp.asarray(padded, y.dtype)
        return y + jnp.tensordot(a, k, axes=1, precision="highest")

    return jtu.tree_map(leaf, y0, ks)


class StraightTsit5(diffrax.AbstractERK):
    """Diffrax's `Tsit5`, the 7 stages of a step as straight-line code rather than a loop.

    The first stage (`f(t0, y0)`) is evaluated in `init`; every step evaluates 6 new
    stages, and the first again only after a jump (`made_jump`). Terms without FSAL fall
    back to diffrax's loop. Takes no arguments.
    """

    tableau: ClassVar[diffrax.ButcherTableau] = _TABLEAU
    interpolation_cls: ClassVar[Callable[..., diffrax.AbstractLocalInterpolation]] = (
        diffrax.Tsit5.interpolation_cls
    )

    def order(self, terms):
        return diffrax.Tsit5().order(terms)

    def init(self, terms, t0, t1, y0, args):
        """The vector field at `(t0, y0)` (FSAL's carried stage)."""
        _, fsal = self._common(terms, t0, t1, y0, args)
        if not fsal:
            return super().init(terms, t0, t1, y0, args)
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        """One Tsit5 step from `(t0, y0)` to `t1`, as diffrax's `step`."""
        _, fsal = self._common(terms, t0, t1, y0, args)
        if not fsal:
            return super().step(terms, t0, t1, y0, args, solver_state, made_jump)
        tableau = self.tableau
        if isinstance(made_jump, bool):  # static (False) unless the solve can jump
            f0 = terms.vf(t0, y0, args) if made_jump else solver_state
        else:
            f0 = jax.lax.cond(
                eqxi.unvmap_any(made_jump), lambda: terms.vf(t0, y0, args), lambda: solver_state
            )
        dt = t1 - t0
        control = terms.contr(t0, t1)
        t_dtype = jnp.result_type(t0, t1)
        # Diffrax's buffer of stages (zeros until written), filled at static indices.
        k = jtu.tree_map(lambda x: jnp.zeros((tableau.num_stages, *x.shape), x.dtype), y0)

        def put(k, i, ki):
            return jtu.tree_map(lambda buf, x: buf.at[i].set(x), k, ki)

        k = put(k, 0, terms.prod(f0, control))
        fi = yi = None
        for i, (a_i, c_i) in enumerate(zip(tableau.a_lower, tableau.c, strict=True), 1):
            yi = _combine(y0, a_i, k)
            # As diffrax: no floating-point error in the last stage's time.
            ti = t1 if c_i == 1 else t0 + jnp.asarray(c_i, t_dtype) * dt
            fi = terms.vf(ti, yi, args)
            k = put(k, i, terms.prod(fi, control))
        y1 = yi if tableau.ssal else _combine(y0, tableau.b_sol, k)
        y_dtype = jnp.result_type(*jtu.tree_leaves(y0))
        b_error = jnp.asarray(tableau.b_error, y_dtype)
        y_error = jtu.tree_map(
            lambda leaf: jnp.tensordot(b_error, leaf, axes=1, precision="highest"), k
        )
        dense_info = dict(y0=y0, y1=y1, k=k)
        return y1, y_error, dense_info, fi, diffrax.RESULTS.successful
