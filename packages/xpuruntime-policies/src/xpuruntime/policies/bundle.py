"""The model bundle's manifest: what carries a training-time strategy into inference.

A bundle is a directory written by ``xpuruntime.pytorch.export`` and opened by
``InferenceSession(bundle_dir)``::

    bundle.json        this manifest: file digests, input/output names, tolerances
    model.onnx         the model (torch.onnx.export(..., dynamo=True))
    policy.json        the policy the model was trained and exported under
    lock.json          the decision lockfile (+ lock.json.artifacts/), when there is one
    environment.json   the environment fingerprint of the exporting machine
    reference.npz      reference inputs ("input/<name>") and outputs ("output/<name>")

Every file's SHA-256 is in the manifest, so a bundle whose parts were swapped or damaged is
refused with the file named. The manifest is plain msgspec: both the writer (the PyTorch
extension) and the reader (the inference package) use it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from xpuruntime.policies.errors import XpuRuntimeError

__all__ = [
    "BUNDLE_FORMAT_VERSION",
    "MANIFEST",
    "BundleError",
    "BundleManifest",
    "file_sha256",
    "read_manifest",
]

BUNDLE_FORMAT_VERSION = 1
MANIFEST = "bundle.json"


class BundleError(XpuRuntimeError, ValueError):
    """A bundle directory is incomplete, damaged, or of a format this release cannot read."""


class BundleManifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``bundle.json``: the parts of a bundle and how to check them."""

    format: Literal["xpuruntime-bundle"] = "xpuruntime-bundle"
    version: Literal[1] = 1
    model: str = "model.onnx"
    policy: str = "policy.json"
    lock: str | None = None
    environment: str = "environment.json"
    reference: str = "reference.npz"
    inputs: list[str]
    outputs: list[str]
    rtol: Annotated[float, Meta(ge=0)]
    atol: Annotated[float, Meta(ge=0)]
    files: Annotated[
        dict[str, str], Meta(description="SHA-256 of every file, by its path in the bundle.")
    ]
    exported_with: dict[str, str] = msgspec.field(default_factory=dict)

    def save(self, folder: Path) -> Path:
        target = folder / MANIFEST
        target.write_text(
            json.dumps(msgspec.to_builtins(self), indent=2, sort_keys=True) + "\n",
            encoding="utf-8",
        )
        return target


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(folder: Path) -> BundleManifest:
    """The checked manifest of the bundle in ``folder``: every listed file present and
    unchanged. BundleError names what is wrong."""
    path = folder / MANIFEST
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BundleError(
            f"{folder} is not a model bundle: {MANIFEST} is missing ({exc.strerror or exc});"
            " write one with xpuruntime.pytorch.export(model, example_inputs, path)"
        ) from None
    try:
        manifest = msgspec.json.decode(raw, type=BundleManifest)
    except msgspec.DecodeError as exc:
        version = _version(raw)
        if isinstance(version, int) and version > BUNDLE_FORMAT_VERSION:
            raise BundleError(
                f"{path}: bundle format {version} is newer than this release reads"
                f" ({BUNDLE_FORMAT_VERSION}); upgrade xpuruntime"
            ) from None
        raise BundleError(f"{path}: not a valid bundle manifest: {exc}") from None
    for name, digest in sorted(manifest.files.items()):
        file = folder / name
        if not file.is_file():
            raise BundleError(f"{folder}: {name} is missing from the bundle")
        if file_sha256(file) != digest:
            raise BundleError(
                f"{folder}: {name} does not match the digest in {MANIFEST}; the bundle was"
                " changed after it was exported. Export it again"
            )
    return manifest


def _version(raw: bytes) -> object:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data.get("version") if isinstance(data, dict) else None
