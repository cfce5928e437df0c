"""The float32 attention reference and the error figures the attention benchmarks report."""

from __future__ import annotations

import math
from typing import Any

import torch


def reference(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """softmax(q kᵀ / sqrt(d)) v in float32 (causal: top-left aligned)."""
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v.float()


def errors(out: Any, ref: Any) -> dict[str, float]:
    """Relative Frobenius error ‖out − ref‖ / ‖ref‖ and the largest |out − ref|."""
    diff = out.float() - ref
    return {"rel_fro": float(diff.norm() / ref.norm()), "max_abs": float(diff.abs().max())}
