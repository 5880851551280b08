"""No two generated sentences contradict each other: every page the report writes (the
README's generated blocks, `docs/results/`, the tables under `figures/`) is read, and
each ratio with its interval (`1.46x [1.45, 1.47]`: the same three numbers after the
same mode named nearest before them are the same comparison) must carry the same
unequal-loss flag (`loss.MARK`) and the same verdict against one device (faster,
slower, not separable, one run) wherever it is stated; two sentences that name the same
ratios must not say once that the intervals separate them and once that they do not."""

import re
from collections import defaultdict

import pytest

from odestudy.measure.environment import ROOT
from odestudy.report.loss import MARK
from odestudy.report.pages import GENERATED_END, GENERATED_START

TRIPLE = re.compile(r"(\d+\.\d+)\s?[x×]?\s?\[(\d+\.\d+), (\d+\.\d+)\]")
MODE = re.compile(r"\b(shard_map|pmap|shard|explicit|single)\b")
CONTROLLER = re.compile(r"\b(pid|stepto)\b")
# The map's workloads as its pages name them (`forced oscillator w64 (controlled)`).
WORKLOAD = re.compile(r"\b(?:forced oscillator|oscillator|latent ODE|bank) w\d+(?: \([^)]*\))?")
# Verdict phrases after a ratio (its own), and for a whole bullet (the claims').
AFTER = [
    ("one run", re.compile(r"\bone run\b", re.I)),
    ("level", re.compile(r"not separable from one device|no faster than one device", re.I)),
    ("faster", re.compile(r"faster than one device within", re.I)),
    ("slower", re.compile(r"slower than one device within", re.I)),
]
BULLET = [
    ("one run", re.compile(r"^- One run each")),
    ("faster", re.compile(r"^- \*\*Use ")),
    ("slower", re.compile(r"^- \*\*Avoid ")),
    ("level", re.compile(r"gains nothing measurable")),
]
APART = re.compile(r"not separable from each other|do not separate them")
TOGETHER = re.compile(r"the intervals separate them")


def generated_pages() -> dict[str, str]:
    """Every page the report writes, by path: only the generated regions of pages that
    also hold hand-written text."""
    out = {}
    paths = [ROOT / "README.md", *sorted((ROOT / "docs" / "results").glob("*.md"))]
    paths += sorted((ROOT / "figures").glob("**/tables/*.md"))
    for path in paths:
        text = path.read_text()
        if GENERATED_START in text:
            text = "\n".join(
                part.split(GENERATED_END)[0] for part in text.split(GENERATED_START)[1:]
            )
        out[str(path.relative_to(ROOT))] = text
    return out


def statements(pages: dict[str, str]) -> list[dict]:
    """Each ratio with its interval on the pages: the three numbers, whether it is
    flagged, its verdict (None where the text gives none of its own), where."""
    out = []
    for where, text in pages.items():
        for number, line in enumerate(text.splitlines(), start=1):
            found = list(TRIPLE.finditer(line))
            whole = [v for v, p in BULLET if p.search(line)]
            for i, m in enumerate(found):
                end = found[i + 1].start() if i + 1 < len(found) else len(line)
                cell = line.find("|", m.end())
                if cell != -1:
                    end = min(end, cell)
                after = line[m.end() : end]
                own = next((v for v, p in AFTER if p.search(after)), None)
                modes = MODE.findall(line[: m.start()])
                controllers = CONTROLLER.findall(line[: m.start()])
                workloads = WORKLOAD.findall(line[: m.start()])
                out.append(
                    {
                        # The ratio and the mode named nearest before it on its line: two
                        # comparisons that round alike are not taken for one.
                        "key": (*m.groups(), modes[-1] if modes else None),
                        # The controller named nearest before it, where one is: two
                        # controllers' comparisons are not one either.
                        "controller": controllers[-1] if controllers else None,
                        # Likewise the workload: two workloads' rows may round alike.
                        "workload": workloads[-1] if workloads else None,
                        "flag": MARK in after,
                        "verdict": own or (whole[0] if len(whole) == 1 else None),
                        "where": f"{where}:{number}",
                    }
                )
    return out


def separations(pages: dict[str, str]) -> list[dict]:
    """Each sentence that says whether intervals separate modes: its ratios, and
    whether it says they are apart (None where it says both, per controller)."""
    out = []
    for where, text in pages.items():
        for number, line in enumerate(text.splitlines(), start=1):
            for sentence in re.split(r"(?<=[.)])\s+(?=[A-Z*-])", line):
                apart, together = APART.search(sentence), TOGETHER.search(sentence)
                if not apart and not together:
                    continue
                keys = {m.groups() for m in TRIPLE.finditer(sentence)}
                said = None if (apart and together) else bool(together)
                out.append({"keys": keys, "apart": said, "where": f"{where}:{number}"})
    return out


