"""The engine kit's fixed pipeline: one order of steps for every engine.

:class:`KitEngine` is the :class:`~xpuruntime.runtime.engines.Engine` an adapter-based
engine registers; its ``create_session`` is :func:`build_session`, which runs the steps the
:mod:`xpuruntime.inference.kit.adapter` docstring lists. One :class:`Decisions` per session
carries the policy, the record, the lockfile store and the fallback rule through them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from xpuruntime.inference.carry_over import carry_over
from xpuruntime.inference.kernel_mapping import apply_kernel_policy
from xpuruntime.inference.kit.adapter import BuildPlan, EngineAdapter
from xpuruntime.inference.kit.inspect import inspect_model
from xpuruntime.inference.kit.limits import check_limits
from xpuruntime.inference.kit.locking import EngineLock
from xpuruntime.inference.kit.shapes import free_dimension_overrides, record_static_shape
from xpuruntime.inference.precision import apply_precision
from xpuruntime.inference.settings import refuse_unhonoured
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.engines import Engine

if TYPE_CHECKING:
    from xpuruntime.inference.cache import CacheLookup
    from xpuruntime.inference.kit.contract import KitSession
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = ["KitEngine", "build_session"]


class KitEngine(Engine):
    """An engine whose sessions the kit builds from an :class:`EngineAdapter`."""

    #: The adapter class; one instance per session creation.
    adapter: ClassVar[type[EngineAdapter]]

    def create_session(
        self,
        model: Path,
        *,
        device: str,
        exec_policy: ExecutionPolicy,
        kernel_policy: KernelPolicy | None,
        record: ExecutionRecord,
    ) -> KitSession:
        return build_session(
            self.adapter(),
            model,
            device=device,
            policy=exec_policy,
            kernel_policy=kernel_policy,
            record=record,
        )


def build_session(
    adapter: EngineAdapter,
    model: Path,
    *,
    device: str,
    policy: ExecutionPolicy,
    kernel_policy: KernelPolicy | None,
    record: ExecutionRecord,
) -> KitSession:
    """Run the kit's pipeline for ``adapter`` (see :mod:`xpuruntime.inference.kit.adapter`)."""
    name = adapter.name
    first_setting = len(record.settings)
    check_limits(policy, adapter.limits(), name)
    store = Decisions.for_policy(policy, record=record).lock
    if store is not None and policy.lock == "replay":
        # Training decisions of the lockfile the engine can take become its options.
        policy = carry_over(store.read(), name, device, policy, record)
    decisions = Decisions(policy, record=record, lock=store)

    model = adapter.choose_model(Path(model), decisions)
    info = inspect_model(model)
    target = adapter.target(device, decisions)
    precision = apply_precision(
        decisions, info, engine=adapter.version(target), supported=adapter.precisions(target)
    )
    support = adapter.kernel_support(target)
    kernel_options = (
        apply_kernel_policy(
            kernel_policy,
            engine=name,
            device=target.device,
            op_types=info.op_types if info is not None else (),
            support=support,
            decisions=decisions,
        )
        if support is not None
        else {}
    )
    declared = info.inputs if info is not None else {}
    plan = BuildPlan(
        model=model,
        info=info,  # type: ignore[arg-type]  # None only for a native format (OpenVINO IR)
        policy=policy,
        target=target,
        precision=precision,
        free_dims=free_dimension_overrides(policy.input_shapes, declared),
        shapes={k: tuple(int(d) for d in v) for k, v in (policy.input_shapes or {}).items()},
        kernel_options=kernel_options,
    )
    if info is not None:
        record_static_shape(policy, info, record)

    lock = _open_lock(adapter, decisions, model, target.device)
    if lock is not None and lock.replaying:
        entry = lock.locked()
        if entry is not None:
            adapter.replay(plan, entry, lock)
            plan.locked = lock.locked()  # None when the adapter refused the entry
    adapter.configure(plan, decisions)
    refuse_unhonoured(decisions, first_setting)  # before the build, where known this early
    plan.cache = _open_cache(adapter, plan, decisions)
    built = _build(adapter, plan, decisions)
    adapter.read_placement(built, plan, decisions)
    if lock is not None:
        _settle_lock(adapter, lock, built, plan)
    refuse_unhonoured(decisions, first_setting)  # and those the built session read back
    session = adapter.session(built, plan)
    session.precision = plan.precision
    return session


