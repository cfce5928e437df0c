"""Small xrt_flash calls for compute-sanitizer (see attention_sanitize.sh): forward and backward
over the kernels' edge cases (partial last blocks, causal diagonal, GQA/MQA, packed sequences
with an empty one, both load paths); on sm_90 the same edge cases through xrt_flash_hopper's
Gluon forward (every variant, each twice: through the JIT and through the kept kernel;
packed sequences through the automatic choice and, forward and backward, directly) and
backward (its default and its deterministic path). Sizes are tiny: the sanitizer slows
kernels ~100x.

    python3 attention_sanitize.py [--hopper-only] [--variants m64n128s2pp_p,...]

``--hopper-only`` runs only the Hopper calls; ``--variants`` only those forward variants (of
the head sizes they compile at), e.g. the ones a change touched."""

from __future__ import annotations

import argparse

import torch

import xpuruntime.ops as ops
from xpuruntime.kernels.attention import launch
from xpuruntime.kernels.attention.tiles import candidates


def dense(heads: int, kv_heads: int, seq: int, dim: int, causal: bool) -> None:
    q = torch.randn(2, heads, seq, dim, device="cuda", dtype=torch.bfloat16)
    k, v = (
        torch.randn(2, kv_heads, seq, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2)
    )
    capability = torch.cuda.get_device_capability()
    # every forward candidate: both the tensor-descriptor (TMA) and the pointer load paths
    for tiles in candidates("forward", dim, capability):
        try:
            out, lse, _ = launch.forward(
                q, k, v, causal=causal, scale=None, layout="bhsd", tiles=tiles
            )
        except Exception as error:  # as the launcher does: a candidate that cannot compile
            print(f"skipped (does not compile here): hd{dim} {tiles.describe()}: {error!r:.200}")
            continue
    dq, dk, dv = ops.attention_backward(
        torch.randn_like(out), q, k, v, out, lse, causal=causal, layout="bhsd"
    )
    torch.cuda.synchronize()
    assert all(torch.isfinite(t).all() for t in (out, dq, dk, dv))


def packed(causal: bool) -> None:
    lengths = [70, 0, 129, 1]
    cu = torch.tensor(
        [0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda"
    )
    q = torch.randn(sum(lengths), 4, 64, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(sum(lengths), 2, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    out, lse = ops.attention(
        q, k, v, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu, return_lse=True
    )
    grads = ops.attention_backward(
        torch.randn_like(out), q, k, v, out, lse, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu
    )
    torch.cuda.synchronize()
    assert all(torch.isfinite(t).all() for t in (out, *grads))


def hopper(
    heads: int, kv_heads: int, seq_q: int, seq_k: int, dim: int, causal: bool, only: list[str]
) -> None:
    """The Gluon Hopper forward (every variant of the head size, or those of ``only`` it
    has, else its default) and backward."""
    from xpuruntime.kernels.attention import hopper_bwd
    from xpuruntime.kernels.attention.hopper import hopper_attention_forward, variant_names

    q = torch.randn(2, heads, seq_q, dim, device="cuda", dtype=torch.bfloat16)
    k, v = (
        torch.randn(2, kv_heads, seq_k, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2)
    )
    # None (the head size's default) where ``only`` names none of this head size's variants:
    # the backward below still needs a forward's output.
    chosen = [n for n in variant_names(dim) if not only or n in only]
    for name in chosen or [None]:
        # Twice: the first call goes through Triton's JIT, the second repeats it through the
        # compiled kernel it kept (hopper._Repeat: its launch laid out once, gluon_launch.Bound)
        # on copies at other addresses, so both launch paths run under the sanitizer.
        first, _ = hopper_attention_forward(q, k, v, causal=causal, variant=name)
        copies = (q.clone(), k.clone(), v.clone())
        out, lse = hopper_attention_forward(*copies, causal=causal, variant=name)
        assert torch.equal(first, out), name or "default"
    grad_out = torch.randn_like(out)
    # Both backward paths the automatic choice can take: the head size's default (fused,
    # float32 atomics on dQ, or the deterministic kernels) and the deterministic kernels.
    for deterministic in (False, True):
        grads = hopper_bwd.hopper_attention_backward(
            grad_out, q, k, v, out, lse, causal=causal, deterministic=deterministic
        )
        torch.cuda.synchronize()
        assert all(torch.isfinite(t).all() for t in (out, *grads))


def hopper_packed(causal: bool) -> None:
    """The Gluon Hopper forward and backward on packed sequences (the backward's deterministic
    kernels on 2-D grids): sequences ending inside tiles, an empty one, more keys than
    queries, GQA 4:1, rows of no sequence at the end; the longest sequence last, then first
    (the grid's CTAs past a short last sequence's end must read nothing)."""
    from xpuruntime.kernels.attention import hopper_bwd
    from xpuruntime.kernels.attention.hopper import hopper_attention_forward

    def offsets(lens: list[int]) -> torch.Tensor:
        return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda").int()

    lens_q, lens_k = [70, 0, 129, 1, 300], [90, 5, 129, 1, 250]
    for dim, order in ((64, 1), (128, 1), (128, -1)):
        cu_q, cu_k = offsets(lens_q[::order]), offsets(lens_k[::order])
        q = torch.randn(sum(lens_q) + 9, 8, dim, device="cuda", dtype=torch.bfloat16)
        k, v = (
            torch.randn(sum(lens_k) + 9, 2, dim, device="cuda", dtype=torch.bfloat16)
            for _ in range(2)
        )
        packed = {
            "cu_seqlens_q": cu_q,
            "cu_seqlens_k": cu_k,
            "max_seqlen_q": 300,
            "max_seqlen_k": 250,
        }
        out, lse = hopper_attention_forward(q, k, v, causal=causal, **packed)
        grads = hopper_bwd.hopper_attention_backward(
            torch.randn_like(out), q, k, v, out, lse, causal=causal, **packed
        )
        torch.cuda.synchronize()
        rows = int(cu_q[-1])
        assert all(torch.isfinite(t).all() for t in (out[:rows], *grads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hopper-only", action="store_true")
    parser.add_argument("--variants", default="", help="comma-separated forward variants")
    args = parser.parse_args()
    only = [name for name in args.variants.split(",") if name]
    from xpuruntime.kernels.attention.hopper import HEAD_DIMS, variant_names

    known = {name for dim in HEAD_DIMS for name in variant_names(dim)}
    if unknown := [name for name in only if name not in known]:
        parser.error(f"--variants: {unknown} are not candidates ({sorted(known)})")
    on_hopper = torch.cuda.get_device_capability() == (9, 0)
    for causal in (False, True):
        if not args.hopper_only:
            dense(4, 4, 200, 64, causal)
            dense(4, 1, 130, 128, causal)
            packed(causal)
        if on_hopper:
            hopper(4, 4, 200, 200, 64, causal, only)
            hopper(4, 1, 130, 250, 128, causal, only)  # GQA 4:1, more keys than queries
            # 240 work items: more than an H100/H200 has SMs, so a persistent CTA runs two.
            hopper(40, 8, 300, 300, 64, causal, only)
            hopper_packed(causal)
    print("attention_sanitize: all calls finished")


if __name__ == "__main__":
    main()
