"""The user guide's examples and tables agree with the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from xpuruntime.policies import (
    BestPerformance,
    ExecutionPolicy,
    KernelPolicy,
    OpPolicy,
    PolicyDocument,
    vocabulary,
)
from xpuruntime.policies.execution_policy import SECTION_FIELDS

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "packages" / "policies.md"

pytestmark = pytest.mark.skipif(not GUIDE.exists(), reason="the docs folder is not here")


def _table_rows(heading: str) -> dict[str, str]:
    """First two columns of the table under ``heading``: `name` -> second cell."""
    text = GUIDE.read_text(encoding="utf-8").split(heading, 1)[1]
    rows: dict[str, str] = {}
    for line in text.splitlines()[2:]:
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells[1]
        elif rows and not line.startswith("|"):
            break
    return rows


def test_settings_table_lists_every_setting_with_its_default() -> None:
    rows = _table_rows("| setting | default | values |")
    assert set(rows) == {*SECTION_FIELDS, "kernel_policy"}
    defaults = ExecutionPolicy().to_dict()["execution"]
    for name, cell in rows.items():
        documented = json.loads(cell.strip("`"))
        assert documented == defaults.get(name), name


def test_kernel_table_matches_the_vocabulary() -> None:
    for op, cell in _table_rows("| op | kernels |").items():
        documented = re.findall(r"`([^`]+)`", cell)
        assert documented == [spec.name for spec in vocabulary.kernels_for(op)], op


def test_repr_example() -> None:
    policy = KernelPolicy(matmul="cublasLt", strategy=BestPerformance)
    policy.set("attention", "flash_v2", mode="prefer").set("conv", "auto").remove("conv")
    assert repr(policy) in GUIDE.read_text(encoding="utf-8")
    assert policy.entries["attention"] == OpPolicy(kernel="flash_v2", mode="prefer")


def test_yaml_example_is_valid() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    document = PolicyDocument.loads(example, "yaml")
    assert document.kernel_policy().mode("attention") == "prefer"
    assert document.execution_policy().memory.limit_bytes == 8 << 30
