"""Shared test set-up: 8 virtual CPU devices, set before JAX starts; the smoke matrix
that several modules read; how the modules are spread over the test workers."""

import atexit
import os
import shutil
import tempfile

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

# One JAX persistent compilation cache for the whole test session, in a fresh folder:
# the first process (pytest itself, or xdist's controller) makes it, and every process
# it starts inherits it (xdist workers, notebook kernels, subprocesses, SLURM jobs), so
# that a program compiled by one test process is loaded by the next that compiles it.
# Tests only: measured runs never see it; a scenario's kernel still gets the cache of
# its own record folder (`repeats.cache_environment`). The size bound turns on JAX's
# file lock, so that concurrent processes never read a half-written entry. Likewise
# one data set cache (`data.cached_dataset`, keyed by what makes each data set), which
# every scenario's kernel and worker reads instead of its scale folder's
# (`repeats.data_cache`): each process would otherwise generate the same smoke data.
if "PYTEST_XDIST_WORKER" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="odestudy-test-jax-cache-")
    _data = tempfile.mkdtemp(prefix="odestudy-test-data-")
    for _folder in (_cache, _data):
        atexit.register(shutil.rmtree, _folder, ignore_errors=True)
    os.environ.update(
        ODESTUDY_DATA_CACHE=_data,
        JAX_COMPILATION_CACHE_DIR=_cache,
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
        JAX_COMPILATION_CACHE_MAX_SIZE=str(8 << 30),
    )

# Timing sessions run no machine probe in the tests (`study.probing`), except the smoke
# matrix's, which `test_probe` reads.
os.environ.setdefault("ODESTUDY_PROBE", "off")

import contextlib  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# Every test process measures under a lock of its own (`odestudy.study.lock`), so that
# pytest's workers, and the tests, never wait for or refuse each other.
os.environ["ODESTUDY_LOCK"] = os.path.join(tempfile.mkdtemp(prefix="odestudy-lock-"), "lock")

# `make test` runs two workers with `--dist loadgroup`: each group's tests on one
# worker. Modules that share expensive work in-process are one group: the compiled
# one-device steps of `test_modes` and `test_explicit_mode` (`helpers.one_step`) and the
# smoke matrix's records; every other module is a group of its own (`test_structure`
# too: it compiles a step per lever, far more than the few baselines it shares with
# `test_modes`). The smoke matrix itself (`smoke_matrix`) is made once per session
# whichever worker asks first, so `test_distributed`, which compares with it, runs
# beside its group on the other worker.
GROUPS = {
    "test_modes": "steps",
    "test_explicit_mode": "steps",
    "test_pipeline": "smoke_runs",
    "test_records": "smoke_runs",
}
# The heaviest groups first (most compiles, or scenario runs in processes of their
# own), so that both workers finish together; the others follow in collection order.
HEAVIEST_FIRST = (
    "smoke_runs",
    "steps",
    "test_structure",
    "test_fused",
    "test_slurm",
    "test_distributed",
    "test_predict",
    "test_installed",
    "test_any_problem",
    "test_problems",
    "test_staging",
    "test_tsit5",
    "test_solvers",
)


def _group(item: pytest.Item) -> str:
    module = item.module.__name__.rsplit(".", 1)[-1] if item.module else item.nodeid
    return GROUPS.get(module, module)


# First among the collection hooks: xdist's worker reads the `xdist_group` marks in its
# own hook (it suffixes each test's id with its group), which otherwise ran before this
# one and found none, so that every test was spread over the workers on its own.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))

    def rank(item: pytest.Item) -> int:
        group = _group(item)
        return HEAVIEST_FIRST.index(group) if group in HEAVIEST_FIRST else len(HEAVIEST_FIRST)

    items.sort(key=rank)  # stable: each module's tests keep their order


def _once(tmp_path_factory, worker_id, name: str, make):
    """`make(folder)` run once per test session in the session's folder `name`, under a
    file lock: under xdist the first worker to ask runs it and the others wait for it.
    Returns the folder."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent  # xdist: basetemp/popen-gwN
    root, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            make(root)
            done.touch()
    return root


@contextlib.contextmanager
def probing_on():
    """Timing sessions run their machine probe in the body (the tests' default is off)."""
    saved = os.environ.pop("ODESTUDY_PROBE", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["ODESTUDY_PROBE"] = saved


@pytest.fixture(scope="session")
def smoke_matrix(tmp_path_factory, worker_id):
    """The smoke matrix of `helpers.SMOKE` (`shard_map` on 2 virtual devices): a notebook
    run and one repeat, with the session's machine probe. Returns `(results folder,
    record)`; made once per test session (`_once`)."""
    from odestudy.study.matrix import record_path, run_matrix
    from odestudy.study.records import read_record

    from .helpers import SMOKE

    def make(root):
        with probing_on():
            run_matrix("smoke", "cpu", results=root, show_progress=False, only=[SMOKE], repeats=2)

    root = _once(tmp_path_factory, worker_id, "smoke-results", make)
    return root, read_record(record_path(SMOKE, root))


@pytest.fixture(scope="session")
def two_process_record(tmp_path_factory, worker_id):
    """The matrix's local run of `helpers.TWO_PROCESSES` (2 processes of 1 device,
    `shard_map`, joined by jax.distributed), one run: `test_distributed` compares it
    with 2 devices of one process, `test_slurm` with the same row run through SLURM.
    Made once per test session (`_once`)."""
    from odestudy.study.matrix import record_path, run_matrix
    from odestudy.study.records import read_record

    from .helpers import TWO_PROCESSES

    def make(root):
        run_matrix(
            "smoke", "cpu", results=root, show_progress=False, only=[TWO_PROCESSES], repeats=1
        )

    root = _once(tmp_path_factory, worker_id, "two-process-results", make)
    return read_record(record_path(TWO_PROCESSES, root))


@pytest.fixture
def spread_measured(monkeypatch):
    """Synthetic records (no results tree, no loss-spread record) judged as if their
    workload's loss spread were measured at 100%: two final losses more than a factor 2
    apart are different models, closer ones the same (`report.loss.verdict`)."""
    from odestudy.report import loss

    monkeypatch.setattr(loss, "limit_for", lambda rec: 2.0)
