"""What every NPU engine records first when it takes a session."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from xpuruntime.policies import KernelPolicy
    from xpuruntime.runtime.record import ExecutionRecord


def claim_session(
    engine: str, backend: str, kernel_policy: KernelPolicy | None, record: ExecutionRecord
) -> None:
    """Name ``engine`` in the record (when InferenceSession has not) and say that ``backend``
    picks its own kernels, so a KernelPolicy given here is recorded but not applied."""
    if record.engine is None:
        record.engine = Choice(engine, engine, "asked for by name")
    if kernel_policy is not None and kernel_policy.entries:
        record.notes.append(
            f"{backend} chooses its own kernels; the KernelPolicy is recorded, not applied"
        )
