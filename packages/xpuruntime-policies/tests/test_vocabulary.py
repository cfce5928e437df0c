"""The vocabulary: built-in ops/kernels/engines and plugins through entry points.

Plugins are real distributions on sys.path (a dist-info folder with entry_points.txt), found
by importlib.metadata exactly as an installed plugin would be.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from xpuruntime.policies import (
    ExecutionPolicy,
    KernelPolicy,
    UnknownKernelError,
    UnknownOpError,
    json_schema,
    vocabulary,
)

PLUGIN_MODULE = """
from xpuruntime.policies.vocabulary import KernelSpec


def kernels():
    return [
        KernelSpec("softmax", "xrt_softmax", "cuda", frozenset({"cuda"}), frozenset({"xpuruntime"})),
        KernelSpec("matmul", "cutlass", "cuda", frozenset({"cuda"}), frozenset({"tensorrt"})),
        KernelSpec("matmul", "cublas", "cuda", frozenset({"cuda"}), frozenset({"torch"})),
        "not a spec",
    ]
"""

ENTRY_POINTS = """\
[xpuruntime.kernels]
demo = xrt_demo_kernels:kernels
broken = xrt_missing_module:kernels

[xpuruntime.engines]
mygpu = xrt_demo_kernels:Engine
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site"
    dist_info = site / "xrt_demo_kernels-0.1.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: xrt-demo-kernels\nVersion: 0.1\n"
    )
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS)
    (site / "xrt_demo_kernels.py").write_text(PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(site))
    vocabulary.refresh()
    yield site
    monkeypatch.delitem(sys.modules, "xrt_demo_kernels", raising=False)
    vocabulary.refresh()


def test_builtin_vocabulary() -> None:
    assert {"matmul", "attention", "layernorm", "conv"} <= set(vocabulary.known_ops())
    assert [spec.name for spec in vocabulary.kernels_for("matmul")][:4] == [
        "cublas",
        "cublasLt",
        "cpu",
        "torch",
    ]
    spec = vocabulary.find_kernel("attention", "flash_v2")
    assert spec.devices == frozenset({"cuda"})
    assert vocabulary.canonical_engine("onnxrt") == "onnxruntime"


def test_builtin_names_need_no_plugin_import(plugin: Path) -> None:
    KernelPolicy(matmul="cublasLt")
    assert "xrt_demo_kernels" not in sys.modules


def test_plugin_kernels_and_ops(plugin: Path) -> None:
    policy = KernelPolicy(softmax="xrt_softmax", matmul="cutlass")
    assert policy.get("softmax") == "xrt_softmax"
    assert "xrt_demo_kernels" in sys.modules
    assert "softmax" in vocabulary.known_ops()
    assert json_schema()["$defs"]["KernelSection"]["properties"]["ops"]["properties"]["softmax"]


def test_plugin_problems_are_reported_not_hidden(plugin: Path) -> None:
    problems = {(problem.entry_point, problem.reason) for problem in vocabulary.plugin_problems()}
    assert (
        "broken = xrt_missing_module:kernels",
        "ModuleNotFoundError: No module named 'xrt_missing_module'",
    ) in problems
    reasons = [problem.reason for problem in vocabulary.plugin_problems()]
    assert "provided 'not a spec', not a KernelSpec" in reasons
    assert "kernel 'cublas' for op 'matmul' already exists" in reasons
    with pytest.raises(UnknownKernelError, match=r"Kernel plugins that failed to load: .*broken"):
        KernelPolicy(softmax="xrt_softmx")
    with pytest.raises(UnknownOpError, match=r"Did you mean 'softmax'\?"):
        KernelPolicy(sofmax="auto")


def test_plugin_engines_are_known_by_name(plugin: Path) -> None:
    policy = ExecutionPolicy(engines=["mygpu"], device="cuda")
    assert policy.engines == ["mygpu"]
    assert (
        "mygpu"
        in json_schema()["$defs"]["ExecutionSection"]["properties"]["engines"]["items"]["enum"]
    )


