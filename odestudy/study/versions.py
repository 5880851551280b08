"""The version study: the core rows (`grid.versions_scenarios`) under several JAX
releases, each in its own environment, measured round by round across the releases so
that a slow spell of the machine hits every release alike (`make versions`).

Each version set is a requirements file `versions/<name>.txt` (JAX and its libraries)
plus `versions/common.txt` (the rest of what a scenario run needs); its environment is
`.venvs/<name>` with the study installed without dependencies, and its records go to
`results/versions/<name>/` in the usual layout (`records`).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

from ..measure.environment import ROOT
from .lock import measuring
from .probing import session_probe
from .records import machine_folder

# Oldest first: the reference's stack, the last release before `pmap` became `jit` over
# `shard_map` (0.8) and mesh axes Explicit by default (0.9), and the current release.
VERSION_SETS = ("jax-0.4.34", "jax-0.7.2", "jax-0.10.2")
REQUIREMENTS = ROOT / "versions"
ENVIRONMENTS = ROOT / ".venvs"
# Its records' folder under the results folder, and that folder in this checkout.
FOLDER = "versions"
RESULTS = ROOT / "results" / FOLDER


def python_of(name: str) -> Path:
    """The Python of version set `name`'s environment."""
    return ENVIRONMENTS / name / "bin" / "python"


def build(name: str) -> Path:
    """Create the environment of version set `name` once (again where its requirements
    changed since); returns its Python."""
    if name not in VERSION_SETS:
        raise ValueError(f"unknown version set {name!r}; valid choices: {', '.join(VERSION_SETS)}")
    folder = ENVIRONMENTS / name
    stamp = folder / ".installed"
    wanted = [REQUIREMENTS / f"{name}.txt", REQUIREMENTS / "common.txt"]
    if stamp.exists() and all(p.stat().st_mtime <= stamp.stat().st_mtime for p in wanted):
        return python_of(name)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    pip = [str(python_of(name)), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, *(a for p in wanted for a in ("-r", str(p)))], check=True)
    subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True)
    stamp.touch()
    return python_of(name)


def run_versions(
    scale: str = "quick", runs: int = 3, sets: tuple[str, ...] = VERSION_SETS, wait: bool = False
) -> int:
    """Build every set's environment, then measure the core rows: round `r` brings every
    row of every set to `r` runs (the matrix is resumable), one set after another, all
    under this machine's measurement lock (`lock.measuring`; `wait`: wait for another
    holder rather than refuse). Returns 0, or 1 where a set's matrix reported failed
    scenarios."""
    pythons = {name: build(name) for name in sets}
    with measuring("version study", wait):
        # One probe for the session, measured with this environment's JAX; every set's
        # matrices inherit it (`probing.session_probe`).
        with session_probe("cpu", 2, machine_folder(RESULTS)):
            return _rounds(scale, runs, pythons)


def _rounds(scale: str, runs: int, pythons: dict[str, Path]) -> int:
    status = 0
    matrix = ["odestudy.cli", "matrix", "--study", "versions", "--scale", scale, "--device", "cpu"]
    for r in range(1, runs + 1):
        for name, python in pythons.items():
            env = dict(os.environ, PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}")
            env.pop("VIRTUAL_ENV", None)
            print(f"== {name}: round {r} of {runs}", flush=True)
            start = time.perf_counter()
            where = ["--runs", str(r), "--results", str(RESULTS / name)]
            done = subprocess.run([str(python), "-m", *matrix, *where], env=env)
            print(f"== {name}: round {r} took {time.perf_counter() - start:.0f} s", flush=True)
            status |= done.returncode != 0
    return int(status)
