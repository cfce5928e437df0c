"""The kernel dispatcher and the engine registry, both held by the native core.

``dispatcher.resolve`` maps (op, shape, dtype, device) to a kernel under a KernelPolicy:
a pinned kernel must run (UnsupportedOperationError otherwise), a preferred one runs when it
can, and auto uses the policy's strategy (FirstSupported, or BestPerformance measured once and
cached). Every new resolution is logged with its reason; see :meth:`Dispatcher.decisions`.

The decision lockfile uses :meth:`Dispatcher.export_decisions` to record what was decided
(kernels, cuBLASLt algorithms, timed candidates) and :meth:`Dispatcher.set_lock` to replay it.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.engines import Availability
from xpuruntime.runtime.errors import InvalidArgumentError
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import DecisionRecord, DecisionStatus

#: How the dispatcher treats the decision lockfile: ``off`` and ``record`` decide as usual
#: (the lockfile layer reads :meth:`Dispatcher.export_decisions` in ``record``), ``replay``
#: resolves every signature in the lock to its locked kernel and algorithm.
LockMode = Literal["off", "record", "replay"]

__all__ = [
    "Decision",
    "Dispatcher",
    "EngineRegistry",
    "KernelInfo",
    "LockMode",
    "dispatcher",
    "engine_registry",
    "native_choice",
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
    #: "decided", "locked" (replayed from the lockfile) or "fallen_back" (reason says why)
    status: DecisionStatus = "decided"
    #: GEMM ops: how a and b are stored ("NN", "TN", ...), the fused epilogue and TF32
    layout: str = ""

    @classmethod
    def _from_native(cls, data: Mapping[str, Any]) -> Decision:
        """From a decision entry of the native dispatcher."""
        return cls(
            op=data["op"],
            kernel=data["kernel"],
            library=data["library"],
            mode=data["mode"],
            reason=data["reason"],
            shape=data["shape"],
            dtype=data["dtype"],
            device=data["device"],
            detail=data["detail"],
            status=data["status"],
            layout=data["layout"],
        )

    def to_record(self) -> DecisionRecord:
        """As the execution record's DecisionRecord (layout and detail appended to the reason)."""
        parts = [self.reason]
        if self.layout:
            parts.append(f"layout {self.layout}")
        if self.detail:
            parts.append(self.detail)
        return DecisionRecord(
            op=self.op,
            kernel=self.kernel,
            mode=self.mode,
            reason="; ".join(parts),
            shape=self.shape,
            dtype=self.dtype,
            device=self.device,
            status=self.status,
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


# Native PolicyChoice objects by policy content: an op call looks one up instead of passing
# strings for the native side to parse. KernelPolicy is mutable, so the key is its content
# for the op (kernel, mode, strategy), read afresh on every call.
_CHOICES: dict[tuple[Any, ...], Any] = {}
_DEFAULT_CHOICES: dict[str, Any] = {}  # op -> choice without policy or precision
_PRECISIONS = {None: False, "fp32": False, "tf32": True}


def native_choice(op: str, policy: KernelPolicy | None, precision: str | None = None) -> Any:
    """The native PolicyChoice for ``op`` under ``policy`` and ``precision`` (cached).

    ``precision`` ``"tf32"`` lets fp32 GEMMs compute with TF32 tensor cores
    (CUBLAS_COMPUTE_32F_FAST_TF32); None and ``"fp32"`` keep full fp32.
    """
    if policy is None and precision is None:  # the common call: one dict lookup
        default = _DEFAULT_CHOICES.get(op)
        if default is not None:
            return default
    try:
        tf32 = _PRECISIONS[precision]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"precision {precision!r} is not one an op takes; use None, 'fp32' or 'tf32'"
        ) from None
    if policy is None:
        key: tuple[Any, ...] = (op, tf32)
    else:
        key = (op, policy.get(op), policy.mode(op), policy.strategy, tf32)
    choice = _CHOICES.get(key)
    if choice is None:
        kernel, mode, strategy = policy_choice(op, policy)
        choice = _CHOICES[key] = core().PolicyChoice(kernel, mode, strategy, tf32)
        if policy is None and not tf32:
            _DEFAULT_CHOICES[op] = choice
    return choice


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
        fields, status, layout = core().resolve(
            op, list(shape), dtype, device, kernel, mode, strategy
        )
        name, chosen, library, how, reason, dims, dtype_name, device_name = fields
        return Decision(
            name, chosen, library, how, reason, dims, dtype_name, device_name,
            status=status, layout=layout,
        )  # fmt: skip

    def decisions(self) -> list[DecisionRecord]:
        """Every new resolution so far (with the algorithm the kernel chose), in order."""
        return [Decision._from_native(d).to_record() for d in core().dispatcher_decisions()]

    def export_decisions(self) -> list[dict[str, Any]]:
        """Every cached decision, for the decision lockfile.

        Each is ``{"op", "shape", "dtype", "device", "layout", "kernel", "mode", "strategy",
        "reason", "status", "algorithm", "candidates", "library", "detail"}``: ``shape`` the
        op's signature dimensions (matmul/linear ``[M, K, N]`` or ``[B, M, K, N]``),
        ``layout`` how a and b are stored (``"NN"``, ``"TN"``, ... with ``T`` a transposed
        view, then ``+EPILOGUE`` and ``:tf32``; ``""`` for other ops), ``algorithm`` the
        kernel's configuration as a plain dict (cuBLASLt: ``{"algo_id", "tile", "stages",
        "splitk", "reduction", "swizzle", "custom", "inner_shape", "cluster_shape",
        "workspace"}``) or None, and ``candidates`` what was timed to choose it:
        ``{"kernel", "ms"}`` for BestPerformance among kernels, ``{"algorithm", "rank",
        "ms"}`` for the kernel's algorithms (``rank`` is the cuBLASLt heuristic's).
        """
        out = []
        for d in core().export_decisions():
            entry = {key: d[key] for key in _EXPORTED}
            entry["shape"] = list(d["dims"])
            out.append(entry)
        return out

    def set_lock(
        self, mode: LockMode, entries: Sequence[Mapping[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """Set the lock mode and, for ``replay``, the locked decisions.

        ``entries`` are dicts as :meth:`export_decisions` returns them (``op``, ``shape``,
        ``dtype``, ``device``, ``layout``, ``kernel``, optional ``algorithm``; other keys are
        ignored). In ``replay`` a call whose signature is in ``entries`` runs exactly the
        locked kernel (decision status ``"locked"``, nothing timed) and, for cuBLASLt, the
        locked algorithm, rebuilt with cublasLtMatmulAlgoInit and validated with
        cublasLtMatmulAlgoCheck. A locked choice that cannot be honoured here, or a signature
        missing from the lock, is decided afresh with status ``"fallen_back"`` and reported
        by :meth:`lock_problems`; applying the fallback mode is the caller's.

        Clears every cached decision. Returns the problems found at once (unknown kernels,
        kernels that cannot run the signature here, algorithms cuBLASLt rejects), each
        ``{"op", "shape", "dtype", "device", "layout", "kernel", "reason"}``.
        """
        if mode not in ("off", "record", "replay"):
            raise InvalidArgumentError(
                f"lock mode {mode!r} is not one of 'off', 'record', 'replay'"
            )
        return [dict(p) for p in core().set_lock(mode, None if entries is None else list(entries))]

    def lock_mode(self) -> LockMode:
        return cast(LockMode, core().lock_mode())

    def lock_problems(self, *, take: bool = False) -> list[dict[str, Any]]:
        """Lock entries not honoured so far (with ``take``, returned once and forgotten)."""
        return [dict(p) for p in core().lock_problems(take)]

    def kernels(self, op: str) -> list[KernelInfo]:
        """The kernels registered for ``op``, in FirstSupported order."""
        return [KernelInfo(**k) for k in core().registered_kernels(op)]

    def supports(
        self, op: str, kernel: str, shape: Sequence[int], dtype: str, device: str, layout: str = ""
    ) -> tuple[bool, str]:
        """Whether ``kernel`` can run the query (``layout`` as in :meth:`export_decisions`),
        and if not, why."""
        reason = str(
            core().kernel_unsupported_reason(op, kernel, list(shape), dtype, device, layout)
        )
        return reason == "", reason

    def ops(self) -> list[str]:
        return list(core().registered_ops())

    def clear(self) -> None:
        """Forget cached resolutions and the decision log."""
        core().dispatcher_clear()

    def cache_info(self) -> dict[str, int]:
        return {"entries": core().dispatcher_cache_size(), "hits": core().dispatcher_cache_hits()}


_EXPORTED = (
    "op",
    "dtype",
    "device",
    "layout",
    "kernel",
    "mode",
    "strategy",
    "reason",
    "status",
    "algorithm",
    "candidates",
    "library",
    "detail",
)


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

    # -- the process's engine availability: probed once, kept here, read from here --------

    def publish(self, name: str, found: Availability, aliases: Sequence[str] = ()) -> None:
        """Keep what probing engine ``name`` found (read back by :meth:`availability`)."""
        self.register(
            name,
            {
                "available": "yes" if found.available else "no",
                # an unavailable engine lists no devices
                "devices": list(found.devices) if found.available else [],
                "aliases": list(aliases),
                "versions": [f"{k} {v}" for k, v in found.versions.items()],
                "reason": found.reason,
                "install_hint": found.install_hint,
            },
        )

    def availability(self, name: str) -> Availability | None:
        """What probing engine ``name`` found in this process; None when it was not probed."""
        entry = next((e for e in self.list() if e["name"] == name), None)
        if entry is None:
            return None
        caps: dict[str, list[str]] = entry["capabilities"]
        return Availability(
            available=caps.get("available") == ["yes"],
            reason="".join(caps.get("reason", [])),
            install_hint="".join(caps.get("install_hint", [])),
            devices=tuple(caps.get("devices", [])),
            versions=dict(v.split(" ", 1) for v in caps.get("versions", []) if " " in v),
        )


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