def _open_lock(
    adapter: EngineAdapter, decisions: Decisions, model: Path, device: str
) -> EngineLock | None:
    """The engine's lock entry; an engine a lock cannot pin says so (replay: a fallback)."""
    store = decisions.lock
    if store is None:
        return None
    if adapter.lockable:
        return EngineLock(store, decisions, adapter.name, model, device)  # type: ignore[arg-type]
    reason = f"the {adapter.name} engine exposes no decisions a lockfile can pin"
    if decisions.policy.lock == "replay":
        decisions.replay_fallback(
            what=f"{adapter.name} session",
            locked=str(store.path),
            chosen=f"{adapter.name}'s own choices",
            reason=reason,
        )
    else:
        decisions.record.notes.append(f"lock: nothing recorded for {adapter.name}: {reason}")
    return None


def _settle_lock(adapter: EngineAdapter, lock: EngineLock, built: Any, plan: BuildPlan) -> None:
    """Record: write what the engine decided. Replay: check it did what the entry locked."""
    if lock.recording:
        choice = adapter.lock_choice(built, plan, lock)
        if choice is not None:
            lock.save(choice, reason=f"what {adapter.version(plan.target)} reports it decided")
        return
    entry = plan.locked
    if entry is None:
        return
    differences = adapter.check_replay(built, plan, entry)
    if differences:
        lock.refuse(entry, "; ".join(differences[:8]))
    else:
        lock.honoured(entry, f"{adapter.name} runs what the entry locked")


def cache_components(policy: ExecutionPolicy) -> dict[str, str]:
    """One cache-key component per policy setting, so a miss names the settings that
    changed (``setting.num_threads changed (null -> 4)``) instead of a policy hash."""
    document = policy.to_dict()
    components = {}
    for section in ("execution", "kernel"):
        for key, value in (document.get(section) or {}).items():
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
            if len(text) > 48:
                from xpuruntime.inference.cache import stable_digest

                text = stable_digest(value)[:16]
            prefix = "setting" if section == "execution" else "kernel"
            components[f"{prefix}.{key}"] = text
    return components


def _open_cache(
    adapter: EngineAdapter, plan: BuildPlan, decisions: Decisions
) -> CacheLookup | None:
    """The cache entry for the plan; an unusable folder goes through the fallback mode."""
    policy = decisions.policy
    if adapter.cache_kind is None or not policy.cache_dir:
        return None
    from xpuruntime.inference.cache import CacheKey, file_digest, open_entry, stable_digest
    from xpuruntime.runtime.fingerprint import fingerprint_hash

    components = {
        "model": file_digest(plan.model),
        **cache_components(policy),
        "shapes": stable_digest(policy.input_shapes or {}),
        "environment": decisions.record.environment_hash or fingerprint_hash(),
        "engine": adapter.version(plan.target),
        **adapter.cache_components(plan),
    }
    key = CacheKey(adapter.cache_kind, components)
    return open_entry(policy.cache_dir, key, decisions)


def _build(adapter: EngineAdapter, plan: BuildPlan, decisions: Decisions) -> Any:
    """Build; a cached entry that fails to load is discarded and the model built again."""
    try:
        built = _typed_build(adapter, plan, decisions)
    except XpuRuntimeError as exc:
        cached = plan.cache
        if cached is None or not cached.hit:
            raise
        reason = f"{type(exc).__name__}: {exc}"
        plan.cache = cached.invalidate(decisions.record, reason)
        built = _typed_build(adapter, plan, decisions)
    if plan.cache is not None and not plan.cache.hit:
        plan.cache.commit(decisions.record)
    return built


def _typed_build(adapter: EngineAdapter, plan: BuildPlan, decisions: Decisions) -> Any:
    try:
        return adapter.build(plan, decisions)
    except XpuRuntimeError:
        if plan.cache is not None and not plan.cache.hit:
            plan.cache.discard()
        raise
    except Exception as exc:
        if plan.cache is not None and not plan.cache.hit:
            plan.cache.discard()
        raise adapter.build_error(exc, plan) from exc
