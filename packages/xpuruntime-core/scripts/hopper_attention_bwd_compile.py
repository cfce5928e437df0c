"""Compile the Gluon Hopper attention backward offline (no GPU, no torch) and inspect it.

For every configuration it compiles ``_hopper_bwd_kernels._xrt_attn_bwd_dkdv_hopper`` and
``_xrt_attn_bwd_dq_hopper`` for sm_90a with Triton's own ptxas and reports what ptxas says
(registers, spill stores/loads, stack), the shared memory, and counts of the instructions
that show the design is there: wgmma, ``setmaxnreg``, TMA (``cp.async.bulk.tensor``) and
local-memory traffic (spills). Exits non-zero if a configuration fails to compile or spills.

    python3 packages/xpuruntime-core/scripts/hopper_attention_bwd_compile.py [--out DIR] [--sass]
        [--varlen]

``--varlen`` compiles the prep, dK/dV and dQ kernels' packed-sequence builds (``VARLEN``)
instead of the dense ones.

Needs only ``triton`` (3.6) and numpy; the reporting helpers are the forward's
(``hopper_attention_compile.py``, next to this script).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hopper_attention_compile as fwd  # the forward's reporting helpers


def compile_one(
    kernels: Any,
    kernel: str,
    dtype: str,
    head_dim: int,
    causal: bool,
    variant: Any,
    out_dir: Path,
    varlen: bool = False,
) -> tuple[str, str, Any]:
    """Compile the ``dkdv`` or ``dq`` kernel of ``variant`` (``varlen``: its packed-sequence
    build); returns (name, ptx, metadata)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    layout = fwd._layout_repr(head_dim * 2)
    # The lse₂/delta rows: float32, unswizzled, as hopper_bwd's row descriptors.
    row_layout = (
        "NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2, "
        "transposed=False, fp4_padded=False, cga_layout=[])"
    )

    def desc(rows: int) -> str:
        return f"tensordesc<{dtype}[1, 1, {rows}, {head_dim}],{layout}>"

    regs = {"CONSUMER_REGS": variant.consumer_regs, "PRODUCER_REGS": variant.producer_regs}
    common = {"group": "i32", "qk_scale": "fp32", "scale": "fp32"}
    # The dK/dV and fused kernels' 1-D order (used with LPT only).
    order = {"num_key_blocks": "i32", "batch_kv_heads": "i32", "section": "i32"}
    lpt = "_l" if getattr(variant, "lpt", False) else ""
    # The packed builds' offsets are int32; the dense launches pass a float32 buffer there.
    offsets = {name: "*i32" if varlen else "*fp32" for name in ("CU_Q", "CU_K", "CU_PAD")}
    if kernel == "dkdv":
        fn = kernels._xrt_attn_bwd_dkdv_hopper
        m = variant.dkdv_block_m
        row = f"tensordesc<fp32[1, {m}],{row_layout}>"
        signature = {"q_desc": desc(m), "k_desc": desc(64), "v_desc": desc(64), "do_desc": desc(m)}
        signature |= {"dk_desc": desc(64), "dv_desc": desc(64), "lse_desc": row, "delta_desc": row}
        signature |= {"seqlen_q": "i32", "num_kv_heads": "i32", **common, **order}
        signature |= {"DK": f"*{dtype}", "DV": f"*{dtype}", "stride_ks": "i32", "stride_kh": "i32"}
        signature |= offsets
        constexprs = {"HEAD_DIM": head_dim, "BLOCK_M": m, "NUM_STAGES": variant.dkdv_stages}
        constexprs |= {"CAUSAL": causal, "LPT": variant.lpt, "OVERLAP": variant.dkdv_overlap}
        constexprs |= {**regs, "VARLEN": varlen}
        tag = f"m{m}s{variant.dkdv_stages}{'o' if variant.dkdv_overlap else ''}{lpt}"
    elif kernel == "fused":
        fn = kernels._xrt_attn_bwd_fused_hopper
        m = variant.block_m
        row = f"tensordesc<fp32[1, {m}],{row_layout}>"
        signature = {"q_desc": desc(m), "k_desc": desc(64), "v_desc": desc(64), "do_desc": desc(m)}
        signature |= {"dk_desc": desc(64), "dv_desc": desc(64), "lse_desc": row, "delta_desc": row}
        acc_layout = row_layout.replace("swizzle_byte_width=0", "swizzle_byte_width=128")
        signature |= {"DQ_ACC": "*fp32", "dq_desc": f"tensordesc<fp32[64, 32],{acc_layout}>"}
        signature |= {"seqlen_q": "i32", "seqlen_pad": "i32"}
        signature |= {"num_kv_heads": "i32", **common, **order}
        constexprs = {"HEAD_DIM": head_dim, "BLOCK_M": m, "NUM_STAGES": variant.stages}
        constexprs |= {"CAUSAL": causal, "SPLIT_COLS": variant.split_cols, **regs}
        constexprs |= {"DQ_TMA": variant.tma_dq, "LPT": variant.lpt, "OVERLAP": variant.overlap}
        constexprs |= {"DQ_WRITER": variant.dq_writer}
        tag = variant.name
    elif kernel == "convert":  # the fused path's float32 dQ to dQ
        fn = kernels._xrt_attn_bwd_dq_convert_hopper
        signature = {"DQ_ACC": "*fp32", "DQ": f"*{dtype}"}
        signature |= {name: "i32" for name in ("stride_b", "stride_h", "stride_s")}
        signature |= {"seqlen_q": "i32", "seqlen_pad": "i32", "num_heads": "i32"}
        constexprs = {"HEAD_DIM": head_dim, "BLOCK": 32}
        tag = "b32"
    elif kernel == "dq":
        fn = kernels._xrt_attn_bwd_dq_hopper
        n = variant.dq_block_n
        signature = {"q_desc": desc(64), "k_desc": desc(n), "v_desc": desc(n), "do_desc": desc(64)}
        signature |= {"dq_desc": desc(64), "LSE2": "*fp32", "DELTA": "*fp32"}
        signature |= {"seqlen_pad": "i32", "seqlen_k": "i32", "num_heads": "i32", **common}
        signature |= {"batch_heads": "i32", "section": "i32"}
        signature |= {"DQ": f"*{dtype}", "stride_qs": "i32", "stride_qh": "i32", **offsets}
        constexprs = {"HEAD_DIM": head_dim, "BLOCK_N": n, "NUM_STAGES": variant.dq_stages}
        constexprs |= {"CAUSAL": causal, "LPT": variant.lpt, **regs, "VARLEN": varlen}
        tag = f"n{n}s{variant.dq_stages}{lpt}"
    else:  # prep: delta and lse * log2(e)
        fn = kernels._xrt_attn_bwd_prep_hopper
        signature = {"OUT": f"*{dtype}", "DO": f"*{dtype}", "LSE": "*fp32", "LSE2": "*fp32"}
        signature |= {"DELTA": "*fp32"}
        for name in ("ob", "oh", "os", "dob", "doh", "dos"):
            signature[f"stride_{name}"] = "i32"
        signature |= {"seqlen_q": "i32", "seqlen_pad": "i32", "num_heads": "i32", "scale": "fp32"}
        signature |= {"CU_Q": offsets["CU_Q"], "CU_PAD": offsets["CU_PAD"]}
        constexprs = {"HEAD_DIM": head_dim, "BLOCK": 64, "VARLEN": varlen}
        tag = "b64"
    for key in constexprs:
        signature[key] = "constexpr"
    src = GluonASTSource(fn, signature, constexprs)
    compiled = triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 1}
    )
    tag += "_varlen" if varlen else ""
    name = f"bwd_{kernel}_{dtype}_hd{head_dim}_{'causal' if causal else 'full'}_{tag}"
    (out_dir / f"{name}.ptx").write_text(compiled.asm["ptx"])
    (out_dir / f"{name}.cubin").write_bytes(compiled.asm["cubin"])
    return name, compiled.asm["ptx"], compiled.metadata


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "xrt_hopper_bwd"))
    parser.add_argument("--sass", action="store_true", help="also write the SASS listings")
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--variants", default="", help="comma-separated variant names")
    parser.add_argument("--kernels", default="fused,convert,dkdv,dq,prep")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument(
        "--varlen", action="store_true", help="the packed-sequence builds (prep, dK/dV, dQ)"
    )
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for src in fwd.PACKAGES.glob("*/src"):
        sys.path.insert(0, str(src))
    from xpuruntime.kernels.attention import _hopper_bwd_kernels as kernels
    from xpuruntime.kernels.attention import hopper_bwd

    failures = 0
    for head_dim in (int(h) for h in args.head_dims.split(",")):
        names = args.variants.split(",") if args.variants else hopper_bwd.variant_names(head_dim)
        variants = [hopper_bwd.parse_variant(n) for n in names]
        fused = [v for v in variants if isinstance(v, hopper_bwd.FusedVariant)]
        split = [v for v in variants if isinstance(v, hopper_bwd.BwdVariant)]
        for kernel in args.kernels.split(","):
            # prep and convert have no variants: once per head size (with any variant's regs)
            once = kernel in ("prep", "convert")
            for variant in variants[:1] if once else fused if kernel == "fused" else split:
                for dtype in args.dtypes.split(","):
                    for causal in (False,) if once else (False, True):
                        varlen = args.varlen and kernel in ("dkdv", "dq", "prep")
                        label = (
                            f"{kernel:4} {dtype} hd{head_dim} {'causal' if causal else 'full  '}"
                            f" {variant.name}{' varlen' if varlen else ''}"
                        )
                        try:
                            name, ptx, meta = compile_one(
                                kernels, kernel, dtype, head_dim, causal, variant, out_dir, varlen
                            )
                        except Exception as error:  # report it and go on
                            failures += 1
                            first = str(error).strip().splitlines()
                            print(f"{label}: COMPILE FAILED: {type(error).__name__}: {first[:3]}")
                            (out_dir / f"{label.replace(' ', '_')}.err").write_text(str(error))
                            continue
                        failures += fwd.report(label, name, ptx, meta, out_dir, args.sass)
    print(f"outputs in {out_dir}; {failures} failing configuration(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
