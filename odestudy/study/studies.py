"""Studies as types. A study knows its name, its scenarios at a scale, how many runs each
gets, the folder its records go to, its records, its tables, its claims and its page.
Each final subclass of `Study` registers itself (`STUDIES`); the matrix and the report
ask the registry (`matrix.get_study`: a name, or `module:Class` for a study defined
outside the package) and never import the built-in studies (`odestudy.builtin`).

What the report makes once from the records and renders into the pages, the notebook
and the README are values: a `Table` of blocks (`Text`, `Grid`), a `Figure`, a `Claim`
(`claim.py`), an `Answer`, a `Page`; what one report reads is a `ReportInputs`."""

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from ..measure.registry import Registered
from ..measure.scenario import Scenario
from . import records
from .claim import Answer as Answer
from .claim import Claim
from .rec import Rec
from .repeats import REPEATS

# Every study by name, in the order defined: filled as each final class is defined.
STUDIES: dict[str, type["Study"]] = {}


@dataclasses.dataclass(frozen=True)
class Text:
    """Markdown as it is: a line, a paragraph or a heading."""

    markdown: str


@dataclasses.dataclass(frozen=True)
class Interval:
    """A cell: `value` and its interval `[low, high]`, to `decimals` decimals."""

    value: float
    low: float
    high: float
    decimals: int = 2


@dataclasses.dataclass(frozen=True)
class Grid:
    """A table of cells (text, numbers, `Interval`s) under `header`, escaped when rendered."""

    header: tuple[str, ...]
    rows: tuple[Sequence[object], ...]


# A block of a table's body.
Block = Text | Grid


@dataclasses.dataclass(frozen=True)
class Table:
    """One table of a study's report (`<name>.md`) and the figures drawn with it."""

    name: str
    title: str
    body: tuple[Block, ...] = ()
    figures: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure of a study's report: `<name>.png` at `path`, with its `alt` text."""

    name: str
    path: Path
    alt: str = ""


@dataclasses.dataclass(frozen=True)
class Page:
    """A results page of the report (`docs/results/<name>.md`): the `tables` and
    `figures` it shows, written by the report of each of `scales`; `answer`: it opens
    with the scale's answer; `readme`: how the README's answer links to it (None: not)."""

    name: str
    title: str
    tables: tuple[str, ...]
    figures: tuple[str, ...] = ()
    scales: tuple[str, ...] = ("quick",)
    answer: bool = False
    readme: str | None = None


@dataclasses.dataclass(frozen=True)
class ReportInputs:
    """What one report reads, read once (`report.document.read_inputs`), from which each
    study makes its tables and claims: the `records` (the whole report's current ones,
    or a study's own), the machine each device kind's tables show (`machines`), their
    scaling rows under the current protocol (`rows`), the records left out with why
    (`skipped`), the reference's CSV (None: `reference.REFERENCE_CSV`); `draw`: the
    scaling and step-cost figures too (False: much faster)."""

    results: Path
    scale: str
    figures: Path
    records: tuple[Rec, ...] = ()
    machines: Mapping[str, str] = dataclasses.field(default_factory=dict)
    rows: tuple[Rec, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    reference: Path | None = None
    draw: bool = True


@dataclasses.dataclass(frozen=True)
class Sizing:
    """What a matrix is sized to (`odestudy matrix --device-count`): `devices` of the
    kind planned for, present or not, and the `gpus` present where the rows run (a row
    on more cannot run); None: this machine's."""

    devices: int | None = None
    gpus: int | None = None


# Sized to this machine: its cores and the GPUs present here.
THIS_MACHINE = Sizing()


class Study(Registered, abc.ABC, registry=STUDIES):
    """A study of the matrix. Final subclasses set `name` (and `title`) and define
    `scenarios`; the class variables say how it runs, the methods what its report holds.

    - `repeated`: each scenario runs `repeats.REPEATS` times (once at the seed scale).
    - `ceiling`: its runs also measure the machine's weak-scaling ceiling.
    - `folder`: its records' folder under the results folder (None: that folder).
    - `scaling_table`: its records are the rows of the scaling tables.
    - `sized`: its matrix is sized to a machine's devices (`planned`, `--device-count`).
    - `page`: its page in the whole report, whose tables `tables` make (None: none).
    - `order`: a built-in study's place in the registry, so in the report.
    """

    name: ClassVar[str]
    title: ClassVar[str] = ""
    repeated: ClassVar[bool] = True
    ceiling: ClassVar[bool] = False
    recommendable: ClassVar[bool] = False
    folder: ClassVar[str | None] = None
    scaling_table: ClassVar[bool] = False
    sized: ClassVar[bool] = False
    page: ClassVar[Page | None] = None
    order: ClassVar[int] = 0

    @abc.abstractmethod
    def scenarios(
        self, scale: str, device: str = "auto", full: bool = False
    ) -> tuple[list[Scenario], list[tuple[Scenario, str]]]:
        """Its scenarios at `scale` that run here, and those that cannot (with why)."""

    def planned(
        self, scale: str, device: str = "auto", full: bool = False, sizing: Sizing = THIS_MACHINE
    ) -> tuple[list[Scenario], list[tuple[Scenario, str]]]:
        """`scenarios` sized to `sizing` (a `sized` study's; others ignore it)."""
        return self.scenarios(scale, device, full)

    def matrix(self, scale: str) -> list[Scenario]:
        """Its whole matrix at `scale`, whatever the machine: by default its CPU scenarios."""
        return self.scenarios(scale, "cpu", True)[0]

    def current(self, scale: str, problem: str) -> list[Scenario]:
        """Its scenarios at `scale` for `problem` whose records under the results folder
        the report keeps as current (`frames.read_records`); none by default."""
        return []

    def runs(self, scale: str) -> int:
        """Runs per scenario at `scale`."""
        return REPEATS if self.repeated and scale != "seed" else 1

    def results(self, results: str | Path) -> Path:
        """The folder its records go to, under `results`."""
        return Path(results) / self.folder if self.folder else Path(results)

    def records(self, results: str | Path, scale: str) -> list[Rec]:
        """Its records at `scale` under `results` (any machine, any protocol)."""
        keys = {s.key() for s in self.scenarios(scale, "cpu", True)[0]}
        paths = records.record_paths(self.results(results), scale)
        found = (Rec(r, path=str(p)) for p, r in records.readable(paths, records.read_record))
        return [rec for rec in found if rec.scenario_key in keys]

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its tables, made from what the report read; none by default."""
        return []

    def claims(self, inputs: ReportInputs) -> list[Claim]:
        """The claims its report states, made from `inputs`; none by default."""
        return []

    def intro(self, scale: str) -> str:
        """What its results page says above its tables (markdown; none by default)."""
        return ""


def pages_of(scale: str) -> list[Page]:
    """The registered studies' pages of `scale`, in the order the studies were defined."""
    return [c.page for c in STUDIES.values() if c.page is not None and scale in c.page.scales]


def page_named(name: str) -> Page:
    """The registered page `name`; KeyError where no study has it."""
    found = {c.page.name: c.page for c in STUDIES.values() if c.page is not None}
    return found[name]
