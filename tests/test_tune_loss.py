"""`odestudy.tune_loss`: `odestudy tune` for a plain loss and model, without a problem
class; the `Step` it returns trains in the researcher's own loop. Nothing here reads a
time for a verdict."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import odestudy
from odestudy import LossProblem, Step
from odestudy.measure.lever import LEVERS


class _Field(eqx.Module):
    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        return self.mlp(y)


def _spiral(n: int) -> tuple[np.ndarray, np.ndarray]:
    ts = np.broadcast_to(np.linspace(0.0, 2.0, 16), (n, 16)).copy()
    y0 = np.random.default_rng(0).normal(size=(n, 2))
    c, s = np.cos(3 * ts), np.sin(3 * ts)
    ys = np.stack([c * y0[:, :1] + s * y0[:, 1:], -s * y0[:, :1] + c * y0[:, 1:]], axis=-1)
    return ts, np.exp(-0.1 * ts)[..., None] * ys


def loss(model, batch, key, solve):
    ts, ys = batch
    return jnp.mean((solve(model, ts, ys[:, 0]) - ys) ** 2)


def _problem(field) -> LossProblem:
    """The plain loss, its optimiser, model and data, with the problem's facts."""
    return odestudy.loss_problem(loss, optax.adam(1e-2), field, _spiral(80),
                                 times=lambda data: data[0], trained_loss=10.0,
                                 time_dependent=False, uniform_grid=True)  # fmt: skip


@pytest.mark.long
def test_tune_on_a_plain_loss_and_model_returns_a_step():
    field = _Field(eqx.nn.MLP(2, 2, 16, 2, activation=jnp.tanh, key=jr.PRNGKey(0)))
    saved, lines = dict(LEVERS), []
    try:
        for name in set(LEVERS) - {"unrolled_stages", "within_ode"}:  # two, for time
            del LEVERS[name]
        step = odestudy.tune_loss(_problem(field), batch=8, scale="smoke", blocks=2,
                                  steps_per_block=2, loss_margin=0.1,
                                  print_line=lines.append)  # fmt: skip
    finally:
        LEVERS.clear()
        LEVERS.update(saved)
    assert isinstance(step, Step) and isinstance(step.scenario().problem_object, LossProblem)
    tried = {r["label"] for r in step.measured["tried"]}
    assert {"default", "unrolled_stages", "within_ode"} <= tried
    assert any(line.startswith("chosen:") for line in lines)
    # The step in the researcher's own loop: its solve from the facts, its make_step.
    solve = step.solve(time_dependent=False, uniform_grid=True)
    train_step = odestudy.make_step(lambda m, b, k: loss(m, b, k, solve), optax.adam(1e-2),
                                    step=step)  # fmt: skip
    ts, ys = _spiral(8)
    _, _, value, _ = train_step(field, train_step.init(field), (ts, ys))
    assert np.isfinite(float(value))


@pytest.mark.long
def test_predict_on_a_plain_loss_and_model_predicts_every_mode(capsys):
    field = _Field(eqx.nn.MLP(2, 2, 16, 2, activation=jnp.tanh, key=jr.PRNGKey(0)))
    out = odestudy.predict_loss(_problem(field), batch=8, scale="smoke", devices=2,
                                profile="h100-nvlink")  # fmt: skip
    modes = [r["mode"] for r in out["rows"]]
    assert "shard_map" in modes and out["n_devices"] == 2
    for r in out["rows"]:  # every estimate inside its interval
        lo, hi = r["step_time_interval_s"]
        assert lo <= r["step_time_s"] <= hi
    printed = capsys.readouterr().out
    assert "predicted step" in printed and "terms:" in printed
    with pytest.raises(ValueError, match="CPU devices"):
        odestudy.predict_loss(_problem(field), devices=64, profile="h100-nvlink")
