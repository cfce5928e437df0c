"""GPU check of the Gluon Hopper attention forward: accuracy against float32, speed against cuDNN.

    python3 hopper_attention_check.py [--quick] [--variants all|m64n128s2pp,...] [--timeout 300]
        [--batches dense,varlen]

For every configuration (head size 64/128, S 512-16384 with batch * S = 16384 tokens and
heads = 2048 / head size, causal and full, bfloat16, plus odd cases: S not a multiple of the
tile, GQA 4:1, float16, seqlen_q != seqlen_k) it:

1. checks the output and the log-sum-exp against a float32 reference (torch math on upcast
   inputs; batch 0, the first and last query heads, every query row) and prints the maximum
   absolute error next to cuDNN SDPA's on the same inputs;
2. times the forward (``triton.testing.do_bench`` medians, rounds interleaved with cuDNN SDPA
   and, when importable, ``xrt_flash``'s Triton forward) and prints TFLOP/s
   (4 * B * H * Sq * Sk * D, halved when causal) and the ratios.

Packed variable-length batches (``--batches varlen``; both kinds run by default): about 16k
tokens a batch in sequences of uneven (seeded) lengths, plus edge cases (sequences shorter
than a tile, on tile edges, empty, query lengths apart from key lengths). Each is checked
against a float32 reference per sequence (three sequences, the first and last query heads)
and against ``xrt_flash``'s varlen forward on every row, and timed against ``xrt_flash``'s
varlen forward and PyTorch's ``varlen_attn`` (FlashAttention-2, or cuDNN where PyTorch picks
it) where the query and key lengths agree (their causal mask is bottom-right aligned where
they differ; ours is top-left, as SDPA's). TFLOP/s count the visible (query, key) pairs.

Every configuration runs in its own subprocess with a time limit, so a failing or hanging
kernel is reported and the run goes on (``--in-process`` turns that off). Run it from the
repository root or from this directory; the core's sources are put on the path.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
POLICIES_SRC = Path(__file__).resolve().parents[2] / "xpuruntime-policies" / "src"

Config = dict[str, Any]


def _config(
    head_dim: int, seqlen: int, causal: bool, *, dtype: str = "bf16", seqlen_k: int | None = None,
    kv_ratio: int = 1, batch: int | None = None, label: str = "",
) -> Config:  # fmt: skip
    heads = 2048 // head_dim
    return {
        "head_dim": head_dim,
        "batch": batch if batch is not None else max(1, 16384 // seqlen),
        "heads": heads,
        "kv_heads": heads // kv_ratio,
        "seqlen_q": seqlen,
        "seqlen_k": seqlen_k if seqlen_k is not None else seqlen,
        "causal": causal,
        "dtype": dtype,
        "label": label,
    }


def odd_configs() -> list[Config]:
    """The edge cases beside the grid (the backward check runs them too)."""
    return [
        _config(128, 1000, True, label="S%128!=0"),
        _config(128, 1000, False, label="S%128!=0"),
        _config(64, 777, True, label="S%128!=0"),
        _config(128, 2048, True, kv_ratio=4, label="GQA 4:1"),
        _config(128, 2048, False, kv_ratio=4, label="GQA 4:1"),
        _config(64, 2048, True, kv_ratio=4, label="GQA 4:1"),
        _config(128, 2048, True, dtype="fp16", label="fp16"),
        _config(64, 2048, False, dtype="fp16", label="fp16"),
        _config(128, 1000, True, seqlen_k=1500, batch=8, label="Sq<Sk"),
        _config(128, 1536, True, seqlen_k=520, batch=8, label="Sq>Sk"),
        _config(128, 1000, False, seqlen_k=3000, batch=8, label="Sq<Sk"),
        _config(64, 300, False, seqlen_k=70, batch=8, label="short"),
    ]


def configs(quick: bool) -> list[Config]:
    odd = odd_configs()
    if quick:
        return [
            _config(128, 4096, False),
            _config(128, 4096, True),
            _config(64, 4096, False),
            odd[0],
            odd[3],
            odd[8],
        ]
    main = [
        _config(hd, s, causal)
        for hd in (64, 128)
        for causal in (False, True)
        for s in (512, 1024, 2048, 4096, 8192, 16384)
    ]
    return main + odd


def _uneven(total: int, mean: int, seed: int) -> list[int]:
    """Sequence lengths drawn uniformly in [1, 2 * mean) until they add up to ``total``."""
    rng = random.Random(seed)
    lengths: list[int] = []
    while sum(lengths) < total:
        lengths.append(min(rng.randrange(1, 2 * mean), total - sum(lengths)))
    return lengths


def _varlen(
    head_dim: int, lens_q: list[int], causal: bool, *, lens_k: list[int] | None = None,
    kv_ratio: int = 1, dtype: str = "bf16", label: str = "",
) -> Config:  # fmt: skip
    heads = 2048 // head_dim
    return {
        "varlen": True,
        "head_dim": head_dim,
        "heads": heads,
        "kv_heads": heads // kv_ratio,
        "lens_q": lens_q,
        "lens_k": lens_k if lens_k is not None else lens_q,
        "causal": causal,
        "dtype": dtype,
        "label": label,
    }


def varlen_configs(quick: bool) -> list[Config]:
    """Packed batches of uneven lengths, then the edge cases."""
    edges = [1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 0, 3000]
    edges_k = [5, 63, 200, 1, 127, 0, 129, 64, 192, 1000, 7, 2500]
    timed = [
        _varlen(hd, _uneven(16384, mean, seed=mean), causal)
        for hd in (128, 64)
        for mean in ((512, 2048) if not quick else (1024,))
        for causal in (False, True)
    ]
    odd = [
        _varlen(128, _uneven(16384, 1024, seed=7), True, kv_ratio=4, label="GQA 4:1"),
        _varlen(128, _uneven(16384, 1024, seed=8), False, dtype="fp16", label="fp16"),
        _varlen(64, _uneven(4096, 48, seed=9), True, label="short"),
        _varlen(128, edges, True, lens_k=edges_k, label="edges, Sq!=Sk"),
        _varlen(128, edges, False, lens_k=edges_k, label="edges, Sq!=Sk"),
        _varlen(256, edges, True, label="edges"),
    ]
    return timed + (odd[:1] + odd[3:4] if quick else odd)


def _describe(c: Config) -> str:
    if c.get("varlen"):
        lens_q, lens_k = c["lens_q"], c["lens_k"]
        seq = f"{len(lens_q)} seqs, {sum(lens_q)} tokens, max {max(lens_q)}"
        if lens_k != lens_q:
            seq += f" / keys {sum(lens_k)} tokens, max {max(lens_k)}"
        heads = f"H{c['heads']}" + (f"/KV{c['kv_heads']}" if c["kv_heads"] != c["heads"] else "")
        kind = "causal" if c["causal"] else "full"
        extra = f" [{c['label']}]" if c["label"] else ""
        return f"varlen hd{c['head_dim']} {heads} {seq} {kind} {c['dtype']}{extra}"
    seq = f"S{c['seqlen_q']}" + (f"/Sk{c['seqlen_k']}" if c["seqlen_k"] != c["seqlen_q"] else "")
    heads = f"H{c['heads']}" + (f"/KV{c['kv_heads']}" if c["kv_heads"] != c["heads"] else "")
    kind = "causal" if c["causal"] else "full"
    extra = f" [{c['label']}]" if c["label"] else ""
    return f"hd{c['head_dim']} B{c['batch']} {heads} {seq} {kind} {c['dtype']}{extra}"


def _reference(q: Any, k: Any, v: Any, causal: bool, scale: float, heads: list[int]) -> Any:
    """float32 output and natural-log LSE of batch 0 for the given query heads."""
    import torch

    group = q.shape[1] // k.shape[1]
    outs, lses = [], []
    for h in heads:
        qh = q[0, h].float()
        kh = k[0, h // group].float()
        vh = v[0, h // group].float()
        o_rows, l_rows = [], []
        for r0 in range(0, qh.shape[0], 2048):
            s = (qh[r0 : r0 + 2048] @ kh.T) * scale
            if causal:
                rows = torch.arange(r0, r0 + s.shape[0], device=s.device)[:, None]
                cols = torch.arange(kh.shape[0], device=s.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            o_rows.append(torch.softmax(s, dim=-1) @ vh)
            l_rows.append(lse)
        outs.append(torch.cat(o_rows))
        lses.append(torch.cat(l_rows))
    return torch.stack(outs), torch.stack(lses)


def _sdpa_cudnn(q: Any, k: Any, v: Any, causal: bool, scale: float) -> Any:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    mask = None
    if causal and q.shape[2] != k.shape[2]:
        # SDPA's is_causal is top-left aligned, as ours; pass the mask explicitly so the
        # alignment is beyond doubt (cuDNN may refuse it: the error is then reported).
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()

    def run() -> Any:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            if mask is not None:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    return run


def inputs(c: Config) -> tuple[Any, Any, Any, float]:
    """Seeded CUDA query, key and value of a configuration, and its default scale (the
    backward check draws the same)."""
    import torch

    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[c["dtype"]]
    shapes = [
        (c["batch"], c["heads"], c["seqlen_q"], c["head_dim"]),
        (c["batch"], c["kv_heads"], c["seqlen_k"], c["head_dim"]),
        (c["batch"], c["kv_heads"], c["seqlen_k"], c["head_dim"]),
    ]
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype) for shape in shapes)
    return q, k, v, 1.0 / math.sqrt(c["head_dim"])


def run_one(c: Config, variants: list[str]) -> None:
    import torch
    import triton

    from xpuruntime.kernels.attention import hopper

    q, k, v, scale = inputs(c)
    b, h, d = c["batch"], c["heads"], c["head_dim"]
    sq, sk, causal = c["seqlen_q"], c["seqlen_k"], c["causal"]
    flops = 4.0 * b * h * sq * sk * d * (0.5 if causal else 1.0)
    names = variants or [hopper._variant(d, None, causal, sk)[0].name]  # the default
    ref_heads = sorted({0, h - 1})
    ref_o, ref_lse = _reference(q, k, v, causal, scale, ref_heads)

    peers: dict[str, Any] = {}
    cudnn_err = "n/a"
    try:
        cudnn = _sdpa_cudnn(q, k, v, causal, scale)
        o_c = cudnn()
        cudnn_err = f"{(o_c[0, ref_heads].float() - ref_o).abs().max().item():.2e}"
        peers["cudnn"] = cudnn
    except Exception as error:  # cuDNN refuses some shapes: say so and go on
        cudnn_err = f"unavailable ({type(error).__name__}: {str(error)[:80]})"
    try:
        from xpuruntime.kernels.attention import launch

        launch.forward(q, k, v, causal=causal, scale=scale, layout="bhsd")
        peers["xrt_flash"] = lambda: launch.forward(
            q, k, v, causal=causal, scale=scale, layout="bhsd"
        )
    except Exception as error:  # the Triton forward is optional here
        print(f"  xrt_flash unavailable: {type(error).__name__}: {str(error)[:120]}", flush=True)

    ours: dict[str, Any] = {}
    for name in names:
        try:
            o, lse = hopper.hopper_attention_forward(
                q, k, v, causal=causal, scale=scale, variant=name
            )
            torch.cuda.synchronize()
            o_err = (o[0, ref_heads].float() - ref_o).abs().max().item()
            finite = torch.isfinite(ref_lse)
            lse_err = (lse[0, ref_heads][finite] - ref_lse[finite]).abs().max().item()
            nan = bool(torch.isnan(o).any().item())
            print(
                f"  {name}: out max|err| {o_err:.2e} (cuDNN {cudnn_err}), lse max|err| "
                f"{lse_err:.2e}{'  NaN IN OUTPUT' if nan else ''}",
                flush=True,
            )
            ours[name] = lambda n=name: hopper.hopper_attention_forward(
                q, k, v, causal=causal, scale=scale, variant=n
            )
        except Exception as error:  # report the variant's failure, keep the others
            print(f"  {name}: FAILED {type(error).__name__}: {str(error)[:300]}", flush=True)

    if ours:
        _check_stream_and_out(q, k, v, causal, scale, next(iter(ours)))

    everyone = {**{f"gluon {n}": f for n, f in ours.items()}, **peers}
    times: dict[str, list[float]] = {n: [] for n in everyone}
    for _ in range(3):  # interleaved rounds: clocks and neighbours drift alike for all
        for name, fn in everyone.items():
            times[name].append(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))
    medians = {n: sorted(t)[len(t) // 2] for n, t in times.items()}
    base = medians.get("cudnn")
    flash = medians.get("xrt_flash")
    for name, ms in medians.items():
        tflops = flops / (ms * 1e-3) / 1e12
        ratios = ""
        if base and name != "cudnn":
            ratios += f"  vs cuDNN {base / ms:.2f}x"
        if flash and name.startswith("gluon"):
            ratios += f"  vs xrt_flash {flash / ms:.2f}x"
        print(f"  {name:>18}: {ms:8.3f} ms  {tflops:6.1f} TFLOP/s{ratios}", flush=True)


def _packed_inputs(c: Config) -> tuple[Any, ...]:
    """Seeded packed query, key and value and their int32 offsets."""
    import torch

    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[c["dtype"]]
    d = c["head_dim"]
    q = torch.randn(sum(c["lens_q"]), c["heads"], d, device="cuda", dtype=dtype)
    k = torch.randn(sum(c["lens_k"]), c["kv_heads"], d, device="cuda", dtype=dtype)
    v = torch.randn_like(k)
    cu_q, cu_k = (
        torch.tensor([0, *itertools.accumulate(c[key])], device="cuda", dtype=torch.int32)
        for key in ("lens_q", "lens_k")
    )
    return q, k, v, cu_q, cu_k


def _visible_pairs(c: Config) -> int:
    """(query, key) pairs the mask lets through (top-left causal: row i sees min(i + 1, Sk))."""
    if not c["causal"]:
        return sum(a * b for a, b in zip(c["lens_q"], c["lens_k"], strict=True))
    return sum(
        sum(min(i + 1, sk) for i in range(sq))
        for sq, sk in zip(c["lens_q"], c["lens_k"], strict=True)
    )


def run_varlen(c: Config, variants: list[str]) -> None:
    import torch
    import triton

    from xpuruntime.kernels.attention import hopper, launch

    q, k, v, cu_q, cu_k = _packed_inputs(c)
    lens_q, lens_k, causal, d = c["lens_q"], c["lens_k"], c["causal"], c["head_dim"]
    scale = 1.0 / math.sqrt(d)
    max_q, max_k = max(lens_q), max(lens_k)
    flops = 4.0 * c["heads"] * d * _visible_pairs(c)
    names = variants or [hopper._variant(d, None, causal, max_k, packed=True)[0].name]
    varlen = launch.Varlen(cu_q, cu_k, max_q, max_k)
    # The float32 reference of three sequences (the first, the longest, the last with rows),
    # first and last query heads; the layout (seq, heads, dim) per sequence.
    nonempty = [i for i, n in enumerate(lens_q) if n]
    picked = sorted({nonempty[0], max(nonempty, key=lambda i: lens_q[i]), nonempty[-1]})
    ref_heads = sorted({0, c["heads"] - 1})
    refs = []
    for i in picked:
        q0, q1, k0, k1 = (int(x) for x in (cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]))
        if k1 == k0:
            continue  # no key: zeros and -inf, checked against xrt_flash below
        seq = [x.transpose(0, 1).unsqueeze(0) for x in (q[q0:q1], k[k0:k1], v[k0:k1])]
        refs.append((q0, q1, *_reference(*seq, causal, scale, ref_heads)))

    want, want_lse, _ = launch.forward(
        q, k, v, causal=causal, scale=scale, layout="thd", varlen=varlen
    )
    peers: dict[str, Any] = {
        "xrt_flash": lambda: launch.forward(
            q, k, v, causal=causal, scale=scale, layout="thd", varlen=varlen
        )
    }
    if lens_q == lens_k:  # bottom-right and top-left causal agree only on square sequences
        try:
            from torch.nn.attention.varlen import varlen_attn

            def torch_varlen() -> Any:
                return varlen_attn(
                    q, k, v, cu_q, cu_k, max_q, max_k, scale=scale,
                    window_size=(-1, 0) if causal else (-1, -1), enable_gqa=True,
                )  # fmt: skip

            o_t = torch_varlen()
            err = (o_t.float() - want.float()).abs().max().item()
            print(f"  torch varlen_attn: max|diff| to xrt_flash {err:.2e}", flush=True)
            peers["torch varlen"] = torch_varlen
        except Exception as error:  # older PyTorch, or a shape it refuses
            print(f"  torch varlen_attn unavailable: {type(error).__name__}: {str(error)[:100]}")

    ours: dict[str, Any] = {}
    for name in names:
        try:
            o, lse = hopper.hopper_attention_forward(
                q, k, v, causal=causal, scale=scale, variant=name, cu_seqlens_q=cu_q,
                cu_seqlens_k=cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k,
            )  # fmt: skip
            torch.cuda.synchronize()
            o_err = lse_err = 0.0
            for q0, q1, ref_o, ref_lse in refs:
                got = o[q0:q1].transpose(0, 1)[ref_heads].float()
                o_err = max(o_err, (got - ref_o).abs().max().item())
                got_lse = lse[ref_heads, q0:q1]
                lse_err = max(lse_err, (got_lse - ref_lse).abs().max().item())
            flash_o = (o.float() - want.float()).abs().max().item()
            same_inf = torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
            finite = torch.isfinite(want_lse)
            flash_lse = (lse[finite] - want_lse[finite]).abs().max().item() if finite.any() else 0
            nan = bool(torch.isnan(o).any().item())
            print(
                f"  {name}: out max|err| {o_err:.2e}, lse {lse_err:.2e} (fp32 reference); "
                f"vs xrt_flash out {flash_o:.2e}, lse {flash_lse:.2e}"
                f"{'' if same_inf else '  -INF ROWS DIFFER'}{'  NaN IN OUTPUT' if nan else ''}",
                flush=True,
            )
            ours[name] = lambda n=name: hopper.hopper_attention_forward(
                q, k, v, causal=causal, scale=scale, variant=n, cu_seqlens_q=cu_q,
                cu_seqlens_k=cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k,
            )  # fmt: skip
        except Exception as error:  # report the variant's failure, keep the others
            print(f"  {name}: FAILED {type(error).__name__}: {str(error)[:300]}", flush=True)

    everyone = {**{f"gluon {n}": f for n, f in ours.items()}, **peers}
    times: dict[str, list[float]] = {n: [] for n in everyone}
    for _ in range(3):  # interleaved rounds
        for name, fn in everyone.items():
            times[name].append(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))
    medians = {n: sorted(t)[len(t) // 2] for n, t in times.items()}
    for name, ms in medians.items():
        ratios = "".join(
            f"  vs {peer} {medians[peer] / ms:.2f}x"
            for peer in ("torch varlen", "xrt_flash")
            if peer in medians and name.startswith("gluon")
        )
        tflops = flops / (ms * 1e-3) / 1e12
        print(f"  {name:>18}: {ms:8.3f} ms  {tflops:6.1f} TFLOP/s{ratios}", flush=True)


def _check_stream_and_out(q: Any, k: Any, v: Any, causal: bool, scale: float, name: str) -> None:
    """``stream=`` runs on that stream and leaves the current one; ``out=`` gets the output,
    written in place when TMA can address it (a (batch, seq, heads, dim) buffer) and through
    a copy when not (a view with a 2-element pad on every row: strides not 16-byte aligned).
    Both must match the plain call bit for bit (the same kernel on the same inputs)."""
    import torch

    from xpuruntime.kernels.attention import hopper

    want, want_lse = hopper.hopper_attention_forward(
        q, k, v, causal=causal, scale=scale, variant=name
    )
    side = torch.cuda.Stream()
    before = torch.cuda.current_stream()
    b, h, s, d = q.shape
    direct = torch.empty(b, s, h, d, dtype=q.dtype, device=q.device).transpose(1, 2)
    padded = torch.empty(b, h, s, d + 2, dtype=q.dtype, device=q.device)[..., :d]
    problems = []
    side.wait_stream(before)
    for label, buf in (("TMA-ready out", direct), ("unaligned out", padded)):
        got, lse = hopper.hopper_attention_forward(
            q, k, v, causal=causal, scale=scale, variant=name, stream=side.cuda_stream, out=buf
        )
        if got is not buf:
            problems.append(f"{label}: not returned")
        if torch.cuda.current_stream() != before:
            problems.append(f"{label}: current stream changed")
        side.synchronize()
        if not torch.equal(buf, want) or not torch.equal(lse, want_lse):
            problems.append(f"{label}: differs from the plain call")
    print(f"  {name}: stream= and out= {'FAILED: ' + '; '.join(problems) if problems else 'ok'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a handful of configurations")
    parser.add_argument(
        "--variants",
        default=os.environ.get("XPURUNTIME_HOPPER_ATTENTION_VARIANT", ""),
        help="comma-separated variants to run (all: every candidate of the head size); "
        "default: the head size's default",
    )
    parser.add_argument(
        "--batches",
        default="dense,varlen",
        help="dense batches and/or varlen (packed sequences, cu_seqlens)",
    )
    parser.add_argument("--head-dims", default="", help="only these head sizes (e.g. 64)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per configuration")
    parser.add_argument("--in-process", action="store_true", help="no subprocess per config")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: JSON of one config
    args = parser.parse_args()
    for path in (SRC, POLICIES_SRC):
        sys.path.insert(0, str(path))

    if args.one:
        config = json.loads(args.one)
        run = run_varlen if config.get("varlen") else run_one
        run(config, _variants(args.variants, config["head_dim"]))
        return 0

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    failures = 0
    batches = args.batches.split(",")
    chosen = (configs(args.quick) if "dense" in batches else []) + (
        varlen_configs(args.quick) if "varlen" in batches else []
    )
    if args.head_dims:
        keep = {int(h) for h in args.head_dims.split(",")}
        chosen = [c for c in chosen if c["head_dim"] in keep]
    for config in chosen:
        print(_describe(config), flush=True)
        start = time.time()
        if args.in_process:
            try:
                run = run_varlen if config.get("varlen") else run_one
                run(config, _variants(args.variants, config["head_dim"]))
            except Exception as error:  # one configuration's failure must not end the run
                failures += 1
                print(f"  FAILED {type(error).__name__}: {str(error)[:400]}", flush=True)
            continue
        command = [
            sys.executable,
            __file__,
            "--one",
            json.dumps(config),
            "--variants",
            args.variants,
        ]
        try:
            result = subprocess.run(command, timeout=args.timeout, text=True, capture_output=True)
        except subprocess.TimeoutExpired as expired:
            failures += 1
            out = expired.stdout if isinstance(expired.stdout, str) else ""
            print(out.rstrip())
            print(f"  TIMEOUT after {args.timeout} s (a hang?): config abandoned", flush=True)
            continue
        print(result.stdout.rstrip(), flush=True)
        if result.returncode != 0:
            failures += 1
            tail = "\n    ".join(result.stderr.strip().splitlines()[-8:])
            print(f"  FAILED (exit {result.returncode}):\n    {tail}", flush=True)
        print(f"  ({time.time() - start:.0f} s)", flush=True)
    print(f"done: {failures} configuration(s) failed or timed out")
    return 1 if failures else 0


def _variants(spec: str, head_dim: int) -> list[str]:
    from xpuruntime.kernels.attention import hopper

    if not spec:
        return []
    if spec == "all":
        return list(hopper.variant_names(head_dim))
    return [name for name in spec.split(",") if name]


if __name__ == "__main__":
    sys.exit(main())