def contradictions(pages: dict[str, str]) -> list[str]:
    """Every pair of places that state one comparison differently."""
    found = []
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    for s in statements(pages):
        by_key[s["key"]].append(s)
    per_controller = (p for k, all_ in by_key.items() for p in _per(k, all_, "controller"))
    for key, said in (p for k, all_ in per_controller for p in _per(k, all_, "workload")):
        flags = {s["flag"] for s in said}
        if len(flags) > 1:
            found.append(
                f"{key}: flagged at {[s['where'] for s in said if s['flag']]}, "
                f"not at {[s['where'] for s in said if not s['flag']]}"
            )
        verdicts = {s["verdict"] for s in said if s["verdict"]}
        if len(verdicts) > 1:
            found.append(
                f"{key}: verdicts "
                + ", ".join(f"{s['verdict']} at {s['where']}" for s in said if s["verdict"])
            )
    seps = [s for s in separations(pages) if s["apart"] is not None]
    for i, a in enumerate(seps):
        for b in seps[i + 1 :]:
            if a["apart"] != b["apart"] and len(a["keys"] & b["keys"]) >= 2:
                found.append(
                    f"{sorted(a['keys'] & b['keys'])}: separated at "
                    f"{(a if a['apart'] else b)['where']}, not at "
                    f"{(b if a['apart'] else a)['where']}"
                )
    return found


def _per(key: tuple, said: list[dict], field: str) -> list[tuple[tuple, list[dict]]]:
    """The statements of one key, per value of `field` (controller, workload) they name:
    those naming one value with those that name none (the same comparison, said without
    it); all of them where none names one."""
    named = sorted({s[field] for s in said if s[field]})
    if not named:
        return [(key, said)]
    return [((*key, v), [s for s in said if s[field] in (v, None)]) for v in named]


def test_no_two_generated_sentences_state_one_comparison_differently():
    pages = generated_pages()
    assert len(pages) > 10 and statements(pages)
    found = contradictions(pages)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "pages",
    [
        {  # the seed page's claim against the seed verdict (the audit's first item)
            "a.md": "- **Use `shard_map` or `pmap`** (fastest first; the intervals separate "
            "them): StepTo `shard_map` 1.65x [1.57, 1.69], `pmap` 1.57x [1.49, 1.61].",
            "b.md": "- **stepto**, 2 devices: fastest **shard_map**, 1.65× [1.57, 1.69] over "
            "one device; the data do not separate them from **pmap** (1.57× [1.49, 1.61]).",
        },
        {  # one ratio flagged on one page and not on another
            "a.md": "| 2 | pmap | 1.89 [1.80, 2.63] ‡ | 0.9 |",
            "b.md": "- fastest **pmap**, 1.89× [1.80, 2.63] over one device, faster than one "
            "device within its 95% interval.",
        },
        {  # one run on one page, a verdict on another
            "a.md": "- One run each on 2 devices (PID `shard` 0.71x [0.70, 0.71]): no verdict.",
            "b.md": "- **Avoid sharded `jit` (`shard`) with PID**: 0.71x [0.70, 0.71] of one "
            "device's speed.",
        },
        {  # flagged under one controller, stated without naming one elsewhere
            "a.md": "| pid | shard_map | 0.68 [0.65, 0.71] ‡ |",
            "b.md": "- `shard_map` 0.68x [0.65, 0.71] over one device.",
        },
    ],
)
def test_the_check_finds_a_contradiction(pages: dict[str, str]):
    assert contradictions(pages)


def test_the_check_spares_one_comparison_stated_alike():
    pages = {
        "a.md": "| 2 | pmap | 1.89 [1.80, 2.63] ‡ | 0.95 [0.90, 1.31] |",
        "b.md": "- fastest **pmap**, 1.89× [1.80, 2.63] over one device (but not the same "
        f"model {MARK}); the data do not separate them from **shard_map** (2.07× [1.78, 2.46]).",
        "c.md": "- sharded `jit` with StepTo gains nothing measurable: 2.07x [1.78, 2.46] flat.",
    }
    assert contradictions(pages) == [], contradictions(pages)
    # Two controllers' comparisons that round alike are not one.
    alike = {"a.md": "| pid | shard_map | 0.68 [0.65, 0.71] ‡ |",
             "b.md": "| shard_map | stepto | weak | 0.68 [0.65, 0.71] |"}  # fmt: skip
    assert contradictions(alike) == [], contradictions(alike)
    # Nor are two workloads' rows.
    alike = {"a.md": "| forced oscillator w64 | pid | explicit | 0.68 [0.64, 0.71] ‡ |",
             "b.md": "| bank w16 (state 16) | pid | explicit | 0.68 [0.64, 0.71] |"}  # fmt: skip
    assert contradictions(alike) == [], contradictions(alike)
    alike["c.md"] = "- pid, `explicit` 0.68x [0.64, 0.71] over one device."
    assert contradictions(alike), "a sentence naming no workload is checked against each"


