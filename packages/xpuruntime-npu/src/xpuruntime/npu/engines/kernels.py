"""Which KernelPolicy kernels the NPU engines honour, per device kind.

OpenVINO and QNN choose their kernels themselves and have no option to pin one. What a pin
can still mean: OpenVINO's CPU plugin runs its own CPU kernels (built on oneDNN), so a policy
asking for the CPU GEMM, CPU layer norm or oneDNN convolution on the CPU is what runs; on an
NPU or through QNN no kernel the vocabulary names is guaranteed. One table serves both the
engines (:func:`kernel_support`, applied when a session is created) and the listing
(:func:`openvino_kernels` / :func:`qnn_kernels`, entry-point group
``xpuruntime.kernel_support``), so they cannot disagree.
"""

from __future__ import annotations

from xpuruntime.inference.kernel_mapping import KernelSupport, SupportTable
from xpuruntime.policies.vocabulary import SupportedKernel

__all__ = ["kernel_support", "openvino_kernels", "qnn_kernels"]

_OPENVINO_CPU = "OpenVINO's CPU plugin runs its own (oneDNN-based) CPU kernels"

#: engine -> (device kind, op, kernel) -> how the engine acts on it.
_TABLES: dict[str, dict[tuple[str, str, str], KernelSupport]] = {
    "openvino": {
        ("cpu", "matmul", "cpu"): KernelSupport(True, note=_OPENVINO_CPU),
        ("cpu", "layernorm", "cpu"): KernelSupport(True, note=_OPENVINO_CPU),
        ("cpu", "conv", "onednn"): KernelSupport(True, note=_OPENVINO_CPU),
    },
    "qnn": {},
}


def kernel_support(engine: str, device: str) -> SupportTable:
    """What ``engine`` can do with a KernelPolicy entry on device kind ``device``."""
    table = _TABLES[engine]

    def support(op: str, kernel: str) -> KernelSupport | None:
        return table.get((device, op, kernel))

    return support


def _published(engine: str) -> list[SupportedKernel]:
    devices: dict[tuple[str, str], set[str]] = {}
    notes: dict[tuple[str, str], str] = {}
    for (device, op, kernel), found in _TABLES[engine].items():
        devices.setdefault((op, kernel), set()).add(device)
        notes[(op, kernel)] = found.note
    return [
        SupportedKernel(op, kernel, frozenset(kinds), note=notes[(op, kernel)])
        for (op, kernel), kinds in devices.items()
    ]


def openvino_kernels() -> list[SupportedKernel]:
    """OpenVINO's table, published."""
    return _published("openvino")


def qnn_kernels() -> list[SupportedKernel]:
    """QNN's table, published (empty: QNN cannot be told which kernel to run)."""
    return _published("qnn")
