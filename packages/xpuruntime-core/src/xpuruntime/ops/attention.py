"""``attention`` and ``attention_backward``: fused attention through the kernel policy.

The dispatcher resolves op ``attention`` (query shape
``[batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, causal, varlen]``) to a registered
kernel — ``xrt_flash_hopper``, the warp-specialised Gluon forward, on Hopper GPUs where it
runs; ``xrt_flash``, xpuruntime's Triton FlashAttention kernels; or, where a policy names it,
``xrt_flash_fp8``, their float8 (e4m3) forward for inference — and the call runs it. The
backward of ``xrt_flash_hopper`` is the Gluon Hopper backward where it runs (head sizes 64
and 128, dense and packed batches) and ``xrt_flash``'s Triton backward on the same
log-sum-exp elsewhere (head size 256, packed causal batches of short sequences, where it
measured faster); its decision says which ran and why. Inputs are PyTorch
CUDA tensors (other DLPack producers are viewed as torch tensors); torch and Triton are
imported on the first call, never by ``import xpuruntime``.

For training, :func:`xpuruntime.pytorch.ops.fused_attention` wraps these in a differentiable
PyTorch custom op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from xpuruntime.kernels.attention import (
    FP8_HOPPER_LIBRARY,
    FP8_KERNEL,
    FP8_TRITON_LIBRARY,
    HOPPER_KERNEL,
    KERNEL,
    LIBRARY,
    query_shape,
)
from xpuruntime.ops._calls import DecisionFields, note
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.dispatch import policy_choice
from xpuruntime.runtime.errors import InvalidArgumentError, UnsupportedOperationError
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import ExecutionRecord
from xpuruntime.runtime.streams import StreamLike, stream_handle

if TYPE_CHECKING:
    import torch

__all__ = ["attention", "attention_backward"]

Layout = Literal["bshd", "bhsd"]


def _torch(x: Any, name: str) -> torch.Tensor:
    try:
        import torch
    except ImportError as exc:
        raise UnsupportedOperationError(
            "xpuruntime.ops.attention runs Triton kernels on PyTorch tensors: pip install torch"
        ) from exc
    if isinstance(x, torch.Tensor):
        # Kernels write new tensors outside autograd (fused_attention is the differentiable
        # op); only a tensor that records history needs detaching.
        return x.detach() if x.requires_grad else x
    if hasattr(x, "__dlpack__"):
        from torch.utils.dlpack import from_dlpack

        return from_dlpack(x)
    raise InvalidArgumentError(
        f"attention: {name} must be a torch tensor or a DLPack producer, got {type(x).__name__}"
    )


def _dims(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, varlen: bool
) -> tuple[int, ...]:
    """(batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim) with the inputs' consistency checked."""
    rank = 3 if varlen else 4

    def shapes() -> str:  # for messages only: formatting it costs a call's host time
        return f"query {tuple(q.shape)}, key {tuple(k.shape)}, value {tuple(v.shape)}"

    if not (q.dim() == k.dim() == v.dim() == rank):
        what = "(total_tokens, heads, head_dim) with cu_seqlens" if varlen else f"4-D ({layout})"
        raise InvalidArgumentError(f"attention takes {what} tensors, got {shapes()}")
    if k.shape != v.shape:
        raise InvalidArgumentError(f"attention: key and value shapes differ: {shapes()}")
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise InvalidArgumentError(
            f"attention: query, key and value must share dtype and device, got "
            f"{q.dtype}/{k.dtype}/{v.dtype} on {q.device}/{k.device}/{v.device}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise InvalidArgumentError(f"attention: head sizes of query and key differ: {shapes()}")
    if varlen:
        return (0, 0, 0, q.shape[1], k.shape[1], q.shape[2])
    b, s, h = (0, 1, 2) if layout == "bshd" else (0, 2, 1)
    if q.shape[b] != k.shape[b]:
        raise InvalidArgumentError(f"attention: batch sizes differ: {shapes()}")
    return (q.shape[b], q.shape[s], k.shape[s], q.shape[h], k.shape[h], q.shape[-1])


def _varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    cu_seqlens_q: Any,
    cu_seqlens_k: Any,
    max_seqlen_q: int | None,
    max_seqlen_k: int | None,
) -> Any:
    import torch

    from xpuruntime.kernels.attention.launch import Varlen

    if cu_seqlens_q is None or cu_seqlens_k is None:
        raise InvalidArgumentError(
            "attention: give both cu_seqlens_q and cu_seqlens_k (or neither)"
        )
    cus = []
    for name, given in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        cu = _torch(given, name)
        if cu.dim() != 1 or cu.numel() < 1 or cu.dtype != torch.int32 or cu.device != q.device:
            raise InvalidArgumentError(
                f"attention: {name} must be a 1-D int32 tensor of batch+1 offsets on {q.device}, "
                f"got {tuple(cu.shape)} {cu.dtype} on {cu.device}"
            )
        cus.append(cu.contiguous())
    cu_q, cu_k = cus
    if cu_q.numel() != cu_k.numel():
        raise InvalidArgumentError(
            f"attention: cu_seqlens_q and cu_seqlens_k describe different batch sizes "
            f"({cu_q.numel() - 1} and {cu_k.numel() - 1})"
        )
    # Without the maxima the grid size needs the lengths on the host (a device sync).
    if max_seqlen_q is None:
        max_seqlen_q = int((cu_q[1:] - cu_q[:-1]).max()) if cu_q.numel() > 1 else 0
    if max_seqlen_k is None:
        max_seqlen_k = int((cu_k[1:] - cu_k[:-1]).max()) if cu_k.numel() > 1 else 0
    return Varlen(cu_q, cu_k, int(max_seqlen_q), int(max_seqlen_k))


