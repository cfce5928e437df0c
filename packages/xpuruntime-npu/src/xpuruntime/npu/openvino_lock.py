"""OpenVINO's lockable decisions: the compiled blob, keyed in the lockfile.

Recording exports the compiled model (``CompiledModel.export_model``) as an artifact of the
lockfile, keyed by the model digest, the device and the precision, with the properties the
compiled model reports (execution devices, precision hint, streams, performance hint) as the
readable part of the entry. Replaying imports that blob (``Core.import_model``) instead of
compiling: the device plugin's own choices (layouts, primitives, fusions) are exactly the
locked ones. A blob OpenVINO will not import here (another release or device driver) goes
through the fallback mode and the model is compiled anew. What a lock cannot pin: a compile
for ``AUTO`` (its device choice happens at run time and some plugins export no blob).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.lock_apply import EngineLock, changed_options
from xpuruntime.policies.lock import LockedChoice

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = ["compile_model"]

BLOB = "openvino-blob"
#: Properties of a compiled model that say what it decided.
_DECIDED = ("EXECUTION_DEVICES", "INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "NUM_STREAMS")


def _decided(compiled: Any) -> dict[str, str]:
    supported = compiled.get_property("SUPPORTED_PROPERTIES")
    return {name: str(compiled.get_property(name)) for name in _DECIDED if name in supported}


def compile_model(
    core: Any,
    model: Any,
    device: str,
    properties: Mapping[str, Any],
    *,
    policy: ExecutionPolicy,
    record: ExecutionRecord,
    model_files: Sequence[Path],
    requested_device: str,
) -> Any:
    """``core.compile_model(model, device, properties)`` under the policy's lockfile."""
    lock = EngineLock.open(policy, record, "openvino", model_files[0], requested_device)
    if lock is not None and lock.replaying:
        imported = _import_locked(lock, core, device, properties)
        if imported is not None:
            return imported
    compiled = core.compile_model(model, device, dict(properties))
    if lock is not None and lock.recording:
        _save(lock, compiled, device)
    return compiled


def _import_locked(lock: EngineLock, core: Any, device: str, properties: Mapping[str, Any]) -> Any:
    entry = lock.locked()
    if entry is None:
        return None
    artifact = entry.choice.artifact
    if artifact is None or artifact.kind != BLOB:
        lock.refuse(entry, "the locked entry holds no compiled OpenVINO blob")
        return None
    blob = lock.store.read_artifact(artifact)
    try:
        compiled = core.import_model(blob, device, dict(properties))
    except RuntimeError as exc:  # OpenVINO checks the blob against the plugin and device
        lock.refuse(entry, f"OpenVINO would not import the locked blob on {device}: {exc}")
        return None
    differences = changed_options(entry.choice.options, _decided(compiled))
    if differences:
        lock.refuse(entry, "; ".join(differences))
        return None
    lock.honoured(entry, f"compiled blob imported on {device}")
    return compiled


def _save(lock: EngineLock, compiled: Any, device: str) -> None:
    decided = _decided(compiled)
    try:
        exported = compiled.export_model()
    except RuntimeError as exc:  # AUTO and some plugins cannot export
        lock.save(
            LockedChoice(kernel=device, options=decided),
            reason=f"properties of the compiled model; {device} exported no blob ({exc})",
        )
        return
    # bytes in older releases, io.BytesIO in newer ones
    blob = exported.getvalue() if hasattr(exported, "getvalue") else bytes(exported)
    lock.save(
        LockedChoice(
            kernel=device,
            options=decided,
            artifact=lock.store.write_artifact(BLOB, blob, ".ov-blob"),
        ),
        reason="the compiled blob (export_model) and the properties it runs with",
    )
