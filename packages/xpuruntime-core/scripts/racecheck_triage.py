"""Sort a compute-sanitizer racecheck log into the known warp-specialisation hand-off and the rest.

    python3 racecheck_triage.py LOG [LOG ...]

Triton's ``gl.warp_specialize`` hands each worker warp its partition index and state through
a small shared-memory slot: the workers' entry read (attributed to the kernel's ``def`` line)
against the default warps' entry and exit writes (attributed to the ``def`` line and to the
``gl.warp_specialize`` line), ordered by four CTA-wide ``BAR.SYNC 0x1`` on every path.
racecheck reports it as a hazard in every Gluon kernel here; docs/attention.md explains why it
is not a race. This script applies that triage rule mechanically: a report whose first access
is a read at a Gluon kernel's ``def`` line and whose every paired access is a write at that
``def`` line or at a ``gl.warp_specialize`` line of the same file (or at the ``if``/``else``
line of the constexpr branch that picks one, to which racecheck attributes that call's writes)
is the hand-off, as is the same pair reported the other way round (a write at those lines
first, against reads at the ``def`` line only); any other report is new and needs analysis.

The line numbers are the source's as it ran, so run this in the checkout that ran the kernels
(the GPU phases do, right after racecheck). Exit status: 0 when every report is the hand-off,
1 when any is not (each printed), 2 when a log is missing or has no racecheck summary.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: The Gluon kernels' sources, by the file name racecheck prints.
SOURCES = {
    path.name: path
    for path in (Path(__file__).resolve().parents[1] / "src/xpuruntime/kernels/attention").glob(
        "_hopper*_kernels.py"
    )
}

_FIRST = re.compile(
    r"Race reported between (Read|Write) access at (\w+)\+0x[0-9a-f]+ in ([\w.]+):(\d+)"
)
_PAIRED = re.compile(r"and (Read|Write) access at (\w+)\+0x[0-9a-f]+ in ([\w.]+):(\d+)")


@dataclass(frozen=True)
class Access:
    kind: str
    kernel: str
    file: str
    line: int


@dataclass(frozen=True)
class Report:
    first: Access
    paired: tuple[Access, ...]


def reports(text: str) -> list[Report]:
    """The race reports of a racecheck log, each with its first and paired accesses."""
    found: list[Report] = []
    for block in re.split(r"\n(?==+ Error: Race reported)", text):
        first = _FIRST.search(block)
        if first is None:
            continue
        paired = tuple(Access(m[0], m[1], m[2], int(m[3])) for m in _PAIRED.findall(block))
        found.append(Report(Access(*first.groups()[:3], int(first.group(4))), paired))
    return found


def _branch(text: list[str], call: int) -> int | None:
    """The ``if``/``elif``/``else:`` line that opens the block whose first statement (past any
    ``gl.static_assert`` lines) is the call at line ``call``, if there is one."""
    line = call - 1
    while line >= 1 and text[line - 1].strip().startswith("gl.static_assert("):
        line -= 1
    if line >= 1 and text[line - 1].strip().startswith(("if ", "elif ", "else:")):
        return line
    return None


def _lines(file: str, kernel: str) -> tuple[int | None, set[int]]:
    """The kernel's ``def`` line and the ``gl.warp_specialize`` lines of ``file``, with the
    branch line that picks a call (:func:`_branch`): where a constexpr branch picks it (the
    forward's two or three consumer warpgroups), racecheck attributed the state writes to the
    ``if`` line on an H200 (the ``else`` line is taken alike)."""
    source = SOURCES.get(file)
    if source is None:
        return None, set()
    text = source.read_text().splitlines()
    define = next((i for i, line in enumerate(text, 1) if line.startswith(f"def {kernel}(")), None)
    specialise = {i for i, line in enumerate(text, 1) if "gl.warp_specialize(" in line}
    branches = {branch for call in specialise if (branch := _branch(text, call)) is not None}
    return define, specialise | branches


def is_handoff(report: Report) -> bool:
    """Whether the report is exactly the warp-specialisation hand-off (module docstring):
    the entry read against the state writes, or the same pair reported the other way round
    (a state write first, against entry reads only; racecheck names first whichever access
    it saw first, seen on an H200 for the dQ kernel)."""
    first = report.first
    define, specialise = _lines(first.file, first.kernel)
    if define is None or not report.paired:
        return False
    writes = {define, *specialise}

    def same_kernel(access: Access) -> bool:
        return access.kernel == first.kernel and access.file == first.file

    if first.kind == "Read" and first.line == define:
        return all(a.kind == "Write" and same_kernel(a) and a.line in writes for a in report.paired)
    if first.kind == "Write" and first.line in writes:
        return all(a.kind == "Read" and same_kernel(a) and a.line == define for a in report.paired)
    return False


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__)
        return 2
    status = 0
    for path in paths:
        log = Path(path)
        text = log.read_text(errors="replace") if log.is_file() else ""
        if "RACECHECK SUMMARY" not in text:
            print(f"{path}: no racecheck summary (missing, cut short, or not a racecheck log)")
            status = max(status, 2)
            continue
        found = reports(text)
        new = [r for r in found if not is_handoff(r)]
        print(
            f"{path}: {len(found)} reports, {len(found) - len(new)} the warp-specialisation "
            f"hand-off, {len(new)} new"
        )
        for report in new:
            status = max(status, 1)
            where = ", ".join(f"{a.kind} {a.file}:{a.line}" for a in report.paired)
            print(f"  NEW: {report.first.kind} {report.first.file}:{report.first.line} vs {where}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
