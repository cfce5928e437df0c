"""Translate a KernelPolicy and an ExecutionPolicy into values of PyTorch's switches.

Pure planning, no side effects: :func:`plan` says which switch gets which value and why, and
which policy entries PyTorch cannot honour on the devices the training runs on.
:mod:`xpuruntime.pytorch.policy` writes the plan, reads every switch back and records what was
honoured; the ops and ``explain()`` check the devices steps actually run on against
:func:`kernel_devices`.

This mapping is PyTorch training's kernel table: :func:`supported_kernels` publishes it
(entry-point group ``xpuruntime.kernel_support``) for ``xpuruntime-policy kernels`` and the
policy vocabulary, so the listing says exactly what this module accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xpuruntime.kernels.attention import HOPPER_KERNEL as XRT_HOPPER_KERNEL
from xpuruntime.kernels.attention import KERNEL as XRT_ATTENTION_KERNEL
from xpuruntime.kernels.attention.support import device_kinds as xrt_attention_devices
from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.policies.vocabulary import SupportedKernel
from xpuruntime.pytorch._compat import SDPBackend
from xpuruntime.pytorch.switches import SWITCHES

__all__ = [
    "ATTENTION_BACKENDS",
    "ATTENTION_DEVICES",
    "CONV_KERNELS",
    "LAYERNORM_KERNELS",
    "MATMUL_LIBRARIES",
    "RMSNORM_KERNELS",
    "Plan",
    "PlannedSetting",
    "Unapplicable",
    "kernel_devices",
    "plan",
    "supported_kernels",
]

_CPU = frozenset({"cpu"})
_CUDA = frozenset({"cuda"})
_ANY = frozenset({"cpu", "cuda"})

# KernelPolicy matmul kernel -> torch.backends.cuda.preferred_blas_library value (CUDA only).
MATMUL_LIBRARIES = {"cublas": "cublas", "cublasLt": "cublaslt"}

# The CPU GEMM (MKL / oneDNN / OpenBLAS, whichever this PyTorch was built with) is what
# aten::mm runs on CPU tensors: nothing to switch.
MATMUL_CPU = "cpu"

# KernelPolicy attention kernel -> SDPA backend and its global enable switch.
ATTENTION_BACKENDS: dict[str, tuple[SDPBackend, str]] = {
    "flash_v2": (SDPBackend.FLASH_ATTENTION, "sdp.flash"),
    "efficient": (SDPBackend.EFFICIENT_ATTENTION, "sdp.mem_efficient"),
    "cudnn": (SDPBackend.CUDNN_ATTENTION, "sdp.cudnn"),
    "math": (SDPBackend.MATH, "sdp.math"),
}
# Where each backend runs: FlashAttention-2, memory-efficient and cuDNN attention are CUDA
# kernels (PyTorch's CPU "flash" backend is a different, CPU kernel: not FlashAttention-2).
# xpuruntime's own kernel (the core's Triton kernels) runs on CUDA through ops.fused_attention
# (and on the CPU inside Triton's interpreter, for tests); its Hopper forward (Gluon, with the
# Triton backward) on CUDA only.
ATTENTION_DEVICES = {
    "flash_v2": _CUDA,
    "efficient": _CUDA,
    "cudnn": _CUDA,
    "math": _ANY,
    XRT_ATTENTION_KERNEL: xrt_attention_devices(),
    XRT_HOPPER_KERNEL: _CUDA,
}

# ops.fused_layernorm / fused_rmsnorm kernels -> devices: the core's ("xrt"; "cpu" is its CPU
# reference) or PyTorch's.
LAYERNORM_KERNELS = {"xrt": _ANY, "cpu": _CPU, "torch": _ANY}
RMSNORM_KERNELS = LAYERNORM_KERNELS

# ops.fused_linear kernels -> devices: the core's cuBLASLt epilogues, its CPU reference, or
# PyTorch's.
LINEAR_KERNELS = {"cublasLt": _CUDA, "cpu": _CPU, "torch": _ANY}

# conv kernel -> (the switch enabling its library for PyTorch's convolutions, devices).
CONV_KERNELS = {"cudnn": ("cudnn.enabled", _CUDA), "onednn": ("mkldnn.enabled", _CPU)}

#: op -> kernel -> device kinds PyTorch training runs it on: the whole table.
_KERNEL_DEVICES: dict[str, dict[str, frozenset[str]]] = {
    "matmul": {"torch": _ANY, MATMUL_CPU: _CPU, **dict.fromkeys(MATMUL_LIBRARIES, _CUDA)},
    "attention": ATTENTION_DEVICES,  # fused_attention without a kernel: PyTorch's choice
    "layernorm": LAYERNORM_KERNELS,
    "rmsnorm": RMSNORM_KERNELS,
    "linear": LINEAR_KERNELS,
    "conv": {"torch": _ANY, **{kernel: devices for kernel, (_, devices) in CONV_KERNELS.items()}},
}

# ExecutionPolicy precision -> fp32 matmul/conv math allowed (reduced precisions accept TF32).
_TF32_PRECISIONS = {"fp32": False, "tf32": True, "fp16": True, "bf16": True}

_DETERMINISTIC_CUBLAS_WORKSPACE = ":4096:8"


def kernel_devices(op: str, kernel: str) -> frozenset[str] | None:
    """Device kinds PyTorch training runs ``kernel`` for ``op`` on; None when it has no such
    kernel (``"auto"``, PyTorch's own choice, runs everywhere)."""
    kernels = _KERNEL_DEVICES.get(op)
    if kernels is None:
        return None
    if kernel == "auto":
        return _ANY
    return kernels.get(kernel)


def supported_kernels() -> list[SupportedKernel]:
    """This mapping as kernel-table rows (entry point ``torch`` of
    ``xpuruntime.kernel_support``)."""
    return [
        SupportedKernel(op, kernel, devices)
        for op, kernels in _KERNEL_DEVICES.items()
        for kernel, devices in kernels.items()
    ]


@dataclass(frozen=True)
class PlannedSetting:
    """One policy setting: what was asked, the switch values that implement it, and why.

    ``mode`` is the KernelPolicy mode (``"pin"``/``"prefer"``) of a kernel entry, None for an
    execution setting: a kernel not honoured follows the kernel fallback rule.
    """

    name: str
    requested: Any
    writes: dict[str, Any]
    note: str = ""
    mode: str | None = None


@dataclass(frozen=True)
class Unapplicable:
    """A policy entry PyTorch cannot honour here (no such kernel, or not on these devices).

    ``mode`` as in :class:`PlannedSetting`.
    """

    name: str
    requested: str
    reason: str
    mode: str | None


@dataclass
class Plan:
    settings: list[PlannedSetting] = field(default_factory=list)
    unapplicable: list[Unapplicable] = field(default_factory=list)

    def writes(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for setting in self.settings:
            merged.update(setting.writes)
        return merged


_Planner = Callable[[str, str, Plan], None]


def _default_note(op: str) -> str:
    return f"{op}: PyTorch's default selection, nothing switched"


def _plan_matmul(kernel: str, mode: str, out: Plan) -> None:
    if kernel in MATMUL_LIBRARIES:
        out.settings.append(
            PlannedSetting(
                "matmul",
                kernel,
                {"preferred_blas_library": MATMUL_LIBRARIES[kernel]},
                "torch.backends.cuda.preferred_blas_library (CUDA matmuls)",
                mode,
            )
        )
    elif kernel == MATMUL_CPU:
        note = "PyTorch's CPU GEMM runs CPU matmuls; nothing switched"
        out.settings.append(PlannedSetting("matmul", kernel, {}, note, mode))
    else:
        out.settings.append(PlannedSetting("matmul", kernel, {}, _default_note("matmul"), mode))


_XRT_ATTENTION_KERNELS = {
    XRT_ATTENTION_KERNEL: "xpuruntime's Triton kernels",
    XRT_HOPPER_KERNEL: "xpuruntime's Hopper forward and backward (Gluon; head size 256: Triton "
    "backward)",
}


def _plan_attention(kernel: str, mode: str, out: Plan) -> None:
    what = _XRT_ATTENTION_KERNELS.get(kernel)
    if what is not None:  # ops.fused_attention's own (the core's) kernels
        note = (
            f"selects {what} in xpuruntime.pytorch.ops.fused_attention; "
            "F.scaled_dot_product_attention keeps PyTorch's backends (aten ops are never "
            "overridden)"
        )
        out.settings.append(PlannedSetting("attention", kernel, {}, note, mode))
        return
    if kernel not in ATTENTION_BACKENDS:
        out.settings.append(
            PlannedSetting("attention", kernel, {}, _default_note("attention"), mode)
        )
        return
    backend, switch = ATTENTION_BACKENDS[kernel]
    if mode == "pin":
        # Only the pinned backend stays enabled, so SDPA cannot pick another one silently:
        # a call it cannot serve fails with PyTorch's "No available kernel" and reasons.
        writes: dict[str, Any] = {name: name == switch for _, name in ATTENTION_BACKENDS.values()}
        note = f"SDPA restricted to {backend.name}; other backends disabled"
    else:
        writes = {switch: True}
        note = f"SDPA {backend.name} enabled and tried first"
        if SWITCHES["sdp.priority_order"].available():
            order = [int(b) for b in SWITCHES["sdp.priority_order"].read()]
            writes["sdp.priority_order"] = [backend.value] + [
                b for b in order if b != backend.value
            ]
        else:
            note += " (this PyTorch has no SDPA priority order; its built-in order applies)"
    out.settings.append(PlannedSetting("attention", kernel, writes, note, mode))


def _norm_planner(op: str, module: str) -> _Planner:
    def plan_norm(kernel: str, mode: str, out: Plan) -> None:
        note = (
            f"selects the kernel of xpuruntime.pytorch.ops.fused_{op} (and fused_add_{op}); "
            f"{module} keeps PyTorch's kernel (aten ops are never overridden)"
        )
        out.settings.append(PlannedSetting(op, kernel, {}, note, mode))

    return plan_norm


def _plan_conv(kernel: str, mode: str, out: Plan) -> None:
    if kernel in CONV_KERNELS:
        switch, _ = CONV_KERNELS[kernel]
        note = f"torch.backends.{switch} (PyTorch uses the library where it supports the call)"
        out.settings.append(PlannedSetting("conv", kernel, {switch: True}, note, mode))
    else:
        out.settings.append(PlannedSetting("conv", kernel, {}, _default_note("conv"), mode))


def _plan_linear(kernel: str, mode: str, out: Plan) -> None:
    note = (
        "selects the kernel of xpuruntime.pytorch.ops.fused_linear; torch.nn.Linear keeps "
        "PyTorch's kernel (aten ops are never overridden)"
    )
    out.settings.append(PlannedSetting("linear", kernel, {}, note, mode))


_OP_PLANNERS: dict[str, _Planner] = {
    "matmul": _plan_matmul,
    "attention": _plan_attention,
    "layernorm": _norm_planner("layernorm", "torch.nn.LayerNorm"),
    "rmsnorm": _norm_planner("rmsnorm", "torch.nn.RMSNorm"),
    "linear": _plan_linear,
    "conv": _plan_conv,
}


def _unapplicable_reason(op: str, kernel: str, devices: frozenset[str]) -> str | None:
    """Why PyTorch cannot honour ``kernel`` for ``op`` on ``devices``; None when it can."""
    if op not in _KERNEL_DEVICES:
        return (
            f"xpuruntime.pytorch applies kernel policy to ops {sorted(_KERNEL_DEVICES)}; "
            f"{op!r} has no PyTorch switch"
        )
    runs_on = kernel_devices(op, kernel)
    if runs_on is None:
        return (
            f"PyTorch training has no {kernel!r} kernel for {op} (its kernels: "
            f"{sorted(_KERNEL_DEVICES[op])})"
        )
    if not runs_on & devices:
        return (
            f"{kernel!r} runs on {'/'.join(sorted(runs_on))} and this training runs on "
            f"{'/'.join(sorted(devices)) or 'no device'}"
        )
    return None


def _plan_kernels(policy: KernelPolicy, devices: frozenset[str], out: Plan) -> None:
    for op, entry in policy.entries.items():
        if entry.mode == "auto" or entry.kernel is None:
            if op in _OP_PLANNERS:
                out.settings.append(PlannedSetting(op, "auto", {}, _default_note(op)))
            continue
        reason = _unapplicable_reason(op, entry.kernel, devices)
        if reason is not None:
            out.unapplicable.append(Unapplicable(op, entry.kernel, reason, entry.mode))
        else:
            _OP_PLANNERS[op](entry.kernel, entry.mode, out)


def _fp32_writes(tf32: bool) -> dict[str, Any]:
    if SWITCHES["cuda.matmul.fp32_precision"].available():
        value = "tf32" if tf32 else "ieee"
        return {
            "cuda.matmul.fp32_precision": value,
            "cudnn.conv.fp32_precision": value,
            "cudnn.rnn.fp32_precision": value,
        }
    return {
        "cuda.matmul.allow_tf32": tf32,
        "cudnn.allow_tf32": tf32,
        "float32_matmul_precision": "high" if tf32 else "highest",
    }


def _plan_execution(execution: ExecutionPolicy, settings: frozenset[str] | None, out: Plan) -> None:
    def wanted(*names: str) -> bool:
        return settings is None or any(name in settings for name in names)

    if wanted("precision"):
        _plan_precision(execution.precision, out)
    deterministic = execution.deterministic
    if wanted("deterministic"):
        _plan_determinism(deterministic, out)
    if wanted("performance_hint", "deterministic"):
        # cuDNN autotuning times algorithms per shape: worth it for throughput, not for
        # latency of changing shapes, and never under determinism (timing picks the algorithm).
        benchmark = execution.performance_hint == "throughput" and not deterministic
        out.settings.append(
            PlannedSetting(
                "cudnn_benchmark",
                benchmark,
                {"cudnn.benchmark": benchmark},
                f"performance_hint={execution.performance_hint!r}, deterministic={deterministic}",
            )
        )


def _plan_precision(precision: str, out: Plan) -> None:
    if precision in _TF32_PRECISIONS:
        tf32 = _TF32_PRECISIONS[precision]
        note = "fp32 matmul/conv may use TF32" if tf32 else "fp32 matmul/conv in full IEEE fp32"
        if precision in ("fp16", "bf16"):
            note += f"; {precision} compute comes from xpuruntime.pytorch.autocast()"
        out.settings.append(PlannedSetting("precision", precision, _fp32_writes(tf32), note))
    else:
        out.unapplicable.append(
            Unapplicable(
                "precision",
                precision,
                f"PyTorch training has no global {precision} switch (use quantization-aware "
                f"tooling); valid training precisions: {sorted(_TF32_PRECISIONS)}",
                None,
            )
        )


def _plan_determinism(deterministic: bool, out: Plan) -> None:
    writes: dict[str, Any] = {
        "deterministic_algorithms": "on" if deterministic else "off",
        "cudnn.deterministic": deterministic,
    }
    note = "torch.use_deterministic_algorithms + cudnn.deterministic"
    if deterministic and SWITCHES["env.CUBLAS_WORKSPACE_CONFIG"].read() is None:
        writes["env.CUBLAS_WORKSPACE_CONFIG"] = _DETERMINISTIC_CUBLAS_WORKSPACE
        note += f"; CUBLAS_WORKSPACE_CONFIG={_DETERMINISTIC_CUBLAS_WORKSPACE} (cuBLAS determinism)"
    out.settings.append(PlannedSetting("deterministic", deterministic, writes, note))


def plan(
    kernel_policy: KernelPolicy | None,
    execution: ExecutionPolicy | None,
    devices: frozenset[str],
    execution_settings: frozenset[str] | None = None,
) -> Plan:
    """The switch values implementing the policies (``None`` parts leave PyTorch alone).

    ``devices`` are the device kinds the training may run on: a kernel that runs on none of
    them is unapplicable. ``execution_settings`` names the ExecutionPolicy fields to apply
    (``precision``, ``deterministic``, ``performance_hint``); None applies all of them.
    """
    out = Plan()
    if kernel_policy is not None:
        _plan_kernels(kernel_policy, devices, out)
    if execution is not None:
        _plan_execution(execution, execution_settings, out)
    return out
