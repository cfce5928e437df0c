"""Which engine runs a session: the one named, or for ``engine="auto"`` the first engine of
``ExecutionPolicy.engines`` that is installed and can use the device, with the reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xpuruntime.inference.device import DeviceSpec
from xpuruntime.inference.errors import did_you_mean
from xpuruntime.runtime.dispatch import engine_registry
from xpuruntime.runtime.engines import (
    KNOWN_ENGINE_HINTS,
    Availability,
    Engine,
    discover_engines,
    load_engine,
)
from xpuruntime.runtime.errors import EngineNotInstalledError, XpuRuntimeError
from xpuruntime.runtime.record import Choice


def availability_of(engine_cls: type[Engine]) -> Availability:
    """``engine_cls.availability()``, probed once per process and kept in the core's engine
    registry, which answers every later ask (the registry lists what this process can run)."""
    found = engine_registry.availability(engine_cls.name)
    if found is None:
        found = engine_cls.availability()
        engine_registry.publish(engine_cls.name, found, engine_cls.aliases)
    return found


def supports(found: Availability, device: DeviceSpec) -> bool:
    """Whether an engine reports the device (``cuda`` matches ``cuda:0`` and so on)."""
    wanted = str(device)
    return any(d == wanted or d.split(":")[0] == wanted for d in found.devices)


@dataclass(frozen=True)
class EngineStatus:
    """One engine as ``xpuruntime engines`` lists it.

    ``state``: "available" (runs here), "unavailable" (its plugin is installed but its
    backend is missing or unusable), "broken" (the plugin fails to load) or "not installed".
    """

    name: str
    state: str
    aliases: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    install_hint: str = ""


def engine_overview() -> list[EngineStatus]:
    """Every engine plugin installed (probed) and every known engine that is not."""
    installed = discover_engines()
    found: list[EngineStatus] = []
    for name, entry in sorted(installed.items()):
        try:
            cls = entry.load()
            state = availability_of(cls)
        except XpuRuntimeError as exc:
            found.append(EngineStatus(name, "broken", reason=str(exc)))
            continue
        found.append(
            EngineStatus(
                name,
                "available" if state.available else "unavailable",
                cls.aliases,
                state.devices if state.available else (),
                {k: v for k, v in state.versions.items() if k != "providers"},
                state.reason,
                "" if state.available else state.install_hint or cls.install_hint,
            )
        )
    for name, hint in sorted(KNOWN_ENGINE_HINTS.items()):
        if name not in installed:
            found.append(EngineStatus(name, "not installed", install_hint=hint))
    return found


def with_install_hint(reason: str, hint: str) -> str:
    """``reason`` followed by the install command, unless the reason already gives it."""
    if not hint or hint in reason:
        return reason
    if not reason:
        return f"Install it with: {hint}"
    return f"{reason.rstrip('. ')}. Install it with: {hint}"


def _unknown_engine(requested: str) -> EngineNotInstalledError:
    overview = engine_overview()
    ready = [e.name for e in overview if e.state == "available"]
    missing = [f"{e.name} ({e.install_hint})" for e in overview if e.install_hint]
    return EngineNotInstalledError(
        f"unknown engine {requested!r}{did_you_mean(requested, [e.name for e in overview])}; "
        f"engines that run here: {', '.join(ready) or 'none'}"
        + (f"; not usable until installed: {'; '.join(missing)}" if missing else "")
    )


@dataclass(frozen=True)
class EngineChoice:
    engine: type[Engine]
    choice: Choice


def choose_engine(requested: str, device: DeviceSpec, preference: Sequence[str]) -> EngineChoice:
    """The engine class for ``requested`` ("auto", a name or an alias) on ``device``."""
    if requested != "auto":
        known = {*discover_engines(), *KNOWN_ENGINE_HINTS}
        try:
            engine_cls = load_engine(requested)
        except EngineNotInstalledError:
            if requested in known:
                raise  # a known engine that is not installed: the message has the install hint
            raise _unknown_engine(requested) from None
        found = availability_of(engine_cls)
        if not found.available:
            raise EngineNotInstalledError(
                f"engine {engine_cls.name!r} cannot run here: "
                + with_install_hint(found.reason, found.install_hint or engine_cls.install_hint)
            )
        reason = "requested" if requested == engine_cls.name else f"requested as {requested!r}"
        return EngineChoice(engine_cls, Choice(requested, engine_cls.name, reason))
    return _choose_auto(device, preference)


def _choose_auto(device: DeviceSpec, preference: Sequence[str]) -> EngineChoice:
    installed = discover_engines()
    skipped: list[str] = []
    usable: list[type[Engine]] = []
    for name in preference:
        if name not in installed:
            hint = KNOWN_ENGINE_HINTS.get(name, "")
            skipped.append(f"{name}: not installed" + (f" ({hint})" if hint else ""))
            continue
        try:
            engine_cls = installed[name].load()
        except XpuRuntimeError as exc:
            skipped.append(f"{name}: {exc}")
            continue
        found = availability_of(engine_cls)
        if not found.available:
            skipped.append(f"{name}: {found.reason}")
            continue
        if supports(found, device):
            why = (
                f"first engine of ExecutionPolicy.engines {list(preference)} that runs on {device}"
            )
            if skipped:
                why += "; skipped " + "; ".join(skipped)
            return EngineChoice(engine_cls, Choice("auto", name, why))
        skipped.append(f"{name}: no {device} device (it has {', '.join(found.devices) or 'none'})")
        usable.append(engine_cls)
    if usable:
        # No engine can use the device: the first installed one made for such devices (else
        # the first installed one) is picked, and its device fallback goes through the
        # policy's fallback mode when the session is created, saying what is missing.
        made_for = [e for e in usable if device.kind in e.device_kinds]
        engine_cls = (made_for or usable)[0]
        why = f"no engine of {list(preference)} runs on {device}: " + "; ".join(skipped)
        return EngineChoice(engine_cls, Choice("auto", engine_cls.name, why))
    raise EngineNotInstalledError(
        f"engine='auto' found no usable engine among ExecutionPolicy.engines "
        f"{list(preference)}: "
        + "; ".join(skipped)
        + ". Install one, for example: "
        + KNOWN_ENGINE_HINTS["onnxruntime"]
    )
