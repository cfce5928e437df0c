"""scripts/ncu_loop_stalls.py: the hottest loop of an Nsight Compute source page, by opcode,
stall reason and runs.

The pages are written here in the shape ``ncu --page source --csv --print-source sass``
gives (a kernel-name row, the header, one row per instruction with absolute addresses)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ncu_loop_stalls.py"
BASE = 0x7F0000000000
REASONS = ("wait", "selected", "long_sb")


def _page(path: Path, code: list[tuple[str, int, str]]) -> Path:
    """``code``: (SASS text, samples, the reason they all have) per instruction, 16 bytes
    apart from BASE; "BRA ->N" branches to instruction N."""
    header = [
        "Address",
        "Source",
        "Warp Stall Sampling (All Samples)",
        "Warp Stall Sampling (Not-issued Samples)",
        *(f"stall_{r}" for r in REASONS),
        *(f"stall_{r} (Not Issued)" for r in REASONS),
    ]
    with path.open("w", newline="") as handle:
        out = csv.writer(handle, quoting=csv.QUOTE_ALL)
        out.writerow(["Kernel Name", "_kernel", ""])
        out.writerow(header)
        for i, (text, samples, reason) in enumerate(code):
            if text.startswith("BRA ->"):
                text = f"@P0 BRA {BASE + 16 * int(text[6:]):#x}"
            stalls = [samples if r == reason else 0 for r in REASONS]
            out.writerow([f"{BASE + 16 * i:#x}", text, samples, samples, *stalls, *stalls])
    return path


def _run(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(page), *args], capture_output=True, text=True
    )


def _kernel() -> list[tuple[str, int, str]]:
    """A prologue, a 130-instruction loop (30 FMNMX, then 64 MUFU.EX2 holding most of the
    samples, then filler and the back edge), an epilogue with a short loop of its own."""
    code = [("MOV R1, c[0x0][0x28]", 5, "selected")] * 4
    loop_start = len(code)
    code += [("FMNMX R0, R1, R2, !PT", 10, "wait")] * 30
    code += [("MUFU.EX2 R3, R4", 40, "wait")] * 64
    code += [("IADD3 R5, R5, 0x1, RZ", 1, "selected")] * 35
    code += [(f"BRA ->{loop_start}", 20, "long_sb")]
    short = len(code)
    code += [("FADD R6, R6, R7", 3, "selected")] * 5 + [(f"BRA ->{short}", 1, "selected")]
    return [*code, ("EXIT", 0, "selected")]


def test_the_hottest_loop_by_opcode_reason_and_runs(tmp_path: Path) -> None:
    result = _run(_page(tmp_path / "page.csv", _kernel()))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    loop_samples = 30 * 10 + 64 * 40 + 35 + 20
    total = loop_samples + 4 * 5 + 5 * 3 + 1
    assert lines[0] == (
        f"loop 0x40-0x850: 130 instructions, {100 * loop_samples / total:.1f}% of the "
        "launch's samples"
    )
    assert lines[1].startswith(f"  by opcode: MUFU {100 * 64 * 40 / loop_samples:.1f}%, FMNMX")
    assert lines[2].startswith(f"  by stall reason: wait {100 * 2860 / loop_samples:.1f}%")
    runs = [line.split() for line in lines[4:]]
    assert [run[0] for run in runs] == ["FMNMX", "MUFU", "IADD3", "BRA"]
    assert runs[1][2] == "x64"


def test_list_prints_every_instruction_of_the_chosen_loop(tmp_path: Path) -> None:
    result = _run(_page(tmp_path / "page.csv", _kernel()), "--loop", "0", "--list")
    assert result.returncode == 0, result.stderr
    listed = result.stdout.splitlines()[3:]
    assert len(listed) == 130
    assert listed[0].split()[:3] == ["0x00040", "10", "FMNMX"]
    assert listed[-1].split()[-2:] == ["long_sb", "20"]


def test_a_page_without_a_long_loop_is_refused(tmp_path: Path) -> None:
    code = [("FADD R6, R6, R7", 3, "selected")] * 5 + [("BRA ->0", 1, "selected")]
    result = _run(_page(tmp_path / "page.csv", code))
    assert result.returncode == 1
    assert "no loop of 100+ instructions" in result.stderr


def test_a_missing_file_a_page_without_samples_and_a_bad_loop_get_clear_errors(
    tmp_path: Path,
) -> None:
    missing = _run(tmp_path / "absent.csv")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert "absent.csv: cannot read it" in missing.stderr
    details = tmp_path / "details.csv"
    details.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"0","_kernel","1.5"\n')
    wrong = _run(details)
    assert wrong.returncode == 2
    assert "no SASS source page with warp-state samples" in wrong.stderr
    beyond = _run(_page(tmp_path / "page.csv", _kernel()), "--loop", "1")
    assert beyond.returncode == 2
    assert "--loop 1: the page has loops 0 to 0" in beyond.stderr
