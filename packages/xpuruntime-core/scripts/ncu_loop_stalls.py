"""Where a kernel's warps spend its hottest loop, from Nsight Compute's warp-state sampling.

    python3 ncu_loop_stalls.py SOURCE_CSV [--loop N] [--list]

SOURCE_CSV is one launch's SASS source page as ``ncu --import REPORT --page source --csv
--print-source sass --launch-skip I --launch-count 1`` writes it (``attention_profile.sh``
with ``SASS_SOURCE=1``), from a report whose sections include ``SourceCounters`` (``--set
full`` does). A loop is the range a backward branch closes (ranges of at least 100
instructions; nested ones all count). For the loop with the most samples, or the ``--loop``-th
by address, it prints its share of the launch's samples, the samples by opcode and by stall
reason, and the loop in runs of consecutive instructions of one opcode, each with its share:
a warp sampled at an instruction is waiting to issue it (or issuing it), so a run's share is
the share of the loop's time the warps spend reaching that part of the loop. ``--list``
prints every instruction with its samples and top stall reasons instead of the runs.
Exit status: 0 with a report, 1 when the page has no such loop, 2 when the file is not a
readable source page with samples or ``--loop`` is out of range.
"""

from __future__ import annotations

import argparse
import collections
import csv
import itertools
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

_BRANCH = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")
_PREDICATE = re.compile(r"^@!?U?P\w+\s+")
MIN_LOOP = 100


@dataclass(frozen=True, slots=True)
class Instruction:
    address: int
    text: str
    samples: int
    stalls: dict[str, int]

    @property
    def opcode(self) -> str:
        return _PREDICATE.sub("", self.text).split()[0].split(".")[0]


class PageError(Exception):
    """The file is not an ncu source page with warp-state samples."""


def read(path: Path) -> list[Instruction]:
    """The launch's instructions, in address order."""
    try:
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as error:
        raise PageError(f"{path}: cannot read it ({error.strerror})") from error
    header_at = next((i for i, row in enumerate(rows) if row and row[0] == "Address"), None)
    needed = ("Source", "Warp Stall Sampling (All Samples)")
    if header_at is None or not all(name in rows[header_at] for name in needed):
        raise PageError(
            f"{path}: no SASS source page with warp-state samples (write it with ncu --page "
            "source --csv --print-source sass from a report with SourceCounters)"
        )
    header = rows[header_at]
    column = {name: i for i, name in enumerate(header)}
    reasons = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    out = []
    for row in rows[header_at + 1 :]:
        if len(row) < len(header) or not row[column["Address"]].startswith("0x"):
            continue
        out.append(
            Instruction(
                int(row[column["Address"]], 16),
                " ".join(row[column["Source"]].split()),
                int(row[column["Warp Stall Sampling (All Samples)"]] or 0),
                {n.removeprefix("stall_"): int(row[column[n]] or 0) for n in reasons},
            )
        )
    return out


def loops(code: list[Instruction]) -> list[tuple[int, int]]:
    """(first, last) indices of each range a backward branch closes, MIN_LOOP or longer."""
    index = {ins.address: i for i, ins in enumerate(code)}
    found = []
    for i, ins in enumerate(code):
        match = _BRANCH.search(ins.text)
        if match:
            target = index.get(int(match.group(1), 16))
            if target is not None and target < i and i - target + 1 >= MIN_LOOP:
                found.append((target, i))
    return found


def _samples(code: list[Instruction], loop: tuple[int, int]) -> int:
    return sum(ins.samples for ins in code[loop[0] : loop[1] + 1])


def hottest(code: list[Instruction], found: list[tuple[int, int]]) -> tuple[int, int]:
    """The loop with the most samples; where that is an outer loop, the innermost loop
    within it holding at least 30 % of its samples."""
    chosen = max(found, key=lambda loop: _samples(code, loop))
    heat = _samples(code, chosen)
    inner = [
        loop
        for loop in found
        if loop != chosen
        and chosen[0] <= loop[0]
        and loop[1] <= chosen[1]
        and _samples(code, loop) >= 0.3 * heat
    ]
    return min(inner, key=lambda loop: loop[1] - loop[0]) if inner else chosen


def _share(counter: collections.Counter[str], total: int, n: int = 10) -> str:
    return ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in counter.most_common(n))


def report(code: list[Instruction], loop: tuple[int, int], listing: bool) -> None:
    first, last = loop
    body = code[first : last + 1]
    total = sum(ins.samples for ins in code) or 1
    in_loop = _samples(code, loop) or 1
    base = code[0].address
    print(
        f"loop {body[0].address - base:#x}-{body[-1].address - base:#x}: {len(body)} "
        f"instructions, {100 * in_loop / total:.1f}% of the launch's samples"
    )
    by_op: collections.Counter[str] = collections.Counter()
    by_reason: collections.Counter[str] = collections.Counter()
    for ins in body:
        by_op[ins.opcode] += ins.samples
        by_reason.update(ins.stalls)
    print(f"  by opcode: {_share(by_op, in_loop)}")
    print(f"  by stall reason: {_share(by_reason, in_loop, 8)}")
    if listing:
        for ins in body:
            top = sorted(ins.stalls.items(), key=lambda kv: -kv[1])[:3]
            reasons = ", ".join(f"{k} {v}" for k, v in top if v)
            print(f"  {ins.address - base:#07x} {ins.samples:7d}  {ins.text[:64]:64s} {reasons}")
        return
    print("  runs of one opcode (share of the loop's samples, instructions):")
    for opcode, run in itertools.groupby(body, key=lambda ins: ins.opcode):
        run = list(run)
        share = 100 * sum(ins.samples for ins in run) / in_loop
        if share >= 0.5:
            print(f"    {opcode:12s} {share:5.1f}%  x{len(run)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source_csv", type=Path)
    parser.add_argument("--loop", type=int, help="the N-th loop by address (default: hottest)")
    parser.add_argument("--list", action="store_true", help="every instruction, not the runs")
    args = parser.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly
    try:
        code = read(args.source_csv)
    except PageError as error:
        print(error, file=sys.stderr)
        return 2
    found = loops(code)
    if not found:
        print(f"{args.source_csv}: no loop of {MIN_LOOP}+ instructions", file=sys.stderr)
        return 1
    if args.loop is not None and not 0 <= args.loop < len(found):
        print(f"--loop {args.loop}: the page has loops 0 to {len(found) - 1}", file=sys.stderr)
        return 2
    report(code, found[args.loop] if args.loop is not None else hottest(code, found), args.list)
    return 0


if __name__ == "__main__":
    sys.exit(main())
