"""xrt_flash_fp8 (float8 e4m3 forward) against our fastest bf16 forward, cuDNN SDPA and SDPA-flash.

    python benchmarks/attention_fp8_bench.py [--quick] [--sweep] [--graphs] [--out DIR]
    python benchmarks/attention_fp8_bench.py --sanitize-calls   # tiny calls for compute-sanitizer
    python benchmarks/attention_fp8_bench.py --profile-calls    # the fp8 kernels and cuDNN

The grid of benchmarks/attention_bench.py (bf16, 16k tokens per batch, hidden 2048: 16 heads
of 128 or 32 of 64), forward only. For each case every implementation is timed in the same
process, interleaved: each round runs one sample of each (CUDA events around 4 back-to-back
calls), in an order that rotates each round, and the median over 9 rounds is kept. Implementations:

- ``cudnn``, ``flash``: SDPA's cuDNN and FlashAttention-2 backends (bf16);
- ``xrt``: our own fastest bf16 forward on this GPU: ``xrt_flash_hopper`` (Gluon) on an
  H100/H200, else xrt_flash's Triton forward with its default tiles;
- ``fp8``: the fp8 kernel on inputs quantized beforehand (what an fp8 KV cache feeds it):
  the Gluon Hopper kernel on an H100/H200 (``fp8.forward`` picks it), else the Triton one;
- ``fp8 triton`` (H100/H200 only): the Triton fp8 kernel on the same inputs, for comparison;
- ``fp8+q``: quantization of the bf16 inputs plus the fp8 kernel (``ops.attention`` under
  ``KernelPolicy(attention="xrt_flash_fp8")`` runs exactly these launches);
- ``e4m3``: the fp8 kernel on e4m3 query, key and value with one descale factor each
  (``fp8.from_fp8``, FlashAttention-3's inputs): the kernel alone, nothing quantized inside;
- ``cudnn fp8``: cuDNN's own fp8 forward on the same e4m3 tensors and descales
  (``_cudnn_fp8``, the cuDNN frontend's ``sdpa_fp8``; e4m3 output on Hopper): the fp8 peer.
  It needs ``pip install nvidia-cudnn-frontend``; without it the column reads ``-`` and the
  JSON says why;
- with ``--sweep``, ``fp8[i]``: every Triton fp8 tile candidate i, and on an H100/H200
  ``fp8 <variant>``: every Gluon fp8 variant, to order the candidates.

With ``--graphs`` each case also times ``xrt``, ``fp8``, ``e4m3`` and ``cudnn fp8`` as
CUDA-graph replays of 8 calls (the kernels alone, without the host time that each eager
sample's first call adds), interleaved the same way; a column whose calls cannot be
captured reads ``-`` and the JSON says why.

TFLOP/s use FlashAttention's count (4·B·H·S²·D, halved when causal). Errors (seqlen <= 4096,
first batch element) against a float32 reference of the same bf16 inputs: relative Frobenius
norm ‖out − ref‖ / ‖ref‖ and max |out − ref|. Then the host time of a call beside its GPU
time (``fp8``, ``quantize`` and ``xrt`` at hd128, 4096 keys, causal): where the host's is
longer, eager calls are host-bound. Prints a table; writes attention_fp8_bench.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _cudnn_fp8
import torch
import torch.nn.functional as F
from _attention_reference import errors, reference
from _interleaved import graph_replay, interleaved_medians, sample_ms
from torch.nn.attention import SDPBackend, sdpa_kernel

import xpuruntime.ops as ops
from xpuruntime.kernels.attention import fp8, hopper, launch
from xpuruntime.kernels.attention.tiles import fp8_candidates
from xpuruntime.policies import KernelPolicy

TOKENS = 16384
HIDDEN = 2048
FP8_POLICY = KernelPolicy(attention="xrt_flash_fp8")


def _warmed_medians(impls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    for fn in impls.values():  # compile / build plans outside the samples
        fn()
        fn()
    torch.cuda.synchronize()
    return interleaved_medians(impls, rounds, calls=4)


def _sdpa(backend: SDPBackend, q: Any, k: Any, v: Any, causal: bool) -> Any:
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _bf16(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """Our own fastest bf16 forward here (the Hopper kernel on sm_90)."""
    if HOPPER:
        return launch.hopper_forward(q, k, v, causal=causal, scale=None, layout="bhsd")[0]
    return launch.forward(q, k, v, causal=causal, scale=None, layout="bhsd")[0]


@contextlib.contextmanager
def _fp8_variant(name: str) -> Any:
    """The Gluon fp8 kernel's variant for the calls inside."""
    before = os.environ.get(hopper.FP8_VARIANT_ENV)
    os.environ[hopper.FP8_VARIANT_ENV] = name
    try:
        yield
    finally:
        if before is None:
            del os.environ[hopper.FP8_VARIANT_ENV]
        else:
            os.environ[hopper.FP8_VARIANT_ENV] = before


