"""GPU check of the Gluon Hopper attention backward: accuracy against float32, speed against cuDNN.

    python3 hopper_attention_bwd_check.py [--set all|grid|odd|quick] [--only 0,3]
        [--variants all|fm64s3c,m64s2n64s2,...] [--triton] [--cudnn-forward]
        [--out results.json] [--timeout 600] [--in-process]

For every configuration (head size 64/128, S 2048-16384 with batch * S = 16384 tokens and
heads = 2048 / head size, causal and full, bfloat16, plus odd cases: S not a multiple of
128, GQA 4:1, float16, seqlen_q != seqlen_k) it:

1. runs ``xrt_flash``'s forward (``launch.forward``, layout bhsd) for the output and the
   log-sum-exp, then the backwards under test with a random output gradient: by default the
   fused one (atomic dQ) and the deterministic one, each at its head size's default variant;
2. checks dq, dk and dv against a float32 autograd reference (upcast inputs, softmax
   attention in chunks of query rows; batch 0, the first and last key/value heads with all
   their query heads) and prints the maximum absolute and the relative Frobenius errors next
   to cuDNN's backward (SDPA, autograd) on the same inputs (and the Triton backward's,
   ``launch.backward``, with ``--triton``);
3. times the backwards alone (``triton.testing.do_bench`` medians, rounds interleaved):
   ours, cuDNN's backward op (``aten._scaled_dot_product_cudnn_attention_backward`` called
   directly; if that call is refused, cuDNN's forward + backward minus its forward), and
   with ``--triton`` the Triton backward; prints TFLOP/s (2.5 x 4 * B * H * Sq * Sk * D,
   halved when causal) and the ratios to cuDNN (above 1: faster than cuDNN).

At the end it prints one table (time and ratio to cuDNN per backward, errors) and, with
``--out``, writes every configuration's figures as JSON. Every configuration runs in its own
subprocess with a time limit, so a failing or hanging kernel is reported and the run goes on
(``--in-process`` turns that off). Run it from the repository root or from this directory;
the core's sources are put on the path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hopper_attention_check as fwd_check  # configuration helpers

Config = dict[str, Any]
_config = fwd_check._config


def configs(which: str) -> list[Config]:
    """``grid``: head size 64/128 x S 2048-16384 x causal/full, bfloat16; ``odd``: the edge
    cases; ``quick``: a handful of both; ``all``: grid and odd cases."""
    odd = fwd_check.odd_configs()
    if which == "quick":
        return [
            _config(128, 4096, True),
            _config(128, 4096, False),
            _config(64, 4096, True),
            _config(64, 4096, False),
            _config(128, 16384, True),
            _config(64, 16384, False),
            odd[3],
            odd[2],
        ]
    grid = [
        _config(hd, s, causal)
        for hd in (64, 128)
        for causal in (False, True)
        for s in (2048, 4096, 8192, 16384)
    ]
    return {"grid": grid, "odd": odd, "all": grid + odd}[which]


def _reference(q: Any, k: Any, v: Any, do: Any, causal: bool, scale: float, kv_heads: list[int]):
    """float32 autograd gradients of batch 0: {kv_head: (dk, dv, {q_head: dq})}. Softmax
    attention is row-wise, so chunks of query rows give exact gradients; dk and dv sum
    over the chunks and over the kv head's group of query heads."""
    import torch

    group = q.shape[1] // k.shape[1]
    chunk = 1024
    grads = {}
    for kvh in kv_heads:
        kf = k[0, kvh].float().requires_grad_()
        vf = v[0, kvh].float().requires_grad_()
        dk = torch.zeros_like(kf)
        dv = torch.zeros_like(vf)
        dqs = {}
        for h in range(kvh * group, (kvh + 1) * group):
            rows_dq = []
            for r0 in range(0, q.shape[2], chunk):
                qc = q[0, h, r0 : r0 + chunk].float().requires_grad_()
                s = (qc @ kf.T) * scale
                if causal:
                    rows = torch.arange(r0, r0 + s.shape[0], device=s.device)[:, None]
                    cols = torch.arange(kf.shape[0], device=s.device)[None, :]
                    s = s.masked_fill(cols > rows, float("-inf"))
                o = torch.softmax(s, dim=-1) @ vf
                gq, gk, gv = torch.autograd.grad(o, (qc, kf, vf), do[0, h, r0 : r0 + chunk].float())
                rows_dq.append(gq)
                dk += gk
                dv += gv
            dqs[h] = torch.cat(rows_dq)
        grads[kvh] = (dk, dv, dqs)
    return grads


