"""scripts/racecheck_triage.py: the known warp-specialisation hand-off against anything new.

The logs are written here in compute-sanitizer's format with the current source's line
numbers (the hand-off's shape is fixed by Triton; the line numbers move with the source)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

SUMMARY = "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"


def _report(kernel: str, file: str, first: tuple[str, int], *paired: tuple[str, int]) -> str:
    lines = [
        f"========= Error: Race reported between {first[0]} access at {kernel}+0x180 in "
        f"{file}:{first[1]}"
    ]
    lines += [
        f"=========     and {kind} access at {kernel}+0x9d90 in {file}:{line} [39 hazards]"
        for kind, line in paired
    ]
    return "\n".join(lines) + "\n=========\n"


def _lines(triage: ModuleType, file: str, kernel: str) -> tuple[int, int]:
    define, specialise = triage._lines(file, kernel)
    assert define is not None, f"{kernel} in {file}"
    assert specialise, file
    return define, min(specialise)


@pytest.mark.parametrize(
    ("kernel", "file"),
    [
        ("_xrt_attn_fwd_hopper", "_hopper_kernels.py"),
        ("_xrt_attn_bwd_fused_hopper", "_hopper_bwd_kernels.py"),
    ],
)
def test_the_handoff_is_known_and_anything_else_is_new(
    kernel: str,
    file: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    core_script: Callable[[str], ModuleType],
) -> None:
    triage = core_script("racecheck_triage")
    define, specialise = _lines(triage, file, kernel)
    known = _report(kernel, file, ("Read", define), ("Write", define), ("Write", specialise))
    # The same pair the other way round: a state write first, against the entry reads.
    reversed_ = _report(kernel, file, ("Write", define), ("Read", define), ("Read", define))
    log = tmp_path / "racecheck.log"
    log.write_text("========= COMPUTE-SANITIZER\n" + known + reversed_ + SUMMARY)
    assert triage.main([str(log)]) == 0
    assert "2 reports, 2 the warp-specialisation hand-off, 0 new" in capsys.readouterr().out
    # A write elsewhere in the kernel (our code), a write-write pair, a read elsewhere, or a
    # write first against a read elsewhere or against another write, is new.
    for other in (
        _report(kernel, file, ("Read", define), ("Write", define), ("Write", define + 40)),
        _report(kernel, file, ("Write", define), ("Write", specialise)),
        _report(kernel, file, ("Read", define + 1), ("Write", define)),
        _report(kernel, file, ("Write", define), ("Read", define), ("Read", define + 40)),
        _report(kernel, file, ("Write", define + 40), ("Read", define)),
        _report(kernel, file, ("Write", specialise), ("Read", define), ("Write", define)),
    ):
        log.write_text(known + other + SUMMARY)
        assert triage.main([str(log)]) == 1
        assert "NEW:" in capsys.readouterr().out


def test_a_log_without_a_summary_is_an_error(
    tmp_path: Path, core_script: Callable[[str], ModuleType]
) -> None:
    triage = core_script("racecheck_triage")
    cut = tmp_path / "cut.log"
    cut.write_text("========= COMPUTE-SANITIZER\n")
    assert triage.main([str(cut), str(tmp_path / "missing.log")]) == 2


def test_the_branch_that_picks_a_warp_specialize_call_is_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], core_script: Callable[[str], ModuleType]
) -> None:
    """The forward picks its call by a constexpr ``if NUM_WG == 2:`` / ``else:`` (two or
    three consumer warpgroups); racecheck attributed the first call's state writes to the
    ``if`` line (seen on an H200). The branch lines are the hand-off's; the comment line
    above the ``if`` and the ``gl.static_assert`` line after the ``else:`` are not."""
    triage = core_script("racecheck_triage")
    kernel, file = "_xrt_attn_fwd_hopper", "_hopper_kernels.py"
    define, _ = triage._lines(file, kernel)
    text = triage.SOURCES[file].read_text().splitlines()
    first, second = (i for i, line in enumerate(text, 1) if "gl.warp_specialize(" in line)
    assert text[first - 2].strip() == "if NUM_WG == 2:"
    assert text[second - 3].strip() == "else:"
    assert text[second - 2].strip().startswith("gl.static_assert(")
    log = tmp_path / "racecheck.log"
    for line, known in ((first - 1, True), (second - 2, True), (first - 2, False),
                        (second - 1, False)):  # fmt: skip
        log.write_text(
            _report(kernel, file, ("Read", define), ("Write", define), ("Write", line)) + SUMMARY
        )
        assert triage.main([str(log)]) == (0 if known else 1), line
        assert ("NEW:" in capsys.readouterr().out) != known
