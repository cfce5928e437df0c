"""What every NPU engine records first when it takes a session."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpuruntime.inference.kernel_mapping import OP_TYPES, apply_kernel_policy
from xpuruntime.npu.engines.kernels import kernel_support
from xpuruntime.npu.onnx_model import load_graph
from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from pathlib import Path

    from xpuruntime.policies import KernelPolicy
    from xpuruntime.runtime.record import ExecutionRecord, FallbackMode


def claim_session(
    engine: str,
    kernel_policy: KernelPolicy | None,
    record: ExecutionRecord,
    *,
    model: Path,
    device: str,
    fallback: FallbackMode,
) -> None:
    """Name ``engine`` in the record (when InferenceSession has not) and apply the
    KernelPolicy through the engine's kernel table: a kernel the engine cannot honour on
    ``device`` follows the fallback mode, as on every engine."""
    if record.engine is None:
        record.engine = Choice(engine, engine, "asked for by name")
    if kernel_policy is None or not kernel_policy.entries:
        return
    apply_kernel_policy(
        kernel_policy,
        engine=engine,
        device=device,
        op_types=_op_types(model),
        support=kernel_support(engine, device.split(":", 1)[0].lower()),
        record=record,
        fallback=fallback,
    )


def _op_types(model: Path) -> frozenset[str]:
    """The model's ONNX op types; for another format (OpenVINO IR) every policy op's, since
    which ops it holds is not known before the engine reads it."""
    if model.suffix.lower() == ".onnx":
        return frozenset(node.op_type for node in load_graph(model).node)
    return frozenset().union(*OP_TYPES.values())
