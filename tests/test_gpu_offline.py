"""What the GPU path needs that can be checked without a GPU: the wheels gathered by
`make gpu-wheels` install without an index for the GPU image's Python (3.12), and the
planning of GPU rows by the number of GPUs present."""

import subprocess
import sys

import pytest

from odestudy.measure.environment import ROOT
from odestudy.study import grid, matrix

PACKAGES = ("papermill", "ipykernel", "nbformat", "nbconvert", "tqdm")
TARGET = (
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "any",
)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """The folder `make gpu-wheels` fills (gathered now if this checkout has none)."""
    folder = ROOT / ".whl" / "gpu"
    if not any(folder.glob("papermill-*.whl")):
        folder = tmp_path_factory.mktemp("wheels")
        subprocess.run(
            [
                "make",
                "-C",
                str(ROOT),
                "gpu-wheels",
                f"PYTHON={sys.executable}",
                f"GPU_WHEELS={folder}",
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return folder


@pytest.mark.long  # over 10 s here: make test-long
def test_gathered_wheels_install_without_an_index(wheels, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--no-index",
            "--find-links",
            str(wheels),
            *TARGET,
            "--target",
            str(tmp_path / "site"),
            *PACKAGES,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    would = result.stdout.split("Would install", 1)[1].lower()
    assert all(p in would for p in PACKAGES)


@pytest.mark.parametrize("gpus", [0, 1, 2])
def test_gpu_rows_are_planned_by_the_gpus_present(monkeypatch, gpus):
    monkeypatch.setattr(grid, "gpu_count", lambda: gpus)
    for full in (False, True):
        runnable, not_run = matrix.plan("quick", "gpu", full=full)
        assert all(s.device == "gpu" and s.total_devices <= gpus for s in runnable)
        assert {s.total_devices for s in runnable} == set(range(1, gpus + 1))
        for s, reason in not_run:
            assert s.total_devices > gpus
            assert reason == f"needs {s.total_devices} GPU(s), {gpus} present"
        # The sized matrix stops at the GPUs present (1-GPU rows are listed as not
        # run where there is none); the whole matrix lists every GPU row.
        want = grid.scenarios("quick", "gpu", None if full else max(gpus, 1))
        want = want if full else [s for s in want if grid.in_sized(s)]
        assert len(runnable) + len(not_run) == len(want)


def test_not_run_records_are_written_once(monkeypatch, tmp_path):
    monkeypatch.setattr(grid, "gpu_count", lambda: 0)
    matrix.run_matrix("smoke", "gpu", results=tmp_path, show_progress=False)
    paths = sorted(tmp_path.glob("*/smoke/*/metrics.json"))
    assert paths and all('"not_run"' in p.read_text() for p in paths)
    before = {p: p.stat().st_mtime_ns for p in paths}
    matrix.run_matrix("smoke", "gpu", results=tmp_path, show_progress=False)
    assert {p: p.stat().st_mtime_ns for p in paths} == before
