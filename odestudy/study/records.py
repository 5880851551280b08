"""Scenario records: atomic JSON I/O."""

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..measure.timing import code_fingerprint

RECORD_NAME = "metrics.json"


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON so that `path` holds either the old or the whole new content.

    Writes a temporary file in the same folder, flushes it to disk, then renames it
    over `path` (an atomic replace on POSIX).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True, allow_nan=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    """Read one record written by `write_json_atomic`."""
    with open(path) as f:
        return json.load(f)


def save_record(
    record: dict[str, Any], out_dir: str | os.PathLike | None, run_id: str | None = None
) -> Path | None:
    """Write `record` as `out_dir/metrics.json` atomically; nothing if `out_dir` is
    empty (the notebook run by hand). `run_id` ties it to the runner that asked."""
    if not out_dir:
        return None
    path = Path(out_dir) / RECORD_NAME
    write_json_atomic(
        path, dict(record, run_id=run_id, code_fingerprint=code_fingerprint()["fingerprint"])
    )
    return path
