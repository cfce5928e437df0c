"""Opening a model bundle for inference, and verifying a session against its reference outputs.

``InferenceSession(bundle_dir)`` runs the bundle's ONNX model under the bundle's policy.
How that policy applies in inference:

- **What training decided is pinned and checked.** The policy's precision, device-neutral
  settings and fallback mode apply as they are. The lockfile is replayed: training
  decisions an engine can express are carried over (``lock.carry_over.*`` in the record),
  the others are recorded with the reason. The training kernel policy names PyTorch kernels
  (``attention=flash_v2``): it is not demanded of the inference engine, whose kernels are
  others; instead the record says, per op call exported, what it was trained on, the ONNX
  form it took (standard op or decomposition, from the bundle) and which engine nodes run it
  (``bundle.op.<call>``).
- **The inference engine's own decisions are recorded,** or replayed when the lockfile holds
  a lock recorded for that engine (``lock="record"`` on an inference session of the
  bundle). A training lockfile never makes an inference session demand entries it never had.
- ``exec_policy=`` (or ``kernel_policy=`` and the other arguments) pins what the engine does,
  on top of or instead of the bundle's policy.

:func:`verify_session` runs the reference inputs exported with the model and compares the
outputs with the bundle's tolerances.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from xpuruntime.inference.settings import add_setting
from xpuruntime.inference.tensor_compare import TensorComparison, compare_tensors
from xpuruntime.policies.bundle import BundleError, BundleManifest, read_manifest

if TYPE_CHECKING:
    from xpuruntime.inference.session import InferenceSession, PolicySource
    from xpuruntime.policies.bundle import ExportedNode, ExportedOp
    from xpuruntime.runtime.record import ExecutionRecord, NodeRecord

__all__ = ["Bundle", "BundleVerification", "VerificationError", "open_bundle", "verify_session"]


class VerificationError(BundleError):
    """The inference engine's outputs differ from the bundle's reference beyond tolerance."""


@dataclass(frozen=True)
class Bundle:
    """A checked bundle directory."""

    folder: Path
    manifest: BundleManifest

    @property
    def model(self) -> Path:
        return self.folder / self.manifest.model

    @property
    def lock_file(self) -> Path | None:
        return None if self.manifest.lock is None else self.folder / self.manifest.lock

    def policy(self, given: PolicySource) -> PolicySource:
        """The policy layer of a session of this bundle: ``given`` when the caller names one
        (it replaces the bundle's entirely), else the bundle's policy with its lockfile
        replayed. The environment and explicit arguments (``device=...``: the training device
        need not exist where the model is served) still apply on top."""
        if given is not None:
            return given
        from xpuruntime.policies import load_policy

        policy = load_policy(self.folder / self.manifest.policy).execution_policy()
        # Training's kernels are PyTorch's: checked in the record (describe), not pinned on
        # an engine that runs other kernels.
        policy = policy.replace(kernel_policy=None)
        if self.lock_file is not None:
            policy = policy.replace(lock="replay", lock_file=str(self.lock_file))
        return policy

    def environment(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (self.folder / self.manifest.environment).read_text(encoding="utf-8")
        )
        return data

    def reference(self) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]]:
        """(inputs, outputs) by name."""
        with np.load(self.folder / self.manifest.reference, allow_pickle=False) as data:
            inputs = {name: data[f"input/{name}"] for name in self.manifest.inputs}
            outputs = {name: data[f"output/{name}"] for name in self.manifest.outputs}
        return inputs, outputs

    def trained_kernels(self) -> dict[str, str]:
        """The training policy's kernel entries, ``op -> "kernel (mode)"``."""
        from xpuruntime.policies import load_policy

        policy = load_policy(self.folder / self.manifest.policy).execution_policy()
        if policy.kernel_policy is None:
            return {}
        return {
            op: f"{entry.kernel or 'auto'} ({entry.mode})"
            for op, entry in sorted(policy.kernel_policy.entries.items())
        }

    def describe(self, record: ExecutionRecord, engine: str) -> None:
        """What the bundle carried into this session, after the engine built it: where it
        came from, and per exported op call what it became and which engine nodes run it
        (from the engine's own node list in ``record.nodes``)."""
        exported = self.manifest.exported_with
        gpus = self.environment().get("gpu") or ["no GPU"]
        record.notes.append(
            f"bundle {self.folder}: exported with torch {exported.get('torch', '?')} on"
            f" {', '.join(gpus)}; policy {exported.get('policy_hash', '?')[:12]}"
            + (f", lockfile {self.manifest.lock}" if self.manifest.lock else ", no lockfile")
        )
        trained = self.trained_kernels()
        if trained:
            add_setting(
                record,
                "bundle.kernel_policy",
                ", ".join(f"{op}={kernel}" for op, kernel in trained.items()),
                None,
                True,
                f"training's kernels (PyTorch's) are checked per op call (bundle.op.*), not"
                f" demanded of {engine}, which runs its own; pin {engine}'s with kernel_policy=",
            )
        export = self.manifest.export
        if export is None:
            record.notes.append(
                f"bundle {self.folder}: format 1 holds no record of what its ops became in ONNX"
            )
            return
        _decomposed_pins(record, engine, export.ops)
        for op in export.ops:
            add_setting(
                record,
                f"bundle.op.{op.call}",
                f"{op.op}, trained on "
                + (", ".join(op.trained) or "no decision in the exporting process's record"),
                f"{op.form}: " + ", ".join(f"{n.name} ({n.op_type})" for n in op.nodes),
                True,
                _served_by(engine, op.nodes, record.nodes),
            )


def _decomposed_pins(record: ExecutionRecord, engine: str, ops: list[ExportedOp]) -> None:
    """A kernel the session's policy pins for an op family the export decomposed: the
    engine's kernel mapping found no node of that family ("the model has no attention
    nodes"), but the model computes it, in nodes no kernel choice reaches. Say so, and let
    the fallback rule decide (a pin under fallback="error" raises)."""
    for setting in record.settings:
        family = setting.name.removeprefix("kernel_policy.")
        decomposed = [op for op in ops if op.family == family and "decomposition" in op.form]
        if setting.name == family or not decomposed or not setting.honoured:
            continue
        if setting.note != f"the model has no {family} nodes":
            continue
        kernel, _, mode = str(setting.requested).partition(" (")
        types = sorted({node.op_type for op in decomposed for node in op.nodes})
        reason = (
            f"the export decomposed {len(decomposed)} {family} call(s) into"
            f" {', '.join(types)} (bundle.op.*): {engine} has no {family} node whose kernel"
            " it could pin"
        )
        setting.honoured, setting.note = False, reason
        record.kernel_fallback(
            op=family,
            kernel=kernel,
            entry_mode=mode.rstrip(")"),
            chosen=f"{engine}'s kernels for the decomposed nodes",
            reason=reason,
            mode=record.policy.get("execution", {}).get("fallback", "warn"),
            hint="Export with the standard op (the engines' probes decide it). ",
        )


def _served_by(engine: str, exported: list[ExportedNode], nodes: list[NodeRecord]) -> str:
    """Which of the engine's nodes run ``exported``, by the names the engine reports (an
    OpenVINO node fused from several ONNX nodes is named after them, comma-separated)."""
    if not nodes:
        return f"{engine} reports no per-node placement: which of its kernels run these is unknown"
    names = {node.name for node in exported}
    serving = [
        f"{node.name.rstrip(',')} ({node.op_type} on {node.chosen}"
        + (f", kernel {node.kernel})" if node.kernel else ")")
        for node in nodes
        if names & set(node.name.split(","))
    ]
    if not serving:
        return (
            f"{engine}'s node list names none of these nodes: its optimizer fused or renamed"
            " them into nodes that do not say where they came from"
        )
    # Only names are evidence: OpenVINO, for one, turns an ONNX Attention into a new
    # ScaledDotProductAttention node whose name does not say where it came from.
    return (
        f"{engine} runs them as "
        + "; ".join(serving)
        + " (the nodes that carry their names; a node its optimizer made from them under"
        " another name is not listed)"
    )


def open_bundle(path: Path) -> Bundle:
    """Check and open the bundle in ``path`` (BundleError says what is wrong)."""
    return Bundle(path, read_manifest(path))


class BundleVerification(msgspec.Struct, frozen=True):
    """The session's outputs against the bundle's reference outputs."""

    bundle: str
    engine: str
    device: str
    rtol: float
    atol: float
    outputs: list[TensorComparison]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.outputs)

    def __str__(self) -> str:
        lines = [
            f"{'passed' if self.passed else 'FAILED'}: {self.engine} on {self.device} against"
            f" {self.bundle} (rtol {self.rtol:g}, atol {self.atol:g})"
        ]
        lines += [
            f"  {c.tensor}: max abs {c.max_abs:.3g}, max rel {c.max_rel:.3g}"
            f" {'ok' if c.passed else 'DIFFERS'}{f' ({c.note})' if c.note else ''}"
            for c in self.outputs
        ]
        return "\n".join(lines)


def verify_session(
    session: InferenceSession,
    bundle: Bundle,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    raise_on_failure: bool = True,
) -> BundleVerification:
    """Run the bundle's reference inputs and compare with its reference outputs."""
    inputs, expected = bundle.reference()
    rtol = bundle.manifest.rtol if rtol is None else rtol
    atol = bundle.manifest.atol if atol is None else atol
    outputs = session.run(inputs)
    target = f"{session.engine}:{session.device}"
    report = BundleVerification(
        str(bundle.folder),
        session.engine,
        session.device,
        rtol,
        atol,
        [
            compare_tensors(name, target, outputs[name], want, atol=atol, rtol=rtol)
            for name, want in expected.items()
        ],
    )
    if raise_on_failure and not report.passed:
        raise VerificationError(
            f"{report}\nThe inference engine does not reproduce the exported outputs within"
            " tolerance: compare the policies' precision, or pass looser rtol/atol"
        )
    return report
