"""cuDNN's own FP8 attention forward, the fp8 bench's peer: an ``sdpa_fp8`` graph of the
cuDNN frontend (``pip install nvidia-cudnn-frontend``; it loads the cuDNN that PyTorch ships).

e4m3 query, key and value with one descale factor each (FlashAttention-3's inputs, the same
as the bench's ``e4m3`` case), inference only (no statistics), P quantized with scale 448.
On Hopper cuDNN writes the output in e4m3 too (its bf16 output is Blackwell-only);
``scale_o`` is one, so the output is the attention in real units rounded to e4m3.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch


def unavailable() -> str:
    """Why the cuDNN fp8 peer cannot run here ("" where it can)."""
    try:
        import cudnn  # noqa: F401
    except ImportError as error:
        return f"cudnn-frontend is not installed ({error}); pip install nvidia-cudnn-frontend"
    except OSError as error:  # installed, but the cuDNN library it loads is missing
        return f"cudnn-frontend cannot load cuDNN ({error})"
    return ""


@functools.cache
def _handle() -> Any:
    """One cuDNN handle for every graph of the process (each call sets its stream)."""
    import cudnn

    return cudnn.create_handle()


def sdpa_fp8(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    descales: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    causal: bool,
) -> Callable[[], torch.Tensor]:
    """A call of cuDNN's fp8 forward on (batch, heads, seq, dim) e4m3 tensors (the graph is
    built and its plan chosen here, once); each call runs on the current stream (so a CUDA
    graph capture records it) and returns the e4m3 output buffer."""
    import cudnn

    e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    handle = _handle()
    graph = cudnn.pygraph(
        io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32, handle=handle
    )
    shape, stride = tuple(q8.shape), tuple(q8.stride())
    q_t, k_t, v_t = (
        graph.tensor(name=name, dim=tuple(x.shape), stride=tuple(x.stride()), data_type=e4m3)
        for name, x in (("q", q8), ("k", k8), ("v", v8))
    )
    scalar_names = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    scalars = {
        name: graph.tensor(name=name, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=f32)
        for name in scalar_names
    }
    out_t, _, amax_s_t, amax_o_t = graph.sdpa_fp8(
        q=q_t, k=k_t, v=v_t, **scalars, is_inference=True,
        attn_scale=1 / math.sqrt(shape[-1]), use_causal_mask=causal,
    )  # fmt: skip
    out_t.set_output(True).set_dim(shape).set_stride(stride).set_data_type(e4m3)
    for amax in (amax_s_t, amax_o_t):
        amax.set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(f32)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    device = q8.device
    workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device=device)
    one = torch.ones((1, 1, 1, 1), dtype=torch.float32, device=device)
    # P (at most 1) goes into e4m3 scaled to its largest value, 448, as Transformer Engine
    # scales it; a scale of one would flush every weight below 2^-9.
    scale_s = torch.full_like(one, 448.0)
    out = torch.empty_like(q8)
    values = (*(d.reshape(1, 1, 1, 1) for d in descales), 1 / scale_s, scale_s, one)
    pack: dict[Any, torch.Tensor] = {
        out_t: out, amax_s_t: torch.empty_like(one), amax_o_t: torch.empty_like(one),
        q_t: q8, k_t: k8, v_t: v8,
        **{scalars[name]: value for name, value in zip(scalar_names, values, strict=True)},
    }  # fmt: skip

    def call() -> torch.Tensor:
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream(device).cuda_stream)
        graph.execute(pack, workspace, handle=handle)
        return out

    return call
