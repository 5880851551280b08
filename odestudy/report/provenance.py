"""Which code made each record: whether the commit it names is in this repository, and,
for a record made from a copied tree (`environment.source_trees`), which commit holds
exactly its code. The report flags what it cannot trace (`provenance_table`)."""

import dataclasses
import re
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..measure import environment
from ..study import records
from ..study.rec import Rec
from ..study.studies import Block, Grid, Text
from .tables import escape


@dataclasses.dataclass(frozen=True)
class Origin:
    """What the repository says of one record's code: the commit it names (`named`,
    without `-dirty`), whether that is a commit of the repository (`known`), and the
    commits whose source folders hold exactly the record's (`matching`; empty where
    the record carries no `source_trees` or no commit holds them)."""

    named: str
    known: bool
    matching: tuple[str, ...] = ()
    has_trees: bool = False
    dirty: bool = False

    def problem(self) -> str | None:
        """Why this record's code cannot be traced to the commit it names, or None: by
        its source folders' hashes where it carries them, else by its commit."""
        if self.has_trees:
            if not self.matching:
                return "its code (source_trees) is in no commit of the repository"
            if self.named and self.named not in self.matching:
                found = ", ".join(c[:7] for c in self.matching[:3])
                return f"it names {self.named[:9]}, but its code is that of {found}"
            return None
        if not self.named:
            return "it names no commit"
        if not self.known:
            return f"{self.named[:9]} is not a commit of the repository"
        if self.dirty:
            return f"made from uncommitted changes to {self.named[:9]}"
        return None


# A commit id, whole or abbreviated.
_HEX = re.compile(r"[0-9a-f]{4,40}")


def _git(args: Sequence[str], text: str = "") -> str | None:
    """`git args` in the checkout with `text` on stdin; None where git or the checkout
    is missing."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=environment.ROOT, input=text, capture_output=True, text=True
        )
    except OSError:
        return None
    return out.stdout if out.returncode == 0 else None


def known_commits(named: Iterable[str]) -> dict[str, str | None] | None:
    """Each name of `named` resolved to its full commit id (None: not in the
    repository); None where there is no repository to ask."""
    # Only a hexadecimal id is asked: any other text a record holds (a space, a line
    # break) would shift git's answers out of line with the names; it is no commit.
    names = sorted(n for n in set(named) if _HEX.fullmatch(n))
    out = _git(["cat-file", "--batch-check=%(objectname) %(objecttype)"],
               "".join(f"{n}^{{commit}}\n" for n in names))  # fmt: skip
    if out is None:
        return None
    lines = out.splitlines()
    found = {
        n: line.split()[0] if line.endswith(" commit") else None
        for n, line in zip(names, lines, strict=True)
    }
    return {n: found.get(n) for n in set(named) - {""}}


def commits_by_trees() -> dict[tuple[tuple[str, str], ...], list[str]]:
    """Every commit of the repository by its source folders' tree ids
    (`environment.SOURCE_FOLDERS`), newest first."""
    listed = _git(["rev-list", "--all"])
    if not listed:
        return {}
    commits = listed.split()
    folders = environment.SOURCE_FOLDERS
    query = "".join(f"{c}:{f}\n" for c in commits for f in folders)
    out = _git(["cat-file", "--batch-check=%(objectname)"], query) or ""
    ids = [line.split()[0] for line in out.splitlines()]
    found: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for i, commit in enumerate(commits):
        trees = tuple(zip(folders, ids[i * len(folders) : (i + 1) * len(folders)], strict=True))
        found.setdefault(trees, []).append(commit)
    return found


def _key(trees: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((f, trees.get(f, "")) for f in environment.SOURCE_FOLDERS)


def origins(recs: Sequence[Rec]) -> list[Origin] | None:
    """The `Origin` of each of `recs`; None without a repository to ask."""
    named = [str(r.git_commit or "").removesuffix("-dirty") for r in recs]
    resolved = known_commits(named)
    if resolved is None:
        return None
    by_trees = commits_by_trees() if any(r.source_trees for r in recs) else {}
    out = []
    for rec, name in zip(recs, named, strict=True):
        trees = rec.source_trees or {}
        full = resolved.get(name) or ""
        matching = tuple(by_trees.get(_key(trees), ())) if trees else ()
        dirty = str(rec.git_commit or "").endswith("-dirty")
        shown = full or " ".join(name.split())  # no line break into a table cell
        out.append(Origin(shown, bool(full), matching, bool(trees), dirty))
    return out


def all_records(results: str | Path) -> list[Rec]:
    """Every JSON record under `results` that names where it was made (`machine_id`),
    with its `path`."""
    found = records.readable(sorted(Path(results).rglob("*.json")))
    return [Rec(r, path=str(p)) for p, r in found if isinstance(r, dict) and "machine_id" in r]


def untraced(recs: Sequence[Rec]) -> list[tuple[Rec, str]] | None:
    """The records of `recs` whose code cannot be traced, each with why; None without a
    repository to ask."""
    found = origins(recs)
    if found is None:
        return None
    return [(r, why) for r, o in zip(recs, found, strict=True) if (why := o.problem())]


def provenance_table(results: str | Path) -> list[Block]:
    """The report's provenance section: how many records under `results` name a commit
    of this repository, and, per machine and problem, the ones whose code cannot be
    traced (their folder and why)."""
    recs = all_records(results)
    flagged = untraced(recs)
    if flagged is None:
        return [Text("No git repository here to check the records' commits against.")]
    groups: dict[tuple[str, str], list[str]] = {}
    root = Path(results)
    for rec, why in flagged:
        parts = Path(str(rec.path)).relative_to(root).parts
        folder, name = "/".join(parts[:2]), "/".join(parts[2:])
        groups.setdefault((folder, why), []).append(name.removesuffix("/metrics.json"))
    said = (
        f"{len(recs) - len(flagged)} of {len(recs)} records name a commit of this repository "
        "whose code they ran (a record made from a copied tree, without `.git`, is traced "
        "by its source folders' content hashes, `source_trees`)."
    )
    if not groups:
        return [Text(said)]
    rows = tuple(
        (folder, str(len(names)), why, ", ".join(names[:3]) + (" …" if len(names) > 3 else ""))
        for (folder, why), names in sorted(groups.items())
    )
    note = "Their rows are shown where their pages show them; what they ran is not certain."
    return [
        Text(said + " These are not:"),
        Grid(("Folder", "Records", "Not traced: why", "Records, first"), rows),
        Text(escape(note)),
    ]
