"""Translate a KernelPolicy and an ExecutionPolicy into values of PyTorch's switches.

Pure planning, no side effects: :func:`plan` says which switch gets which value and why, and
which policy entries PyTorch has no switch for. :mod:`xpuruntime.pytorch.policy` writes the
plan, reads every switch back and records what was honoured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.pytorch._compat import SDPBackend
from xpuruntime.pytorch.switches import SWITCHES

__all__ = [
    "ATTENTION_BACKENDS",
    "LAYERNORM_KERNELS",
    "MATMUL_LIBRARIES",
    "PYTORCH_DEFAULT",
    "Plan",
    "PlannedSetting",
    "plan",
]

# Kernel names that mean "leave it to PyTorch": nothing to switch.
PYTORCH_DEFAULT = frozenset({"auto", "torch", "aten"})

# KernelPolicy matmul kernel -> torch.backends.cuda.preferred_blas_library value.
MATMUL_LIBRARIES = {"cublas": "cublas", "cublasLt": "cublaslt"}

# KernelPolicy attention kernel -> SDPA backend and its global enable switch.
ATTENTION_BACKENDS: dict[str, tuple[SDPBackend, str]] = {
    "flash_v2": (SDPBackend.FLASH_ATTENTION, "sdp.flash"),
    "efficient": (SDPBackend.EFFICIENT_ATTENTION, "sdp.mem_efficient"),
    "cudnn": (SDPBackend.CUDNN_ATTENTION, "sdp.cudnn"),
    "math": (SDPBackend.MATH, "sdp.math"),
}

# ops.fused_layernorm kernels: the core's ("xrt") or PyTorch's.
LAYERNORM_KERNELS = frozenset({"xrt", "cpu", "torch"})

# ops.fused_linear kernels: the core's cuBLASLt epilogues, its CPU reference, or PyTorch's.
LINEAR_KERNELS = frozenset({"cublasLt", "cpu", "torch"})

CONV_KERNELS = {"cudnn": True}

# ExecutionPolicy precision -> fp32 matmul/conv math allowed (reduced precisions accept TF32).
_TF32_PRECISIONS = {"fp32": False, "tf32": True, "fp16": True, "bf16": True}

_DETERMINISTIC_CUBLAS_WORKSPACE = ":4096:8"


@dataclass(frozen=True)
class PlannedSetting:
    """One policy setting: what was asked, the switch values that implement it, and why."""

    name: str
    requested: Any
    writes: dict[str, Any]
    note: str = ""
    pinned: bool = False  # a pinned kernel: not honouring it raises instead of recording


@dataclass(frozen=True)
class Unapplicable:
    """A policy entry PyTorch has no switch or kernel for."""

    name: str
    requested: str
    reason: str
    pinned: bool


@dataclass
class Plan:
    settings: list[PlannedSetting] = field(default_factory=list)
    unapplicable: list[Unapplicable] = field(default_factory=list)

    def writes(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for setting in self.settings:
            merged.update(setting.writes)
        return merged


def _default_note(op: str) -> str:
    return f"{op}: PyTorch's default selection, nothing switched"


def _plan_matmul(kernel: str, pinned: bool, out: Plan) -> None:
    if kernel in PYTORCH_DEFAULT:
        out.settings.append(PlannedSetting("matmul", kernel, {}, _default_note("matmul")))
    elif kernel in MATMUL_LIBRARIES:
        out.settings.append(
            PlannedSetting(
                "matmul",
                kernel,
                {"preferred_blas_library": MATMUL_LIBRARIES[kernel]},
                "torch.backends.cuda.preferred_blas_library (CUDA matmuls)",
                pinned,
            )
        )
    else:
        out.unapplicable.append(
            Unapplicable(
                "matmul",
                kernel,
                f"PyTorch training can select matmul kernels {sorted(MATMUL_LIBRARIES)} "
                f"(or {sorted(PYTORCH_DEFAULT)}), not {kernel!r}",
                pinned,
            )
        )


def _plan_attention(kernel: str, pinned: bool, out: Plan) -> None:
    if kernel in PYTORCH_DEFAULT:
        out.settings.append(PlannedSetting("attention", kernel, {}, _default_note("attention")))
        return
    if kernel not in ATTENTION_BACKENDS:
        out.unapplicable.append(
            Unapplicable(
                "attention",
                kernel,
                f"PyTorch's scaled_dot_product_attention has backends "
                f"{sorted(ATTENTION_BACKENDS)}, not {kernel!r}",
                pinned,
            )
        )
        return
    backend, switch = ATTENTION_BACKENDS[kernel]
    if pinned:
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
    out.settings.append(PlannedSetting("attention", kernel, writes, note, pinned))


def _plan_layernorm(kernel: str, pinned: bool, out: Plan) -> None:
    if kernel in PYTORCH_DEFAULT or kernel in LAYERNORM_KERNELS:
        out.settings.append(
            PlannedSetting(
                "layernorm",
                kernel,
                {},
                "selects the kernel of xpuruntime.pytorch.ops.fused_layernorm; "
                "torch.nn.LayerNorm keeps PyTorch's kernel (aten ops are never overridden)",
            )
        )
    else:
        out.unapplicable.append(
            Unapplicable(
                "layernorm",
                kernel,
                f"ops.fused_layernorm has kernels {sorted(LAYERNORM_KERNELS)}, not {kernel!r}",
                pinned,
            )
        )


def _plan_conv(kernel: str, pinned: bool, out: Plan) -> None:
    if kernel in PYTORCH_DEFAULT:
        out.settings.append(PlannedSetting("conv", kernel, {}, _default_note("conv")))
    elif kernel in CONV_KERNELS:
        out.settings.append(
            PlannedSetting(
                "conv", kernel, {"cudnn.enabled": True}, "torch.backends.cudnn.enabled", pinned
            )
        )
    else:
        out.unapplicable.append(
            Unapplicable(
                "conv",
                kernel,
                f"PyTorch training can select conv kernels {sorted(CONV_KERNELS)}, not {kernel!r}",
                pinned,
            )
        )


def _plan_linear(kernel: str, pinned: bool, out: Plan) -> None:
    if kernel in PYTORCH_DEFAULT or kernel in LINEAR_KERNELS:
        out.settings.append(
            PlannedSetting(
                "linear",
                kernel,
                {},
                "selects the kernel of xpuruntime.pytorch.ops.fused_linear; "
                "torch.nn.Linear keeps PyTorch's kernel (aten ops are never overridden)",
            )
        )
    else:
        out.unapplicable.append(
            Unapplicable(
                "linear",
                kernel,
                f"ops.fused_linear has kernels {sorted(LINEAR_KERNELS)}, not {kernel!r}",
                pinned,
            )
        )


_OP_PLANNERS = {
    "matmul": _plan_matmul,
    "attention": _plan_attention,
    "layernorm": _plan_layernorm,
    "linear": _plan_linear,
    "conv": _plan_conv,
}


def _plan_kernels(policy: KernelPolicy, out: Plan) -> None:
    for op, kernel in policy.preferences.items():
        pinned = policy.mode(op) == "pin"
        planner = _OP_PLANNERS.get(op)
        if planner is None:
            out.unapplicable.append(
                Unapplicable(
                    op,
                    kernel,
                    f"xpuruntime.pytorch applies kernel policy to ops {sorted(_OP_PLANNERS)}; "
                    f"{op!r} has no PyTorch switch",
                    pinned,
                )
            )
        else:
            planner(kernel, pinned, out)


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


def _plan_execution(execution: ExecutionPolicy, out: Plan) -> None:
    precision = execution.precision
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
                False,
            )
        )

    deterministic = execution.deterministic
    writes: dict[str, Any] = {
        "deterministic_algorithms": "on" if deterministic else "off",
        "cudnn.deterministic": deterministic,
    }
    note = "torch.use_deterministic_algorithms + cudnn.deterministic"
    if deterministic and SWITCHES["env.CUBLAS_WORKSPACE_CONFIG"].read() is None:
        writes["env.CUBLAS_WORKSPACE_CONFIG"] = _DETERMINISTIC_CUBLAS_WORKSPACE
        note += f"; CUBLAS_WORKSPACE_CONFIG={_DETERMINISTIC_CUBLAS_WORKSPACE} (cuBLAS determinism)"
    out.settings.append(PlannedSetting("deterministic", deterministic, writes, note))

    # cuDNN autotuning times algorithms per shape: worth it for throughput, not for latency
    # of changing shapes, and never under determinism (timing picks the algorithm).
    benchmark = execution.performance_hint == "throughput" and not deterministic
    out.settings.append(
        PlannedSetting(
            "cudnn_benchmark",
            benchmark,
            {"cudnn.benchmark": benchmark},
            f"performance_hint={execution.performance_hint!r}, deterministic={deterministic}",
        )
    )


def plan(kernel_policy: KernelPolicy | None, execution: ExecutionPolicy | None) -> Plan:
    """The switch values implementing the policies (``None`` parts leave PyTorch alone)."""
    out = Plan()
    if kernel_policy is not None:
        _plan_kernels(kernel_policy, out)
    if execution is not None:
        _plan_execution(execution, out)
    return out