#: The implementations ``--graphs`` times as CUDA-graph replays.
GRAPHED = ("xrt", "fp8", "e4m3", "cudnn fp8")
#: Calls a replay holds.
GRAPH_CALLS = 8


def _graph_medians(
    impls: dict[str, Callable[[], Any]], rounds: int
) -> tuple[dict[str, float], dict[str, str]]:
    """Milliseconds a call of each of :data:`GRAPHED` in ``impls`` as CUDA-graph replays of
    :data:`GRAPH_CALLS` calls, interleaved; and why an implementation was not captured."""
    replays: dict[str, Callable[[], Any]] = {}
    failed: dict[str, str] = {}
    for name in GRAPHED:
        if name not in impls:
            continue
        try:
            replays[name] = graph_replay(impls[name], GRAPH_CALLS)
        except Exception as error:  # a library call that a graph cannot capture
            failed[name] = f"{type(error).__name__}: {error}"
    ms = interleaved_medians(replays, rounds, calls=1) if replays else {}
    return {name: t / GRAPH_CALLS for name, t in ms.items()}, failed


def case(
    dim: int, seqlen: int, causal: bool, sweep: bool, rounds: int, graphs: bool = False
) -> dict[str, Any]:
    batch, heads = TOKENS // seqlen, HIDDEN // dim
    q, k, v = (
        torch.randn(batch, heads, seqlen, dim, device="cuda", dtype=torch.bfloat16)
        for _ in range(3)
    )
    qz = fp8.quantize(q, k, v, layout="bhsd")
    tensors8, descales = _per_tensor_e4m3_tensors(q, k, v)
    e4m3 = fp8.from_fp8(*tensors8, descales, layout="bhsd")
    triton_tiles = fp8_candidates(dim, torch.cuda.get_device_capability())[0]
    # The Triton kernel's inputs: the value in its key order (no reordering copy per call).
    qz_triton = fp8.quantize(q, k, v, layout="bhsd", key_order="sequential")
    impls: dict[str, Callable[[], Any]] = {
        "cudnn": lambda: _sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal),
        "flash": lambda: _sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal),
        "xrt": lambda: _bf16(q, k, v, causal),
        "fp8": lambda: fp8.forward(qz, causal=causal, scale=None, layout="bhsd")[0],
        "e4m3": lambda: fp8.forward(e4m3, causal=causal, scale=None, layout="bhsd")[0],
        "quant": lambda: fp8.quantize(q, k, v, layout="bhsd"),
        "fp8+q": lambda: fp8.forward(
            fp8.quantize(q, k, v, layout="bhsd"), causal=causal, scale=None, layout="bhsd"
        )[0],
    }
    if not CUDNN_FP8_UNAVAILABLE:
        impls["cudnn fp8"] = _cudnn_fp8.sdpa_fp8(*tensors8, descales, causal)
    if HOPPER:
        impls["fp8 triton"] = lambda: fp8.forward(
            qz_triton, causal=causal, scale=None, layout="bhsd", tiles=triton_tiles
        )[0]
    compiled: dict[str, str] = {}
    if sweep and HOPPER and dim in hopper.FP8_HEAD_DIMS:
        for name in hopper.variant_names(dim, fp8=True):

            def run(name: str = name) -> Any:
                with _fp8_variant(name):
                    return fp8.forward(qz, causal=causal, scale=None, layout="bhsd")[0]

            try:
                with _fp8_variant(name):
                    detail = fp8.forward(qz, causal=causal, scale=None, layout="bhsd")[2]
            except Exception as error:  # a variant that does not compile or fit
                compiled[f"fp8 {name}"] = f"{type(error).__name__}: {error}"
                continue
            if not detail.startswith(fp8.HOPPER_DETAIL):  # the Triton kernel took the call
                compiled[f"fp8 {name}"] = detail
                continue
            compiled[f"fp8 {name}"] = name
            impls[f"fp8 {name}"] = run
    if sweep:
        for i, tiles in enumerate(fp8_candidates(dim, torch.cuda.get_device_capability())):
            try:
                fp8.forward(qz_triton, causal=causal, scale=None, layout="bhsd", tiles=tiles)
            except Exception as error:  # a candidate that does not fit this GPU
                compiled[f"fp8[{i}]"] = f"{tiles.describe()}: {type(error).__name__}"
                continue
            compiled[f"fp8[{i}]"] = tiles.describe()
            impls[f"fp8[{i}]"] = lambda t=tiles: fp8.forward(  # type: ignore[misc]
                qz_triton, causal=causal, scale=None, layout="bhsd", tiles=t
            )[0]
    ms = _warmed_medians(impls, rounds)
    flops = 4 * batch * heads * seqlen * seqlen * dim / (2 if causal else 1)
    row: dict[str, Any] = {
        "head_dim": dim,
        "seqlen": seqlen,
        "causal": causal,
        "batch": batch,
        "heads": heads,
        "ms": ms,
        "tflops": {name: flops / t / 1e9 for name, t in ms.items()},
        "fp8_detail": fp8.forward(qz, causal=causal, scale=None, layout="bhsd")[2],
        "sweep": compiled,
    }
    if graphs:
        graph_ms, not_captured = _graph_medians(impls, rounds)
        row["graph_ms"] = graph_ms
        row["graph_tflops"] = {name: flops / t / 1e9 for name, t in graph_ms.items()}
        row["not_captured"] = not_captured
    if seqlen <= 4096:
        first = (q[:1], k[:1], v[:1])
        ref = reference(*first, causal)
        outs = {
            "cudnn": _sdpa(SDPBackend.CUDNN_ATTENTION, *first, causal),
            "flash": _sdpa(SDPBackend.FLASH_ATTENTION, *first, causal),
            "xrt": _bf16(*first, causal),
            "fp8": ops.attention(*first, causal=causal, layout="bhsd", policy=FP8_POLICY),
            "fp8_triton": fp8.forward(
                fp8.quantize(*first, layout="bhsd"),
                causal=causal,
                scale=None,
                layout="bhsd",
                tiles=triton_tiles,
            )[0],
            "e4m3": fp8.forward(_per_tensor_e4m3(*first), causal=causal, scale=None, layout="bhsd")[
                0
            ],
            **_cudnn_fp8_output(first, causal),
            "bf16_rounded_reference": ref.to(torch.bfloat16),
        }
        row["errors"] = {name: errors(out, ref) for name, out in outs.items()}
    return row


