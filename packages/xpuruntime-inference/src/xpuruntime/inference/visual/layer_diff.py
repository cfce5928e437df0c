"""Every node's output on two engines, compared: the data behind the difference overlay and
the report's per-layer error plot.

The same method as ``xpuruntime compare --per-layer`` (:func:`~xpuruntime.inference.compare.
expose_intermediates` makes every node output a graph output; :func:`~xpuruntime.inference.
compare.compare_tensors` compares them), kept for every node instead of stopping at the first
that diverges. Both targets run with ``fallback="error"``, as in ``compare``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xpuruntime.inference.compare import Target, expose_intermediates
from xpuruntime.inference.tensor_compare import compare_tensors
from xpuruntime.inference.visual.graph_ids import GraphIds
from xpuruntime.policies import ExecutionPolicy, LayeredPolicy


@dataclass(frozen=True)
class NodeDifference:
    """One node output on the target against the reference."""

    node_id: str
    node: str
    op_type: str
    tensor: str
    max_abs: float
    max_rel: float
    passed: bool


@dataclass
class LayerDifferences:
    reference: str
    target: str
    atol: float
    rtol: float
    #: In graph order.
    outputs: list[NodeDifference] = field(default_factory=list)

    def max_abs_by_node(self) -> dict[str, float]:
        """Each node's largest absolute difference over its outputs (finite values only:
        JSON has no infinity; a shape mismatch shows as the largest finite float)."""
        by_node: dict[str, float] = {}
        for o in self.outputs:
            value = o.max_abs if np.isfinite(o.max_abs) else float(np.finfo(np.float64).max)
            by_node[o.node_id] = max(by_node.get(o.node_id, 0.0), value)
        return by_node

    @property
    def first_divergence(self) -> NodeDifference | None:
        return next((o for o in self.outputs if not o.passed), None)


def _run(model: Path, target: Target, feeds: Mapping[str, Any], policy: Any) -> dict[str, Any]:
    from xpuruntime.inference.session import InferenceSession

    with InferenceSession(
        model,
        engine=target.engine,
        device=target.device,
        exec_policy=policy,
        policy_arguments={"execution": {"fallback": "error"}},
    ) as sess:
        return sess.run(feeds)


def layer_differences(
    model: Path,
    graph: GraphIds,
    reference: Target,
    target: Target,
    feeds: Mapping[str, np.ndarray],
    *,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    policy: ExecutionPolicy | LayeredPolicy | None = None,
) -> LayerDifferences:
    """Every node output of ``model`` on ``target`` compared with ``reference``."""
    ids_by_output = {output: n.id for n in graph.nodes for output in n.outputs}
    with tempfile.TemporaryDirectory(prefix="xpuruntime-layers-") as tmp:
        exposed, order = expose_intermediates(model, Path(tmp) / "all_outputs.onnx")
        expected = _run(exposed, reference, feeds, policy)
        got = _run(exposed, target, feeds, policy)
    result = LayerDifferences(str(reference), str(target), atol, rtol)
    for node, op_type, tensor in order:
        if tensor not in got or tensor not in expected or tensor not in ids_by_output:
            continue
        c = compare_tensors(
            tensor, str(target), got[tensor], expected[tensor], atol=atol, rtol=rtol,
            allow_nonfinite=True,
        )  # fmt: skip
        result.outputs.append(
            NodeDifference(
                ids_by_output[tensor], node, op_type, tensor, c.max_abs, c.max_rel, c.passed
            )
        )
    return result
