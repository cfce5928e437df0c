"""Run one model on several engines/devices and compare the outputs.

Per output: max absolute and relative error against the first engine, and pass/fail under
``|a - b| <= atol + rtol * |b|``. The per-layer mode rewrites the model so that every node
output is a graph output, runs that on each engine, and names the first node (in graph
order) whose output diverges: where to look when two engines disagree.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from xpuruntime.inference.errors import InvalidModelError
from xpuruntime.inference.session import InferenceSession
from xpuruntime.inference.tensor_compare import TensorComparison, compare_tensors
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.errors import PolicyError, XpuRuntimeError


@dataclass(frozen=True)
class Target:
    """``engine:device`` as given on the command line (``onnxruntime:cuda``)."""

    engine: str
    device: str

    def __str__(self) -> str:
        return f"{self.engine}:{self.device}"


def parse_targets(text: str) -> list[Target]:
    """``"onnxruntime:cpu,openvino:cpu"`` -> targets; at least two different ones are needed.

    The same target twice is refused (it would compare a result with itself); to compare
    two sessions of one engine (run-to-run determinism), name it once by an alias.
    """
    targets = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        engine, _, device = part.partition(":")
        target = Target(engine.strip(), device.strip() or "cpu")
        if target in targets:
            raise PolicyError(
                f"target {target} is given twice in {text!r}; each engine:device target may "
                f"appear once (results are compared target by target)"
            )
        targets.append(target)
    if len(targets) < 2:
        raise PolicyError(
            f"compare needs at least two engine:device targets separated by commas, got "
            f"{text!r}; for example --engines onnxruntime:cpu,onnxruntime:cuda"
        )
    return targets


class TargetStatus(msgspec.Struct, frozen=True):
    target: str
    ran: bool
    reason: str = ""


class Divergence(msgspec.Struct, frozen=True):
    """The first node whose output differs beyond the tolerance."""

    node: str
    op_type: str
    tensor: str
    target: str
    max_abs: float
    max_rel: float


class CompareReport(msgspec.Struct, frozen=True):
    model: str
    reference: str
    atol: float
    rtol: float
    targets: list[TargetStatus]
    outputs: list[TensorComparison]
    first_divergence: Divergence | None = None
    per_layer: bool = False
    allow_nonfinite: bool = False

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.outputs) and all(t.ran for t in self.targets)


def _open(model: Path, target: Target, policy: ExecutionPolicy) -> InferenceSession | str:
    """A session for the target under ``policy`` (its fallback mode included: a fallback
    is an error under 'error' and recorded otherwise, and :func:`_ran` states it), or why
    the target cannot run here."""
    try:
        return InferenceSession(
            model, device=target.device, engine=target.engine, exec_policy=policy
        )
    except (XpuRuntimeError, ImportError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _ran(sess: InferenceSession) -> str:
    """What a target ran: engine, device, precision and every recorded fallback."""
    record = sess.record()
    precision = record.precision.chosen if record.precision is not None else "unknown"
    text = f"ran on {sess.engine}:{sess.device} in {precision}"
    if record.fallbacks:
        text += "; fell back: " + "; ".join(
            f"{f.what}: {f.requested!r} -> {f.chosen!r} ({f.reason})" for f in record.fallbacks
        )
    return text


def compare_models(
    model: Path,
    targets: Sequence[Target],
    feeds: Mapping[str, Any],
    *,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    per_layer: bool = False,
    policy: ExecutionPolicy | None = None,
    allow_nonfinite: bool = False,
) -> CompareReport:
    """Run ``feeds`` through ``model`` on every target and compare with the first."""
    policy = policy or ExecutionPolicy()
    with tempfile.TemporaryDirectory(prefix="xpuruntime-compare-") as tmp:
        layer_order: list[tuple[str, str, str]] = []
        run_model = model
        if per_layer:
            run_model, layer_order = expose_intermediates(model, Path(tmp) / "all_outputs.onnx")
        statuses: list[TargetStatus] = []
        results: dict[str, dict[str, Any]] = {}
        for target in targets:
            sess = _open(run_model, target, policy)
            if isinstance(sess, str):
                statuses.append(TargetStatus(str(target), False, sess))
                continue
            try:
                results[str(target)] = sess.run(feeds)
            except XpuRuntimeError as exc:
                statuses.append(TargetStatus(str(target), False, f"{type(exc).__name__}: {exc}"))
                continue
            statuses.append(TargetStatus(str(target), True, _ran(sess)))
        reference = str(targets[0])
        ref_out = results.get(reference)
        comparisons: list[TensorComparison] = []
        divergence = None
        if ref_out is not None:
            final_outputs = _model_output_names(model)
            for name, out in results.items():
                if name == reference:
                    continue
                for tensor in final_outputs:
                    comparisons.append(
                        compare_tensors(
                            tensor,
                            name,
                            out[tensor],
                            ref_out[tensor],
                            atol=atol,
                            rtol=rtol,
                            allow_nonfinite=allow_nonfinite,
                        )
                    )
                if per_layer and divergence is None:
                    divergence = _first_divergence(layer_order, name, out, ref_out, atol, rtol)
    return CompareReport(
        str(model),
        reference,
        atol,
        rtol,
        statuses,
        comparisons,
        divergence,
        per_layer,
        allow_nonfinite,
    )


def _first_divergence(
    layer_order: list[tuple[str, str, str]],
    target: str,
    out: Mapping[str, Any],
    ref: Mapping[str, Any],
    atol: float,
    rtol: float,
) -> Divergence | None:
    for node, op_type, tensor in layer_order:
        if tensor not in out or tensor not in ref:
            continue
        c = compare_tensors(
            tensor, target, out[tensor], ref[tensor], atol=atol, rtol=rtol, allow_nonfinite=True
        )
        if not c.passed:
            return Divergence(node, op_type, tensor, target, c.max_abs, c.max_rel)
    return None


def _model_output_names(model: Path) -> list[str]:
    import onnx

    return [o.name for o in onnx.load(str(model), load_external_data=False).graph.output]


def expose_intermediates(model: Path, target: Path) -> tuple[Path, list[tuple[str, str, str]]]:
    """Write a copy of ``model`` whose every node output is also a graph output.

    Returns the new file and (node name, op type, tensor) in graph order, for finding the
    first divergence. Types come from ONNX shape inference. Models with external weights
    are not supported here (the copy lives in a temporary folder).
    """
    import onnx

    try:
        proto = onnx.load(str(model), load_external_data=False)
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception as exc:
        raise InvalidModelError(f"cannot read {model} for per-layer comparison: {exc}") from exc
    graph = inferred.graph
    typed = {vi.name: vi for vi in graph.value_info}
    existing = {o.name for o in graph.output}
    order: list[tuple[str, str, str]] = []
    for node in graph.node:
        for tensor in node.output:
            if not tensor:
                continue
            order.append((node.name or tensor, node.op_type, tensor))
            if tensor in existing:
                continue
            if tensor in typed:
                graph.output.append(typed[tensor])
            else:
                graph.output.append(onnx.helper.make_empty_tensor_value_info(tensor))
            existing.add(tensor)
    onnx.save(inferred, str(target))
    return target, order
