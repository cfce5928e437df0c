"""An ONNX Runtime session bound to one QNN EP device: creating it (ONNX Runtime's silent
CPU retry caught), reading where its nodes run, and running it under the kit's contract
(ONNX Runtime's silent CPU retry of a failed run taken over by the kit's ProviderRetry)."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xpuruntime.inference.kit import KitSession
from xpuruntime.inference.kit.ort_retry import ProviderRetry
from xpuruntime.inference.kit.provider_assignment import assigned_nodes, record_assignment
from xpuruntime.inference.tensors import as_host_array, onnx_type_to_numpy_name
from xpuruntime.npu import qnn_backend
from xpuruntime.npu.onnx_model import graph_io_qdq, load_inferred_graph
from xpuruntime.runtime.engines import TensorInfo
from xpuruntime.runtime.errors import UnsupportedOperationError
from xpuruntime.runtime.record import NodeRecord

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions


def _tensor_infos(args: Sequence[Any]) -> list[TensorInfo]:
    return [
        TensorInfo(
            a.name,
            onnx_type_to_numpy_name(a.type),
            tuple(d if isinstance(d, (int, str)) else None for d in a.shape),
        )
        for a in args
    ]


class QNNSession(KitSession):
    """An ONNX Runtime session bound to one QNN EP device (the kit's behaviour contract)."""

    # ONNX Runtime rejects wrong names, element types, ranks and fixed dimensions itself, and
    # takes whatever it can run (string arrays of any numpy string type included).
    checks_inputs = True

    def __init__(self, ort: Any, session: Any, decisions: Decisions) -> None:
        super().__init__(
            _tensor_infos(session.get_inputs()), _tensor_infos(session.get_outputs()), engine="QNN"
        )
        self._session: Any = session
        # A graph the QNN EP built but cannot execute (e.g. from shapes the model declares
        # wrongly) fails every run: the session moves to the CPU EP under the fallback mode.
        self._retry = ProviderRetry(ort, session, qnn_backend.EP_NAME, decisions)

    def release(self) -> None:
        self._session = None  # released with the last reference

    def execute(self, feeds: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        arrays = {k: np.ascontiguousarray(as_host_array(v)[0]) for k, v in feeds.items()}
        session = self._session
        try:
            return dict(zip(names, session.run(names, arrays), strict=True))
        except self._retry.failure as exc:
            self._retry.leave(session, exc)
        return dict(zip(names, session.run(names, arrays), strict=True))


def zero_feeds(args: Sequence[Any], shapes: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """Zeros (empty strings) of each input's element type in its fixed shape."""
    feeds: dict[str, Any] = {}
    for a in args:
        dtype = onnx_type_to_numpy_name(a.type)
        shape = tuple(shapes[a.name])
        feeds[a.name] = np.full(shape, "", object) if dtype == "str" else np.zeros(shape, dtype)
    return feeds


def create(ort: Any, model: Path, so: Any, decisions: Decisions) -> Any:
    """Create the session; ONNX Runtime's own silent retry on the CPU EP is caught here.

    When the EP fails to initialise, onnxruntime's Python InferenceSession (up to 1.31)
    prints the error to stdout and retries with the CPU EP only: that retry is a fallback
    like any other. Later releases raise instead, and so does this engine (typed). Other
    failures propagate for the kit to type (a memory failure as such, else InvalidModelError).
    """
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            session = ort.InferenceSession(str(model), sess_options=so)
    except Exception as exc:
        message = " ".join(str(exc).split())
        if "CreateProvider" in message or "creating execution provider" in message:
            raise UnsupportedOperationError(
                f"the QNN EP failed to start and ONNX Runtime {ort.__version__} refused to run "
                f"without it: {message}. Check engine_options['qnn'] against the QNN EP's "
                f"provider options"
            ) from exc
        raise
    if qnn_backend.EP_NAME not in session.get_providers():
        message = " ".join(printed.getvalue().replace("*", "").split()) or "no reason given"
        decisions.fallback(
            what="execution provider",
            requested=qnn_backend.EP_NAME,
            chosen=", ".join(session.get_providers()),
            reason=f"the QNN EP failed to start and ONNX Runtime retried without it: {message}",
        )
    return session


def check_assignment(
    session: Any, model: Path, offload_io: bool, decisions: Decisions, precision: str
) -> None:
    """Per-node EP assignment into the record, classified (host-side shape computation or
    fallback) like every engine's.

    With ``offload_graph_io_quantization=1`` (QNN's default) the Q/DQ nodes at the graph's
    inputs and outputs run on the CPU EP by design: recorded as requested there.
    """
    record = decisions.record
    nodes = assigned_nodes(session) or []
    graph = None
    if any(n.device != qnn_backend.EP_NAME for n in nodes):
        graph = load_inferred_graph(model)
    io_qdq = graph_io_qdq(graph) if offload_io and graph is not None else frozenset()
    offloaded = [n for n in nodes if n.name in io_qdq and n.device != qnn_backend.EP_NAME]
    record_assignment(
        decisions,
        [n for n in nodes if n not in offloaded],
        requested=qnn_backend.EP_NAME,
        graph=graph,
        precision=precision,
        fallback_recorded=qnn_backend.EP_NAME not in session.get_providers(),
    )
    record.nodes.extend(
        NodeRecord(
            n.name,
            n.op_type,
            requested=n.device,
            chosen=n.device,
            placement="requested",
            reason="offload_graph_io_quantization=1: QNN hands graph-I/O (de)quantization "
            "to the CPU EP",
        )
        for n in offloaded
    )
    if offloaded:
        record.notes.append(
            f"{len(offloaded)} graph-I/O Q/DQ node(s) run on {offloaded[0].device}: QNN's "
            f"offload_graph_io_quantization=1 hands input/output (de)quantization to the CPU"
        )
