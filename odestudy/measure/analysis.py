"""Where multi-device time goes: lock-step waste from per-sample solver steps."""

from typing import Any

import numpy as np


def lockstep_waste(steps: Any) -> dict[str, float]:
    """Lock-step waste from per-sample forward solver steps, shape `(devices, batch)`.

    - `within_device`: a batched loop runs as many steps as its slowest sample, so
      `1 - mean(steps) / mean over devices of max(steps on the device)`;
    - `across_devices`: a synchronous step waits for the slowest device, so
      `1 - mean over devices of max / max over devices of max` (the most an
      asynchronous scheme could save);
    - `total`: `1 - steps needed / steps executed` when every device runs as long as
      the slowest sample of all (`1 - mean / max`).
    """
    arr = np.asarray(steps, dtype=float)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"steps must have shape (devices, batch), got {arr.shape}")
    per_device_max = arr.max(axis=1)
    needed, slowest = arr.mean(), per_device_max.max()
    return {
        "within_device": float(1 - needed / per_device_max.mean()),
        "across_devices": float(1 - per_device_max.mean() / slowest),
        "total": float(1 - needed / slowest),
    }


def mean_waste(per_step: Any) -> dict[str, float]:
    """`lockstep_waste` averaged over steps; `per_step` has shape
    `(steps, devices, batch)`."""
    wastes = [lockstep_waste(s) for s in np.asarray(per_step)]
    return {k: float(np.mean([w[k] for w in wastes])) for k in wastes[0]}
