"""Count collective operations in compiled HLO, and how many sit inside while loops."""

import math
import re
from typing import NamedTuple

COLLECTIVES = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
)
# An instruction line: `%name = type opcode(operands), attrs` (ROOT optional).
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([\w\-]+)\((.*)$")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLED = re.compile(
    r"\b(?:body|condition|to_apply|calls|branch_computations|true_computation|"
    r"false_computation)=(\{[^}]*\}|%?[\w.\-]+)"
)
_NAME = re.compile(r"%?([\w.\-]+)")
_ARRAY = re.compile(r"\b(pred|[sufc]\d+|bf16)\[([\d,]*)\]")
_BITS = {"pred": 8, "bf16": 16}


def _bytes(type_text: str) -> int:
    """Bytes of the arrays in an HLO result type, e.g. `(f32[2,3]{1,0}, s32[])`."""
    total = 0
    for dtype, dims in _ARRAY.findall(type_text):
        n = math.prod(int(d) for d in dims.split(",") if d)
        total += n * _BITS.get(dtype, int(dtype[1:]) if dtype[1:].isdigit() else 32) // 8
    return total


class CollectiveCount(NamedTuple):
    """Collectives in one compiled program (async start/done pairs counted once), and
    those inside a while loop at any depth; bytes are of their results, run once each."""

    total: int
    in_loops: int
    by_kind: dict
    in_loops_by_kind: dict
    while_loops: int
    bytes_total: int = 0
    bytes_in_loops: int = 0


def _kind(opcode: str) -> str | None:
    if opcode.endswith("-done"):
        return None
    base = opcode[: -len("-start")] if opcode.endswith("-start") else opcode
    return base if base in COLLECTIVES else None


def parse(hlo: str) -> dict[str, list[tuple[str, str, str, str]]]:
    """Each computation of an HLO module's text: its instructions as `(opcode, line,
    result type, name)`."""
    computations: dict[str, list[tuple[str, str, str, str]]] = {}
    current = None
    for line in hlo.splitlines():
        if current is None or line.rstrip().endswith("{") and "=" not in line.split("{")[0]:
            match = _COMP.match(line)
            if match and "=" not in line.split("(")[0]:
                current = match.group(1)
                computations[current] = []
                continue
        if current is None:
            continue
        if line.strip() == "}":
            current = None
            continue
        match = _INSTR.match(line)
        if match:
            computations[current].append((match.group(3), line, match.group(2), match.group(1)))
    return computations


def _callees(line: str) -> list[str]:
    names = []
    for group in _CALLED.findall(line):
        names.extend(_NAME.findall(group))
    return names


def _in_loop(computations: dict) -> tuple[set[str], int]:
    """The computations reachable from a `while` body or condition, and the number of
    `while` instructions."""
    calls = {
        name: [c for _, line, *_ in instrs for c in _callees(line) if c in computations]
        for name, instrs in computations.items()
    }
    loop_roots: list[str] = []
    n_while = 0
    for instrs in computations.values():
        for opcode, line, *_ in instrs:
            if opcode == "while":
                n_while += 1
                loop_roots.extend(c for c in _callees(line) if c in computations)
    in_loop: set[str] = set()
    stack = list(loop_roots)
    while stack:
        name = stack.pop()
        if name in in_loop:
            continue
        in_loop.add(name)
        stack.extend(calls.get(name, []))
    return in_loop, n_while


def loop_collective_arrays(hlo: str) -> dict[str, int]:
    """The collective instructions inside while loops of a compiled HLO module's text,
    each with how often the CPU runtime meets its devices to run it once: an all-reduce
    once per array of its tuple, any other once (as a profile's rendezvous count shows)."""
    computations = parse(hlo)
    in_loop, _ = _in_loop(computations)
    meetings = {}
    for name in in_loop:
        for opcode, _, type_text, instr in computations[name]:
            kind = _kind(opcode)
            if kind is not None:
                k = len(_ARRAY.findall(type_text)) // (2 if opcode.endswith("-start") else 1)
                meetings[instr] = max(1, k) if kind == "all-reduce" else 1
    return dict(sorted(meetings.items()))


def count_collectives(hlo: str) -> CollectiveCount:
    """Audit the text of a compiled HLO module (`compiled.as_text()`)."""
    computations = parse(hlo)
    in_loop, n_while = _in_loop(computations)
    by_kind: dict[str, int] = {}
    in_loops_by_kind: dict[str, int] = {}
    nbytes = {True: 0, False: 0}
    for name, instrs in computations.items():
        for opcode, _, type_text, _ in instrs:
            kind = _kind(opcode)
            if kind is None:
                continue
            by_kind[kind] = by_kind.get(kind, 0) + 1
            size = _bytes(type_text)
            if opcode.endswith("-start"):  # (operands, results): count results only
                size //= 2
            nbytes[name in in_loop] += size
            if name in in_loop:
                in_loops_by_kind[kind] = in_loops_by_kind.get(kind, 0) + 1
    return CollectiveCount(
        total=sum(by_kind.values()),
        in_loops=sum(in_loops_by_kind.values()),
        by_kind=by_kind,
        in_loops_by_kind=in_loops_by_kind,
        while_loops=n_while,
        bytes_total=nbytes[True] + nbytes[False],
        bytes_in_loops=nbytes[True],
    )