# Claims as values: the report's claims about one comparison (`study.claim.Comparison`)
# agree unless they name the sessions that differ (`report.consistency`).

from odestudy.study.claim import Agreement, Claim, Comparison, Verdict  # noqa: E402

COMPARISON = Comparison(
    "oscillator", "quick scale, width 64, batch 32", "stepto", "shard", 2,
    "the default step", "its own step on one device", "a-machine",
)  # fmt: skip
MONDAY, TUESDAY = "a-machine, 2026-11-23 08:00–09:00 UTC", "a-machine, 2026-11-24 08:00–09:00 UTC"


def _claim(value, low, high, sessions=(MONDAY,), where="a", **kw) -> Claim:
    verdict = Verdict.of(low, high)
    return Claim(COMPARISON, value, (low, high), verdict, sessions, where=where, **kw)


def test_two_claims_about_one_comparison_that_disagree_in_one_session_fail_the_report(
    monkeypatch, tmp_path
):
    from odestudy.report import consistency, findings, publish
    from odestudy.report.document import Report
    from odestudy.study.studies import ReportInputs

    planted = [_claim(0.97, 0.79, 1.10, where="README"), _claim(0.79, 0.74, 0.93, where="page")]
    (found,) = consistency.conflicts(planted)
    assert "0.97x [0.79, 1.1] not separable (README" in found and "slower (page" in found
    # A claim that names no session cannot disagree with another either.
    assert consistency.conflicts([planted[0], _claim(0.79, 0.74, 0.93, sessions=())])
    # The report checks its claims before it writes a page.
    inputs = ReportInputs(tmp_path, "quick", tmp_path)
    made = Report(rows=[], values={}, inputs=inputs)
    monkeypatch.setattr(publish, "write_report", lambda *a, **k: made)
    monkeypatch.setattr(findings, "scale_records", lambda *a, **k: [])
    monkeypatch.setattr(findings, "verdict_stated", lambda rows: planted)
    with pytest.raises(consistency.InconsistentClaims, match="claims disagree"):
        publish.publish(tmp_path, "quick", tmp_path, docs=tmp_path)
    assert not (tmp_path / "results").exists()


def test_claims_about_one_comparison_may_differ_where_their_sessions_do():
    from odestudy.report.consistency import conflicts

    same = [_claim(0.97, 0.79, 1.10, where="README"), _claim(0.97, 0.79, 1.10, where="page")]
    apart = [_claim(0.97, 0.79, 1.10), _claim(0.79, 0.74, 0.93, sessions=(TUESDAY,))]
    assert conflicts(same) == [] and conflicts(apart) == []
    # Flagged in one place and not in another, in one session: a conflict.
    assert conflicts([same[0], _claim(0.97, 0.79, 1.10, flagged=True)])


def test_a_claim_says_how_many_sessions_with_rows_agree_and_names_the_others():
    agreed = Agreement(5, 6, ((Verdict.SLOWER, ("2026-11-26 11:12–12:04 UTC",)),))
    assert agreed.said(Verdict.FASTER) == (
        "faster in 5 of 6 sessions with such rows; slower in 1 (2026-11-26 11:12–12:04 UTC)"
    )


# About 13 s here; `make report` (and so `make all`) runs the same check before it writes
# any page (`consistency.check`).
@pytest.mark.long
def test_the_committed_records_claims_agree_by_comparison(scale="quick"):
    from odestudy.report.consistency import conflicts
    from odestudy.report.document import report_rows
    from odestudy.report.findings import findings
    from odestudy.study.records import read_once

    results = ROOT / "results"
    with read_once():
        rows = report_rows(results, scale)[2]
        found = findings(results, scale, rows)  # raises where claims disagree
    claims = found.claims()
    assert found.readme and found.by_session and found.verdict
    assert claims and all(c.sessions for c in claims)
    assert conflicts(claims) == []
    for claim in claims:
        if claim.agreement is not None and claim.verdict is not Verdict.ONE_RUN:
            k, n = claim.agreement.agree, claim.agreement.answered
            assert 0 < n and k + sum(len(w) for _, w in claim.agreement.others) == n
