"""The decision lockfile around engines the kit does not build (third-party plugins).

Kit engines (:class:`xpuruntime.inference.kit.KitEngine`) lock inside the kit's pipeline,
the same way for every engine. For any other engine, :func:`create_session` carries the
lock's training decisions over (:mod:`xpuruntime.inference.carry_over`) and says, when the
engine locks nothing itself, that a lockfile cannot pin it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from xpuruntime.inference.carry_over import carry_over
from xpuruntime.inference.kit import KitEngine
from xpuruntime.runtime.decisions import Decisions

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime.engines import Engine, EngineSession
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = ["create_session"]

#: Engines outside the kit that lock their decisions themselves.
SELF_LOCKING_ENGINES: frozenset[str] = frozenset({"openvino"})


def create_session(
    engine: Engine,
    model: Path,
    *,
    device: str,
    exec_policy: ExecutionPolicy,
    kernel_policy: KernelPolicy | None,
    record: ExecutionRecord,
) -> EngineSession:
    """``engine.create_session`` under the policy's decision lockfile (if it names one)."""
    policy = exec_policy
    store = Decisions.for_policy(policy, record=record).lock
    if store is not None and not isinstance(engine, KitEngine):
        decisions = Decisions(policy, record=record, lock=store)
        if engine.name not in SELF_LOCKING_ENGINES:
            reason = f"the {engine.name} engine exposes no decisions a lockfile can pin"
            if policy.lock == "replay":
                decisions.replay_fallback(
                    what=f"{engine.name} session",
                    locked=str(store.path),
                    chosen=f"{engine.name}'s own choices",
                    reason=reason,
                )
            else:
                record.notes.append(f"lock: nothing recorded for {engine.name}: {reason}")
        if policy.lock == "replay":
            policy = carry_over(store.read(), engine.name, device, policy, record)
    return engine.create_session(
        model, device=device, exec_policy=policy, kernel_policy=kernel_policy, record=record
    )
