"""xpuruntime's attention kernels (xrt_flash) against PyTorch's SDPA backends on one GPU.

    python benchmarks/attention_bench.py [--quick] [--tune] [--out DIR] [--no-efficient]
        [--seqlens 512,1024]

FlashAttention papers' setup: bf16, 16k tokens per batch (batch = 16384 / seqlen), hidden
size 2048 (16 heads of 128, 32 of 64), seqlen 512 .. 16k, full and causal. For each case it
times the forward and the backward of xrt_flash, cuDNN SDPA, SDPA FlashAttention-2 and SDPA
memory-efficient attention (CUDA events around 16 back-to-back calls, median of 7 samples, the
implementations' samples interleaved in an order that rotates each round) and
reports TFLOP/s with FlashAttention's FLOP count (forward 4·B·H·S²·D, halved when causal;
backward 2.5x the forward), the ratios ours/cuDNN and ours/flash, and, for seqlen <= 2048,
the max/mean |error| of outputs and gradients against a float32 reference (first batch
element) for xrt_flash and FlashAttention-2.

Every case runs each implementation once before timing (xrt_flash compiles its Triton kernels
on first use: the "compile" column is that first call). xrt_flash runs its fixed tile
configuration unless --tune (then each case's candidates are timed once and the fastest
kept; the chosen tiles are in the JSON). Prints a table and writes attention_bench.json to
--out. The whole run takes about 3-4 minutes on an H100 (--quick: about 1).

On sm_90 it also times xrt_flash_hopper (the Gluon forward and backward) and prints its table
against cuDNN. Targets (issue 13, H100 bf16): forward >= 1.0x cuDNN and >= 1.6x FlashAttention-2 at head
size 128, seqlen >= 2048; backward >= 1.2x FlashAttention-2.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from _interleaved import interleaved_medians
from torch.nn.attention import SDPBackend, sdpa_kernel

import xpuruntime.ops as ops
from xpuruntime.kernels.attention import launch
from xpuruntime.policies import KernelPolicy

TOKENS = 16384
HIDDEN = 2048
PIN = KernelPolicy(attention="xrt_flash")
#: xpuruntime's Hopper kernels (sm_90 only): the Gluon forward and backward.
HOPPER_PIN = KernelPolicy(attention="xrt_flash_hopper")
OURS = {"xrt_flash": PIN, "xrt_flash_hopper": HOPPER_PIN}
SDPA_BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


#: Calls per timed sample: each sample starts on an idle GPU, which waits for the first
#: call's host work; with 4 calls that start-up was 5-7% of a short Triton/Gluon case on the
#: H100, whose Python launchers then took 0.1-0.2 ms a call.
CALLS = 16


def _flops(batch: int, heads: int, seq: int, dim: int, causal: bool) -> float:
    forward = 4.0 * batch * heads * seq * seq * dim
    return forward / 2 if causal else forward


def _detail() -> str:
    decision = ops.last_decision()
    return decision.detail if decision is not None else ""


class _Ours:
    def __init__(
        self, q: Any, k: Any, v: Any, causal: bool, policy: KernelPolicy, do: Any = None
    ) -> None:
        self.q, self.k, self.v, self.causal, self.policy = q, k, v, causal, policy
        self.out, self.lse = ops.attention(
            q, k, v, causal=causal, layout="bhsd", return_lse=True, policy=policy
        )
        self.forward_detail = _detail()
        # One output gradient for every implementation: the errors compare against one reference.
        self.do = torch.randn_like(self.out) if do is None else do

    def forward(self) -> Any:
        return ops.attention(
            self.q, self.k, self.v, causal=self.causal, layout="bhsd", policy=self.policy
        )

    def backward(self) -> Any:
        return ops.attention_backward(
            self.do, self.q, self.k, self.v, self.out, self.lse, causal=self.causal,
            layout="bhsd", policy=self.policy,
        )  # fmt: skip

    def results(self) -> tuple[Any, ...]:
        return (self.out, *self.backward())


class _Sdpa:
    def __init__(self, backend: SDPBackend, q: Any, k: Any, v: Any, causal: bool, do: Any) -> None:
        self.backend, self.causal = backend, causal
        self.leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        self.do = do
        with sdpa_kernel([backend]):
            self.out = F.scaled_dot_product_attention(*self.leaves, is_causal=causal)

    def forward(self) -> Any:
        with torch.no_grad(), sdpa_kernel([self.backend]):
            return F.scaled_dot_product_attention(*self.leaves, is_causal=self.causal)

    def backward(self) -> Any:
        return torch.autograd.grad(self.out, self.leaves, self.do, retain_graph=True)

    def results(self) -> tuple[Any, ...]:
        return (self.out.detach(), *self.backward())


def _reference(q: Any, k: Any, v: Any, causal: bool, do: Any) -> tuple[Any, ...]:
    """float32 output and gradients of the first batch element."""
    leaves = [t[:1].detach().float().requires_grad_() for t in (q, k, v)]
    scores = leaves[0] @ leaves[1].transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    out = torch.softmax(scores, -1) @ leaves[2]
    return (out.detach(), *torch.autograd.grad(out, leaves, do[:1].float()))


def _errors(results: tuple[Any, ...], ref: tuple[Any, ...]) -> dict[str, list[float]]:
    names = ("out", "dq", "dk", "dv")
    return {
        name: [
            (got[:1].float() - want).abs().max().item(),
            (got[:1].float() - want).abs().mean().item(),
        ]
        for name, got, want in zip(names, results, ref, strict=True)
    }


def bench_case(seq: int, dim: int, causal: bool, repeats: int, impls: list[str]) -> dict[str, Any]:
    batch, heads = TOKENS // seq, HIDDEN // dim
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(batch, heads, seq, dim, device="cuda", generator=gen, dtype=torch.bfloat16)
        for _ in range(3)
    )
    flops = _flops(batch, heads, seq, dim, causal)
    row: dict[str, Any] = {
        "seqlen": seq,
        "head_dim": dim,
        "causal": causal,
        "batch": batch,
        "heads": heads,
    }
    runners: dict[str, Any] = {}
    start = time.perf_counter()
    runners["xrt_flash"] = ours = _Ours(q, k, v, causal, PIN)
    ours.backward()
    torch.cuda.synchronize()
    row["xrt_flash_first_call_s"] = round(time.perf_counter() - start, 2)
    row["xrt_flash_tiles"] = {"forward": ours.forward_detail, "backward": _detail()}
    if torch.cuda.get_device_capability() == (9, 0):
        runners["xrt_flash_hopper"] = hopper = _Ours(q, k, v, causal, HOPPER_PIN, ours.do)
        hopper.backward()
        row["xrt_flash_hopper_kernels"] = {"forward": hopper.forward_detail, "backward": _detail()}
    for name in impls:
        try:
            runners[name] = _Sdpa(SDPA_BACKENDS[name], q, k, v, causal, runners["xrt_flash"].do)
            runners[name].backward()
        except RuntimeError as error:
            row[f"{name}_error"] = str(error).splitlines()[0]
    forward = interleaved_medians({n: r.forward for n, r in runners.items()}, repeats, CALLS)
    backward = interleaved_medians({n: r.backward for n, r in runners.items()}, repeats, CALLS)
    for name in runners:
        fwd_ms, bwd_ms = forward[name], backward[name]
        row[name] = {
            "fwd_ms": round(fwd_ms, 4),
            "bwd_ms": round(bwd_ms, 4),
            "fwd_tflops": round(flops / fwd_ms / 1e9, 1),
            "bwd_tflops": round(2.5 * flops / bwd_ms / 1e9, 1),
        }
    for ours_name in OURS:
        if ours_name not in row:
            continue
        mine = row[ours_name]
        prefix = "" if ours_name == "xrt_flash" else "hopper_"
        for peer in ("cudnn", "flash", "efficient"):
            if peer in row:
                ratio = mine["fwd_tflops"] / row[peer]["fwd_tflops"]
                row[f"{prefix}fwd_vs_{peer}"] = round(ratio, 3)
                row[f"{prefix}bwd_vs_{peer}"] = round(
                    mine["bwd_tflops"] / row[peer]["bwd_tflops"], 3
                )
    if seq <= 2048:
        ref = _reference(q, k, v, causal, ours.do)
        row["errors"] = {
            name: _errors(runners[name].results(), ref)
            for name in ("xrt_flash", "xrt_flash_hopper", "cudnn", "flash")
            if name in runners
        }
    del runners
    torch.cuda.empty_cache()
    return row


def _environment() -> dict[str, Any]:
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "triton": triton.__version__,
        "tuning": launch._tuning,
    }


def _print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'hd':>3} {'S':>6} {'causal':>6} | {'fwd TFLOP/s: xrt':>16} {'cudnn':>6} {'flash':>6} {'eff':>6}"
        f" {'/cudnn':>6} {'/flash':>6} | {'bwd: xrt':>8} {'cudnn':>6} {'flash':>6} {'eff':>6}"
        f" {'/flash':>6} | {'out err xrt/flash (max)':>24} | {'first':>5}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:

        def t(name: str, key: str, r: dict[str, Any] = r) -> str:
            return f"{r[name][key]:.0f}" if name in r else "-"

        err = "-"
        if "errors" in r and "flash" in r["errors"]:
            err = f"{r['errors']['xrt_flash']['out'][0]:.2e}/{r['errors']['flash']['out'][0]:.2e}"
        print(
            f"{r['head_dim']:>3} {r['seqlen']:>6} {'yes' if r['causal'] else 'no':>6} | "
            f"{t('xrt_flash', 'fwd_tflops'):>16} {t('cudnn', 'fwd_tflops'):>6} {t('flash', 'fwd_tflops'):>6} "
            f"{t('efficient', 'fwd_tflops'):>6} {r.get('fwd_vs_cudnn', '-'):>6} {r.get('fwd_vs_flash', '-'):>6} | "
            f"{t('xrt_flash', 'bwd_tflops'):>8} {t('cudnn', 'bwd_tflops'):>6} {t('flash', 'bwd_tflops'):>6} "
            f"{t('efficient', 'bwd_tflops'):>6} {r.get('bwd_vs_flash', '-'):>6} | {err:>24} | "
            f"{r['xrt_flash_first_call_s']:>5}"
        )


def _print_hopper_table(rows: list[dict[str, Any]]) -> None:
    """xrt_flash_hopper against cuDNN (sm_90 only): TFLOP/s, ratios, max |error| of the output
    and dq against the float32 reference beside cuDNN's."""
    rows = [r for r in rows if "xrt_flash_hopper" in r]
    if not rows:
        return
    head = (
        f"{'hd':>3} {'S':>6} {'causal':>6} | {'fwd: hopper':>11} {'cudnn':>6} {'/cudnn':>6} | "
        f"{'bwd: hopper':>11} {'cudnn':>6} {'/cudnn':>6} | {'max err out, dq: hopper / cudnn':>36}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        mine, peer = r["xrt_flash_hopper"], r.get("cudnn", {})
        err = "-"
        errors = r.get("errors", {})
        if "xrt_flash_hopper" in errors and "cudnn" in errors:
            ours, theirs = errors["xrt_flash_hopper"], errors["cudnn"]
            err = (
                f"{ours['out'][0]:.1e} {ours['dq'][0]:.1e} / "
                f"{theirs['out'][0]:.1e} {theirs['dq'][0]:.1e}"
            )
        print(
            f"{r['head_dim']:>3} {r['seqlen']:>6} {'yes' if r['causal'] else 'no':>6} | "
            f"{mine['fwd_tflops']:>11.0f} {peer.get('fwd_tflops', 0):>6.0f} "
            f"{r.get('hopper_fwd_vs_cudnn', '-'):>6} | {mine['bwd_tflops']:>11.0f} "
            f"{peer.get('bwd_tflops', 0):>6.0f} {r.get('hopper_bwd_vs_cudnn', '-'):>6} | {err:>36}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seqlen 2k and 8k only")
    parser.add_argument("--tune", action="store_true", help="time every tile candidate per case")
    parser.add_argument("--no-efficient", action="store_true", help="skip memory-efficient SDPA")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seqlens", default="", help="only these (comma-separated)")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("attention_bench needs a CUDA GPU")
    launch.set_tuning(args.tune)
    seqs = [2048, 8192] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    if args.seqlens:
        seqs = [int(x) for x in args.seqlens.split(",")]
    impls = ["cudnn", "flash"] + ([] if args.no_efficient else ["efficient"])
    env = _environment()
    print(json.dumps(env))
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "attention_bench.json"

    def save() -> None:  # after every case: a run cut short keeps what it measured
        wall = round(time.perf_counter() - started, 1)
        path.write_text(json.dumps({"environment": env, "cases": rows, "wall_s": wall}, indent=1))

    for dim in (64, 128):
        for causal in (False, True):
            for seq in seqs:
                rows.append(bench_case(seq, dim, causal, args.repeats, impls))
                save()
                print(
                    f"  hd{dim} S{seq} {'causal' if causal else 'full'}: done ({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
    _print_table(rows)
    _print_hopper_table(rows)
    print(f"wrote {path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
