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

Format 2 adds :class:`ExportRecord` (``export``): the ONNX form each xpuruntime op took and
why, the nodes each op call became, the kernels training decided for it, and the input
shapes as exported (symbolic dimensions stay dynamic). Format-1 bundles still open.
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
    "ExportError",
    "ExportRecord",
    "ExportedNode",
    "ExportedOp",
    "file_sha256",
    "read_manifest",
]

BUNDLE_FORMAT_VERSION = 2
MANIFEST = "bundle.json"


class BundleError(XpuRuntimeError, ValueError):
    """A bundle directory is incomplete, damaged, or of a format this release cannot read."""


class ExportError(BundleError):
    """A model cannot be exported: the error names the op or part and what to do."""


class ExportedNode(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One ONNX node an op call became."""

    name: str
    op_type: str


class ExportedOp(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One call of an xpuruntime op in the exported graph, and what it became."""

    op: Annotated[str, Meta(description="The torch op, e.g. xpuruntime::fused_attention.")]
    call: Annotated[str, Meta(description="The call's node in the exported program.")]
    family: Annotated[str, Meta(description="Its kernel-policy entry: attention, rmsnorm, ...")]
    form: Annotated[str, Meta(description="The ONNX form it took, and why.")]
    nodes: list[ExportedNode]
    trained: Annotated[
        list[str],
        Meta(description="Kernels training decided for this family (kernel (status)); empty"
             " when this process's training record holds none."),
    ]  # fmt: skip


class ExportRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the model became ONNX."""

    opset: int
    engines: Annotated[
        dict[str, dict[str, str]],
        Meta(description="'engine version' -> standard op type -> 'runs' or its refusal."),
    ]
    probed_dtype: Annotated[str, Meta(description="The dtype the engines were probed in.")] = (
        "float32"
    )
    forms: Annotated[dict[str, str], Meta(description="op family -> the form it took, why.")]
    fused: Annotated[
        dict[str, int],
        Meta(description="Standard ops the exporter's optimiser fused from the graph, counted."),
    ] = msgspec.field(default_factory=dict)
    ops: list[ExportedOp]
    input_shapes: Annotated[
        dict[str, list[str | int]],
        Meta(description="Per input, its dimensions as exported: names are dynamic."),
    ]


class BundleManifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``bundle.json``: the parts of a bundle and how to check them."""

    format: Literal["xpuruntime-bundle"] = "xpuruntime-bundle"
    version: Literal[1, 2] = 2
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
    export: ExportRecord | None = None

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
