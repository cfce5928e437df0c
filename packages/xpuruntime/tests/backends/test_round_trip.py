"""Research to production, unchanged: the conformance matrix of the round trip.

Models (an MLP, a CNN, a transformer block using every xpuruntime op in each ONNX form, and
real architectures built from `transformers`' own classes with small configs and random
weights: Llama with grouped-query attention and RMSNorm, BERT; nothing is downloaded) x
engines (ONNX Runtime CPU, OpenVINO CPU): train a few steps under a strict policy that
records a lockfile -> export -> bundle -> InferenceSession(bundle) under the bundle's own
policy -> verify() -> run a batch size and sequence length other than the exported ones and
compare with PyTorch.

Default CI runs the small cases (``nox -s "backends(backend='torch-cpu')"``, which installs
OpenVINO for this column); ``nox -s round_trip`` adds the heavy ones (GPT-2, Mistral, deeper
configs, more shapes) through XPURUNTIME_ROUND_TRIP=heavy.
"""

from __future__ import annotations

import importlib.util
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_NEEDS = ("torch", "onnxscript", "onnxruntime")
pytestmark = [
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in _NEEDS),
        reason="needs torch, onnxscript and onnxruntime (nox backends torch-cpu)",
    ),
    # torch.onnx's exporter and transformers trip over their own deprecations.
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:torch"),
]

HEAVY = os.environ.get("XPURUNTIME_ROUND_TRIP", "") == "heavy"
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
ENGINES = [
    "onnxruntime",
    pytest.param(
        "openvino",
        marks=pytest.mark.skipif(not HAS_OPENVINO, reason="OpenVINO is not installed here"),
    ),
]


@dataclass(frozen=True)
class Case:
    """A model of the matrix: how to build it, its inputs at a (batch, length), its loss."""

    build: Callable[[], Any]
    inputs: Callable[[int, int], tuple[Any, ...]]
    exported: tuple[int, int] = (2, 8)
    other: tuple[int, int] = (3, 5)
    forms: str = "installed"  # "installed": the probed forms; "decomposition": forced
    heavy: bool = False
    dtype: str = "float32"

    @property
    def tolerance(self) -> float:
        return 1e-2 if self.dtype == "float16" else 1e-4

    def example(self, batch: int, length: int) -> tuple[Any, ...]:
        """The inputs in the case's dtype (token ids stay integers)."""
        import torch

        dtype = getattr(torch, self.dtype)
        return tuple(
            t.to(dtype) if t.is_floating_point() else t for t in self.inputs(batch, length)
        )


# ---------------------------------------------------------------------------------------
# Models


def _mlp() -> Any:
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16), torch.nn.LayerNorm(16)
    )


def _cnn() -> Any:
    import torch

    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )


