"""One measurement at a time on a machine: a machine-wide lock (`filelock`) that every
timing run holds (a scenario's cold run, a repeat round, a ceiling probe, the benchmarks,
the version rounds), so that two measurements never share the machine's cores.

A second measurement refuses at once with `MachineBusy` naming the holder (who wrote
`<lock>.holder.json` beside the lock file), or waits for it (`wait=True`). The lock is
reentrant within a process, and the processes a holder starts inherit it through
`HOLDER_VARIABLE`, so they do not wait for their own parent.
"""

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LOCK_VARIABLE = "ODESTUDY_LOCK"
DEFAULT_LOCK = Path("/tmp/odestudy-measure.lock")
HOLDER_VARIABLE = "ODESTUDY_LOCK_HOLDER"  # set while held: "<pid>:<lock path>"
WAIT_VARIABLE = "ODESTUDY_LOCK_WAIT"  # "1": scripts wait for the lock (`run_measuring`)
BUSY_STATUS = 75  # the exit status of a command refused for a busy machine (EX_TEMPFAIL)
POLL_S = 0.5


class MachineBusy(RuntimeError):
    """Another measurement holds this machine's lock."""


def lock_path() -> Path:
    """The machine-wide lock file: `$ODESTUDY_LOCK`, else `DEFAULT_LOCK`."""
    return Path(os.environ.get(LOCK_VARIABLE) or DEFAULT_LOCK)


def holder_path(path: Path) -> Path:
    """Where the holder of lock `path` describes itself."""
    return path.with_name(path.name + ".holder.json")


def holder(path: Path | None = None) -> dict[str, Any] | None:
    """What the holder of the lock wrote (`pid`, `command`, `started`, `what`), or None
    where nothing readable is there."""
    try:
        data = json.loads(holder_path(path or lock_path()).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe(info: dict[str, Any] | None) -> str:
    """A holder as one line of text: process id, command and start time."""
    if not info:
        return "another process (it has not said which yet)"
    return (
        f"process {info.get('pid')} ({info.get('command')!r}, started {info.get('started')}"
        + (f", {info['what']}" if info.get("what") else "")
        + ")"
    )


def _inherited(path: Path) -> bool:
    """Whether an ancestor of this process holds lock `path` and handed it down."""
    pid, _, held = os.environ.get(HOLDER_VARIABLE, "").partition(":")
    if not pid.isdigit() or Path(held) != path:
        return False
    info = holder(path)
    return info is not None and info.get("pid") == int(pid) and _alive(int(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


_HELD: dict[Path, Any] = {}  # lock path -> the FileLock this process holds


@contextlib.contextmanager
def measuring(what: str = "", wait: bool = False) -> Iterator[None]:
    """Hold the machine's measurement lock for the body (`what` is measured, said to a
    second measurement); `wait` for another holder, else raise `MachineBusy` at once.
    Nested uses, and processes the holder started, go straight on."""
    from filelock import FileLock, Timeout

    path = lock_path().resolve()
    if path in _HELD or _inherited(path):
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), mode=0o666)
    announced = False
    while True:
        try:
            lock.acquire(timeout=0)
            break
        except Timeout:
            if not wait:
                raise MachineBusy(
                    f"another measurement runs on this machine: {describe(holder(path))}; "
                    f"wait for it (--wait) or stop it (lock file {path})"
                ) from None
            if not announced:
                print(f"waiting for {describe(holder(path))} to finish", file=sys.stderr)
                announced = True
            time.sleep(POLL_S)
    saved = os.environ.get(HOLDER_VARIABLE)
    try:
        _write_holder(path, what)
        _HELD[path] = lock
        os.environ[HOLDER_VARIABLE] = f"{os.getpid()}:{path}"
        yield
    finally:
        _HELD.pop(path, None)
        if saved is None:
            os.environ.pop(HOLDER_VARIABLE, None)
        else:
            os.environ[HOLDER_VARIABLE] = saved
        holder_path(path).unlink(missing_ok=True)
        lock.release()


def _write_holder(path: Path, what: str) -> None:
    from .records import write_json_atomic  # imports JAX: scripts import this module first

    info = {
        "pid": os.getpid(),
        "command": " ".join(sys.argv) or sys.executable,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "what": what,
    }
    write_json_atomic(holder_path(path), info)
    with contextlib.suppress(OSError):  # let other users read (and replace) it
        holder_path(path).chmod(0o666)


def run_measuring(main: Callable[[], Any], what: str) -> None:
    """Run a measuring script's `main` under the lock (waiting where `WAIT_VARIABLE` is
    `1`) and exit with its status; a busy machine: print who, exit with `BUSY_STATUS`."""
    wait = os.environ.get(WAIT_VARIABLE) == "1"
    try:
        with measuring(what, wait):
            status = main()
    except MachineBusy as exc:
        print(f"{what}: {exc}", file=sys.stderr)
        sys.exit(BUSY_STATUS)
    sys.exit(status if isinstance(status, int) else 0)
