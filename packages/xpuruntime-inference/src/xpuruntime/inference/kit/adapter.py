"""What an engine adapter supplies to the engine kit, and the one build plan they share.

The kit (:func:`xpuruntime.inference.kit.pipeline.build_session`) runs the same pipeline
for every engine, in this order, and owns every step that is not engine-specific::

    limits    policy values the engine cannot take (num_threads ...)   kit
    inspect   the model file: readable ONNX with a graph, else          kit
              InvalidModelError; its inputs, op types, stored precision
    target    the engine's device for the requested one                 adapter.target
    precision what the record says runs, under the one precision rule   kit (adapter.precisions)
    kernels   the KernelPolicy against the engine's kernel table        kit (adapter.kernel_support)
    shapes    ExecutionPolicy.input_shapes checked against the model    kit
    lock      replay: the locked entry handed to the adapter            kit (adapter.replay)
    configure every other policy setting -> engine options, recorded    adapter.configure
    cache     key, lookup, an unusable folder via the fallback mode     kit (adapter.cache_kind)
    build     the engine's compiled model                               adapter.build
              (a cached entry that fails to load is discarded, recorded as a miss with the
              reason, and built again; the new entry is committed)       kit
    placement where each node runs, classified and recorded             adapter.read_placement
    lock      record: the entry written; replay: checked, honoured      kit (adapter.lock_choice,
              or refused                                                 adapter.check_replay)
    session   the runnable session (a KitSession: the behaviour          adapter.session
              contract of names, feeds, outputs, closed, errors)

An adapter is a small class; one instance serves one session creation, so it may keep
state between its steps on ``self``. It never reads ``policy.fallback`` and never calls
``record.fallback``: every fallback goes through the :class:`Decisions` it is handed
(``decisions.fallback(what=, requested=, chosen=, reason=)``), settings through
``add_setting(decisions.record, ...)``. It imports the kit, never another engine's module.

The methods an adapter must supply: :meth:`EngineAdapter.version`,
:meth:`EngineAdapter.target`, :meth:`EngineAdapter.build` and :meth:`EngineAdapter.session`.
The others have defaults that say "the engine has nothing here".
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from xpuruntime.inference.cache import CacheLookup
    from xpuruntime.inference.kernel_mapping import SupportTable
    from xpuruntime.inference.kit.contract import KitSession
    from xpuruntime.inference.kit.locking import EngineLock
    from xpuruntime.inference.model_info import ModelInfo
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.policies.lock import LockedChoice, LockEntry
    from xpuruntime.runtime.decisions import Decisions

__all__ = ["BuildPlan", "EngineAdapter", "Target"]


@dataclass
class Target:
    """Where the engine builds for: the device string the record states (``"cpu"``,
    ``"cuda:1"``, ``"npu"``), and the adapter's own handle for it (an execution provider
    name, an OpenVINO device, a QNN backend ...)."""

    device: str
    native: Any = None


@dataclass
class BuildPlan:
    """Everything a build needs, decided before it: the one build-plan type of every engine.

    The kit fills the fields above ``options``; ``options`` and ``keep_alive`` belong to the
    adapter (its engine's session options, provider options, builder flags ...).
    """

    #: The model file to build (the quantized one when the policy names it).
    model: Path
    #: What the kit read from the model (inputs, op types, stored precision, graph).
    info: ModelInfo
    #: The policy the build runs under (after a lockfile's training decisions carried over).
    policy: ExecutionPolicy
    target: Target
    #: The precision the record says the model runs in (``record.precision.chosen``).
    precision: str
    #: Symbolic dimension name -> size, from ExecutionPolicy.input_shapes.
    free_dims: dict[str, int]
    #: Input name -> fixed shape, from ExecutionPolicy.input_shapes (checked against the model).
    shapes: dict[str, tuple[int, ...]]
    #: Engine options the KernelPolicy maps to (already recorded).
    kernel_options: dict[str, Any]
    #: The cache entry to load (``cache.hit``) or to write into (``cache.entry``); None when
    #: the policy sets no cache_dir, the engine has no cache, or the folder is unusable.
    cache: CacheLookup | None = None
    #: Replay: the lock entry being honoured (None when not replaying or refused).
    locked: LockEntry | None = None
    #: The adapter's own build settings.
    options: dict[str, Any] = field(default_factory=dict)
    #: Objects that must live as long as the session (streams, temporary folders).
    keep_alive: list[Any] = field(default_factory=list)


class EngineAdapter(abc.ABC):
    """The engine-specific steps of the kit's pipeline (see the module docstring)."""

    #: The engine's name: the record's engine, the lock domain, the engine_options key.
    name: ClassVar[str]
    #: The cache kind (``record.cache[kind]``) when the engine keeps built artifacts in
    #: ExecutionPolicy.cache_dir; None when it keeps none.
    cache_kind: ClassVar[str | None] = None
    #: Whether a lockfile can pin this engine's decisions (replay/lock_choice/check_replay).
    lockable: ClassVar[bool] = False

    # -- required ---------------------------------------------------------------------------
    @abc.abstractmethod
    def version(self, target: Target | None = None) -> str:
        """``"<engine> <version> [<device detail>]"``: in messages and in the cache key."""

    @abc.abstractmethod
    def target(self, device: str, decisions: Decisions) -> Target:
        """The engine's target for ``device`` (a validated device string). A device the
        engine cannot use goes through ``decisions.fallback`` and the target says where it
        runs instead; set ``decisions.record.device`` when it differs from ``device``."""

    @abc.abstractmethod
    def build(self, plan: BuildPlan, decisions: Decisions) -> Any:
        """Build (compile, load) the model; return the engine's built object.

        With ``plan.cache`` a hit, load from ``plan.cache.entry`` (the kit rebuilds after
        discarding the entry if this raises); a miss: write the artifact into
        ``plan.cache.entry`` (the kit commits it). Raise the typed errors of
        :mod:`xpuruntime.inference.errors`; anything else is wrapped by
        :meth:`build_error`."""

    @abc.abstractmethod
    def session(self, built: Any, plan: BuildPlan) -> KitSession:
        """The runnable session over ``built``."""

    # -- optional ---------------------------------------------------------------------------
    def choose_model(self, model: Path, decisions: Decisions) -> Path:
        """The model file to build (default: the quantized model the policy names for int8,
        :func:`xpuruntime.inference.kit.inspect.pick_model`)."""
        from xpuruntime.inference.kit.inspect import pick_model

        return pick_model(model, decisions)

    def precisions(self, target: Target) -> Collection[str]:
        """Precisions the engine itself can compute an fp32 model in on ``target``."""
        return ("fp32",)

    def kernel_support(self, target: Target) -> SupportTable | None:
        """The engine's kernel table on ``target`` (None: it can enforce no kernel choice)."""
        return None

    def limits(self) -> Mapping[str, tuple[int, int]]:
        """Inclusive bounds of integer policy settings the engine takes (``num_threads``);
        the kit refuses a value outside them with a PolicyValidationError."""
        from xpuruntime.inference.kit.limits import DEFAULT_LIMITS

        return DEFAULT_LIMITS

    def configure(self, plan: BuildPlan, decisions: Decisions) -> None:  # noqa: B027 (optional step)
        """Map the remaining policy settings onto ``plan.options``, recording each one
        (honoured, or not with the reason)."""

    def cache_components(self, plan: BuildPlan) -> Mapping[str, str]:
        """Extra cache-key components the artifact depends on beyond the kit's (model,
        settings, shapes, environment, :meth:`version`)."""
        return {}

    def read_placement(self, built: Any, plan: BuildPlan, decisions: Decisions) -> None:  # noqa: B027 (optional step)
        """Record where each node runs (``xpuruntime.inference.placement`` classifies and
        applies the policy); the default records nothing (the engine cannot tell)."""

    def replay(self, plan: BuildPlan, entry: LockEntry, lock: EngineLock) -> None:  # noqa: B027 (optional step)
        """Replay, before configure/build: apply the locked choices to ``plan`` (or call
        ``lock.refuse(entry, reason)``, which leaves ``plan.locked`` None)."""

    def lock_choice(self, built: Any, plan: BuildPlan, lock: EngineLock) -> LockedChoice | None:
        """Record: what the built engine decided, read from the engine (None: nothing)."""
        return None

    def check_replay(self, built: Any, plan: BuildPlan, entry: LockEntry) -> list[str]:
        """Replay, after the build: each way the engine did not do what ``entry`` locked
        (empty: honoured)."""
        return []

    def build_error(self, exc: Exception, plan: BuildPlan) -> Exception:
        """The typed error for a build failure the adapter did not type itself (default:
        :func:`xpuruntime.inference.kit.errors.build_error`: memory-class failures named as
        such, everything else InvalidModelError)."""
        from xpuruntime.inference.kit.errors import build_error

        return build_error(
            exc, engine=self.version(plan.target), model=plan.model, precision=plan.precision
        )
