"""Shared test set-up: 8 virtual CPU devices, set before JAX starts; the smoke matrix
that several modules read; how the modules are spread over the test workers."""

import os

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# Every test process measures under a lock of its own (`odestudy.study.lock`), so that
# pytest's workers, and the tests, never wait for or refuse each other.
import tempfile  # noqa: E402

os.environ["ODESTUDY_LOCK"] = os.path.join(tempfile.mkdtemp(prefix="odestudy-lock-"), "lock")

# `make test` runs two workers with `--dist loadgroup`: each group's tests on one
# worker. Modules that share expensive work are one group: the compiled one-device
# steps (`helpers.one_step`) and the smoke matrix's records (`smoke_matrix`); every
# other module is a group of its own.
GROUPS = {
    "test_modes": "steps",
    "test_structure": "steps",
    "test_pipeline": "smoke_runs",
    "test_records": "smoke_runs",
    "test_distributed": "smoke_runs",
}
# The heaviest groups first (most compiles, or scenario runs in processes of their
# own), so that both workers finish together; the others follow in collection order.
HEAVIEST_FIRST = ("steps", "smoke_runs", "test_staging", "test_tsit5", "test_solvers")


def _group(item: pytest.Item) -> str:
    module = item.module.__name__.rsplit(".", 1)[-1] if item.module else item.nodeid
    return GROUPS.get(module, module)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))

    def rank(item: pytest.Item) -> int:
        group = _group(item)
        return HEAVIEST_FIRST.index(group) if group in HEAVIEST_FIRST else len(HEAVIEST_FIRST)

    items.sort(key=rank)  # stable: each module's tests keep their order


@pytest.fixture(scope="session")
def smoke_matrix(tmp_path_factory):
    """The smoke matrix of `helpers.SMOKE_SCENARIOS` (2 virtual devices, `shard` and
    `shard_map`): each a notebook run and one repeat. Returns `(results folder,
    records)`."""
    from odestudy.study.matrix import run_matrix

    from .helpers import SMOKE_SCENARIOS

    root = tmp_path_factory.mktemp("results")
    recs = run_matrix(
        "smoke", "cpu", results=root, show_progress=False, only=SMOKE_SCENARIOS, repeats=2
    )
    return root, recs
