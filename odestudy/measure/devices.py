"""Choose the platform and the number of virtual CPU devices before JAX starts."""

import os

# XLA's flag for the number of virtual CPU devices.
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def with_device_count(flags: str, count: int) -> str:
    """XLA flags `flags` with the virtual CPU device count set to `count`."""
    kept = [f for f in flags.split() if not f.startswith(DEVICE_COUNT_FLAG)]
    return " ".join([*kept, f"{DEVICE_COUNT_FLAG}={count}"])


def configure_devices(device: str, devices_per_process: int) -> None:
    """Set up JAX for a scenario; call before anything touches a JAX device.

    - `device`: `"cpu"` (forces `JAX_PLATFORMS=cpu` and `devices_per_process` virtual CPU
      devices, even on a machine with GPUs) or `"gpu"`.
    - `devices_per_process`: the number of devices this process uses.

    Raises RuntimeError if JAX's backends already started with other settings: restart
    the kernel or process then.
    """
    import jax
    from jax._src import xla_bridge

    if device == "cpu":
        want = max(devices_per_process, 1)
        if xla_bridge.backends_are_initialized():
            have = len(jax.devices("cpu"))
            if jax.default_backend() != "cpu" or have < want:
                raise RuntimeError(
                    f"JAX already started with {have} CPU device(s) on "
                    f"{jax.default_backend()!r}; restart the kernel to get {want} CPU "
                    "devices"
                )
            return
        os.environ["JAX_PLATFORMS"] = "cpu"
        jax.config.update("jax_platforms", "cpu")
        try:
            jax.config.update("jax_num_cpu_devices", want)
        except AttributeError:  # JAX before 0.4.38: only the XLA flag sets the count
            os.environ["XLA_FLAGS"] = with_device_count(os.environ.get("XLA_FLAGS", ""), want)
    elif device == "gpu":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    else:
        raise ValueError(f"unknown device {device!r}; valid choices: cpu, gpu")


def child_environment(device: str, devices_per_process: int, base: dict | None = None) -> dict:
    """Environment for a fresh process (or kernel) that runs one scenario.

    CPU scenarios get `JAX_PLATFORMS=cpu` and the virtual device count in `XLA_FLAGS`,
    so that a kernel started on a GPU machine measures the CPU. Every scenario gets
    `EQX_ON_ERROR=nan`: equinox's default checks (`raise`) put a host callback in every
    diffrax solve, and JAX's persistent compilation cache skips programs with host
    callbacks, so repeats could not reuse the cold run's compiles (measured: a repeat
    recompiled for 10 s). A failed solve then gives NaN, which training records as a
    diverged run.
    """
    env = dict(os.environ if base is None else base)
    if device == "cpu":
        env["XLA_FLAGS"] = with_device_count(env.get("XLA_FLAGS", ""), max(devices_per_process, 1))
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env.pop("JAX_PLATFORMS", None)
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("EQX_ON_ERROR", "nan")
    return env


def gpu_count() -> int:
    """GPUs visible to a new process, without starting JAX here (nvidia-smi)."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = min(n, len([v for v in visible.split(",") if v.strip()]))
    return n
