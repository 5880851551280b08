"""A latent ODE on your own series, written outside the package: a worked example.

The shipped latent ODE (`odestudy/problems/latent.py`: a set encoder, a reparameterised
latent initial state, a latent neural ODE, a decoder, the negative ELBO) trained on data
of your own: 2-D waves whose series hold different numbers of observations, padded to one
array by repeating each series' last time and value (the padding rule,
`odestudy.observed`). The encoder and the loss leave the padding out, and the loss is an
`odestudy.Mean`, so every mode trains the same global mean. Run it from the folder
holding this file:

    odestudy run --problem latent_ode:PROBLEM --scale smoke
    odestudy predict --problem latent_ode:PROBLEM --scale smoke --devices 2
    odestudy report --scale smoke
"""

from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from odestudy.problems.latent import LatentODE, Series

N_TIMES = 24
T_END = 5.0


def waves(size: int, key: jax.Array) -> Series:
    """`size` waves `a (sin(w t + p), cos(w t + p))`, each observed at its own random
    times, the first `k` of them kept (`k` from 8 to `N_TIMES`) and the rest padded."""
    t_key, a_key, w_key, p_key, k_key = jr.split(key, 5)
    inner = jnp.sort(jr.uniform(t_key, (size, N_TIMES - 1), maxval=T_END), axis=1)
    ts = np.array(jnp.concatenate([jnp.zeros((size, 1)), inner], axis=1), np.float32)
    amplitude = np.asarray(jr.uniform(a_key, (size, 1), minval=0.5, maxval=1.5))
    frequency = np.asarray(jr.uniform(w_key, (size, 1), minval=1.0, maxval=2.0))
    phase = np.asarray(jr.uniform(p_key, (size, 1), maxval=2 * np.pi))
    angle = frequency * ts + phase
    ys = amplitude[..., None] * np.stack([np.sin(angle), np.cos(angle)], axis=-1)
    kept = np.asarray(jr.randint(k_key, (size,), 8, N_TIMES + 1))
    for i, k in enumerate(kept):  # the padding rule: repeat the last kept point
        ts[i, k:], ys[i, k:] = ts[i, k - 1], ys[i, k - 1]
    return Series(ts, ys.astype(np.float32))


class Waves(LatentODE):
    """The latent ODE on `waves`: only the data and the name are yours."""

    name: ClassVar[str] = "latent_waves"

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Any:
        del spread
        return waves(size, key)


PROBLEM = Waves()
