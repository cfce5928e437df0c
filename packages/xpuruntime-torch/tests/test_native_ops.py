"""The native ops extension: registered in C++ with PyTorch's dispatcher, autograd in C++,
and a clear ImportError when it does not match the PyTorch or the core it runs with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from xpuruntime.pytorch.ops import _native, fused_add_rmsnorm, fused_layernorm, fused_linear

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


@pytest.mark.parametrize("op", ["xpuruntime::fused_linear", "xpuruntime::fused_linear_weight_grad"])
def test_linear_ops_have_cpp_kernels_for_every_key(op: str) -> None:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for key in ("CPU", "CUDA", "Meta"):
        assert has(op, key), f"{op} has no {key} kernel"
    assert has(op, "Autograd") == (op == "xpuruntime::fused_linear")


@pytest.mark.parametrize("kernel", ["cpu", "torch"])
def test_eager_linear_training_call_records_a_cpp_autograd_node(kernel: str) -> None:
    import xpuruntime.pytorch as xrt_torch

    x = torch.randn(3, 8, requires_grad=True)
    w = torch.randn(5, 8, requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    with xrt_torch.kernel_policy(linear=kernel):
        y = fused_linear(x, w, b, "gelu")
        assert type(y.grad_fn).__name__ == "CppFunction"  # no Python autograd.Function
        y.sum().backward()
    for t in (x, w, b):
        assert t.grad is not None


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


def test_a_kernel_table_shorter_than_the_ops_need_is_an_import_error() -> None:
    # An older core: the same table version, without the fields appended since.
    import ctypes

    header = (ctypes.c_uint32 * 2)(_native.native.KERNEL_TABLE_VERSION, 8)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(header), b"xpuruntime.kernel_table", None)
    with pytest.raises(ImportError, match="install matching xpuruntime-core and xpuruntime-torch"):
        _native.native.load_kernel_table(capsule)
    # The loaded table stays the core's: the ops still run.
    torch.testing.assert_close(
        fused_linear(torch.ones(1, 2), torch.ones(3, 2)), torch.full((1, 3), 2.0)
    )