def _fused_block() -> Any:
    """A pre-norm transformer block on xpuruntime's ops, every op and form used once:
    fused_linear (none, relu, gelu), fused_rmsnorm, fused_add_rmsnorm, fused_layernorm (with
    and without affine weights), fused_add_layernorm, and fused_attention 4-D causal with
    grouped-query heads, 4-D with a boolean mask, 3-D with a float mask and a scale."""
    import torch

    from xpuruntime.pytorch import ops

    class Block(torch.nn.Module):
        def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2) -> None:
            super().__init__()
            self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
            self.qkv = torch.nn.Linear(dim, dim + 2 * kv_heads * self.head_dim)
            self.out = torch.nn.Linear(dim, dim)
            self.up = torch.nn.Linear(dim, 2 * dim)
            self.down = torch.nn.Linear(2 * dim, dim)
            self.gate = torch.nn.Linear(dim, dim, bias=False)
            self.rms = torch.nn.Parameter(torch.rand(dim) + 0.5)
            self.ln_w = torch.nn.Parameter(torch.rand(dim) + 0.5)
            self.ln_b = torch.nn.Parameter(torch.randn(dim) * 0.1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            b, n, d = x.shape
            h = ops.fused_rmsnorm(x, d, self.rms, eps=1e-6)
            q, k, v = torch.split(
                ops.fused_linear(h, self.qkv.weight, self.qkv.bias),
                [d, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim],
                dim=-1,
            )
            q = q.view(b, n, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
            causal = ops.fused_attention(q, k, v, is_causal=True, enable_gqa=True)
            keep = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(-1)
            masked = ops.fused_attention(causal, causal, causal, attn_mask=keep)
            attended = masked.transpose(1, 2).reshape(b, n, d)
            y, s = ops.fused_add_rmsnorm(
                ops.fused_linear(attended, self.out.weight, self.out.bias), x, d, self.rms
            )
            bias = torch.eye(n, device=x.device) * -0.5
            mixed = ops.fused_attention(y, y, s, attn_mask=bias, scale=0.25)  # 3-D, one head
            up = ops.fused_linear(mixed, self.up.weight, self.up.bias, activation="gelu")
            down = ops.fused_linear(up, self.down.weight, self.down.bias, activation="relu")
            z, s = ops.fused_add_layernorm(down, s, d, self.ln_w, self.ln_b)
            gated = ops.fused_linear(z, self.gate.weight)
            return ops.fused_layernorm(gated, d), s

    return Block()


class _Logits:
    """A transformers model's logits (or last hidden state) for input ids: the tensor a
    bundle holds, without the cache objects its output carries."""

    @staticmethod
    def wrap(model: Any, attribute: str) -> Any:
        import torch

        class Head(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                out = self.model(input_ids=ids, **({"use_cache": False} if attribute == "logits"
                                                   else {}))  # fmt: skip
                return getattr(out, attribute)  # type: ignore[no-any-return]

        return Head()


def _llama(layers: int = 2) -> Any:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return _Logits.wrap(transformers.LlamaForCausalLM(config), "logits")


def _mistral() -> Any:
    import transformers

    config = transformers.MistralConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    return _Logits.wrap(transformers.MistralForCausalLM(config), "logits")


def _bert() -> Any:
    import transformers

    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64,
    )  # fmt: skip
    return _Logits.wrap(
        transformers.BertModel(config, add_pooling_layer=False), "last_hidden_state"
    )


def _gpt2() -> Any:
    import transformers

    config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    return _Logits.wrap(transformers.GPT2LMHeadModel(config), "logits")


def _tokens(batch: int, length: int) -> tuple[Any, ...]:
    import torch

    return (torch.randint(0, 64, (batch, length)),)


def _features(batch: int, length: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(batch, length, 32),)


CASES: dict[str, Case] = {
    "mlp": Case(_mlp, lambda b, n: _features_of(b, n, 16)),
    "cnn": Case(_cnn, lambda b, n: _images(b, n), exported=(2, 16), other=(3, 12)),
    "fused_block": Case(_fused_block, _features),
    "fused_block_decomposed": Case(_fused_block, _features, forms="decomposition"),
    # Trained in float32, served in float16.
    "fused_block_fp16": Case(_fused_block, _features, dtype="float16"),
    "llama": Case(_llama, _tokens),
    "bert": Case(_bert, _tokens),
    "gpt2": Case(_gpt2, _tokens, heavy=True),
    "mistral": Case(_mistral, _tokens, exported=(2, 24), other=(4, 9), heavy=True),
    "llama_deep": Case(lambda: _llama(6), _tokens, exported=(4, 32), other=(1, 17), heavy=True),
}


def _features_of(batch: int, length: int, dim: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(batch, length, dim),)


def _images(batch: int, side: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(batch, 3, side, side),)


# ---------------------------------------------------------------------------------------
# The round trip


def _train(model: Any, case: Case, steps: int = 3) -> None:
    """A few optimiser steps on the case's inputs (whatever the loss: the weights move)."""
    import torch

    optimiser = torch.optim.SGD(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        out = model(*case.inputs(*case.exported))
        first = out[0] if isinstance(out, tuple) else out
        loss = first.float().pow(2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()


_bundles: dict[str, tuple[Path, Any]] = {}


def _bundle(name: str, folder: Path) -> tuple[Path, Any]:
    """(bundle, trained model) of a case: trained and exported once per test session under
    a strict policy (fallback="error") that records a lockfile."""
    if name in _bundles:
        return _bundles[name]
    import torch

    import xpuruntime as xrt
    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.pytorch.onnx_forms import choose_forms

    if name in ("llama", "bert", "gpt2", "mistral", "llama_deep") and not HAS_TRANSFORMERS:
        pytest.skip("transformers is not installed here")
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build()
    policy = xrt.ExecutionPolicy(
        fallback="error", lock="record", lock_file=str(folder / f"{name}.lock.json")
    )
    forms = choose_forms(()) if case.forms == "decomposition" else None
    with xrt_torch.kernel_policy(exec_policy=policy):
        _train(model, case)  # in float32; a float16 case is then served in float16
        model.to(getattr(torch, case.dtype))
        bundle = xrt_torch.export(
            model,
            case.example(*case.exported),
            folder / name,
            rtol=max(case.tolerance, 1e-3),
            atol=case.tolerance,
            forms=forms,
        )
    _bundles[name] = (bundle, model)
    return bundle, model


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bundles")


def _names() -> list[Any]:
    return [
        pytest.param(
            name, marks=pytest.mark.skipif(case.heavy and not HEAVY, reason="heavy: nox -s round_trip")
        )
        for name, case in CASES.items()
    ]  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", _names())
def test_round_trip(name: str, engine: str, bundles: Path) -> None:
    _serve_and_check(name, engine, "cpu", bundles)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fused_block", "fused_block_decomposed", "llama", "bert"])
def test_round_trip_on_onnxruntime_cuda(name: str, bundles: Path) -> None:
    """The CUDA column: the same bundles on ONNX Runtime's CUDA execution provider."""
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("ONNX Runtime's CUDA execution provider is missing (install onnxruntime-gpu)")
    _serve_and_check(name, "onnxruntime", "cuda", bundles)


def _openvino_cpu_fp16() -> bool:
    """Whether OpenVINO's CPU plugin computes in float16 on this machine (its own report)."""
    import openvino

    return "FP16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _serve_and_check(name: str, engine: str, device: str, bundles: Path) -> None:
    import torch

    import xpuruntime as xrt
    from xpuruntime.runtime.errors import FallbackError

    case = CASES[name]
    bundle, model = _bundle(name, bundles)
    options: dict[str, Any] = {}
    if case.dtype == "float16" and engine == "openvino" and not _openvino_cpu_fp16():
        # The bundle's strict policy refuses to run a float16 model in float32; allowed,
        # OpenVINO runs it (upcast) and it verifies.
        with pytest.raises(FallbackError, match="precision"):
            xrt.InferenceSession(str(bundle), device=device, engine=engine)
        options["fallback"] = "allow"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the bundle opens under its own strict policy, quietly
        session = xrt.InferenceSession(str(bundle), device=device, engine=engine, **options)
    assert session.engine == engine
    report = session.verify()
    assert report.passed, str(report)

    # Other batch and sequence sizes than the exported ones: the bundle kept them dynamic.
    inputs = case.example(*case.other)
    feeds = {n: t.numpy() for n, t in zip(session.input_names, inputs, strict=True)}
    outputs = session.run(feeds)
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for name_, want in zip(session.output_names, expected, strict=True):
        np.testing.assert_allclose(
            outputs[name_], want.numpy(), rtol=max(case.tolerance, 1e-3), atol=case.tolerance
        )


# ---------------------------------------------------------------------------------------
# What the bundle and the record say


def _manifest(bundle: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    return data


def test_every_op_call_is_in_the_bundle_with_its_form(bundles: Path) -> None:
    from xpuruntime.pytorch.onnx_forms import choose_forms

    forms = choose_forms()
    standard = _manifest(_bundle("fused_block", bundles)[0])["export"]
    decomposed = _manifest(_bundle("fused_block_decomposed", bundles)[0])["export"]
    ops = sorted(o["op"] for o in standard["ops"])
    assert ops == sorted(
        ["xpuruntime::fused_attention"] * 3
        + ["xpuruntime::fused_linear"] * 5
        + ["xpuruntime::fused_rmsnorm", "xpuruntime::fused_add_rmsnorm"]
        + ["xpuruntime::fused_layernorm", "xpuruntime::fused_add_layernorm"]
    )
    standard_types = {"attention": "Attention", "rmsnorm": "RMSNormalization",
                      "layernorm": "LayerNormalization"}  # fmt: skip
    for op in standard["ops"]:
        types = {n["op_type"] for n in op["nodes"]}
        if op["family"] in standard_types:
            # The standard op exactly where every installed engine runs it.
            assert (standard_types[op["family"]] in types) == forms.standard(op["family"])
            assert op["form"].startswith("standard") == forms.standard(op["family"])
    for op in decomposed["ops"]:
        types = {n["op_type"] for n in op["nodes"]}
        assert not types & {"Attention", "RMSNormalization", "LayerNormalization", "Gelu"}
        if op["family"] != "linear":
            assert op["form"].startswith("decomposition")
    assert decomposed["opset"] == 18
    # Trained under a policy whose record holds the ops' decisions.
    assert all(op["trained"] for op in standard["ops"])
    # Dynamic dimensions: batch and sequence are names, not the example's sizes.
    (shape,) = standard["input_shapes"].values()
    assert all(isinstance(d, str) for d in shape[:2])


@pytest.mark.parametrize("name", ["fused_block", "fused_block_decomposed"])
def test_record_names_the_engine_nodes_of_each_trained_op(name: str, bundles: Path) -> None:
    import xpuruntime as xrt

    bundle, _ = _bundle(name, bundles)
    session = xrt.InferenceSession(str(bundle), device="cpu", engine="onnxruntime")
    settings = {s.name: s for s in session.record().settings if s.name.startswith("bundle.op.")}
    exported = _manifest(bundle)["export"]["ops"]
    assert len(settings) == len(exported)
    for op in exported:
        setting = settings[f"bundle.op.{op['call']}"]
        assert op["op"] in setting.requested
        assert setting.applied.startswith(op["form"])
    attention = [s for s in settings.values() if "fused_attention" in s.requested]
    if name == "fused_block_decomposed":
        assert all("decomposition" in s.applied and "(Attention)" not in s.applied
                   for s in attention)  # fmt: skip
    else:
        # The standard node exactly where the export's probes found every installed engine
        # running it correctly (recorded in the bundle); the decomposed bundle above forces
        # the other branch on any machine.
        standard = _manifest(bundle)["export"]["forms"]["attention"].startswith("standard")
        assert all(("(Attention)" in s.applied) == standard for s in attention)
    # ONNX Runtime names its nodes after the model's: each op's nodes are found.
    assert all(s.note.startswith("onnxruntime runs them as") for s in settings.values())
    assert "no attention nodes" not in session.explain(width=200)


def test_a_training_lock_opens_under_a_strict_policy_and_records_the_engine(
    bundles: Path,
) -> None:
    import xpuruntime as xrt

    bundle, _ = _bundle("fused_block", bundles)
    assert (bundle / "lock.json").is_file()
    session = xrt.InferenceSession(str(bundle), device="cpu", engine="onnxruntime")
    record = session.record()
    assert record.policy["execution"]["fallback"] == "error"
    (decision,) = [d for d in record.decisions if d.op == "session" and d.mode == "lock"]
    assert decision.status == "decided"
    assert "holds no onnxruntime decisions" in decision.reason
    assert not record.fallbacks


def test_an_op_without_onnx_form_is_a_typed_error(tmp_path: Path) -> None:
    import torch

    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.policies.bundle import ExportError
    from xpuruntime.pytorch import ops

    class FiveD(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return ops.fused_attention(x, x, x)

    with pytest.raises(ExportError, match=r"fused_attention cannot export.*4-D"):
        xrt_torch.export(FiveD().eval(), (torch.randn(2, 2, 2, 4, 8),), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_a_bfloat16_model_is_refused_before_exporting(tmp_path: Path) -> None:
    import torch

    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.policies.bundle import ExportError

    model = torch.nn.Linear(8, 8).to(torch.bfloat16).eval()
    with pytest.raises(ExportError, match="export it in float16 or float32"):
        xrt_torch.export(model, (torch.randn(2, 8, dtype=torch.bfloat16),), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_forms_follow_what_every_engine_runs() -> None:
    """The other branches of the form decision, forced: an engine refusing one standard op,
    one loading no opset-23 model, and none installed."""
    from xpuruntime.pytorch.onnx_forms import STANDARD_OPS, EngineProbe, choose_forms

    runs = {op_type: "runs" for op_type, _ in STANDARD_OPS.values()}
    both = EngineProbe("a", "1", runs)
    no_attention = EngineProbe("b", "1", {**runs, "Attention": "refused: no kernel"})
    forms = choose_forms((both, no_attention))
    assert forms.opset == 23
    assert not forms.standard("attention")
    assert "b 1: refused: no kernel" in forms.describe("attention")
    assert forms.standard("rmsnorm")
    assert forms.standard("layernorm")

    old = {op_type: ("runs" if since < 23 else "refused: opset 23") for op_type, since in
           STANDARD_OPS.values()}  # fmt: skip
    forms = choose_forms((both, EngineProbe("c", "1", old)))
    assert forms.opset == 18
    assert not forms.standard("rmsnorm")
    assert forms.standard("layernorm")
    assert not forms.standard("gelu")  # opset 20 > the export's 18

    forms = choose_forms(())
    assert forms.opset == 18
    assert not any(forms.standard(f) for f in STANDARD_OPS)
    assert "no engine was installed to ask" in forms.describe("layernorm")


@pytest.mark.skipif(not HAS_OPENVINO, reason="OpenVINO is not installed here")
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("forced", [None, ("FP32", "BF16"), ("FP32", "FP16", "BF16"), ("FP32",)])
def test_openvino_probes_compile_as_the_engine_serves(dtype: str, forced: Any) -> None:
    """The export probes OpenVINO under the precision hint its engine sets for a model of
    that dtype, not under the plugin's CPU-dependent default: on this CPU's capabilities
    and on forced ones (with FP16, without, without BF16)."""
    import openvino

    from xpuruntime.npu.engines.openvino_settings import precision_hint
    from xpuruntime.pytorch.onnx_forms import openvino_hint, probe_engines

    listed = forced or tuple(
        str(c) for c in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    )
    stored = {"float32": "fp32", "float16": "fp16", "float64": "fp64"}[dtype]
    assert openvino_hint(dtype, listed) == precision_hint(stored, listed)
    if forced is None:
        (probe,) = [p for p in probe_engines(dtype) if p.engine == "openvino"]
        assert probe.version.endswith(f"INFERENCE_PRECISION_HINT={openvino_hint(dtype, listed)}")


def test_a_pin_on_a_decomposed_op_is_not_honoured_by_absence(bundles: Path) -> None:
    """kernel_policy= pins attention on a bundle whose attention was decomposed: no
    "the model has no attention nodes"; the fallback rule applies (warned, or raised)."""
    import xpuruntime as xrt
    from xpuruntime.policies import KernelPolicy
    from xpuruntime.runtime.errors import UnsupportedOperationError
    from xpuruntime.runtime.record import FallbackWarning

    bundle, _ = _bundle("fused_block_decomposed", bundles)
    pin = KernelPolicy().set("attention", "math", mode="pin")
    with pytest.warns(FallbackWarning, match="decomposed 3 attention call"):
        session = xrt.InferenceSession(
            str(bundle), device="cpu", engine="onnxruntime", kernel_policy=pin, fallback="warn"
        )
    setting = next(s for s in session.record().settings if s.name == "kernel_policy.attention")
    assert not setting.honoured
    assert "no attention nodes" not in session.explain(width=200)
    with pytest.raises(UnsupportedOperationError, match="decomposed"):
        xrt.InferenceSession(
            str(bundle), device="cpu", engine="onnxruntime", kernel_policy=pin, fallback="error"
        )
