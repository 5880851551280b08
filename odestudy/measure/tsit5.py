"""Tsit5 with its stages as straight-line code: diffrax's `Tsit5` evaluates the stages
of a step in a loop of its own (`eqxi.while_loop` over the stages); `StraightTsit5`
writes the same arithmetic out stage by stage, inside diffrax's own solve loop."""

from typing import Any

import diffrax
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np


def _combine(y0: Any, coefficients: np.ndarray, ks: Any) -> Any:
    """`y0 + coefficients . ks` leaf by leaf, as diffrax computes a stage's state:
    `ks` holds all stages (leading axis), the ones not yet evaluated zero, and
    `coefficients` is padded with zeros to the same length."""
    num_stages = jtu.tree_leaves(ks)[0].shape[0]
    padded = np.zeros(num_stages)
    padded[: len(coefficients)] = coefficients

    def leaf(y, k):
        a = jnp.asarray(padded, y.dtype)
        return y + jnp.tensordot(a, k, axes=1, precision="highest")

    return jtu.tree_map(leaf, y0, ks)


class StraightTsit5(diffrax.Tsit5):
    """Diffrax's `Tsit5` (its tableau, FSAL, embedded error estimate and 5th-order
    interpolation), the 7 stages of a step evaluated as straight-line code rather than
    a loop over stages. Step-size controllers, `SaveAt` and adjoints are diffrax's own.

    The first stage of the first step (`f(t0, y0)`) is evaluated in `init`; every step
    then evaluates 6 new stages, and re-evaluates the first only after a jump
    (`made_jump`, e.g. a controller's `jump_ts`). Terms whose vector field diffrax
    calls expensive (no FSAL) fall back to diffrax's loop.

    Takes no arguments (`scan_kind` is diffrax's and unused here).
    """

    def init(self, terms, t0, t1, y0, args):
        """The solver state: the vector field at `(t0, y0)` (FSAL's carried stage)."""
        _, fsal = self._common(terms, t0, t1, y0, args)
        if not fsal:
            return super().init(terms, t0, t1, y0, args)
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        """One Tsit5 step from `(t0, y0)` to `t1`, as diffrax's `step` returns it:
        `(y1, y_error, dense_info, solver_state, result)`."""
        _, fsal = self._common(terms, t0, t1, y0, args)
        if not fsal:
            return super().step(terms, t0, t1, y0, args, solver_state, made_jump)
        tableau = self.tableau
        f0 = solver_state
        if isinstance(made_jump, bool):  # static (False) unless the solve can jump
            f0 = terms.vf(t0, y0, args) if made_jump else f0
        else:
            f0 = jax.lax.cond(
                eqxi.unvmap_any(made_jump), lambda: terms.vf(t0, y0, args), lambda: f0
            )
        dt = t1 - t0
        control = terms.contr(t0, t1)
        t_dtype = jnp.result_type(t0, t1)
        num_stages = tableau.num_stages
        # Diffrax's buffer of stages (zeros until written), filled at static indices.
        k = jtu.tree_map(lambda x: jnp.zeros((num_stages, *x.shape), x.dtype), y0)

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
