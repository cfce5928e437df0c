"""How the attention forwards run a negative softmax scale: as its magnitude on the negated
query. Imported by the Triton launcher, the Gluon Hopper host and the fp8 forward; torch only
inside the function, so the Hopper host's variant table stays importable without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    import torch

__all__ = ["query_for_scale"]


@overload
def query_for_scale(
    q: torch.Tensor, scale: float, stream: int | None
) -> tuple[torch.Tensor, float]: ...
@overload
def query_for_scale(
    q: torch.Tensor, scale: float | None, stream: int | None
) -> tuple[torch.Tensor, float | None]: ...
def query_for_scale(
    q: torch.Tensor, scale: float | None, stream: int | None
) -> tuple[torch.Tensor, float | None]:
    """(query, scale) as the forward kernels take them: a negative ``scale`` as its magnitude
    on the negated query. Every forward takes a block's max score before scaling it (one
    multiply a row instead of one a score), which a negative scale turns into the min, so P
    overflows: float16 and e4m3 at once. softmax(s q kᵀ) = softmax(|s| (-q) kᵀ), so the output
    and log-sum-exp are the call's; the backwards recompute P from the log-sum-exp, right
    for either sign, and take the query and scale as given. The negation is exact (an e4m3
    query's sign bit flips) and runs on ``stream``, as the kernel does."""
    if scale is None or not scale < 0.0:
        return q, scale
    import torch

    from xpuruntime.kernels.attention.streams import on_device

    with on_device(q.device, stream):
        if q.element_size() == 1:  # e4m3 has no negation kernel: flip the sign bits
            negated = torch.bitwise_xor(q.view(torch.uint8), 0x80).view(q.dtype)
        else:
            negated = torch.neg(q)
    return negated, -float(scale)
