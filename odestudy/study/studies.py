"""Studies as types. A study knows its name, its scenarios at a scale, how many runs each
gets, the folder its records go to, its records, its tables and its page. Each final
subclass of `Study` registers itself (`STUDIES`) when its class is defined, as a mode
does: `odestudy matrix --study` and `odestudy report --study` ask it, by its name or,
for a study defined outside the package, as `module:Class` (imported from the working
directory, as a problem is). The built-in studies (scaling, explain, target, versions,
map) are defined beside the scenario matrix (`matrix.py`).

A table is a value (`Table`): a title, a header, rows of cells and notes, made once from
the records; the report renders it and the study's page (`report.studies`)."""

import abc
import dataclasses
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from ..measure.scenario import Scenario
from .repeats import REPEATS

# Every study by name, in the order defined: filled as each final class is defined.
STUDIES: dict[str, type["Study"]] = {}


@dataclasses.dataclass(frozen=True)
class Table:
    """One table of a study's report: `name` (its file, `<name>.md`), `title`, the
    `header` and `rows` of cells (text), and `notes` below it (markdown)."""

    name: str
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: str = ""


class Study(abc.ABC):
    """A study of the matrix. Final subclasses set `name` (and `title`) and define
    `scenarios`; the class variables below say how it runs, the methods what its report
    holds.

    - `repeated`: each scenario runs `repeats.REPEATS` times (once at the seed scale);
      otherwise once.
    - `ceiling`: its runs also measure the machine's weak-scaling ceiling.
    - `recommendable`: `--recommended` applies to its scenarios.
    - `folder`: its records' folder under the results folder (None: that folder).
    """

    name: ClassVar[str]
    title: ClassVar[str] = ""
    repeated: ClassVar[bool] = True
    ceiling: ClassVar[bool] = False
    recommendable: ClassVar[bool] = False
    folder: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if isinstance(cls.__dict__.get("name"), str):
            STUDIES[cls.__dict__["name"]] = cls

    @abc.abstractmethod
    def scenarios(
        self, scale: str, device: str = "auto", full: bool = False
    ) -> tuple[list[Scenario], list[tuple[Scenario, str]]]:
        """Its scenarios at `scale` that run here, and those that cannot (with why)."""

    def runs(self, scale: str) -> int:
        """Runs per scenario at `scale`."""
        return REPEATS if self.repeated and scale != "seed" else 1

    def results(self, results: str | Path) -> Path:
        """The folder its records go to, under `results`."""
        return Path(results) / self.folder if self.folder else Path(results)

    def records(self, results: str | Path, scale: str) -> list[dict[str, Any]]:
        """Its records at `scale` (any machine, any protocol): those of `results` whose
        scenario is one of its CPU scenarios at that scale, read once."""
        from . import records

        keys = {s.key() for s in self.scenarios(scale, "cpu", True)[0]}
        out = []
        for path in records.record_paths(self.results(results), scale):
            try:
                rec = dict(records.read_record(path), path=str(path))
            except (OSError, ValueError):
                continue
            if rec.get("scenario_key") in keys:
                out.append(rec)
        return out

    def tables(self, records: Sequence[dict[str, Any]], scale: str) -> list[Table]:
        """Its tables, from its records (none by default: the built-in studies' tables
        are written by the report's own modules)."""
        return []

    def intro(self, scale: str) -> str:
        """What its results page says above its tables (markdown; none by default)."""
        return ""


def get_study(spec: "str | Study | type[Study]") -> Study:
    """The study `spec` names: a registered name, or `module:Class` (imported, also from
    the working directory) of a `Study` subclass; ValueError naming the choices
    otherwise."""
    from . import matrix  # noqa: F401  (defines the built-in studies)

    if isinstance(spec, Study):
        return spec
    if isinstance(spec, type) and issubclass(spec, Study):
        return spec()
    if spec in STUDIES:
        return STUDIES[spec]()
    if ":" in spec:
        module, _, attr = spec.partition(":")
        found = getattr(_import(module), attr, None)
        if isinstance(found, type) and issubclass(found, Study):
            return found()
        raise ValueError(f"study {spec!r}: {attr!r} of {module!r} is no Study subclass")
    raise ValueError(
        f"unknown study {spec!r}; valid choices: {', '.join(STUDIES)}, or module:Class"
    )


def study_name(spec: "str | Study | type[Study]") -> str:
    """The name of the study `spec` names (`get_study`)."""
    return get_study(spec).name


def _import(module: str) -> Any:
    """Import `module`, also from the working directory (as `python -m` would)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        cwd = str(Path.cwd())
        if exc.name != module.split(".")[0] or cwd in sys.path:
            raise
        sys.path.insert(0, cwd)
        return importlib.import_module(module)
