"""fused_attention's native op on PyTorch's CPU flash kernel (the backend a lock replays on a
CPU): the C++ kernels and autograd node, opcheck, torch.compile, and the eager fast path
with its decision record; fused_attention itself as a C function (Python's signature and
argument errors, a decided call that runs no Python, and the tracers — dynamo, export,
make_fx — that see the Python function or the op in its place)."""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.pytorch.ops import attention, fused_attention

LOCKED = ("flash_v2", "locked")


def _qkv() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(2, 3, 24, 16, requires_grad=True) for _ in range(3))


def _op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
        is_causal: bool = True) -> tuple[torch.Tensor, ...]:  # fmt: skip
    out: tuple[torch.Tensor, ...] = torch.ops.xpuruntime.fused_attention(
        q, k, v, mask, 0.0, is_causal, None, *LOCKED, True
    )
    return out


@pytest.mark.parametrize("masked", [False, True])
def test_op_on_cpu_flash_passes_opcheck(masked: bool) -> None:
    q, k, v = _qkv()
    mask = torch.rand(24, 24) > 0.3 if masked else None
    torch.library.opcheck(
        torch.ops.xpuruntime.fused_attention.default,
        (q, k, v, mask, 0.0, False, None, *LOCKED, True),
    )


def test_op_is_a_cpp_autograd_node_running_the_backends_backward() -> None:
    q, k, v = _qkv()
    out, lse, seed, offset = _op(q, k, v)
    assert type(out.grad_fn).__name__ == "CppFunction"
    # The CPU flash kernel keeps its log-sum-exp (not differentiable) and no RNG state.
    assert lse.shape == (2, 24, 3) or lse.shape == (2, 3, 24)
    assert not lse.requires_grad
    assert seed.numel() == 0
    assert offset.numel() == 0
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(expected, (q, k, v), grad)
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want)


def test_op_compiles_with_fullgraph_and_its_backward_op() -> None:
    torch._dynamo.reset()
    q, k, v = _qkv()
    mask = torch.rand(24, 24) > 0.3

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _op(q, k, v, mask, is_causal=False)[0]

    out = torch.compile(step, backend="aot_eager", fullgraph=True)(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected)
    ours = torch.autograd.grad(out.sum(), (q, k, v))
    theirs = torch.autograd.grad(expected.sum(), (q, k, v))
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want)


def test_replayed_lock_runs_the_native_entry_and_records_once(tmp_path: Path) -> None:
    lock = str(tmp_path / "training.lock.json")
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 32, requires_grad=True)
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(lock="record", lock_file=lock)):
        fused_attention(q, q, q)
    replay = ExecutionPolicy(lock="replay", lock_file=lock, fallback="error")
    with xrt_torch.kernel_policy(exec_policy=replay) as record:
        outputs = [fused_attention(q, q, q) for _ in range(3)]
    # One decision for the three calls (the lock's switch group is recorded apart, shapeless).
    decisions = [(d.kernel, d.status) for d in record.decisions if d.op == "attention" and d.shape]
    assert decisions == [LOCKED]
    # The eager path: PyTorch's own autograd node of the entry point, as under SDPA.
    assert "FlashAttentionForCpu" in type(outputs[-1].grad_fn).__name__
    expected = F.scaled_dot_product_attention(q, q, q)
    torch.testing.assert_close(outputs[-1], expected)
    (ours,) = torch.autograd.grad(outputs[-1].sum(), q)
    (theirs,) = torch.autograd.grad(expected.sum(), q)
    torch.testing.assert_close(ours, theirs)