def _per_tensor_e4m3_tensors(
    q: Any, k: Any, v: Any
) -> tuple[tuple[Any, Any, Any], tuple[Any, Any, Any]]:
    """e4m3 copies of q, k, v and their descale factors, one each (FlashAttention-3's inputs)."""
    quantized, descales = [], []
    for x in (q, k, v):
        d = (x.float().abs().amax() / 448).reshape(1)
        quantized.append((x.float() / d).to(fp8.FP8))
        descales.append(d)
    return (quantized[0], quantized[1], quantized[2]), (descales[0], descales[1], descales[2])


def _per_tensor_e4m3(q: Any, k: Any, v: Any) -> fp8.Quantized:
    """The e4m3 copies of :func:`_per_tensor_e4m3_tensors` as the fp8 kernel takes them."""
    (q8, k8, v8), descales = _per_tensor_e4m3_tensors(q, k, v)
    return fp8.from_fp8(q8, k8, v8, descales, layout="bhsd")


#: Why cuDNN's fp8 forward is not timed here ("" where it is).
CUDNN_FP8_UNAVAILABLE = _cudnn_fp8.unavailable()


def _cudnn_fp8_output(inputs: tuple[Any, Any, Any], causal: bool) -> dict[str, Any]:
    """cuDNN's fp8 output on the per-tensor e4m3 copies of ``inputs``, for the errors (none
    where it cannot run)."""
    if CUDNN_FP8_UNAVAILABLE:
        return {}
    tensors8, descales = _per_tensor_e4m3_tensors(*inputs)
    return {"cudnn_fp8": _cudnn_fp8.sdpa_fp8(*tensors8, descales, causal)().float()}


