"""Provenance: a record names the code it ran by the content hash of its source folders
(`environment.source_trees`, git's tree ids computed without git), and the report flags
every record whose commit is not in the repository, or whose code is not that commit's
(`report.provenance`)."""

import json
import subprocess
from pathlib import Path

import pytest

from odestudy.measure import environment
from odestudy.report import provenance
from odestudy.report.tables import render_blocks


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_a_folder_hashes_to_the_tree_id_git_gives_it(tmp_path):
    """The content hash of a folder is the tree id git gives that folder in a commit:
    nested folders, an executable file and caches git ignores included."""
    (tmp_path / "odestudy" / "sub").mkdir(parents=True)
    (tmp_path / "odestudy" / "a.py").write_text("x = 1\n")
    (tmp_path / "odestudy" / "a-b.py").write_text("y = 2\n")
    (tmp_path / "odestudy" / "sub" / "c.py").write_text("z = 3\n")
    (tmp_path / "odestudy" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "odestudy" / "run.sh").chmod(0o755)
    (tmp_path / "odestudy" / "__pycache__").mkdir()
    (tmp_path / "odestudy" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    trees = environment.source_trees(tmp_path)
    assert trees == {"odestudy": _git(tmp_path, "rev-parse", "HEAD:odestudy")}


def _record(folder: Path, name: str, **fields) -> None:
    path = folder / "m" / "quick" / name / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"machine_id": "m", **fields}))


@pytest.fixture
def head() -> str:
    head = _git(environment.ROOT, "rev-parse", "HEAD")
    if not head:
        pytest.skip("no git checkout")
    return head


def test_the_report_flags_records_it_cannot_trace_to_their_commit(tmp_path, head):
    """A commit not in the repository is flagged, a dirty one too, and a copied tree's
    record whose stale `git_commit` is not the commit its code is names the commit
    that holds its code; a record of HEAD, or a copied tree's of HEAD's code, is not
    flagged."""
    trees = {
        f: _git(environment.ROOT, "rev-parse", f"HEAD:{f}") for f in environment.SOURCE_FOLDERS
    }
    first = _git(environment.ROOT, "rev-list", "--max-parents=0", "HEAD").split()[0]
    _record(tmp_path, "clean", git_commit=head)
    _record(tmp_path, "copied", git_commit=None, source_trees=trees)
    _record(tmp_path, "unknown", git_commit="7db7c5821")
    _record(tmp_path, "dirty", git_commit=f"{first}-dirty")
    _record(tmp_path, "stale", git_commit=first, source_trees=trees)
    _record(tmp_path, "nowhere", git_commit=head, source_trees={"odestudy": "0" * 40})
    _record(tmp_path, "garbled", git_commit="HEAD\nmain extra")
    flagged = provenance.untraced(provenance.all_records(tmp_path))
    assert flagged is not None
    why = {Path(rec["path"]).parent.name: text for rec, text in flagged}
    assert set(why) == {"unknown", "dirty", "stale", "nowhere", "garbled"}
    assert why["garbled"] == "HEAD main is not a commit of the repository"
    assert why["unknown"] == "7db7c5821 is not a commit of the repository"
    assert why["dirty"] == f"made from uncommitted changes to {first[:9]}"
    assert why["stale"].startswith(f"it names {first[:9]}, but its code is that of ")
    assert why["nowhere"] == "its code (source_trees) is in no commit of the repository"
    table = render_blocks(provenance.provenance_table(tmp_path))
    assert "2 of 7 records name a commit" in table
    assert "7db7c5821 is not a commit of the repository" in table
