"""Apply a KernelPolicy to an engine that picks kernels itself.

ONNX Runtime and TensorRT choose kernels internally; each engine states, per (op, kernel),
whether it can enforce the choice (an option that guarantees it), only steer it (an option
that widens or narrows what the engine may pick), or not act on it at all. This module turns
that into decisions, settings and — where the policy is not met — a pin error or a recorded
fallback, so a kernel policy is never ignored silently.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.settings import add_setting
from xpuruntime.runtime.record import DecisionRecord, ExecutionRecord

if TYPE_CHECKING:
    from xpuruntime.policies import KernelPolicy
    from xpuruntime.runtime.decisions import Decisions

# ONNX op types that each policy op stands for.
OP_TYPES: dict[str, frozenset[str]] = {
    "matmul": frozenset(
        {"MatMul", "Gemm", "FusedMatMul", "MatMulInteger", "QLinearMatMul", "MatMulNBits"}
    ),
    "attention": frozenset(
        {"Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention"}
    ),
    "layernorm": frozenset({"LayerNormalization", "SkipLayerNormalization"}),
    "rmsnorm": frozenset(
        {"RMSNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}
    ),
    # A linear layer is a Gemm (x @ W^T + b, ONNX's export of nn.Linear) or a fused one.
    "linear": frozenset({"Gemm", "FusedGemm"}),
    "conv": frozenset({"Conv", "ConvTranspose", "FusedConv", "QLinearConv", "NhwcConv"}),
}


@dataclass(frozen=True)
class KernelSupport:
    """How an engine can act on one (op, kernel) choice."""

    enforced: bool
    option: str = ""
    value: Any = None
    note: str = ""


#: An engine's answer for (op, kernel): None when it cannot act on it at all.
SupportTable = Callable[[str, str], "KernelSupport | None"]


def apply_kernel_policy(
    policy: KernelPolicy | None,
    *,
    engine: str,
    device: str,
    op_types: Collection[str],
    support: SupportTable,
    decisions: Decisions,
) -> dict[str, Any]:
    """Record a decision per policy entry; return the engine options to set.

    A pinned kernel the engine cannot enforce raises UnsupportedOperationError under
    ``fallback="error"`` and is a recorded fallback otherwise; a preferred one is recorded as
    a fallback (warned unless the policy says "allow").
    """
    options: dict[str, Any] = {}
    record = decisions.record
    if policy is None:
        return options
    present = set(op_types)
    for op, entry in policy.entries.items():
        kernel, mode = entry.kernel or "auto", entry.mode
        model_ops = sorted(present & OP_TYPES.get(op, frozenset({op})))
        name = f"kernel_policy.{op}"
        if mode == "auto":
            _decide(record, op, f"{engine} default", mode, f"mode auto: {engine} chooses", device)
            continue
        if not model_ops:
            add_setting(
                record, name, f"{kernel} ({mode})", None, True, f"the model has no {op} nodes"
            )
            _decide(record, op, kernel, mode, "no such nodes in the model: nothing to run", device)
            continue
        found = support(op, kernel)
        if found is not None and found.option:
            options[found.option] = found.value
        if found is not None and found.enforced:
            add_setting(record, name, f"{kernel} ({mode})", _applied(found), True, found.note)
            _decide(record, op, kernel, mode, f"enforced by {engine}: {found.note}", device)
            continue
        reason = (
            f"{engine} on {device} cannot guarantee kernel {kernel!r} for {', '.join(model_ops)}"
            + (f": {found.note}" if found is not None and found.note else "")
        )
        add_setting(record, name, f"{kernel} ({mode})", _applied(found), False, reason)
        chosen = f"{engine}'s own choice"
        decisions.kernel_fallback(
            op=op,
            kernel=kernel,
            entry_mode=mode,
            chosen=chosen,
            reason=reason,
            hint="Use another engine that runs it. ",
        )
        _decide(record, op, chosen, mode, reason, device)
    return options


def _applied(found: KernelSupport | None) -> Any:
    if found is None or not found.option:
        return None
    return f"{found.option}={found.value}"


def _decide(
    record: ExecutionRecord, op: str, kernel: str, mode: str, reason: str, device: str
) -> None:
    record.decisions.append(
        DecisionRecord(op=op, kernel=kernel, mode=mode, reason=reason, device=device)
    )
