"""OpenVINO's lockable decisions: the compiled blob, keyed in the lockfile.

Recording exports the compiled model (``CompiledModel.export_model``) as an artifact of the
lockfile, with the properties the compiled model reports (execution devices, precision hint,
streams, performance hint) as the readable part of the entry. Replaying imports that blob
(``Core.import_model``) instead of compiling: the device plugin's own choices (layouts,
primitives, fusions) are exactly the locked ones. A blob OpenVINO will not import here
(another release or device driver) is refused through the kit's lock (the fallback mode) and
the model is compiled anew. What a lock cannot pin: a compile for ``AUTO`` (its device
choice happens at run time and some plugins export no blob).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.kit.locking import changed_options
from xpuruntime.policies.lock import LockedChoice

if TYPE_CHECKING:
    from xpuruntime.inference.kit import EngineLock
    from xpuruntime.policies.lock import LockEntry

__all__ = ["import_locked", "locked_choice", "replay_differences"]

BLOB = "openvino-blob"
#: Properties of a compiled model that say what it decided.
_DECIDED = ("EXECUTION_DEVICES", "INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "NUM_STREAMS")


def _decided(compiled: Any) -> dict[str, str]:
    supported = compiled.get_property("SUPPORTED_PROPERTIES")
    return {name: _text(compiled.get_property(name)) for name in _DECIDED if name in supported}


def _text(value: Any) -> str:
    """A property as OpenVINO spells it: an element type by its name ("f32"), not the Python
    repr ("<Type: 'float32'>") its ``str`` gives."""
    name = getattr(value, "get_type_name", None)
    return str(name()) if callable(name) else str(value)


def import_locked(
    lock: EngineLock, entry: LockEntry, core: Any, device: str, properties: Mapping[str, Any]
) -> Any:
    """The locked blob imported on ``device``; None (the entry refused) when it cannot be."""
    artifact = entry.choice.artifact
    if artifact is None or artifact.kind != BLOB:
        lock.refuse(entry, "the locked entry holds no compiled OpenVINO blob")
        return None
    blob = lock.store.read_artifact(artifact)
    try:
        return core.import_model(blob, device, dict(properties))
    except RuntimeError as exc:  # OpenVINO checks the blob against the plugin and device
        lock.refuse(entry, f"OpenVINO would not import the locked blob on {device}: {exc}")
        return None


def replay_differences(compiled: Any, entry: LockEntry) -> list[str]:
    """Each locked property the imported model does not run with."""
    return changed_options(entry.choice.options, _decided(compiled))


def locked_choice(compiled: Any, device: str, lock: EngineLock) -> LockedChoice:
    """What the compiled model decided, with its exported blob where the plugin exports one."""
    decided = _decided(compiled)
    try:
        exported = compiled.export_model()
    except RuntimeError:  # AUTO and some plugins cannot export: the properties alone
        return LockedChoice(kernel=device, options=decided)
    # bytes in older releases, io.BytesIO in newer ones
    blob = exported.getvalue() if hasattr(exported, "getvalue") else bytes(exported)
    return LockedChoice(
        kernel=device,
        options=decided,
        artifact=lock.store.write_artifact(BLOB, blob, ".ov-blob"),
    )
