"""Shared test set-up: 8 virtual CPU devices, set before JAX starts."""

import os

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# Every test process measures under a lock of its own (`odestudy.study.lock`), so that
# pytest's workers, and the tests, never wait for or refuse each other.
import tempfile  # noqa: E402

os.environ["ODESTUDY_LOCK"] = os.path.join(tempfile.mkdtemp(prefix="odestudy-lock-"), "lock")
