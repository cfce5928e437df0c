"""Which KernelPolicy kernels ONNX Runtime can act on, per execution provider.

One table serves both sides: :func:`kernel_support` is what the engine applies when it
creates a session, and :func:`supported_kernels` publishes the same rows (entry-point group
``xpuruntime.kernel_support``) for ``xpuruntime-policy kernels`` and the policy vocabulary,
so the listing cannot say something the engine does not do. Imports nothing of ONNX
Runtime.
"""

from __future__ import annotations

from xpuruntime.inference.engines.ort_options import CPU_EP, CUDA_EP
from xpuruntime.inference.kernel_mapping import KernelSupport, SupportTable
from xpuruntime.policies.vocabulary import SupportedKernel

__all__ = ["PROVIDER_DEVICES", "kernel_support", "supported_kernels"]

#: The device kind each execution provider runs on.
PROVIDER_DEVICES = {CPU_EP: "cpu", CUDA_EP: "cuda"}

# Bits of the CUDA EP's ``sdpa_kernel`` option (contrib attention ops' backend mask).
_SDPA_KERNELS = {"flash_v2": 1, "efficient": 2, "cudnn": 8, "math": 16}

_CPU_OWN = "the CPU execution provider runs its own kernels"

#: (provider, op, kernel) -> how ONNX Runtime acts on it; absent: it cannot act on it at all.
_TABLE: dict[tuple[str, str, str], KernelSupport] = {
    (CPU_EP, "matmul", "cpu"): KernelSupport(True, note=_CPU_OWN),
    (CPU_EP, "layernorm", "cpu"): KernelSupport(True, note=_CPU_OWN),
    (CPU_EP, "rmsnorm", "cpu"): KernelSupport(True, note=_CPU_OWN),
    (CPU_EP, "linear", "cpu"): KernelSupport(True, note=_CPU_OWN),
    (CPU_EP, "attention", "math"): KernelSupport(
        True, note="the CPU execution provider's attention is unfused"
    ),
    (CUDA_EP, "matmul", "cublas"): KernelSupport(
        True, note="the CUDA EP runs MatMul/Gemm through cuBLAS"
    ),
    (CUDA_EP, "matmul", "cublasLt"): KernelSupport(
        False,
        note="the CUDA EP calls cuBLAS; cuBLASLt only for some fp8/int8 contrib ops, with no "
        "option to require it",
    ),
    (CUDA_EP, "conv", "cudnn"): KernelSupport(True, note="the CUDA EP runs Conv through cuDNN"),
    **{
        (CUDA_EP, "attention", kernel): KernelSupport(
            True, "sdpa_kernel", bit, "the CUDA EP's attention ops use only this backend"
        )
        for kernel, bit in _SDPA_KERNELS.items()
    },
}


def kernel_support(provider: str) -> SupportTable:
    """What ONNX Runtime can do with a KernelPolicy entry on ``provider``."""

    def support(op: str, kernel: str) -> KernelSupport | None:
        return _TABLE.get((provider, op, kernel))

    return support


def supported_kernels() -> list[SupportedKernel]:
    """The table as published rows: one per (op, kernel, enforced), devices merged."""
    devices: dict[tuple[str, str, bool], set[str]] = {}
    notes: dict[tuple[str, str, bool], str] = {}
    for (provider, op, kernel), found in _TABLE.items():
        key = (op, kernel, found.enforced)
        devices.setdefault(key, set()).add(PROVIDER_DEVICES[provider])
        notes.setdefault(key, found.note)
    return [
        SupportedKernel(op, kernel, frozenset(kinds), enforced, notes[(op, kernel, enforced)])
        for (op, kernel, enforced), kinds in devices.items()
    ]