def _precision_choice(policy: KernelPolicy | None, precision: str | None) -> tuple[str, ...]:
    """(kernel, mode, strategy) for the dispatcher: the policy's, or for ``precision="fp8"``
    the fp8 kernel, pinned (a precision that cannot be honoured is an error, not a fallback
    to a more precise kernel)."""
    kernel, mode, strategy = policy_choice("attention", policy)
    if precision is None:
        return kernel, mode, strategy
    if precision != "fp8":
        raise InvalidArgumentError(
            f"attention: precision {precision!r} is not one attention takes; use None (the "
            "inputs' own float16/bfloat16) or 'fp8' (float8 e4m3, for inference)"
        )
    if kernel and kernel != FP8_KERNEL:
        raise InvalidArgumentError(
            f"attention: precision 'fp8' runs {FP8_KERNEL!r}, but the kernel policy names "
            f"{kernel!r}; drop one of them"
        )
    return FP8_KERNEL, "pin" if mode == "auto" else mode, strategy


def _resolve(
    q: torch.Tensor,
    dims: Sequence[int],
    varlen: Any,
    causal: bool,
    policy: KernelPolicy | None,
    precision: str | None = None,
) -> DecisionFields:
    batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim = dims
    if varlen is not None:
        batch = varlen.cu_seqlens_q.numel() - 1
        seqlen_q, seqlen_k = varlen.max_seqlen_q, varlen.max_seqlen_k
    shape = query_shape(
        batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, causal=causal, varlen=varlen is not None,
    )  # fmt: skip
    kernel, mode, strategy = _precision_choice(policy, precision)
    dtype = str(q.dtype).removeprefix("torch.")
    device = "cpu" if q.device.type == "cpu" else f"cuda:{q.device.index or 0}"
    decision: DecisionFields
    decision, _status, _layout = core().resolve(
        "attention", shape, dtype, device, kernel, mode, strategy
    )
    if decision[1] not in (HOPPER_KERNEL, KERNEL, FP8_KERNEL):  # someone else's: not launchable
        raise UnsupportedOperationError(
            f"attention resolved to kernel {decision[1]!r} ({decision[2]}), which "
            f"xpuruntime.ops.attention cannot launch; pin attention={KERNEL!r}"
        )
    return decision


