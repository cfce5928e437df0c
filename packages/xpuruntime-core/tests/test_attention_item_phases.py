"""scripts/attention_item_phases.py: its in-memory patch of the Gluon Hopper forward still
finds every place it reads the clock at (the GPU run itself needs an H100/H200)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

CORE = Path(__file__).resolve().parents[1]
KERNELS = CORE / "src" / "xpuruntime" / "kernels" / "attention" / "_hopper_kernels.py"


def test_patch_reads_the_clock_at_every_phase_edge_and_stores_the_phases(
    core_script: Callable[[str], ModuleType],
) -> None:
    script = core_script("attention_item_phases")
    patched = script.patch(KERNELS.read_text())
    reads = re.findall(r"\b(c\d) = _clock\(", patched)
    assert reads == ["c0", "c1", "c2", "c3", "c4", "c5"]  # in the consumer's order
    assert patched.count("gl.store(lse_ptrs, d.to(gl.float32), mask=(i < 8) & (rows < len_q))") == 1
    assert len(script.PHASES) == 6
    compile(patched, str(KERNELS), "exec")  # still Python


def test_patch_names_an_anchor_the_kernel_lost(core_script: Callable[[str], ModuleType]) -> None:
    script = core_script("attention_item_phases")
    source = KERNELS.read_text().replace("def _box(", "def _boxed(")
    with pytest.raises(ValueError, match="0 copies of this anchor"):
        script.patch(source)
