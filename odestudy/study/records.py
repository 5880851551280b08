"""Scenario records on disk: where they live, and atomic JSON I/O of the `Record` type.

The layout, one folder per machine so that records are only reused where they were
made: `results/<machine id>/<scale>/<scenario name>/metrics.json`, and beside the
scales the machine's side studies (`results/<machine id>/<study>/*.json`: `step_cost`,
`collectives`, `levers`), and per scale the ceiling runs
(`results/<machine id>/<scale>/ceiling/<controller>.json`).
"""

import contextlib
import contextvars
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..measure.environment import machine_id, this_machine, workdir
from ..measure.record import Record, upgrade
from ..measure.scenario import SCALES, Scenario
from ..measure.timing import code_fingerprint

T = TypeVar("T")

RECORD_NAME = "metrics.json"
DEFAULT_RESULTS = workdir("results")
CEILING_FOLDER = "ceiling"


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON so that `path` holds either the old or the whole new content (a
    temporary file beside it, flushed to disk, then renamed over it)."""
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


class ReadOnce:
    """The record files read while it is active (`read_once`): each file's text (or its
    error), by absolute path. Every read parses the text anew, so that no reader sees
    another's changes to a record."""

    def __init__(self) -> None:
        self.texts: dict[str, str | OSError] = {}
        self.made: dict[Any, Any] = {}  # `made_once`

    def text(self, path: str | os.PathLike) -> str:
        """The text of the file at `path`, read once (its error raised again)."""
        key = os.path.abspath(path)
        if key not in self.texts:
            try:
                self.texts[key] = read_text(path)
            except OSError as exc:
                self.texts[key] = exc
        found = self.texts[key]
        if isinstance(found, OSError):
            raise found
        return found


_READING: contextvars.ContextVar[ReadOnce | None] = contextvars.ContextVar(
    "odestudy_read_once", default=None
)


@contextlib.contextmanager
def read_once() -> Iterator[ReadOnce]:
    """Within it, every record is read from disk once however many readers ask (nested,
    the outer one holds)."""
    active = _READING.get()
    if active is not None:
        yield active
        return
    reading = ReadOnce()
    token = _READING.set(reading)
    try:
        yield reading
    finally:
        _READING.reset(token)


def made_once(key: Any, make: Callable[[], T]) -> T:
    """`make()`, made once per `read_once` for the hashable `key` (outside one, every
    time): what several parts of one report derive from the same records. Those who get
    it must not change it."""
    reading = _READING.get()
    if reading is None:
        return make()
    if key not in reading.made:
        reading.made[key] = make()
    return reading.made[key]


def read_text(path: str | os.PathLike) -> str:
    """The text of the file at `path`, from disk: the one place a record is opened."""
    with open(path) as f:
        return f.read()


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file: from disk, or from what `read_once` already read."""
    reading = _READING.get()
    return json.loads(reading.text(path) if reading is not None else read_text(path))


def read_record(path: str | os.PathLike) -> Record:
    """Read one record, in today's terms (`record.upgrade`)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds no record (a JSON {type(data).__name__})")
    return upgrade(data)


def readable(
    paths: Iterable[Path], read: Callable[[Path], Any] = read_json
) -> Iterator[tuple[Path, Any]]:
    """Each of `paths` that `read` can read (others skipped), with what it holds."""
    for path in paths:
        try:
            yield path, read(path)
        except (OSError, ValueError):
            continue


def read_or(
    path: str | os.PathLike, default: Any = None, read: Callable[[Path], Any] = read_json
) -> Any:
    """`read(path)`, or `default` where the file is missing or not JSON."""
    return next((data for _, data in readable([Path(path)], read)), default)


def machine_folder(results: str | Path = DEFAULT_RESULTS) -> Path:
    """This machine's folder of records, `results/<machine id>`: others' are never resumed."""
    return Path(results) / machine_id(this_machine())


def record_path(s: Scenario, results: str | Path = DEFAULT_RESULTS) -> Path:
    """Where this machine's record of `s` lives."""
    return machine_folder(results) / s.scale / s.name() / RECORD_NAME


def record_paths(results: str | Path, scale: str | None = None) -> list[Path]:
    """Every scenario record under `results`, of every machine, of `scale` (None: all)."""
    pattern = f"*/{scale or '*'}/*/{RECORD_NAME}"
    return [p for p in sorted(Path(results).glob(pattern)) if p.parent.parent.name in SCALES]


def subfolders(folder: str | Path) -> list[Path]:
    """The folders in `folder` (each machine's, under `results`), sorted; none if it is missing."""
    return sorted(p for p in Path(folder).glob("*") if p.is_dir())


def side_study_paths(machine: str | Path, study: str, pattern: str = "*.json") -> list[Path]:
    """The records of one of a machine's side studies: `<machine>/<study>/<pattern>`."""
    return sorted(Path(machine, study).glob(pattern))


def every_machines(results: str | Path, study: str, pattern: str = "*.json") -> list[Path]:
    """The records of a side study of every machine: `<results>/*/<study>/<pattern>`."""
    return sorted(Path(results).glob(f"*/{study}/{pattern}"))


# Where a prediction made again from a newer row keeps the one it replaces, beside it:
# `<folder>/earlier/<name>.<made>.json`. It was made before the newer rows were measured,
# so the report checks it against them as a prediction held out in time.
EARLIER = "earlier"


def keep_earlier(out: Path) -> Path | None:
    """Move the prediction at `out`, if any, to `EARLIER`, named by when it was made."""
    old = read_or(out)
    if old is None:
        return None
    stamp = str(old.get("finished") or "unknown").replace(":", "").replace("+0000", "Z")
    kept = out.parent / EARLIER / f"{out.stem}.{stamp}.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    out.replace(kept)
    return kept


# Where a scenario's record measured again (`odestudy matrix --force`) is kept, so that
# its session still counts in the claims (`report.claims.related_records`):
# `<results>/sessions/<when replaced>/<machine>/<scale>/<name>/metrics.json`.
REPLACED = "sessions"


def keep_replaced(path: Path, results: str | Path, when: str) -> Path | None:
    """Copy the record at `path`, about to be measured again, to `REPLACED/<when>/` under
    `results`; returns where it went (None: no record there)."""
    old = read_or(path, None, read_record)
    if old is None:
        return None
    kept = Path(results) / REPLACED / when / Path(path).relative_to(results)
    write_json_atomic(kept, old)
    return kept


def replaced_folders(results: str | Path) -> list[Path]:
    """The folders under `results` that keep records measured again (`keep_replaced`),
    oldest first."""
    return subfolders(Path(results) / REPLACED)


def ceiling_path(scale_folder: str | os.PathLike, controller: str, step: str = "") -> Path:
    """Where the ceiling runs of `controller` with the step `step` (`Scenario.step_tag`)
    live in a machine's scale folder: a file per step."""
    name = "-".join(filter(None, (controller, step)))
    return Path(scale_folder) / CEILING_FOLDER / f"{name}.json"


def save_record(
    record: Record, out_dir: str | os.PathLike | None, run_id: str | None = None
) -> Path | None:
    """Write `record` as `out_dir/metrics.json`; nothing if `out_dir` is empty (the
    notebook run by hand). `run_id` ties it to the runner that asked."""
    if not out_dir:
        return None
    path = Path(out_dir) / RECORD_NAME
    write_json_atomic(
        path, dict(record, run_id=run_id, code_fingerprint=code_fingerprint()["fingerprint"])
    )
    return path
