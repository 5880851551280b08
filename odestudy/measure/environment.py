"""Where and with what a measurement ran: versions, CPU, machine fingerprint, git commit."""

import datetime
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The checkout's `notebooks/` and `data/` travel in an installed wheel as package data
# (`odestudy/notebooks/`, `odestudy/data/`; see pyproject.toml).
_PACKAGE = Path(__file__).resolve().parents[1]


def shipped(folder: str, name: str) -> Path:
    """File `name` of the checkout's `folder`, or of an installed package's copy."""
    checkout = ROOT / folder / name
    return checkout if checkout.exists() else _PACKAGE / folder / name


def notebook(name: str) -> Path:
    """The path of notebook `name` (checkout or installed package)."""
    return shipped("notebooks", name)


def in_checkout() -> bool:
    """Whether the package runs from a git checkout of the study (not a wheel)."""
    return (ROOT / ".git").exists() and (ROOT / "notebooks").is_dir()


def workdir(name: str) -> Path:
    """Where the study's folder `name` goes: the checkout's, else the working directory's."""
    return ROOT / name if in_checkout() else Path.cwd() / name


# What the study writes (records, figures, the results pages under docs/results, and
# README.md, whose results section `odestudy report --readme` rewrites); changes there
# do not make a checkout dirty.
OUTPUTS = ("results", "figures", "README.md", "docs/results")
PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "optax", "numpy")


def versions() -> dict[str, str | None]:
    """Versions of python and the study's packages (None where not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_info() -> dict[str, Any]:
    """CPU model, logical CPUs and physical cores of this machine (Linux; best effort)."""
    model, cores = platform.processor() or None, set()
    try:
        text = Path("/proc/cpuinfo").read_text()
        physical = core = None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name" and model in (None, "", "x86_64"):
                model = value
            elif key == "physical id":
                physical = value
            elif key == "core id":
                core = value
            elif not key and core is not None:
                cores.add((physical, core))
                core = None
        if core is not None:
            cores.add((physical, core))
    except OSError:
        pass
    logical = os.cpu_count() or 1
    try:  # the CPUs this process may use (containers, taskset)
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = logical
    physical_cores = len(cores) or logical
    return {
        "cpu_model": model,
        "logical_cpus": logical,
        "usable_cpus": usable,
        "physical_cores": min(physical_cores, usable),
    }


def machine(accelerator: str | None = None) -> dict[str, Any]:
    """This machine's fingerprint; `accelerator`: the GPU's device kind (None: CPU only)."""
    cpu = cpu_info()
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu["cpu_model"],
        "logical_cpus": cpu["logical_cpus"],
        "accelerator": accelerator,
    }


def machine_id(fingerprint: dict[str, Any]) -> str:
    """A readable folder name for a fingerprint: `<cpu>-<N>cpu[-<gpu>]-<hash>`."""

    def slug(text: str | None) -> str:
        text = re.sub(r"\((r|tm)\)|processor|cpu|@.*|\d+-core", " ", (text or "unknown").lower())
        return "-".join(re.findall(r"[a-z0-9]+", text)[:4]) or "unknown"

    keys = ("hostname", "cpu_model", "logical_cpus", "accelerator")
    digest = hashlib.sha256(json.dumps([fingerprint.get(k) for k in keys]).encode())
    name = f"{slug(fingerprint.get('cpu_model'))}-{fingerprint.get('logical_cpus')}cpu"
    if fingerprint.get("accelerator"):
        name += "-" + slug(fingerprint["accelerator"])
    return f"{name}-{digest.hexdigest()[:6]}"


def local_accelerator() -> str | None:
    """The device kind of this machine's first GPU, from `nvidia-smi` (no JAX backend)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    names = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return names[0].strip() if names else None


_MACHINE: dict[str, Any] = {}


def this_machine() -> dict[str, Any]:
    """`machine(local_accelerator())`, computed once per process."""
    if not _MACHINE:
        _MACHINE.update(machine(local_accelerator()))
    return dict(_MACHINE)


def git_commit(path: str | os.PathLike | None = None) -> str | None:
    """The checkout's git commit (`-dirty` if its code or inputs changed). The study's
    own `OUTPUTS` do not count: a run that rewrites committed records must still name
    the clean commit that made them. A copy without `.git` gives `ODESTUDY_GIT_COMMIT`
    instead: a claim the report checks against `source_trees`.
    """
    cwd = Path(path) if path else Path(__file__).resolve().parent
    if not (ROOT / ".git").exists() and os.environ.get("ODESTUDY_GIT_COMMIT"):
        return os.environ["ODESTUDY_GIT_COMMIT"]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, check=True, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ":(top)",
                *(f":(top,exclude){d}" for d in OUTPUTS),
            ],
            cwd=cwd,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("-dirty" if dirty else "")


# The folders whose content names the code a record ran (`source_trees`).
SOURCE_FOLDERS = ("odestudy", "benchmarks", "notebooks")


def _tree_hash(folder: Path) -> str:
    """Git's tree object id of `folder`'s files, computed without git; caches and
    hidden files are left out, as the checkout's ignore rules leave them out."""
    entries = []
    for path in folder.iterdir():
        if path.name.startswith(".") or path.name == "__pycache__" or path.is_symlink():
            continue
        if path.suffix in (".pyc", ".pyo"):
            continue
        if path.is_dir():
            if not any(path.iterdir()):
                continue  # git holds no empty folder
            oid, mode, key = _tree_hash(path), b"40000", path.name + "/"
        else:
            data = path.read_bytes()
            oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            mode = b"100755" if os.access(path, os.X_OK) else b"100644"
            key = path.name
        entries.append((key, mode + b" " + path.name.encode() + b"\0" + bytes.fromhex(oid)))
    body = b"".join(e for _, e in sorted(entries, key=lambda e: e[0].encode()))
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def source_trees(root: Path = ROOT) -> dict[str, str]:
    """Git's tree id of each of `SOURCE_FOLDERS`, so that the report can name the commit
    holding exactly this code whatever git metadata travelled with a copy."""
    return {name: _tree_hash(root / name) for name in SOURCE_FOLDERS if (root / name).is_dir()}


def provenance() -> dict[str, Any]:
    """What names the code a record ran: `git_commit` and `source_trees`."""
    return {"git_commit": git_commit(), "source_trees": source_trees()}


def now() -> str:
    """The current UTC time, ISO format."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
