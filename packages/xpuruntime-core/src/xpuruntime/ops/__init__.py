"""xpuruntime.ops: ops dispatched through the kernel policy to the native kernels.

Inputs are anything with ``__dlpack__`` (numpy arrays, torch and cupy tensors, xpuruntime
Tensors); they are viewed without copies, strided views included, and the result comes back
as the first input's array type (numpy in, numpy out; torch in, torch out), again without a
copy. Each call resolves its kernel through the native dispatcher's cache and records the
decision natively; :func:`last_decision` and ``record=`` read it back.

``precision="tf32"`` lets fp32 GEMMs (matmul, linear) use TF32 tensor cores, as an
ExecutionPolicy with precision "tf32" does; None or ``"fp32"`` keeps full fp32.
"""

from __future__ import annotations

from typing import Any, Literal

from xpuruntime.ops._interop import adapter
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.dispatch import Decision, native_choice, policy_choice
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import ExecutionRecord
from xpuruntime.runtime.streams import StreamLike, stream_handle
from xpuruntime.runtime.tensor import from_dlpack, like_input

__all__ = [
    "activation_grad",
    "last_decision",
    "layernorm",
    "linear",
    "linear_backward",
    "linear_gelu_grad",
    "linear_weight_grad",
    "matmul",
]

Activation = Literal["relu", "gelu"]
Precision = Literal["fp32", "tf32"]

_native = core()


