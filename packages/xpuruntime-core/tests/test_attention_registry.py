"""xrt_flash in the native kernel registry, and Python kernels registered from Python.

Runs without torch or Triton (the core's CPU test environment): the kernel is registered,
says why it cannot run, and a pinned policy turns that into UnsupportedOperationError.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.kernels.attention import KERNEL, LIBRARY, query_shape, unsupported_reason
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.errors import (
    InvalidArgumentError,
    UnsupportedOperationError,
    XpuRuntimeError,
)
from xpuruntime.runtime.native import core

SHAPE = query_shape(
    batch=2,
    seqlen_q=128,
    seqlen_k=128,
    heads=8,
    kv_heads=2,
    head_dim=128,
    causal=True,
    varlen=False,
)


def test_xrt_flash_is_registered_for_attention() -> None:
    kernels = rt.dispatcher.kernels("attention")
    # The Hopper forward first (the automatic choice on sm_90), then xrt_flash (everywhere
    # else); the fp8 forward after them (test_attention_fp8).
    assert [(k.name, k.library) for k in kernels] == [
        ("xrt_flash_hopper", "xpuruntime Gluon (Hopper, warp-specialised)"),
        (KERNEL, LIBRARY),
        ("xrt_flash_fp8", "xpuruntime fp8 (Gluon on Hopper, Triton elsewhere)"),
    ]
    assert "attention" in rt.dispatcher.ops()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"dtype": "float32"}, "supports float16 and bfloat16, not float32"),
        ({"head_dim": 80}, "head sizes 16, 32, 64, 128, 256, not 80"),
        ({"heads": 6, "kv_heads": 4}, "query heads (6) must be a multiple of key/value heads (4)"),
        ({"device": "cpu"}, "runs on NVIDIA GPUs of compute capability 8.0 or newer"),
    ],
)
def test_unsupported_reasons(
    change: dict[str, Any], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    fields = dict(
        batch=2,
        seqlen_q=64,
        seqlen_k=64,
        heads=8,
        kv_heads=2,
        head_dim=64,
        causal=False,
        varlen=False,
    )
    dtype, device = change.pop("dtype", "bfloat16"), change.pop("device", "cpu")
    fields.update(change)
    assert expected in unsupported_reason("attention", query_shape(**fields), dtype, device)


def test_pinned_xrt_flash_that_cannot_run_raises_with_the_reason() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"pins attention to 'xrt_flash'.*float32"):
        rt.dispatcher.resolve(
            "attention", SHAPE, "float32", "cuda:0", KernelPolicy(attention=KERNEL)
        )


def test_supports_reports_the_reason() -> None:
    ok, reason = rt.dispatcher.supports("attention", KERNEL, SHAPE, "float64", "cuda:0")
    assert not ok
    assert "float64" in reason


def test_malformed_query_shape_is_explained() -> None:
    reason = unsupported_reason("attention", [1, 2, 3], "float16", "cuda:0")
    assert "expects the attention query shape" in reason


def test_ops_attention_on_numpy_without_torch_says_what_to_install() -> None:
    pytest.importorskip("numpy")
    try:
        import torch  # noqa: F401
    except ImportError:
        q = np.zeros((1, 4, 2, 64), np.float16)
        with pytest.raises(UnsupportedOperationError, match="pip install torch"):
            ops.attention(q, q, q)
    else:
        pytest.skip("torch is installed: the missing-torch message cannot show")


def test_loading_the_core_imports_neither_torch_nor_triton() -> None:
    code = (
        "import sys, xpuruntime.ops, xpuruntime.runtime as rt;"
        "rt.dispatcher.kernels('attention');"
        "rt.dispatcher.supports('attention', 'xrt_flash', [1,1,1,1,1,64,0,0], 'float16', 'cpu');"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- Python kernels through the binding -------------------------------------------------


def _register_scaler(op: str, calls: list[tuple[Any, ...]]) -> None:
    def reason(op_: str, shape: list[int], dtype: str, device: str) -> str:
        calls.append(("reason", op_, tuple(shape), dtype, device))
        return "" if dtype == "float32" else f"float32 only, not {dtype}"

    def run(inputs: list[Any], scalars: list[float], output: Any, stream: int) -> str:
        (x,) = (np.from_dlpack(t) for t in inputs)
        # numpy views DLPack read-only; the output's memory is ours to write.
        target = np.ctypeslib.as_array((ctypes.c_float * x.size).from_address(output.data_ptr))
        np.multiply(x, scalars[0], out=target)
        calls.append(("run", stream))
        return f"scaled by {scalars[0]}"

    core().register_python_kernel(op, "py_scale", "test Python", reason, run)


def test_python_kernel_resolves_runs_and_is_logged() -> None:
    calls: list[tuple[Any, ...]] = []
    _register_scaler("test_scale", calls)
    decision = rt.dispatcher.resolve("test_scale", [3], "float32", "cpu")
    assert (decision.kernel, decision.library) == ("py_scale", "test Python")
    assert calls[0] == ("reason", "test_scale", (3,), "float32", "cpu")
    x = np.arange(3, dtype=np.float32)
    out = np.zeros(3, np.float32)
    detail = core().run_kernel(
        "test_scale", "py_scale", [core().from_dlpack(x)], [2.0], core().from_dlpack(out), 7
    )
    assert detail == "scaled by 2.0"
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])
    assert calls[-1] == ("run", 7)
    assert any(d.op == "test_scale" and d.kernel == "py_scale" for d in rt.dispatcher.decisions())
    with pytest.raises(UnsupportedOperationError, match="float32 only, not float16"):
        core().resolve("test_scale", [3], "float16", "cpu", "py_scale", "pin", "FirstSupported")


def test_python_kernel_errors_become_typed_errors() -> None:
    def broken(*_: Any) -> str:
        raise ZeroDivisionError("support check blew up")

    def run(*_: Any) -> str:
        raise InvalidArgumentError("bad input to the kernel")

    core().register_python_kernel("test_broken", "py_broken", "test", broken, run)
    with pytest.raises(XpuRuntimeError, match=r"support check of kernel 'py_broken'.*blew up"):
        rt.dispatcher.resolve("test_broken", [1], "float32", "cpu")
    x = np.zeros(1, np.float32)
    with pytest.raises(InvalidArgumentError, match="bad input to the kernel"):
        core().run_kernel("test_broken", "py_broken", [], [], core().from_dlpack(x), 0)
    with pytest.raises(InvalidArgumentError, match="must be callable"):
        core().register_python_kernel("test_broken", "py_x", "test", "not callable", run)


def test_python_kernel_resolves_from_threads() -> None:
    calls: list[tuple[Any, ...]] = []
    _register_scaler("test_threads", calls)
    errors: list[BaseException] = []

    def resolve(i: int) -> None:
        try:
            for n in range(20):
                assert (
                    rt.dispatcher.resolve("test_threads", [i, n], "float32", "cpu").kernel
                    == "py_scale"
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=resolve, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(1 for c in calls if c[0] == "reason") == 80
