"""No measured number typed by hand: every line of README.md and docs/ that states one
lies in a region the report generates from the records (`odestudy/report/pages.py`,
between its generated markers). The README stays short, answers first.

The rule for a hand-written line, after fenced code blocks, inline code (commands,
option values, file names, commit ids), link targets and HTML comments are taken out:
- no decimal number (`1.57`), except a version (`0.10.2`, or one after a package name:
  `jax 0.10`, `Python 3.12`);
- no number with a unit of time, speed, size or ratio (`12 s`, `3.5 ms`, `40 %`, `2x`,
  `19 MB`, `GB/s`), except the interval level chosen before any run (`95% interval`);
- no interval (`[1.49, 2.16]`).
Integers without such a unit (counts and settings: `3 runs`, `2 devices`, `150 lines`)
are method, not measurement. Nor may a hand-written line state a measured claim in words
(`WORDS`: "several times slower", "N-fold", "to float32 tolerance", "by more than the
intervals hold"), across line breaks too.
"""

import re
from pathlib import Path

import pytest

from odestudy.measure.environment import ROOT
from odestudy.report.answer import LIST_MARKER, wrapped
from odestudy.report.pages import GENERATED_END, GENERATED_START

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PACKAGES = r"(?:jax|jaxlib|python|diffrax|equinox|optax|numpy|protocol|cuda|version)"
UNITS = r"(?:s|ms|us|µs|ns|min|minutes?|hours?|h|x|×|%|GB|MB|KB|GiB|MiB|GB/s|GFLOP/s|FLOP/s)"
MEASURED = [
    ("decimal", re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")),
    ("with a unit", re.compile(rf"(?<![\w.])\d+(?:\.\d+)?\s?{UNITS}(?![\w/])(?! ?\d)", re.I)),
    ("interval", re.compile(r"\[\s*-?\d+(?:\.\d+)?\s*,\s*-?\d+(?:\.\d+)?\s*\]")),
]
# Measured claims in words: a factor in words ("several times slower", "several times a
# tanh", "twice as fast", "orders of magnitude"), an N-fold anything, a precision reached
# ("to float32 tolerance", "to float32 rounding"), a measured excess ("by more than the
# intervals").
_AMOUNT = r"(?:several|many|a\s+few|some|two|three|four|five|six|seven|eight|nine|ten|\d+)"
_COMPARED = (
    r"(?:faster|slower|quicker|longer|shorter|larger|smaller|more|less|fewer|higher|lower|as)"
)
WORDS = re.compile(
    rf"\b{_AMOUNT}\s+times\s+(?:{_COMPARED}|a|an|the)\b"
    r"|\b(?:twice|thrice|half)\s+as\s+\w+"
    r"|\b[\w.]+-fold\b"
    r"|\borders?\s+of\s+magnitude\b"
    r"|\bto\s+(?:float\d*|machine|single|double)\s+(?:tolerance|precision|accuracy|rounding)\b"
    r"|\bby\s+(?:far\s+)?more\s+than\s+(?:the|its|their|one|a)\s+(?:\w+\s+)?(?:intervals?|spread|noise)",
    re.I,
)
# The interval level (chosen before any run) and versions (`0.10.2`, `jax 0.10`).
ALLOWED = re.compile(
    rf"95\s?% (?:interval|confidence|bootstrap)|\b{PACKAGES}\s+\d+(?:\.\d+)*|\d+\.\d+\.\d+", re.I
)


def hand_written(text: str) -> list[tuple[int, str]]:
    """The hand-written lines of a page, numbered from 1, with code, link targets and
    comments taken out; generated regions and fenced blocks are left out."""
    out, generated, fenced = [], False, False
    for number, line in enumerate(text.splitlines(), start=1):
        if GENERATED_START in line:
            generated = True
        if generated:
            generated = GENERATED_END not in line
            continue
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        line = re.sub(r"\]\([^)]*\)", "]", line)
        line = re.sub(r"<!--.*?-->", "", line)
        out.append((number, line))
    return out


def measured_numbers(text: str) -> list[str]:
    """`line N: what (text)` for each measured number on a hand-written line, and each
    measured claim in words (`WORDS`, also where it runs over a line break)."""
    found = []
    lines = hand_written(text)
    for number, line in lines:
        line = ALLOWED.sub("", line)
        for what, pattern in MEASURED:
            found += [f"line {number}: {what} ({m.group(0)!r})" for m in pattern.finditer(line)]
    joined = "\n".join(line for _, line in lines)
    for m in WORDS.finditer(joined):
        number = lines[joined.count("\n", 0, m.start())][0]
        found.append(f"line {number}: in words ({' '.join(m.group(0).split())!r})")
    return found


def test_the_rule_catches_measured_numbers_and_spares_method():
    bad = "It ran 1.57x faster [1.49, 2.16] in 12 s, 40 % of the step, 0.28 of one device."
    assert len(measured_numbers(bad)) >= 5
    good = (
        "Each scenario runs 3 times on 2 devices with 95% intervals; jax 0.10.2 and "
        "Python 3.12, `make seed` in `results/x`, see [this](docs/a1.5.md), 150 lines."
    )
    assert measured_numbers(good) == []
    fenced = "```sh\nmake all  # 12 s\n```"
    assert measured_numbers(fenced) == []
    region = f"{GENERATED_START}\n1.57x [1.49, 2.16]\n{GENERATED_END}\nthen 3 runs"
    assert measured_numbers(region) == []


@pytest.mark.parametrize(
    "claim",
    [
        "found sharded jit several times slower than one device",
        "found sharded jit several times\nslower than one device",
        "a tenfold gain, or a 3-fold one, an N-fold one",
        "the losses agree to float32 tolerance",
        "it drifts between sessions by more than the intervals of one session hold",
        "twice as fast as pmap",
        "softplus costs several times a tanh at the step's shapes",
        "orders of magnitude below the floor",
        "the results agree to float32 rounding",
    ],
)
def test_the_rule_catches_measured_claims_in_words(claim: str):
    assert measured_numbers(claim), claim


def test_the_rule_in_words_spares_method():
    good = (
        "Each scenario runs three times, interleaved; the step runs 3 times per block; "
        "a gap of more than the session gap starts a new one."
    )
    assert measured_numbers(good) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_hand_written_line_states_a_measured_number(page: Path):
    found = measured_numbers(page.read_text())
    assert not found, f"{page.relative_to(ROOT)} holds measured numbers by hand: {found}"


def test_every_generated_region_is_closed():
    for page in PAGES:
        text = page.read_text()
        assert text.count(GENERATED_START) == text.count(GENERATED_END), page


def test_the_readme_answers_first_and_is_short():
    """Read in two minutes: at most 1,000 words, its generated answer at most 450, no
    line over 300 characters; an interval and the figure near the top."""
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(text.split()) <= 1000
    answer = text[text.index(GENERATED_START) : text.index(GENERATED_END)]
    assert len(answer.split()) <= 450
    assert max(len(line) for line in lines) <= 300
    assert len(lines) <= 150
    interval = re.compile(r"\d\.\d+x? \[\d\.\d+, \d\.\d+\]")
    assert any(interval.search(line) for line in lines[:40]), "no interval in the first 40 lines"
    assert any(line.startswith("![") for line in lines[:60]), "no figure in the first 60 lines"
    assert "make all" in "\n".join(lines) and "make test" in "\n".join(lines)


def test_each_results_page_exists_and_a_page_without_rows_says_so_in_one_line():
    results = ROOT / "docs" / "results"
    names = {"quick", "seed", "explain", "step", "versions", "workloads", "crossover"}
    assert names <= {p.stem for p in results.glob("*.md")}
    for page in results.glob("*.md"):
        text = page.read_text()
        assert "None." not in text and "protocol None" not in text, page
        if "No rows yet" in text:
            body = [
                line
                for line in text.splitlines()
                if line.strip() and not line.startswith(("<!--", "#"))
            ]
            assert len(body) == 1, page


def test_the_answer_wraps_without_opening_a_list():
    """A wrapped line never opens with `1. ` or `- ` (markdown would render a list)."""
    line = "x" * 93 + " holds 1. *Best*: " + "y " * 60 + "- z"
    pieces = wrapped(line)
    assert " ".join(p.strip() for p in pieces).split() == line.split()
    assert not any(re.match(LIST_MARKER + " ", p.strip()) for p in pieces[1:])
