"""The native ops extension: registered in C++ with PyTorch's dispatcher, autograd in C++,
and a clear ImportError when it does not match the PyTorch or the core it runs with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from xpuruntime.pytorch.ops import _native, fused_add_rmsnorm, fused_layernorm

NORM_OPS = [
    f"xpuruntime::{name}"
    for norm in ("layernorm", "rmsnorm")
    for name in (f"fused_{norm}", f"fused_add_{norm}", f"fused_{norm}_backward")
]


@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_ops_have_cpp_kernels_for_every_key(op: str) -> None:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for key in ("CPU", "CUDA", "Meta"):
        assert has(op, key), f"{op} has no {key} kernel"
    # The forward ops differentiate in C++; the backward op is what their node calls.
    assert has(op, "Autograd") == (not op.endswith("_backward"))


def test_eager_training_call_records_a_cpp_autograd_node() -> None:
    x = torch.randn(4, 16, requires_grad=True)
    y = fused_layernorm(x, 16)
    assert type(y.grad_fn).__name__ == "CppFunction"  # no Python autograd.Function
    y.sum().backward()
    assert x.grad is not None
    _, s = fused_add_rmsnorm(x.detach(), x.detach().requires_grad_(), 16)
    assert type(s.grad_fn).__name__ == "CppFunction"


def test_a_build_for_another_pytorch_release_is_an_import_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_native.native, "TORCH_VERSION", "2.0.0")
    with pytest.raises(ImportError, match=r"built for PyTorch 2\.0\.0.*reinstall xpuruntime-torch"):
        _native._load()


def test_a_core_without_the_kernel_table_is_an_import_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_native, "core", lambda: SimpleNamespace())
    with pytest.raises(ImportError, match="no kernel table"):
        _native._load()


def test_the_matching_build_loads() -> None:
    assert _native._load() is _native.native
    assert _native.native.KERNEL_TABLE_VERSION == 1
