"""The kernel dispatcher and the engine registry, both held by the native core.

``dispatcher.resolve`` maps (op, shape, dtype, device) to a kernel under a KernelPolicy:
a pinned kernel must run (UnsupportedOperationError otherwise), a preferred one runs when it
can, and auto uses the policy's strategy (FirstSupported, or BestPerformance measured once and
cached). Every new resolution is logged with its reason; see :meth:`Dispatcher.decisions`.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import DecisionRecord

__all__ = [
    "Decision",
    "Dispatcher",
    "EngineRegistry",
    "KernelInfo",
    "dispatcher",
    "engine_registry",
    "policy_choice",
]


@dataclass(frozen=True)
class Decision:
    """Which kernel an op resolved to, by which mode, and why."""

    op: str
    kernel: str
    library: str
    mode: str
    reason: str
    shape: str
    dtype: str
    device: str
    detail: str = ""  # what the kernel reported (for example the cuBLASLt algorithm)

    @classmethod
    def _from_native(cls, data: Mapping[str, Any]) -> Decision:
        """From a decision-log entry of the native dispatcher."""
        return cls(**data)

    def to_record(self) -> DecisionRecord:
        """As the execution record's DecisionRecord (detail appended to the reason)."""
        reason = f"{self.reason}; {self.detail}" if self.detail else self.reason
        return DecisionRecord(
            op=self.op,
            kernel=self.kernel,
            mode=self.mode,
            reason=reason,
            shape=self.shape,
            dtype=self.dtype,
            device=self.device,
        )


@dataclass(frozen=True)
class KernelInfo:
    """A registered kernel of an op."""

    op: str
    name: str
    library: str
    timeable: bool  # BestPerformance can time it


def policy_choice(op: str, policy: KernelPolicy | None) -> tuple[str, str, str]:
    """(kernel, mode, strategy) the native dispatcher takes for ``op`` under ``policy``."""
    if policy is None:
        return "", "auto", "FirstSupported"
    mode = policy.mode(op) or "auto"
    kernel = policy.get(op) if mode != "auto" else ""
    return kernel or "", mode, policy.strategy.name


class Dispatcher:
    """Facade over the native dispatcher (one per process)."""

    def resolve(
        self,
        op: str,
        shape: Sequence[int],
        dtype: str,
        device: str,
        policy: KernelPolicy | None = None,
    ) -> Decision:
        """Resolve ``op`` for the given shape (matmul: [M, K, N]), dtype and device."""
        kernel, mode, strategy = policy_choice(op, policy)
        return Decision(*core().resolve(op, list(shape), dtype, device, kernel, mode, strategy))

    def decisions(self) -> list[DecisionRecord]:
        """Every new resolution so far (and algorithm choices of the kernels), in order."""
        return [Decision._from_native(d).to_record() for d in core().dispatcher_decisions()]

    def kernels(self, op: str) -> list[KernelInfo]:
        """The kernels registered for ``op``, in FirstSupported order."""
        return [KernelInfo(**k) for k in core().registered_kernels(op)]

    def supports(
        self, op: str, kernel: str, shape: Sequence[int], dtype: str, device: str
    ) -> tuple[bool, str]:
        """Whether ``kernel`` can run the query, and if not, why."""
        reason = str(core().kernel_unsupported_reason(op, kernel, list(shape), dtype, device))
        return reason == "", reason

    def ops(self) -> list[str]:
        return list(core().registered_ops())

    def clear(self) -> None:
        """Forget cached resolutions and the decision log."""
        core().dispatcher_clear()

    def cache_info(self) -> dict[str, int]:
        return {"entries": core().dispatcher_cache_size(), "hits": core().dispatcher_cache_hits()}


class EngineRegistry:
    """Where engine plugins register with their capabilities (used by inference and npu).

    Capabilities map a name to a string or a list of strings, for example
    ``{"devices": ["cpu", "cuda"], "precisions": ["fp32", "fp16"]}``.
    """

    def register(self, name: str, capabilities: Mapping[str, str | Sequence[str]]) -> None:
        core().engine_register(name, _normalise(name, capabilities))

    def unregister(self, name: str) -> bool:
        return bool(core().engine_unregister(name))

    def get(self, name: str) -> dict[str, Any]:
        """``{"name", "capabilities"}``; InvalidArgumentError with a did-you-mean when unknown."""
        return dict(core().engine_get(name))

    def list(self) -> list[dict[str, Any]]:
        return [dict(e) for e in core().engine_list()]

    def find(self, **required: str | Sequence[str]) -> builtins.list[str]:
        """Engines listing every required value, e.g. ``find(devices="cuda", precisions="fp16")``."""
        return list(core().engine_find(_normalise("find", required)))


def _normalise(owner: str, capabilities: Mapping[str, str | Sequence[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in capabilities.items():
        values = [value] if isinstance(value, str) else list(value)
        if not all(isinstance(v, str) for v in values):
            from xpuruntime.runtime.errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"{owner}: capability {key!r} must be a string or a list of strings, got {value!r}"
            )
        out[key] = values
    return out


dispatcher = Dispatcher()
engine_registry = EngineRegistry()