def test_eager_calls_under_no_attention_entry_run_sdpa_from_cpp_and_record_once() -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 32, requires_grad=True)
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy()) as record:
        outputs = [fused_attention(q, q, q, is_causal=True) for _ in range(3)]
    decisions = [(d.kernel, d.mode) for d in record.decisions if d.op == "attention"]
    assert decisions == [("auto", "auto")]
    expected = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    # SDPA's own selection, with its own autograd node.
    assert type(outputs[-1].grad_fn) is type(expected.grad_fn)
    torch.testing.assert_close(outputs[-1], expected)
    (ours,) = torch.autograd.grad(outputs[-1].sum(), q)
    (theirs,) = torch.autograd.grad(expected.sum(), q)
    torch.testing.assert_close(ours, theirs)


class _Seen(TorchDispatchMode):
    """Names the ops that reach the dispatcher's Python key."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _Subclass(torch.Tensor):
    pass


def test_eager_fast_path_yields_to_what_intercepts_the_call() -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 32)
    replay = ExecutionPolicy()
    with xrt_torch.kernel_policy(exec_policy=replay):
        expected = fused_attention(q, q, q)  # decided: later plain calls take the fast path
        with _Seen() as seen:
            out = fused_attention(q, q, q)
        # A dispatch mode sees the op itself, not the kernel it resolves to.
        assert seen.ops[0].startswith("xpuruntime.fused_attention")
        torch.testing.assert_close(out, expected)
        sub = q.as_subclass(_Subclass)
        with _Seen() as seen:
            out = fused_attention(sub, sub, sub)
        assert seen.ops[0].startswith("xpuruntime.fused_attention")
        torch.testing.assert_close(out.as_subclass(torch.Tensor), expected)
        batched = torch.func.vmap(lambda t: fused_attention(t, t, t))(q.unsqueeze(0))
        torch.testing.assert_close(batched[0], expected)


def _randn(*shape: int) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(*shape)


def test_it_is_a_c_function_with_the_python_signature_and_docstring() -> None:
    assert isinstance(fused_attention, types.BuiltinFunctionType)
    signature = inspect.signature(fused_attention)
    assert [(p.name, p.default) for p in signature.parameters.values()] == [
        ("query", inspect.Parameter.empty),
        ("key", inspect.Parameter.empty),
        ("value", inspect.Parameter.empty),
        ("attn_mask", None),
        ("dropout_p", 0.0),
        ("is_causal", False),
        ("scale", None),
        ("enable_gqa", False),
    ]
    assert fused_attention.__doc__ is not None
    assert fused_attention.__doc__.startswith("Fused multi-head attention")
    assert fused_attention.__module__ == attention.__name__
    assert pickle.loads(pickle.dumps(fused_attention)) is fused_attention


def test_arguments_bind_as_python_binds_them() -> None:
    q = _randn(2, 4, 16, 8)
    mask = torch.rand(16, 16) > 0.3
    expected = F.scaled_dot_product_attention(q, q, q, attn_mask=mask, scale=0.5)
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy()):
        for _ in range(2):  # the first call decides, the second takes the fast path
            for out in (
                fused_attention(q, q, q, mask, 0.0, False, 0.5),
                fused_attention(q, q, q, attn_mask=mask, scale=0.5),
                fused_attention(scale=0.5, value=q, key=q, query=q, attn_mask=mask),
                fused_attention(q, q, value=q, attn_mask=mask, dropout_p=0, scale=0.5),
            ):
                torch.testing.assert_close(out, expected)
        causal = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        torch.testing.assert_close(fused_attention(q, q, q, is_causal=True), causal)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1, 1), {}, "missing 1 required positional argument: 'value'"),
        ((1, 1, 1), {"bogus": 1}, "unexpected keyword argument 'bogus'"),
        ((1, 1, 1), {"query": 1}, "multiple values for argument 'query'"),
        ((1,) * 9, {}, "takes from 3 to 8 positional arguments but 9 were given"),
    ],
)
def test_argument_errors_are_pythons(args: tuple[Any, ...], kwargs: dict[str, Any],
                                     message: str) -> None:  # fmt: skip
    q = _randn(1, 2, 4, 8)
    with pytest.raises(TypeError, match=message):
        fused_attention(*(q if a == 1 else a for a in args), **{k: q for k in kwargs})


def _python_calls(fn: Any) -> list[str]:
    """The Python functions of xpuruntime.pytorch that run during ``fn()``."""
    seen: list[str] = []
    package = str(Path(xrt_torch.__file__).parent)

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(package):
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_a_decided_call_runs_no_python_and_a_new_policy_decides_again() -> None:
    q = _randn(1, 2, 8, 16).requires_grad_()
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy()) as record:
        assert "fused_attention" in _python_calls(lambda: fused_attention(q, q, q))
        assert _python_calls(lambda: fused_attention(q, q, q)) == []
        with torch.no_grad():  # another call signature (no grad): decided on its first call
            assert "fused_attention" in _python_calls(lambda: fused_attention(q, q, q))
            assert _python_calls(lambda: fused_attention(q, q, q)) == []
    assert [(d.op, d.kernel) for d in record.decisions if d.shape] == [("attention", "auto")]
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy()) as record:
        assert "fused_attention" in _python_calls(lambda: fused_attention(q, q, q))
    assert [(d.op, d.kernel) for d in record.decisions if d.shape] == [("attention", "auto")]


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.usefixtures("fresh_dynamo")
def test_compiles_with_fullgraph_tracing_the_python_function() -> None:
    q = _randn(1, 2, 8, 16).requires_grad_()
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy()):
        fused_attention(q, q, q, is_causal=True)  # decided: its eager calls are in C++
        compiled = torch.compile(
            lambda q: fused_attention(q, q, q, is_causal=True) * 2, backend="aot_eager",
            fullgraph=True,
        )  # fmt: skip
        out = compiled(q)
    expected = F.scaled_dot_product_attention(q, q, q, is_causal=True) * 2
    torch.testing.assert_close(out, expected)
    (ours,) = torch.autograd.grad(out.sum(), q)
    (theirs,) = torch.autograd.grad(expected.sum(), q)
    torch.testing.assert_close(ours, theirs)


class _Attend(torch.nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return fused_attention(q, q, q, is_causal=True)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("strict", [True, False])
def test_export_sees_the_op(strict: bool) -> None:
    q = _randn(1, 2, 8, 16)
    fused_attention(q, q, q, is_causal=True)
    program = torch.export.export(_Attend(), (q,), strict=strict)
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert any(t.startswith("xpuruntime.fused_attention") for t in targets), targets
    torch.testing.assert_close(program.module()(q), _Attend()(q))


def test_make_fx_sees_the_op() -> None:
    q = _randn(1, 2, 8, 16)
    fused_attention(q, q, q)
    graph = make_fx(lambda q: fused_attention(q, q, q))(q)
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert any(t.startswith("xpuruntime.fused_attention") for t in targets), targets


def test_importing_it_leaves_dynamo_unimported_until_a_compile_needs_it() -> None:
    code = textwrap.dedent(
        """
        import sys
        import torch
        from xpuruntime.pytorch.ops import fused_attention
        assert "torch._dynamo" not in sys.modules
        q = torch.randn(1, 2, 8, 16)
        fused_attention(q, q, q)  # the policy state (made on first use) exists
        assert "torch._dynamo" not in sys.modules
        out = torch.compile(lambda q: fused_attention(q, q, q), backend="eager", fullgraph=True)(q)
        torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, q, q))
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_without_substitute_in_graph_the_python_function_stays_the_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PyTorch before 2.5 has no torch.compiler.substitute_in_graph: dynamo could not trace
    # the C function, so the typed Python function is the op and runs every call.
    from xpuruntime.pytorch.ops import attention

    def function(query: torch.Tensor) -> torch.Tensor:
        return query

    monkeypatch.setattr(attention, "HAS_SUBSTITUTE_IN_GRAPH", False)
    assert attention._in_cpp(function) is function
