"""A timing session's machine probe (`measure.probe`): run once, in a process of its
own with the session's devices, at the start of the session; its file is named in
`PROBE_VARIABLE`, which the session's processes inherit, so that every record of the
session carries it.

    python -m odestudy.study.probing --device cpu --devices 2 --out probe.json
"""

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ..measure.devices import child_environment, configure_devices
from ..measure.probe import (
    GRADIENT_FLOATS,
    PROBE_FOLDER,
    PROBE_VARIABLE,
    probe,
    read_probe,
    record_probe,
    summary,
)
from . import records

# `PROBE_VARIABLE` set to this: sessions run no probe (the tests' default).
PROBE_OFF = "off"


@contextlib.contextmanager
def session_probe(
    device: str, n_devices: int, folder: str | os.PathLike, show: bool = True
) -> Iterator[Path | None]:
    """Run the machine probe into `folder/probes/` at the start of a timing session and
    name its file in `PROBE_VARIABLE` for the body; yields it, or None (`off`, failed). A
    session inside another keeps the outer one's probe."""
    inherited = os.environ.get(PROBE_VARIABLE)
    if inherited == PROBE_OFF or (inherited and Path(inherited).exists()):
        yield None if inherited == PROBE_OFF else Path(inherited)
        return
    out = run_probe(device, n_devices, folder)
    if out is not None and show:
        print(summary(read_probe(out)), flush=True)
    if out is not None:
        os.environ[PROBE_VARIABLE] = str(out)
    try:
        yield out
    finally:
        if out is not None:
            os.environ.pop(PROBE_VARIABLE, None)


def run_probe(device: str, n_devices: int, folder: str | os.PathLike) -> Path | None:
    """Run the probe in a process of its own; returns its file, or None (said) where it failed."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = Path(folder) / PROBE_FOLDER / f"{stamp}-{device}-{n_devices}.json"
    command = [
        sys.executable, "-m", "odestudy.study.probing",
        "--device", device, "--devices", str(n_devices), "--out", str(out),
    ]  # fmt: skip
    env = child_environment(device, n_devices)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"machine probe failed, the session goes on without one: {tail[0]}", flush=True)
        return None
    return out


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    a.add_argument("--devices", type=int, default=1, help="devices to probe")
    a.add_argument("--gradient-floats", type=int, default=GRADIENT_FLOATS)
    a.add_argument("--out", required=True, help="the probe's JSON file")
    args = a.parse_args(argv)
    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as in scenario kernels
    configure_devices(args.device, args.devices)  # before JAX starts its backends

    records.write_json_atomic(args.out, record_probe(probe(args.gradient_floats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