def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    scale: float | None = None,
    cu_seqlens_q: Any = None,
    cu_seqlens_k: Any = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    layout: Layout = "bshd",
    return_lse: bool = False,
    policy: KernelPolicy | None = None,
    precision: Literal["fp8"] | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> Any:
    """Softmax attention ``softmax(q kᵀ · scale) v`` on the kernel the policy selects.

    Dense inputs are 4-D, ``(batch, seq, heads, head_dim)`` (``layout="bshd"``, as
    FlashAttention) or ``(batch, heads, seq, head_dim)`` (``layout="bhsd"``, as PyTorch's SDPA);
    key and value may have fewer heads than the query (grouped-query / multi-query attention:
    query heads must be a multiple of key/value heads). With ``cu_seqlens_q``/``cu_seqlens_k``
    (int32 offsets, batch+1 entries) the inputs are packed ``(total_tokens, heads, head_dim)``
    sequences without padding; give ``max_seqlen_q``/``max_seqlen_k`` to avoid reading the
    lengths back to the host.

    ``causal`` masks key ``j > i`` for query ``i`` (top-left aligned, as SDPA's ``is_causal``);
    ``scale`` defaults to ``1/sqrt(head_dim)``. Returns the output (the query's layout), and
    with ``return_lse=True`` also the float32 natural-log log-sum-exp of each query row,
    ``(batch, heads, seqlen_q)`` or ``(heads, total_q)`` for packed input. A policy pinning a
    kernel that cannot run the call raises :class:`UnsupportedOperationError` with the reason.
    Without a policy, float16/bfloat16 calls (dense or packed) on an H100/H200 run
    ``xrt_flash_hopper`` (head sizes 64, 128, 256) and the others ``xrt_flash``; the decision
    says which and why.
    ``precision="fp8"`` (or ``KernelPolicy(attention="xrt_flash_fp8")``) computes in float8
    e4m3 on ``xrt_flash_fp8``, for inference: per-row query, per-block key and per-channel
    value scales, output in the inputs' dtype, no backward; where it cannot run, the call
    raises :class:`UnsupportedOperationError` with the reason.
    """
    query, key, value = _torch(q, "q"), _torch(k, "k"), _torch(v, "v")
    is_varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    dims = _dims(query, key, value, layout, is_varlen)
    varlen = (
        _varlen(query, key, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        if is_varlen
        else None
    )
    decision = _resolve(query, dims, varlen, causal, policy, precision)
    from xpuruntime.kernels.attention import launch

    kind = "thd" if is_varlen else layout
    handle = None if stream is None else stream_handle(stream)
    if decision[1] == HOPPER_KERNEL:
        out, lse, detail = launch.hopper_forward(
            query, key, value, causal=causal, scale=scale, layout=kind, varlen=varlen,
            stream=handle,
        )  # fmt: skip
    elif decision[1] == FP8_KERNEL:
        from xpuruntime.kernels.attention import fp8

        quantized = fp8.quantize(query, key, value, layout=kind, varlen=varlen, stream=handle)
        out, lse, detail = fp8.forward(
            quantized, causal=causal, scale=scale, layout=kind, varlen=varlen, stream=handle
        )
        # The decision names the kernel the policy chose; the library is the one that ran (none
        # for an empty input: the registered name stays).
        if detail.startswith(fp8.HOPPER_DETAIL):
            decision = (decision[0], decision[1], FP8_HOPPER_LIBRARY, *decision[3:])
        elif detail.startswith(fp8.TRITON_DETAIL):
            decision = (decision[0], decision[1], FP8_TRITON_LIBRARY, *decision[3:])
    else:
        out, lse, detail = launch.forward(
            query, key, value, causal=causal, scale=scale, layout=kind, varlen=varlen,
            stream=handle,
        )  # fmt: skip
    note(decision, detail, record)
    return (out, lse) if return_lse else out


def attention_backward(
    grad_out: Any,
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    *,
    causal: bool = False,
    scale: float | None = None,
    cu_seqlens_q: Any = None,
    cu_seqlens_k: Any = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    layout: Layout = "bshd",
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> tuple[Any, Any, Any]:
    """(dq, dk, dv) of :func:`attention` given the output's gradient, the forward's output and
    its log-sum-exp (``return_lse=True``); same arguments as the forward. dk and dv have the
    key/value heads (summed over the query heads that share each)."""
    query, key, value = _torch(q, "q"), _torch(k, "k"), _torch(v, "v")
    d_out, output, log_sum_exp = (
        _torch(grad_out, "grad_out"),
        _torch(out, "out"),
        _torch(lse, "lse"),
    )
    is_varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    dims = _dims(query, key, value, layout, is_varlen)
    if d_out.shape != query.shape or output.shape != query.shape:
        raise InvalidArgumentError(
            f"attention_backward: grad_out {tuple(d_out.shape)} and out {tuple(output.shape)} "
            f"must have the query's shape {tuple(query.shape)}"
        )
    varlen = (
        _varlen(query, key, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        if is_varlen
        else None
    )
    expected = (dims[3], query.shape[0]) if is_varlen else (dims[0], dims[3], dims[1])
    if tuple(log_sum_exp.shape) != expected:
        raise InvalidArgumentError(
            f"attention_backward: lse must be the forward's log-sum-exp of shape {expected}, "
            f"got {tuple(log_sum_exp.shape)}"
        )
    decision = _resolve(query, dims, varlen, causal, policy)
    from xpuruntime.kernels.attention import launch

    if decision[1] == FP8_KERNEL:
        raise UnsupportedOperationError(
            f"attention_backward: {FP8_KERNEL!r} is a forward for inference and has no "
            "backward; train with attention='xrt_flash'"
        )
    handle = None if stream is None else stream_handle(stream)
    kind = "thd" if is_varlen else layout
    if decision[1] == HOPPER_KERNEL:
        dq, dk, dv, detail = launch.hopper_backward(
            d_out, query, key, value, output, log_sum_exp, causal=causal, scale=scale,
            layout=kind, varlen=varlen, stream=handle,
        )  # fmt: skip
        if not launch.hopper_backward_plan(query, causal=causal, layout=kind, varlen=varlen)[0]:
            # The decision names the kernel the policy chose; what ran is xrt_flash's backward.
            decision = (decision[0], decision[1], LIBRARY, *decision[3:])
    else:
        dq, dk, dv, detail = launch.backward(
            d_out, query, key, value, output, log_sum_exp, causal=causal, scale=scale,
            layout=kind, varlen=varlen, stream=handle,
        )  # fmt: skip
    note(decision, detail, record)
    return dq, dk, dv
