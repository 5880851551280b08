"""Committed records write the same pages on every machine: the machine a page shows
is this one only where it measured under the current protocol."""

import pytest

from odestudy.measure import environment
from odestudy.measure.timing import PROTOCOL
from odestudy.report.device_tables import pick_machine
from odestudy.study.rec import Rec


def _recs(machine: str, n: int, protocol: int | None, status: str = "ok") -> list[Rec]:
    return [
        Rec(machine_id=machine, device="cpu", status=status, protocol=protocol,
            finished=f"2026-11-2{i}T10:00:00+00:00")
        for i in range(n)
    ]  # fmt: skip


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(environment, "machine_id", lambda _fingerprint: "here")
    return "here"


def test_this_machine_is_shown_where_it_measured_under_the_current_protocol(here):
    recs = _recs("elsewhere", 5, PROTOCOL) + _recs(here, 1, PROTOCOL)
    assert pick_machine(recs, "cpu") == here


@pytest.mark.parametrize("status", ["ok", "failed"])
def test_older_or_failed_records_here_do_not_change_the_page(here, status):
    recs = _recs("elsewhere", 3, PROTOCOL) + _recs(here, 4, PROTOCOL - 1, status)
    assert pick_machine(recs, "cpu") == "elsewhere"
    older = _recs("elsewhere", 3, PROTOCOL - 1, "failed") + _recs(here, 1, None, "failed")
    assert pick_machine(older, "cpu") == "elsewhere"
    assert pick_machine(older, "gpu") is None
