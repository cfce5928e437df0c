"""What ``InferenceSession(model)`` accepts: a path, the model's bytes, or an ``onnx.ModelProto``.

Engines load files (TensorRT's parser and OpenVINO read external weights beside the model),
so a model given in memory is written once to a private temporary folder that lives as long
as the session: removed by ``InferenceSession.close()`` or when the session is collected.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from xpuruntime.inference.errors import ModelNotFoundError, ModelTypeError

# protobuf cannot serialize a message of 2 GiB or more in one piece.
_PROTOBUF_LIMIT = 2**31 - 1


class ModelSource:
    """The file an engine loads, and how the record names the model."""

    def __init__(self, path: Path, description: str, temporary: Path | None = None) -> None:
        self.path = path
        self.description = description
        self._cleanup = (
            None
            if temporary is None
            else weakref.finalize(self, shutil.rmtree, temporary, ignore_errors=True)
        )

    def close(self) -> None:
        """Remove the temporary copy of an in-memory model (nothing for a path)."""
        if self._cleanup is not None:
            self._cleanup()


def open_model(model: object) -> ModelSource:
    """A :class:`ModelSource` for a path, ``bytes``-like ONNX data or an ``onnx.ModelProto``."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model).expanduser()
        if not path.is_file():
            where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
            raise ModelNotFoundError(
                f"model file {str(path)!r} does not exist{where}; pass the path of an .onnx file"
            )
        return ModelSource(path, str(path))
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        return _in_memory(lambda target: target.write_bytes(data), data, "bytes")
    if _is_model_proto(model):
        return _from_proto(model)
    raise ModelTypeError(
        f"model must be a path (str or os.PathLike), the model's bytes, or an onnx.ModelProto; "
        f"got {type(model).__module__}.{type(model).__qualname__}"
    )


def _is_model_proto(model: object) -> bool:
    # Checked by name: importing onnx only to reject a wrong type would cost ~0.3 s.
    return type(model).__name__ == "ModelProto" and hasattr(model, "SerializeToString")


def _from_proto(proto: Any) -> ModelSource:
    if proto.ByteSize() <= _PROTOBUF_LIMIT:
        data = proto.SerializeToString()
        return _in_memory(lambda target: target.write_bytes(data), data, "onnx.ModelProto")
    import onnx

    # Over protobuf's limit: weights go to a file beside the model (ONNX external data).
    def save(target: Path) -> None:
        onnx.save_model(proto, str(target), save_as_external_data=True, location="weights.bin")

    return _in_memory(save, None, "onnx.ModelProto with external weights")


def _in_memory(write: Any, data: bytes | None, kind: str) -> ModelSource:
    folder = Path(tempfile.mkdtemp(prefix="xpuruntime-model-"))
    target = folder / "model.onnx"
    try:
        write(target)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    size = target.stat().st_size if data is None else len(data)
    digest = hashlib.sha256(target.read_bytes() if data is None else data).hexdigest()
    return ModelSource(target, f"<in-memory {kind}: {size} bytes, sha256 {digest[:16]}>", folder)