def fp8_inputs_check() -> dict[str, Any]:
    """e4m3 inputs with per-tensor descale factors (FlashAttention-3's convention) through
    ``fp8.from_fp8``, against the float32 reference of the dequantized tensors."""
    q, k, v = (torch.randn(2, 8, 1024, 128, device="cuda") * 3 for _ in range(3))
    quantized, descales = [], []
    for x in (q, k, v):
        d = (x.abs().amax() / 448).reshape(1)
        quantized.append((x / d).to(fp8.FP8))
        descales.append(d.float())
    q8, k8, v8 = quantized
    z = fp8.from_fp8(q8, k8, v8, (descales[0], descales[1], descales[2]), layout="bhsd")
    out, _, detail = fp8.forward(z, causal=True, scale=None, layout="bhsd")
    qr, kr, vr = (x8.float() * d for x8, d in zip(quantized, descales, strict=True))
    return {"detail": detail, **errors(out, reference(qr, kr, vr, True))}


def quant_breakdown() -> dict[str, Any]:
    """Milliseconds of each quantization step (the key with the value's channel maxima, then
    the whole of ``fp8.quantize``) at two shapes of 33.5M elements per tensor, beside a
    device-to-device copy of one bf16 tensor (the bandwidth yardstick)."""
    from xpuruntime.kernels.attention.fp8 import _quantize_key
    from xpuruntime.kernels.attention.launch import _geometry

    rows = {}
    for batch, heads, seqlen, dim in ((16, 32, 1024, 64), (1, 16, 16384, 128)):
        x = torch.randn(batch, heads, seqlen, dim, device="cuda", dtype=torch.bfloat16)
        copy = torch.empty_like(x)
        g = _geometry(x, x, "bhsd", None)
        steps: dict[str, Callable[[], Any]] = {
            "copy": lambda: copy.copy_(x),  # noqa: B023
            "key+value_max": lambda: _quantize_key(x, x, "bhsd", None, g, 128),  # noqa: B023
            "quantize": lambda: fp8.quantize(x, x, x, layout="bhsd"),  # noqa: B023
        }
        rows[f"B{batch} H{heads} S{seqlen} D{dim}"] = _warmed_medians(steps, 9)
    return rows