def matmul(
    a: Any,
    b: Any,
    *,
    policy: KernelPolicy | None = None,
    precision: Precision | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> Any:
    """``a @ b`` for ``a`` [M, K] or [B, M, K] and ``b`` [K, N] or [B, K, N] of one dtype on
    one device (a 2-D operand is broadcast over the batch); the result is contiguous.

    Kernels: ``cublasLt`` and ``cublas`` (CUDA; fp32, fp16, bf16; transposed views go
    through the BLAS operation flags, other strides ask for ``.contiguous()``) and ``cpu``
    (float32, float64, any strides). ``policy`` pins/prefers one
    (``KernelPolicy(matmul="cublasLt")``); without one the first supported kernel runs.
    ``stream`` defaults to the current stream of the input's library (torch/cupy) or the
    legacy default stream. The decision (with the cuBLASLt algorithm) is appended to
    ``record.decisions`` when a record is given.
    """
    io = adapter(a)
    out = _native.matmul(
        io.export(a),
        adapter(b).export(b),
        native_choice("matmul", policy, precision),
        io.stream(a) if stream is None else stream_handle(stream),
        io.as_capsule,
    )
    if record is not None:
        _record(record)
    return io.wrap(out)


def linear(
    x: Any,
    weight: Any,
    bias: Any = None,
    activation: Activation | None = None,
    *,
    save_preactivation: bool = False,
    policy: KernelPolicy | None = None,
    precision: Precision | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> Any:
    """``activation(x @ weight.T + bias)`` on one GEMM with a fused epilogue.

    ``x`` is [..., K], ``weight`` [N, K] (as ``torch.nn.Linear`` stores it), ``bias`` [N] or
    None; ``activation`` None, ``"relu"`` or ``"gelu"`` (GELU's tanh approximation, as
    cuBLASLt computes it: ``F.gelu(..., approximate="tanh")``). Kernels: ``cublasLt``
    (epilogues BIAS, RELU, RELU_BIAS, GELU, GELU_BIAS; GELU_AUX(_BIAS) with
    ``save_preactivation``) and ``cpu`` (the reference). With ``save_preactivation``
    (GELU only) returns ``(y, z)`` where ``z = x @ weight.T + bias`` is kept for backward
    (an [M, N] view whose row stride is a multiple of 8); otherwise ``y``.
    """
    io = adapter(x)
    out = _native.linear(
        io.export(x),
        adapter(weight).export(weight),
        None if bias is None else adapter(bias).export(bias),
        activation or "",
        save_preactivation,
        native_choice("linear", policy, precision),
        io.stream(x) if stream is None else stream_handle(stream),
        io.as_capsule,
    )
    if record is not None:
        _record(record)
    if save_preactivation:
        y, z = out
        return io.wrap(y), io.wrap(z)
    return io.wrap(out)


def linear_weight_grad(
    dz: Any,
    x: Any,
    *,
    bias_grad: bool = True,
    policy: KernelPolicy | None = None,
    precision: Precision | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> tuple[Any, Any]:
    """``(dw, db)`` of a linear layer: ``dw = dz^T @ x`` [N, K] and, with ``bias_grad``,
    ``db = dz.sum(rows)`` [N] from the same GEMM (cuBLASLt's BGRADB epilogue); db is None
    otherwise. ``dz`` is [..., N] (the gradient at the pre-activation), ``x`` [..., K]."""
    io = adapter(dz)
    dw, db = _native.linear_weight_grad(
        io.export(dz),
        adapter(x).export(x),
        bias_grad,
        native_choice("linear", policy, precision),
        io.stream(dz) if stream is None else stream_handle(stream),
        io.as_capsule,
    )
    if record is not None:
        _record(record)
    return io.wrap(dw), None if db is None else io.wrap(db)


def linear_gelu_grad(
    g: Any,
    weight: Any,
    preactivation: Any,
    *,
    bias_grad: bool = True,
    policy: KernelPolicy | None = None,
    precision: Precision | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> tuple[Any, Any]:
    """Backward through a GELU layer into the layer before it, on one GEMM.

    For an MLP ``h = gelu(z)``, ``y = h @ weight.T``: given ``g = dL/dy`` [M, P] and the next
    layer's ``weight`` as ``[P, N]`` (so ``g @ weight`` is ``dL/dh``), returns
    ``dz = (g @ weight) * gelu'(z)`` [M, N] and, with ``bias_grad``, ``db = dz.sum(rows)``
    [N] (cuBLASLt's DGELU / DGELU_BGRAD epilogues); ``preactivation`` is the ``z`` that
    :func:`linear` returned with ``save_preactivation=True``.
    """
    io = adapter(g)
    dz, db = _native.linear_gelu_grad(
        io.export(g),
        adapter(weight).export(weight),
        adapter(preactivation).export(preactivation),
        bias_grad,
        native_choice("linear", policy, precision),
        io.stream(g) if stream is None else stream_handle(stream),
        io.as_capsule,
    )
    if record is not None:
        _record(record)
    return io.wrap(dz), None if db is None else io.wrap(db)


def activation_grad(
    dy: Any, saved: Any, activation: Activation, *, stream: StreamLike = None
) -> Any:
    """``dy * activation'(saved)`` elementwise: GELU takes the pre-activation, ReLU the
    pre-activation or the output."""
    io = adapter(dy)
    out = _native.activation_grad(
        io.export(dy),
        adapter(saved).export(saved),
        activation,
        io.stream(dy) if stream is None else stream_handle(stream),
        io.as_capsule,
    )
    return io.wrap(out)


def linear_backward(
    dy: Any,
    x: Any,
    weight: Any,
    *,
    activation: Activation | None = None,
    saved: Any = None,
    bias_grad: bool = True,
    policy: KernelPolicy | None = None,
    precision: Precision | None = None,
    stream: StreamLike = None,
) -> tuple[Any, Any, Any]:
    """``(dx, dw, db)`` of ``y = linear(x, weight, bias, activation)`` given ``dy``.

    ``saved`` is what the activation's derivative needs: the pre-activation for GELU
    (``linear(..., save_preactivation=True)``), the output ``y`` or the pre-activation for
    ReLU. dz = dy * act'(saved) runs elementwise, then ``dx = dz @ weight`` and ``dw, db``
    come from :func:`linear_weight_grad` (BGRADB epilogue).
    """
    dz = dy
    if activation is not None:
        if saved is None:
            from xpuruntime.runtime.errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"linear_backward with activation={activation!r} needs `saved` (the "
                "pre-activation, or the output for relu)"
            )
        dz = activation_grad(dy, saved, activation, stream=stream)
    dx = matmul(dz, weight, policy=policy, precision=precision, stream=stream)
    dw, db = linear_weight_grad(
        dz, x, bias_grad=bias_grad, policy=policy, precision=precision, stream=stream
    )
    return dx, dw, db


def layernorm(
    x: Any,
    weight: Any,
    bias: Any,
    eps: float = 1e-5,
    *,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> Any:
    """Layer normalisation of ``x`` over its last dimension: (x - mean) / sqrt(var + eps) * weight + bias."""
    kernel, mode, strategy = policy_choice("layernorm", policy)
    out, _decision, _detail = _native.layernorm(
        from_dlpack(x),
        from_dlpack(weight),
        from_dlpack(bias),
        eps,
        kernel,
        mode,
        strategy,
        adapter(x).stream(x) if stream is None else stream_handle(stream),
    )
    if record is not None:
        _record(record)
    return like_input(out, x)


def last_decision() -> Decision | None:
    """The dispatcher decision of this thread's most recent op call."""
    native = _native.last_decision()
    return None if native is None else Decision._from_native(native)


def _record(record: ExecutionRecord) -> None:
    native = _native.last_decision()
    if native is not None:
        record.decisions.append(Decision._from_native(native).to_record())