def _errors(grads: dict, dq: Any, dk: Any, dv: Any) -> dict[str, tuple[float, float, float]]:
    """Errors of dq, dk, dv (batch 0) against the reference's heads: ``max``, the largest
    absolute error, and ``rel``, the relative Frobenius (root-mean-square) error, ‖ours −
    reference‖ / ‖reference‖ over the same elements. The maximum is one element's rounding
    luck; the relative error weighs every element, so two backwards' accuracy compares on it."""
    worst = {"dq": 0.0, "dk": 0.0, "dv": 0.0}
    sq_err = {"dq": 0.0, "dk": 0.0, "dv": 0.0}
    sq_ref = {"dq": 0.0, "dk": 0.0, "dv": 0.0}

    def add(name: str, ours: Any, ref: Any) -> None:
        diff = ours.float() - ref
        worst[name] = max(worst[name], diff.abs().max().item())
        sq_err[name] += diff.square().sum().item()
        sq_ref[name] += ref.square().sum().item()

    for kvh, (rdk, rdv, rdqs) in grads.items():
        add("dk", dk[0, kvh], rdk)
        add("dv", dv[0, kvh], rdv)
        for h, rdq in rdqs.items():
            add("dq", dq[0, h], rdq)
    names = ("dq", "dk", "dv")
    rel = tuple((sq_err[n] / sq_ref[n]) ** 0.5 if sq_ref[n] else 0.0 for n in names)
    return {"max": tuple(worst[n] for n in names), "rel": rel}  # type: ignore[dict-item]


def _fmt(errors: dict[str, tuple[float, float, float]] | None) -> str:
    if errors is None:
        return "n/a"
    return "max dq {:.2e} dk {:.2e} dv {:.2e}".format(*errors["max"]) + (
        " rel dq {:.2e} dk {:.2e} dv {:.2e}".format(*errors["rel"])
    )


