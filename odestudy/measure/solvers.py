"""Step-size controllers of the study: adaptive `pid` and fixed `stepto`."""

import diffrax
import jax

CONTROLLERS = ("pid", "stepto")
MAX_STEPS = 4096
RTOL = 1e-3
ATOL = 1e-6


def check_controller(controller: str) -> None:
    """Raise a ValueError naming the valid choices if `controller` is unknown."""
    if controller not in CONTROLLERS:
        raise ValueError(
            f"unknown controller {controller!r}; valid choices: {', '.join(CONTROLLERS)}"
        )


def controller_and_dt0(controller: str, ts: jax.Array):
    """The diffrax step-size controller and initial step for one series.

    - `controller`: `"pid"` (`PIDController(rtol=1e-3, atol=1e-6)`, `dt0 = ts[1] - ts[0]`)
      or `"stepto"` (`StepTo(ts)`: one solver step per observation, `dt0 = None`).
    - `ts`: the series' observation times, shape `(n_times,)`.
    """
    check_controller(controller)
    if controller == "pid":
        return diffrax.PIDController(rtol=RTOL, atol=ATOL), ts[1] - ts[0]
    return diffrax.StepTo(ts=ts), None
