"""Which ONNX form each xpuruntime op takes in an export: the standard op, or a decomposition.

The standard ops (opset 23's ``Attention`` and ``RMSNormalization``, opset 17's
``LayerNormalization``, opset 20's ``Gelu``) keep an op one node an engine can map to its own
fused kernel. An engine that does not implement one would refuse the whole model, so the
choice is made from what the installed engines accept: each standard op is built as a
one-node model, run on every installed engine (ONNX Runtime's CPU provider, and its CUDA
provider where present; OpenVINO's CPU device, under the precision hint xpuruntime's
OpenVINO engine sets for the model's dtype) and compared with a NumPy reference. An op
becomes the standard node only when every engine runs it correctly, a decomposition into
basic ONNX ops otherwise; the export's opset is 23 when every engine loads opset-23 models,
18 otherwise; with no engine installed every op is decomposed. The answers are cached per
process (the engines do not change under it) and recorded in the bundle.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Collection
from typing import Any

import msgspec
import numpy as np

__all__ = [
    "STANDARD_OPS",
    "EngineProbe",
    "Forms",
    "choose_forms",
    "openvino_hint",
    "optimise",
    "probe_engines",
]

#: xpuruntime op family -> (standard ONNX op type, the opset that defines it).
STANDARD_OPS: dict[str, tuple[str, int]] = {
    "attention": ("Attention", 23),
    "rmsnorm": ("RMSNormalization", 23),
    "layernorm": ("LayerNormalization", 17),
    "gelu": ("Gelu", 20),
    # No xpuruntime op: the exporter's optimiser fuses a rotary embedding into it (Llama).
    "rotary": ("RotaryEmbedding", 23),
}

#: The opset of an export when every engine loads it, and the one it falls back to.
HIGH_OPSET, LOW_OPSET = 23, 18
# ONNX Runtime 1.2x reads IR version 10 models at the newest; opset 23 needs no more.
_IR_VERSION = 10


class EngineProbe(msgspec.Struct, frozen=True):
    """One engine's answers: op type -> "runs" or why it does not."""

    engine: str
    version: str
    results: dict[str, str]


class Forms(msgspec.Struct, frozen=True):
    """The forms of one export: its opset, per op family "standard" or "decomposition"."""

    opset: int
    forms: dict[str, str]
    engines: list[EngineProbe]
    dtype: str = "float32"  # the dtype the engines were probed in

    def standard(self, family: str) -> bool:
        return self.forms.get(family) == "standard"

    def describe(self, family: str) -> str:
        op_type, since = STANDARD_OPS[family]
        if self.standard(family):
            return f"standard {op_type} (opset {since})"
        refusals = [
            f"{probe.engine} {probe.version}: {probe.results.get(op_type, 'not probed')}"
            for probe in self.engines
            if probe.results.get(op_type, "") != "runs"
        ]
        why = (
            "; ".join(refusals)
            if refusals
            else f"the export's opset is {self.opset}"
            if self.engines
            else "no engine was installed to ask"
        )
        return f"decomposition into basic ONNX ops ({op_type} not used: {why})"