def _cudnn(q: Any, k: Any, v: Any, do: Any, causal: bool, scale: float) -> dict[str, Any]:
    """cuDNN's gradients (autograd through SDPA) and a backward-only timing function."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    group = q.shape[1] // k.shape[1]
    qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
    kr = kg.repeat_interleave(group, dim=1) if group > 1 else kg
    vr = vg.repeat_interleave(group, dim=1) if group > 1 else vg
    mask = None
    if causal and q.shape[2] != k.shape[2]:
        # Top-left causal, explicit: SDPA's is_causal alignment is beyond doubt this way.
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        if mask is not None:
            o = F.scaled_dot_product_attention(qg, kr, vr, attn_mask=mask, scale=scale)
        else:
            o = F.scaled_dot_product_attention(qg, kr, vr, is_causal=causal, scale=scale)
    o.backward(do)
    result: dict[str, Any] = {"grads": (qg.grad, kg.grad, vg.grad)}

    # Backward-only timing: cuDNN's backward op on the repeated K/V (the GQA group sum is
    # left out), or forward + backward minus forward if the direct call is refused.
    kx = k.repeat_interleave(group, dim=1) if group > 1 else k
    vx = v.repeat_interleave(group, dim=1) if group > 1 else v
    try:
        if mask is not None:
            raise RuntimeError("explicit mask: timed as forward + backward minus forward")
        fwd = torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, kx, vx, None, True, 0.0, causal, False, scale=scale
        )
        out, lse, cum_q, cum_k, max_q, max_k, seed, offset = fwd[:8]
        bias = torch.empty(0, device=q.device, dtype=q.dtype)

        def backward() -> Any:
            return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
                do, q, kx, vx, out, lse, seed, offset, bias, cum_q, cum_k, max_q, max_k,
                0.0, causal, scale=scale,
            )  # fmt: skip

        backward()
        result["backward"] = backward
        result["how"] = "cuDNN backward op"
    except Exception as error:  # the op's signature varies between torch releases
        leaves = [x.detach().clone().requires_grad_() for x in (q, kx, vx)]

        def forward() -> Any:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                if mask is not None:
                    return F.scaled_dot_product_attention(*leaves, attn_mask=mask, scale=scale)
                return F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)

        def both() -> Any:
            return torch.autograd.grad(forward(), leaves, do)

        result["forward"] = forward
        result["both"] = both
        result["how"] = f"cuDNN fwd+bwd minus fwd ({type(error).__name__}: {str(error)[:60]})"
    return result


def _default_variants(head_dim: int, causal: bool) -> list[str]:
    """The default and the deterministic default of the head size and mask."""
    from xpuruntime.kernels.attention import hopper_bwd

    names = (
        hopper_bwd.choose_variant(head_dim, causal=causal, deterministic=d)[0].name
        for d in (False, True)
    )
    return list(dict.fromkeys(names))  # one name when the default is deterministic


def _cudnn_forward(q: Any, k: Any, v: Any, causal: bool, scale: float) -> tuple[Any, Any]:
    """cuDNN's forward output and natural-log log-sum-exp, (batch, heads, seqlen_q), for our
    backward to run on (``--cudnn-forward``: separates the forward's share of the errors).
    The raw op takes ``is_causal`` only; with Sq != Sk its mask is top-left as ours (on an
    H200 our backward's errors on its output matched those on ours to three digits at
    Sq 1000 < Sk 1500 and Sq 1536 > Sk 520, which a differently aligned mask would not give)."""
    import torch

    group = q.shape[1] // k.shape[1]
    kx = k.repeat_interleave(group, dim=1) if group > 1 else k
    vx = v.repeat_interleave(group, dim=1) if group > 1 else v
    out, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, kx, vx, None, True, 0.0, causal, False, scale=scale
    )[:2]
    return out, lse.reshape(q.shape[:3]).contiguous()


def run_one(
    c: Config, variants: list[str], with_triton: bool, rounds: int, cudnn_forward: bool = False
) -> dict[str, Any]:
    """Check and time (``rounds`` > 0) one configuration; returns its figures (also printed).
    ``cudnn_forward``: each variant is also checked (not timed) on cuDNN's forward output and
    log-sum-exp, reported as ``<variant> on cuDNN fwd``."""
    import torch
    import triton

    from xpuruntime.kernels.attention import hopper_bwd, launch

    q, k, v, scale = fwd_check.inputs(c)
    b, h, kvh, d = c["batch"], c["heads"], c["kv_heads"], c["head_dim"]
    sq, sk, causal = c["seqlen_q"], c["seqlen_k"], c["causal"]
    do = torch.randn_like(q)
    flops = 2.5 * 4.0 * b * h * sq * sk * d * (0.5 if causal else 1.0)
    out, lse, _ = launch.forward(q, k, v, causal=causal, scale=scale, layout="bhsd")
    grads = _reference(q, k, v, do, causal, scale, sorted({0, kvh - 1}))
    result: dict[str, Any] = {"config": c, "errors": {}, "ms": {}, "failed": {}}

    timed: dict[str, Any] = {}
    cudnn: dict[str, Any] = {}
    try:
        cudnn = _cudnn(q, k, v, do, causal, scale)
        result["errors"]["cuDNN"] = _errors(grads, *cudnn["grads"])
        result["cudnn_timing"] = cudnn["how"]
    except Exception as error:  # cuDNN refuses some shapes: say so and go on
        result["failed"]["cuDNN"] = f"{type(error).__name__}: {str(error)[:120]}"
    if with_triton:
        try:
            tdq, tdk, tdv, _ = launch.backward(
                do, q, k, v, out, lse, causal=causal, scale=scale, layout="bhsd"
            )
            result["errors"]["triton"] = _errors(grads, tdq, tdk, tdv)
            timed["triton"] = lambda: launch.backward(
                do, q, k, v, out, lse, causal=causal, scale=scale, layout="bhsd"
            )
        except Exception as error:  # the comparison is optional
            result["failed"]["triton"] = f"{type(error).__name__}: {str(error)[:120]}"

    cudnn_fwd: tuple[Any, Any] | None = None  # computed once, for --cudnn-forward
    for name in variants or _default_variants(d, causal):
        try:
            dq, dk, dv = hopper_bwd.hopper_attention_backward(
                do, q, k, v, out, lse, causal=causal, scale=scale, variant=name
            )
            torch.cuda.synchronize()
            if any(bool(torch.isnan(x).any().item()) for x in (dq, dk, dv)):
                result["failed"][name] = "NaN in the gradients"
            result["errors"][name] = _errors(grads, dq, dk, dv)
            timed[name] = lambda n=name: hopper_bwd.hopper_attention_backward(
                do, q, k, v, out, lse, causal=causal, scale=scale, variant=n
            )
        except Exception as error:  # report the variant's failure, keep the others
            result["failed"][name] = f"{type(error).__name__}: {str(error)[:300]}"
        if cudnn_forward:
            try:
                if cudnn_fwd is None:
                    cudnn_fwd = _cudnn_forward(q, k, v, causal, scale)
                c_out, c_lse = cudnn_fwd
                grads_c = hopper_bwd.hopper_attention_backward(
                    do, q, k, v, c_out, c_lse, causal=causal, scale=scale, variant=name
                )
                result["errors"][f"{name} on cuDNN fwd"] = _errors(grads, *grads_c)
            except Exception as error:  # a diagnostic: report and go on
                result["failed"][f"{name} on cuDNN fwd"] = f"{type(error).__name__}: {error!s:.200}"

    if "backward" in cudnn:
        timed["cuDNN"] = cudnn["backward"]
    elif "both" in cudnn:
        timed["cuDNN fwd"] = cudnn["forward"]
        timed["cuDNN fwd+bwd"] = cudnn["both"]
    times: dict[str, list[float]] = {n: [] for n in timed}
    for _ in range(rounds):  # interleaved rounds: clocks and neighbours drift alike for all
        for name, fn in timed.items():
            times[name].append(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))
    medians = {n: sorted(t)[len(t) // 2] for n, t in times.items() if t}
    if "cuDNN fwd+bwd" in medians:
        medians["cuDNN"] = medians.pop("cuDNN fwd+bwd") - medians.pop("cuDNN fwd")
    result["ms"] = medians
    result["tflops"] = {n: flops / (ms * 1e-3) / 1e12 for n, ms in medians.items()}
    base = medians.get("cuDNN")
    result["vs_cudnn"] = {n: base / ms for n, ms in medians.items() if base and n != "cuDNN"}

    for name in [n for n in result["errors"] if n != "cuDNN"] + ["cuDNN"]:
        errors = result["errors"].get(name)
        ms = medians.get(name)
        timing = f"{ms:8.3f} ms {result['tflops'][name]:6.1f} TFLOP/s" if ms else " " * 25
        ratio = f"  {result['vs_cudnn'][name]:.2f}x cuDNN" if name in result["vs_cudnn"] else ""
        print(f"  {name:>12}: {timing}  {_fmt(errors)}{ratio}", flush=True)
    for name, why in result["failed"].items():
        print(f"  {name:>12}: FAILED {why}", flush=True)
    return result


def _variants(spec: str, head_dim: int, causal: bool) -> list[str]:
    from xpuruntime.kernels.attention import hopper_bwd

    if not spec:
        return []
    if spec == "all":  # every fused candidate and the deterministic default
        fused = [n for n in hopper_bwd.variant_names(head_dim) if n.startswith("f")]
        deterministic = hopper_bwd.choose_variant(head_dim, causal=causal, deterministic=True)
        return [*fused, deterministic[0].name]
    return [name for name in spec.split(",") if name]


def _table(results: list[dict[str, Any]]) -> None:
    """One line per configuration: each backward's time and ratio to cuDNN, errors."""
    print(
        "\nsummary (ms; x = cuDNN time / ours, above 1 is faster than cuDNN; errors dq/dk/dv: "
        "max |err|, then relative Frobenius)"
    )
    for r in results:
        cells = []
        for name, ms in r.get("ms", {}).items():
            ratio = f" {r['vs_cudnn'][name]:.2f}x" if name in r.get("vs_cudnn", {}) else ""
            cells.append(f"{name} {ms:.3f}{ratio}")
        worst = {
            n: "/".join(f"{e:.1e}" for e in errs["max"])
            + " rel "
            + "/".join(f"{e:.2e}" for e in errs["rel"])
            for n, errs in r.get("errors", {}).items()
        }
        fails = "; ".join(f"{n} FAILED" for n in r.get("failed", {}))
        print(f"{fwd_check._describe(r['config'])}: {' | '.join(cells)} {fails}")
        print(f"    err {', '.join(f'{n} {e}' for n, e in worst.items())}")


def _save(path: str | None, results: list[dict[str, Any]]) -> None:
    if path:
        import torch

        device = torch.cuda.get_device_name()
        Path(path).write_text(json.dumps({"device": device, "results": results}, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set", default="all", choices=("all", "grid", "odd", "quick"), help="configurations"
    )
    parser.add_argument("--only", help="comma-separated indices into the set (edge-case picks)")
    parser.add_argument(
        "--variants",
        default=os.environ.get("XPURUNTIME_HOPPER_ATTENTION_BWD_VARIANT", ""),
        help="comma-separated variants to run (all: every fused candidate of the head size "
        "and the deterministic default); default: the head size's fused and deterministic "
        "defaults",
    )
    parser.add_argument("--triton", action="store_true", help="also check and time xrt_flash's")
    parser.add_argument(
        "--cudnn-forward",
        action="store_true",
        help="also check each variant on cuDNN's forward output and log-sum-exp",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="timing rounds (0: check accuracy only)"
    )
    parser.add_argument("--out", help="write the figures of every configuration here (JSON)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per configuration")
    parser.add_argument("--in-process", action="store_true", help="no subprocess per config")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: JSON of one config
    args = parser.parse_args()
    for path in (fwd_check.SRC, fwd_check.POLICIES_SRC):
        sys.path.insert(0, str(path))

    if args.one:
        config = json.loads(args.one)
        variants = _variants(args.variants, config["head_dim"], config["causal"])
        result = run_one(config, variants, args.triton, args.rounds, args.cudnn_forward)
        print(_RESULT + json.dumps(result), flush=True)
        return 0

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    failures = 0
    results: list[dict[str, Any]] = []
    chosen = configs(args.set)
    if args.only:
        chosen = [chosen[int(i)] for i in args.only.split(",")]
    for config in chosen:
        print(fwd_check._describe(config), flush=True)
        start = time.time()
        if args.in_process:
            try:
                variants = _variants(args.variants, config["head_dim"], config["causal"])
                results.append(
                    run_one(config, variants, args.triton, args.rounds, args.cudnn_forward)
                )
                _save(args.out, results)  # as it goes: a run cut short keeps what it measured
            except Exception as error:  # one configuration's failure must not end the run
                failures += 1
                print(f"  FAILED {type(error).__name__}: {str(error)[:400]}", flush=True)
            continue
        command = [sys.executable, __file__, "--one", json.dumps(config)]
        command += ["--variants", args.variants, "--rounds", str(args.rounds)]
        command += ["--triton"] if args.triton else []
        command += ["--cudnn-forward"] if args.cudnn_forward else []
        try:
            done = subprocess.run(command, timeout=args.timeout, text=True, capture_output=True)
        except subprocess.TimeoutExpired as expired:
            failures += 1
            out = expired.stdout if isinstance(expired.stdout, str) else ""
            print(out.rstrip())
            print(f"  TIMEOUT after {args.timeout} s (a hang?): config abandoned", flush=True)
            results.append({"config": config, "failed": {"run": "timeout"}})
            continue
        for line in done.stdout.splitlines():
            if line.startswith(_RESULT):
                results.append(json.loads(line[len(_RESULT) :]))
            else:
                print(line, flush=True)
        if done.returncode != 0:
            failures += 1
            tail = "\n    ".join(done.stderr.strip().splitlines()[-8:])
            print(f"  FAILED (exit {done.returncode}):\n    {tail}", flush=True)
        print(f"  ({time.time() - start:.0f} s)", flush=True)
        _save(args.out, results)
    _table(results)
    _save(args.out, results)
    print(f"done: {failures} configuration(s) failed or timed out")
    return 1 if failures else 0


_RESULT = "RESULT "

if __name__ == "__main__":
    sys.exit(main())