def host_times() -> dict[str, dict[str, float]]:
    """Host and GPU milliseconds per call at hd128, 4096 keys, causal (batch 4, 16 heads):
    host, the best of 5 samples of 50 calls issued back to back from an idle GPU (a call's
    Python and launch work); GPU, CUDA-graph replays of 8 calls (its kernels alone)."""
    seqlen, dim = 4096, 128
    q, k, v = (
        torch.randn(TOKENS // seqlen, HIDDEN // dim, seqlen, dim, device="cuda").bfloat16()
        for _ in range(3)
    )
    qz = fp8.quantize(q, k, v, layout="bhsd")
    calls: dict[str, Callable[[], Any]] = {
        "fp8": lambda: fp8.forward(qz, causal=True, scale=None, layout="bhsd"),
        "quantize": lambda: fp8.quantize(q, k, v, layout="bhsd"),
        "xrt": lambda: _bf16(q, k, v, True),
    }
    rows = {}
    for name, fn in calls.items():
        fn()
        torch.cuda.synchronize()
        host = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(50):
                fn()
            host.append((time.perf_counter() - start) / 50 * 1e3)
            torch.cuda.synchronize()
        rows[name] = {"host_ms": min(host), "gpu_ms": sample_ms(graph_replay(fn, 8), 5) / 8}
    return rows


def sanitize_calls() -> None:
    """Tiny calls over the fp8 kernels' edge cases for compute-sanitizer: partial last
    blocks (and key groups), the causal diagonal, GQA/MQA, every Triton tile candidate and
    Gluon variant, packed sequences with an empty one, e4m3 inputs."""
    capability = torch.cuda.get_device_capability()
    for causal in (False, True):
        for heads, kv_heads, seq, dim in (
            (4, 4, 200, 64),
            (4, 1, 130, 128),
            (2, 2, 2, 128),
            (2, 2, 1, 128),
            (2, 2, 70, 256),
        ):
            q = torch.randn(2, heads, seq, dim, device="cuda", dtype=torch.bfloat16)
            k, v = (
                torch.randn(2, kv_heads, seq, dim, device="cuda", dtype=torch.bfloat16)
                for _ in range(2)
            )
            qz = fp8.quantize(q, k, v, layout="bhsd")
            for tiles in fp8_candidates(dim, capability):
                try:
                    out, _, _ = fp8.forward(
                        qz, causal=causal, scale=None, layout="bhsd", tiles=tiles
                    )
                except Exception as error:
                    print(f"skipped: hd{dim} {tiles.describe()}: {error!r:.200}")
                    continue
                assert torch.isfinite(out).all()
            if HOPPER and dim in hopper.FP8_HEAD_DIMS:  # every Gluon variant too
                for name in hopper.variant_names(dim, fp8=True):
                    with _fp8_variant(name):
                        out, _, detail = fp8.forward(qz, causal=causal, scale=None, layout="bhsd")
                    assert detail.startswith(fp8.HOPPER_DETAIL), detail
                    assert torch.isfinite(out).all()
        lengths = [70, 0, 129, 1]
        cu = torch.tensor(
            [0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda"
        )
        q = torch.randn(sum(lengths), 4, 64, device="cuda", dtype=torch.float16)
        k, v = (
            torch.randn(sum(lengths), 2, 64, device="cuda", dtype=torch.float16) for _ in range(2)
        )
        out = ops.attention(
            q, k, v, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu, policy=FP8_POLICY
        )
        assert torch.isfinite(out).all()
    fp8_inputs_check()
    torch.cuda.synchronize()
    print("attention_fp8 sanitize calls: all finished")


def profile_calls() -> None:
    """The fp8 forwards (the Triton kernel, and on an H100/H200 the Gluon one and our bf16
    Hopper forward beside it) and one cuDNN forward between cudaProfilerStart/Stop: hd128,
    8192 keys, batch 2, 16 heads, full attention, each run once before the profiled
    range."""
    q, k, v = (torch.randn(2, 16, 8192, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qz = fp8.quantize(q, k, v, layout="bhsd", key_order="sequential")
    calls: list[Callable[[], Any]] = [
        lambda: fp8.forward(qz, causal=False, scale=None, layout="bhsd")[0],
        lambda: _sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, False),
    ]
    if HOPPER:
        qz_gluon = fp8.quantize(q, k, v, layout="bhsd")
        calls.append(lambda: fp8.forward(qz_gluon, causal=False, scale=None, layout="bhsd")[0])
        calls.append(lambda: _bf16(q, k, v, False))
    for fn in calls:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for fn in calls:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def _graph_line(row: dict[str, Any]) -> str:
    """A case's kernels-alone TFLOP/s, with each one's ratio to our bf16 forward's."""
    t, ms = row["graph_tflops"], row["graph_ms"]
    cells = []
    for name in GRAPHED:
        if name in t:
            ratio = f" ({ms['xrt'] / ms[name]:.2f}x xrt)" if "xrt" in ms and name != "xrt" else ""
            cells.append(f"{name} {t[name]:.0f}{ratio}")
        else:
            cells.append(f"{name} -")
    return ", ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="hd128, S 2048-16384 only")
    parser.add_argument("--sweep", action="store_true", help="time every fp8 tile candidate")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--graphs", action="store_true", help="also time the kernels alone (CUDA-graph replays)"
    )
    parser.add_argument("--dims", default="", help="only these head sizes (e.g. 64)")
    parser.add_argument("--seqlens", default="", help="only these lengths (e.g. 2048,8192)")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--sanitize-calls", action="store_true")
    parser.add_argument("--profile-calls", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("attention_fp8_bench needs a CUDA GPU")
    if args.sanitize_calls:
        sanitize_calls()
        return
    if args.profile_calls:
        profile_calls()
        return
    dims = (128,) if args.quick else (64, 128)
    seqlens = (2048, 4096, 8192, 16384) if args.quick else (1024, 2048, 4096, 8192, 16384)
    if args.dims:
        dims = tuple(int(d) for d in args.dims.split(","))
    if args.seqlens:
        seqlens = tuple(int(s) for s in args.seqlens.split(","))
    rows = []
    header = (
        f"{'hd':>3} {'S':>6} {'causal':>6} | {'cuDNN':>6} {'FA-2':>6} {'xrt':>6} {'fp8':>6} "
        f"{'fp8+q':>6} {'e4m3':>6} {'cuDNN8':>6} | fp8/xrt fp8+q/xrt e4m3/xrt fp8/cuDNN "
        f"cuDNN8/xrt fp8/cuDNN8 | rel err fp8 / e4m3 / cuDNN8 / xrt / cuDNN"
    )
    if CUDNN_FP8_UNAVAILABLE:
        print(f"cuDNN8 (cuDNN's fp8 forward) not timed: {CUDNN_FP8_UNAVAILABLE}", file=sys.stderr)
    print(torch.cuda.get_device_name(), torch.__version__, file=sys.stderr)
    print(header)
    for dim in dims:
        for causal in (False, True):
            for seqlen in seqlens:
                row = case(dim, seqlen, causal, args.sweep, args.rounds, args.graphs)
                rows.append(row)
                t, ms = row["tflops"], row["ms"]
                err = row.get("errors", {})
                errs = " / ".join(
                    f"{err[n]['rel_fro']:.2e}" if n in err else "-"
                    for n in ("fp8", "e4m3", "cudnn_fp8", "xrt", "cudnn")
                )
                if "cudnn fp8" in ms:
                    peer = (
                        f"{t['cudnn fp8']:6.0f}",
                        f"{ms['xrt'] / ms['cudnn fp8']:10.2f} {ms['cudnn fp8'] / ms['fp8']:11.2f}",
                    )
                else:
                    peer = (f"{'-':>6}", f"{'-':>10} {'-':>11}")
                sweep = " ".join(
                    f"{n}={t[n]:.0f}" for n in t if n.startswith("fp8[") or n.startswith("fp8 ")
                )
                print(
                    f"{dim:>3} {seqlen:>6} {causal!s:>6} | {t['cudnn']:6.0f} {t['flash']:6.0f} "
                    f"{t['xrt']:6.0f} {t['fp8']:6.0f} {t['fp8+q']:6.0f} {t['e4m3']:6.0f} "
                    f"{peer[0]} | {ms['xrt'] / ms['fp8']:7.2f} {ms['xrt'] / ms['fp8+q']:9.2f} "
                    f"{ms['xrt'] / ms['e4m3']:8.2f} {ms['cudnn'] / ms['fp8']:9.2f} {peer[1]} | "
                    f"{errs} {sweep}",
                    flush=True,
                )
                if args.graphs:
                    print(f"{'':>18}kernels alone: {_graph_line(row)}", flush=True)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "triton": __import__("triton").__version__,
        "command": " ".join(sys.argv),
        "cudnn_fp8_unavailable": CUDNN_FP8_UNAVAILABLE,
        "fp8_inputs": fp8_inputs_check(),
        "quant_breakdown_ms": quant_breakdown(),
        "host_and_gpu_ms": host_times(),
        "cases": rows,
    }
    print("e4m3 inputs (from_fp8, per-tensor descales):", result["fp8_inputs"])
    print("quantization steps (ms):", result["quant_breakdown_ms"])
    print("host / GPU ms a call (hd128, 4096 keys, causal):", result["host_and_gpu_ms"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "attention_fp8_bench.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