def _model(node: Any, inputs: dict[str, np.ndarray[Any, Any]], opset: int) -> bytes:
    from onnx import helper

    graph = helper.make_graph(
        [node],
        "probe",
        [helper.make_tensor_value_info(n, _onnx_type(a), a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info("y", _onnx_type(next(iter(inputs.values()))), None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = _IR_VERSION
    return bytes(model.SerializeToString())


def _onnx_type(array: np.ndarray[Any, Any]) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(array.dtype))


def _softmax(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]


Case = tuple[bytes, dict[str, np.ndarray[Any, Any]], np.ndarray[Any, Any]]


def _cases(dtype: str) -> dict[str, Case]:
    """op type -> (one-node model in ``dtype``, feeds, the float32 reference output).
    Causal, grouped-query attention: the hardest form the translations emit."""
    return {
        op_type: (_model(node, {n: a.astype(dtype) for n, a in feeds.items()}, opset),
                  {n: a.astype(dtype) for n, a in feeds.items()}, want)
        for op_type, (node, feeds, opset, want) in _float32_cases().items()
    }  # fmt: skip


def _float32_cases() -> dict[str, tuple[Any, dict[str, np.ndarray[Any, Any]], int, Any]]:
    from onnx import helper

    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 3, 8)).astype(np.float32)
    kv = rng.standard_normal((2, 1, 2, 3, 8)).astype(np.float32)
    k, v = kv[0], kv[1]
    scores = q @ np.repeat(k, 2, axis=1).transpose(0, 1, 3, 2) / np.sqrt(8)
    scores = np.where(np.tril(np.ones((3, 3), bool)), scores, -np.inf)
    attention = _softmax(scores) @ np.repeat(v, 2, axis=1)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    centred = x - x.mean(-1, keepdims=True)
    layernorm = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5) * w + b
    rmsnorm = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5) * w
    gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    # The exporter's fusion gives RotaryEmbedding a cos/sin cache of batch 1 (broadcast).
    angles = rng.standard_normal((1, 3, 4)).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    heads = rng.standard_normal((2, 2, 3, 8)).astype(np.float32)  # batch 2
    first, second = heads[..., :4], heads[..., 4:]
    c, s = cos[:, None], sin[:, None]
    rotary = np.concatenate([first * c - second * s, second * c + first * s], axis=-1)
    make = helper.make_node
    return {
        "Attention": (
            make("Attention", ["q", "k", "v"], ["y"], is_causal=1),
            {"q": q, "k": k, "v": v}, 23, attention,
        ),
        "RMSNormalization": (
            make("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-5),
            {"x": x, "w": w}, 23, rmsnorm,
        ),
        "LayerNormalization": (
            make("LayerNormalization", ["x", "w", "b"], ["y"], axis=-1, epsilon=1e-5),
            {"x": x, "w": w, "b": b}, 17, layernorm,
        ),
        "Gelu": (make("Gelu", ["x"], ["y"], approximate="tanh"), {"x": x}, 20, gelu),
        "RotaryEmbedding": (
            make("RotaryEmbedding", ["x", "cos", "sin"], ["y"]),
            {"x": heads, "cos": cos, "sin": sin}, 23, rotary,
        ),
    }  # fmt: skip


Runner = Callable[[bytes, dict[str, np.ndarray[Any, Any]]], np.ndarray[Any, Any]]


def _onnxruntime(provider: str) -> Runner:
    def run(model: bytes, feeds: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4  # a refusal is the answer, not a message for the log
        session = onnxruntime.InferenceSession(model, options, providers=[provider])
        return np.asarray(session.run(None, feeds)[0])

    return run


def openvino_hint(dtype: str, listed: Collection[str]) -> str:
    """The INFERENCE_PRECISION_HINT xpuruntime's OpenVINO engine compiles a ``dtype`` model
    with on a CPU whose OPTIMIZATION_CAPABILITIES are ``listed`` (the engine's
    ``openvino_settings.precision_hint``): f16 for float16 where the CPU lists FP16, f32
    otherwise. Left unset, the plugin's own default decides, and it is bf16 on CPUs with
    AVX512_BF16 or AMX: a probe would then fail a float32 op for the CPU's default
    precision, not for how the engine implements the op."""
    return "f16" if dtype == "float16" and "FP16" in listed else "f32"


def _openvino(hint: str) -> Runner:
    def run(model: bytes, feeds: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        import openvino

        core = openvino.Core()
        compiled = core.compile_model(
            core.read_model(model, b""), "CPU", {"INFERENCE_PRECISION_HINT": hint}
        )
        return np.asarray(compiled(feeds)[0])

    return run


def _engines(dtype: str) -> list[tuple[str, str, Runner]]:
    """(engine, version, runner) of every installed engine the bundle may be served on, for
    a ``dtype`` model (OpenVINO's version names the precision hint it was probed under)."""
    found: list[tuple[str, str, Runner]] = []
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime

        providers = onnxruntime.get_available_providers()
        for provider, name in (
            ("CPUExecutionProvider", "onnxruntime"),
            ("CUDAExecutionProvider", "onnxruntime-cuda"),
        ):
            if provider in providers:
                found.append((name, onnxruntime.__version__, _onnxruntime(provider)))
    if importlib.util.find_spec("openvino") is not None:
        import openvino

        listed = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        hint = openvino_hint(dtype, [str(c) for c in listed])
        found.append(
            (
                "openvino",
                f"{openvino.__version__} CPU INFERENCE_PRECISION_HINT={hint}",
                _openvino(hint),
            )
        )
    return found


#: How close a run must come to the float32 reference, by the dtype it runs in.
_TOLERANCE = {"float16": 1e-2, "bfloat16": 5e-2}


def _answer(run: Runner, case: Case) -> str:
    model, feeds, want = case
    tolerance = _TOLERANCE.get(str(next(iter(feeds.values())).dtype), 1e-4)
    try:
        got = run(model, feeds)
    except Exception as exc:
        return f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    if got.shape != want.shape or not np.allclose(
        got.astype(np.float32), want, rtol=tolerance, atol=tolerance
    ):
        return "runs but computes something else than the ONNX definition"
    return "runs"


#: Dtypes the probes build models in; others (bfloat16: NumPy has none) are probed in float32.
PROBED_DTYPES = ("float32", "float16", "float64")


@functools.cache
def probe_engines(dtype: str = "float32") -> tuple[EngineProbe, ...]:
    """Every installed engine's answer for every standard op in ``dtype`` (cached per
    process)."""
    probed = dtype if dtype in PROBED_DTYPES else "float32"
    cases = _cases(probed)
    return tuple(
        EngineProbe(name, version, {op_type: _answer(run, case) for op_type, case in cases.items()})
        for name, version, run in _engines(probed)
    )


def choose_forms(probes: tuple[EngineProbe, ...] | None = None, dtype: str = "float32") -> Forms:
    """The forms of an export of a ``dtype`` model for the engines probed (default: the
    installed ones, probed in that dtype)."""
    engines = list(probe_engines(dtype) if probes is None else probes)
    # An engine that runs one opset-23 op loads opset-23 models: the others it refuses are
    # decomposed, and the rest of the model keeps the newer opset.
    newest = [STANDARD_OPS[f][0] for f in STANDARD_OPS if STANDARD_OPS[f][1] == HIGH_OPSET]
    loads_newest = all(any(p.results.get(t) == "runs" for t in newest) for p in engines)
    # With no engine to ask, nothing vouches for a standard op: decompose everything.
    opset = HIGH_OPSET if loads_newest and engines else LOW_OPSET
    forms = {
        family: "standard"
        if engines and since <= opset and all(p.results.get(op_type) == "runs" for p in engines)
        else "decomposition"
        for family, (op_type, since) in STANDARD_OPS.items()
    }
    return Forms(opset, forms, engines, dtype)


def optimise(model: Any, forms: Forms) -> dict[str, int]:
    """The exporter's own optimisation of ``model`` (an ``onnx_ir`` model, in place: constant
    folding, dead nodes, common subexpressions), with only the opset-23 fusions whose op
    every engine runs (the exporter would apply them all). Returns fused op -> count."""
    import onnxscript.optimizer

    onnxscript.optimizer.optimize_ir(model)
    if forms.opset < HIGH_OPSET:
        return {}
    try:  # onnxscript's fusion rules, one module per fused op
        from onnxscript.rewriter.rules.fusion import (
            _gqa,
            _rms_normalization,
            _rotary_embedding,
        )
    except ImportError:  # another onnxscript: its fusions are not applied, and none is needed
        return {}
    fusions = {
        "rmsnorm": ("RMSNormalization", _rms_normalization.fuse_rms_normalization),
        "rotary": ("RotaryEmbedding", _rotary_embedding.fuse_rotary_embedding),
        "attention": ("Attention", _gqa.fuse_gqa),
    }
    counts = {
        op_type: int(fuse(model))
        for family, (op_type, fuse) in fusions.items()
        if forms.standard(family)
    }
    return {op_type: count for op_type, count in counts.items() if count}
