"""Engine plugin contract and discovery.

Engines (onnxruntime and tensorrt from ``xpuruntime-inference``, openvino and qnn from
``xpuruntime-npu``) are classes advertised in the entry-point group ``xpuruntime.engines``.
Discovery reads entry-point metadata only; an engine module is imported when the engine
is first used, so listing engines never imports onnxruntime, openvino or tensorrt.

An engine module must itself import nothing heavy at module level: it imports its backend
inside :meth:`Engine.availability` / :meth:`Engine.create_session`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from xpuruntime.runtime.errors import EngineNotInstalledError, XpuRuntimeError

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime.record import CopyRecord, ExecutionRecord

ENTRY_POINT_GROUP = "xpuruntime.engines"


@dataclass(frozen=True)
class TensorInfo:
    """Name, element type (numpy dtype name) and shape of a model input or output.

    A dimension is an int when fixed, a str when symbolic (``"batch"``), None when unknown.
    """

    name: str
    dtype: str
    shape: tuple[int | str | None, ...]


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run here, and if not, why and how to fix it."""

    available: bool
    reason: str = ""
    install_hint: str = ""
    devices: tuple[str, ...] = ()
    versions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunStats:
    """Host<->device traffic of one run, as the engine session saw it.

    The caller turns it into a :class:`~xpuruntime.runtime.record.RunRecord` together with
    the latency it measured.
    """

    copies: tuple[CopyRecord, ...] = ()
    syncs: int = 0
    io_binding: bool = False


NO_TRANSFERS = RunStats()


class EngineSession(abc.ABC):
    """A model loaded by one engine on one device; created by :meth:`Engine.create_session`."""

    #: True when :meth:`run` itself rejects unknown or missing input names, wrong dtypes and
    #: wrong ranks or fixed dimensions (with any exception). The caller then skips its own
    #: per-call feed check and runs it only after a failure, to raise the typed error.
    checks_inputs: ClassVar[bool] = False

    def run_stats(self) -> RunStats:
        """Copies, synchronisations and I/O binding of the latest :meth:`run`.

        Engines that move data between host and device override this; the default says
        the run made no copies and no synchronisations.
        """
        return NO_TRANSFERS

    def profile_events(self) -> list[dict[str, Any]]:
        """The engine's own profile as Chrome trace events (empty unless profiling was on).

        Timestamps are microseconds on the monotonic clock the core profiler uses, so the
        events merge into ``xpuruntime.runtime.profiler.export_chrome_trace(extra_events=...)``.
        """
        return []

    def close(self) -> None:  # noqa: B027 (optional: engines holding nothing need no close)
        """Release the engine's resources and temporary files (the session is unusable after).

        Engines that hold such resources override this; it must be safe to call twice.
        """

    @property
    @abc.abstractmethod
    def inputs(self) -> Sequence[TensorInfo]:
        """Model inputs, in model order."""

    @property
    @abc.abstractmethod
    def outputs(self) -> Sequence[TensorInfo]:
        """Model outputs, in model order."""

    @abc.abstractmethod
    def run(
        self, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Run once. ``feeds`` are validated by the caller; returns outputs by name."""


class Engine(abc.ABC):
    """An inference engine plugin (a class, registered under ``xpuruntime.engines``)."""

    #: Name users pass as ``engine=``/``backend=`` (the entry-point name).
    name: ClassVar[str]
    #: Other names accepted for this engine (for example ``"onnxrt"``).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: The command that installs what this engine needs.
    install_hint: ClassVar[str]
    #: Device kinds the engine is made for ("cpu", "cuda", "npu" ...), present here or not:
    #: with no engine able to use a requested device, ``engine="auto"`` picks one made for
    #: it, so that the engine's own fallback says what is missing.
    device_kinds: ClassVar[tuple[str, ...]] = ()

    @classmethod
    @abc.abstractmethod
    def availability(cls) -> Availability:
        """Import the backend (may be slow) and say whether and where it can run."""

    @abc.abstractmethod
    def create_session(
        self,
        model: Path,
        *,
        device: str,
        exec_policy: ExecutionPolicy,
        kernel_policy: KernelPolicy | None,
        record: ExecutionRecord,
    ) -> EngineSession:
        """Load ``model`` for ``device`` under the policies, filling ``record`` as it goes.

        Every policy setting the engine maps goes into ``record.settings`` (honoured or
        not); every fallback goes through a :class:`~xpuruntime.runtime.decisions.Decisions`
        over ``exec_policy`` and ``record`` (never a mode passed by hand).
        """


@dataclass(frozen=True)
class EngineEntry:
    """A discovered, not yet imported, engine plugin."""

    name: str
    value: str
    distribution: str | None
    entry_point: EntryPoint = field(repr=False, compare=False)

    def load(self) -> type[Engine]:
        """Import the plugin class; an import failure says which plugin and why."""
        try:
            engine_cls = self.entry_point.load()
        except Exception as exc:  # a broken plugin must not take the others down
            raise EngineNotInstalledError(
                f"engine plugin {self.name!r} ({self.value}, from {self.distribution}) "
                f"failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(engine_cls, type) and issubclass(engine_cls, Engine)):
            raise XpuRuntimeError(
                f"engine plugin {self.name!r} ({self.value}) is not an xpuruntime Engine subclass"
            )
        return engine_cls


def discover_engines() -> dict[str, EngineEntry]:
    """All engine plugins installed, by name, without importing any of them."""
    found: dict[str, EngineEntry] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else None
        found.setdefault(ep.name, EngineEntry(ep.name, ep.value, dist, ep))
    return found


# Engines users may name before their distribution is installed, with how to get them.
KNOWN_ENGINE_HINTS: Mapping[str, str] = {
    "onnxruntime": "pip install 'xpuruntime[cpu]' (or 'xpuruntime[cuda]' for the CUDA provider)",
    "tensorrt": "pip install 'xpuruntime[tensorrt]'",
    "openvino": "pip install 'xpuruntime[openvino]'",
    "qnn": "pip install 'xpuruntime[qnn]'",
}


def load_engine(name: str) -> type[Engine]:
    """The engine class called ``name`` (or one of its aliases); loud error if absent."""
    engines = discover_engines()
    entry = engines.get(name)
    if entry is None:
        for candidate in engines.values():
            try:
                cls = candidate.load()
            except XpuRuntimeError:
                continue
            if name in cls.aliases:
                return cls
        hint = KNOWN_ENGINE_HINTS.get(name)
        if hint is not None:
            raise EngineNotInstalledError(
                f"engine {name!r} is not installed. Install it with: {hint}"
            )
        raise EngineNotInstalledError(
            f"unknown engine {name!r}; installed engines: {sorted(engines) or 'none'}; "
            f"known engines: {sorted(KNOWN_ENGINE_HINTS)}"
        )
    return entry.load()
