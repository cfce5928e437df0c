"""A bundle carries the lock decisions of its own model only: a lockfile another model's
training wrote to as well keeps those entries out of the bundle (with a warning naming them).

Needs PyTorch, onnxscript and ONNX Runtime together: `nox -s "backends(backend='torch-cpu')"`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("torch", "onnxscript", "onnxruntime")),
        reason="needs torch, onnxscript and onnxruntime (nox backends torch-cpu)",
    ),
    # torch.onnx's exporter trips over its own pytree deprecations (torch 2.13).
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
]


def test_bundle_leaves_out_another_models_lock_entries(tmp_path: Path) -> None:
    import torch

    import xpuruntime as xrt
    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.policies.lock import Lockfile
    from xpuruntime.pytorch.ops import fused_attention, fused_layernorm

    class Attend(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return fused_attention(x, x, x, is_causal=True)

    lock = tmp_path / "shared.lock.json"
    policy = xrt.ExecutionPolicy(lock="record", lock_file=str(lock))
    # Another model's training, recorded into the same file first.
    with xrt_torch.kernel_policy(exec_policy=policy, layernorm="xrt"):
        fused_layernorm(torch.randn(4, 32), (32,), torch.ones(32), torch.zeros(32))
    assert any(e.op == "layernorm" for e in Lockfile.load(lock).domain("core"))

    model, example = Attend().eval(), torch.randn(1, 2, 8, 32)
    with xrt_torch.kernel_policy(exec_policy=policy):
        model(example)
        with pytest.warns(UserWarning, match="left out of the bundle"):
            bundle = xrt_torch.export(model, (example,), tmp_path / "bundle")
    carried = Lockfile.load(bundle / "lock.json")
    assert not [e for e in carried if e.op == "layernorm"]
    assert [e for e in carried if e.op == "attention" and e.layout != "switches"]