def test_a_policy_naming_a_missing_plugin_says_so() -> None:
    with pytest.raises(UnknownOpError, match=r"unknown op 'softmax'.*'xpuruntime\.kernels'"):
        KernelPolicy(softmax="xrt_softmax")


TABLE_MODULE = """
from xpuruntime.policies.vocabulary import SupportedKernel


def mygpu_kernels():
    return [
        SupportedKernel("matmul", "cublas", frozenset({"cuda"})),
        SupportedKernel("matmul", "cublasLt", frozenset({"cuda"}), enforced=False, note="steers"),
        SupportedKernel("conv", "aten", frozenset({"cuda"})),
        SupportedKernel("matmul", "nope", frozenset({"cuda"})),
        SupportedKernel("matmul", "cpu", frozenset({"tpu"})),
        "not a row",
    ]
"""

TABLE_ENTRY_POINTS = """\
[xpuruntime.engines]
mygpu = xrt_demo_table:Engine

[xpuruntime.kernel_support]
mygpu = xrt_demo_table:mygpu_kernels
broken = xrt_missing_table:kernels
"""


@pytest.fixture
def engine_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site"
    dist_info = site / "xrt_demo_table-0.2.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: xrt-demo-table\nVersion: 0.2\n"
    )
    (dist_info / "entry_points.txt").write_text(TABLE_ENTRY_POINTS)
    (site / "xrt_demo_table.py").write_text(TABLE_MODULE)
    monkeypatch.syspath_prepend(str(site))
    vocabulary.refresh()
    yield site
    sys.modules.pop("xrt_demo_table", None)  # not monkeypatch: its undo would put it back
    vocabulary.refresh()


def test_an_engine_publishes_its_table(engine_table: Path) -> None:
    table = vocabulary.engine_tables()["mygpu"]
    assert table.published
    assert table.source == "xrt-demo-table 0.2 (xrt_demo_table:mygpu_kernels)"
    assert table.honours("matmul", "cublas", "cuda")
    assert not table.honours("matmul", "cublas", "cpu")
    assert not table.honours("matmul", "cublasLt", "cuda")  # steers only
    # an alias is stored as the kernel's name, as policies store it
    assert table.honours("conv", "torch", "cuda")
    support = vocabulary.kernel_support("matmul", "cublasLt")
    row, _ = support["mygpu"]
    assert (row.enforced, row.note) == (False, "steers")


def test_unusable_rows_and_tables_are_reported_not_hidden(engine_table: Path) -> None:
    reasons = {(p.entry_point, p.reason.split(".")[0]) for p in vocabulary.table_problems()}
    label = "mygpu = xrt_demo_table:mygpu_kernels"
    assert (label, "unknown kernel 'nope' for op 'matmul'") in reasons
    assert (label, "matmul/cpu: unknown devices ['tpu']") in reasons
    assert (label, "provided 'not a row', not a SupportedKernel") in reasons
    assert any(entry == "broken = xrt_missing_table:kernels" for entry, _ in reasons)
    assert len(vocabulary.engine_tables()["mygpu"].kernels) == 3


def test_engines_without_a_table_are_described_by_the_built_in_list(engine_table: Path) -> None:
    tables = vocabulary.engine_tables()
    for name in ("tensorrt", "onnxruntime", "openvino", "qnn", "torch", "xpuruntime"):
        table = tables[name]
        if not table.published:
            assert table.source.startswith("built-in list: ")
            assert table.kernels == vocabulary.declared_kernels(name)
    declared = {(row.op, row.kernel) for row in vocabulary.declared_kernels("onnxruntime")}
    assert ("matmul", "cublas") in declared
    assert ("matmul", "cublasLt") not in declared  # ONNX Runtime cannot guarantee cuBLASLt


def test_validating_a_policy_reads_no_engine_table(engine_table: Path) -> None:
    ExecutionPolicy(device="cuda", kernel_policy=KernelPolicy(matmul="cublas", conv="cudnn"))
    assert "xrt_demo_table" not in sys.modules
