"""A trained scenario's state on disk: its parameters and optimiser state, and its
last stage's compiled step, saved by the cold run beside its record for the repeats
(`resume.time_repeat`) to go on from."""

import os
from pathlib import Path
from typing import Any

import numpy as np

CACHE_DIR = ".jax_cache"  # per scenario, beside its record (ignored by git)
STATE_NAME = ".repeat_state.npz"  # the cold run's trained state (ignored by git)
# The cold run's compiled last-stage step, one per process (ignored by git).
EXEC_NAME = ".repeat_step.{process}.bin"


def save_executable(state_path: str | os.PathLike, payload: bytes, process: int = 0) -> None:
    """Write the cold run's serialized step beside its saved state, atomically; a repeat
    then runs that very executable instead of tracing the step again."""
    path = Path(state_path).with_name(EXEC_NAME.format(process=process))
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, path)


def load_executable(
    out_dir: str | os.PathLike, params: Any, opt_state: Any, placed: Any
) -> Any | None:
    """The compiled step `save_executable` saved in `out_dir` for this JAX process, for
    arguments shaped like these; None where there is none or it does not load."""
    import jax

    path = Path(out_dir) / EXEC_NAME.format(process=jax.process_index())
    if not path.exists():
        return None
    from jax.experimental.serialize_executable import deserialize_and_load

    in_tree = jax.tree.structure(((params, opt_state, placed), {}))
    out_tree = jax.tree.structure((params, opt_state, 0, 0))
    try:
        return deserialize_and_load(path.read_bytes(), in_tree, out_tree)
    except Exception:  # noqa: BLE001 - a stale or foreign file: compile instead
        return None


def save_state(path: str | os.PathLike, params: Any, opt_state: Any) -> None:
    """Write host copies of trained `params` and `opt_state` to `path` (npz, atomic)."""
    import jax

    leaves = [np.asarray(x) for x in jax.tree.leaves((params, opt_state))]
    path = Path(path)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(tmp, *leaves)
    os.replace(tmp, path)


def load_state(path: str | os.PathLike, params: Any, opt_state: Any) -> tuple[Any, Any]:
    """The `(params, opt_state)` saved at `path`, in the given ones' tree structure."""
    import jax

    treedef = jax.tree.structure((params, opt_state))
    with np.load(path) as f:
        leaves = [f[f"arr_{i}"] for i in range(len(f.files))]
    return jax.tree.unflatten(treedef, leaves)
