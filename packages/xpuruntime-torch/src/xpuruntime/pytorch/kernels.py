"""Name the library behind a device kernel and the policy op behind an aten op.

Profilers report kernel names only; these rules turn them into the vocabulary of the kernel
policy so :func:`xpuruntime.pytorch.explain` can say "attention ran FlashAttention-2" and
check it against what the policy pinned.
"""

from __future__ import annotations

__all__ = ["LIBRARY_KERNEL", "kernel_library", "policy_op"]

# (substring of the lower-cased kernel name, library); first match wins.
_LIBRARY_MARKERS: tuple[tuple[str, str], ...] = (
    # xpuruntime's Gluon Hopper forward and backward kernels, then its Triton attention
    # kernels (before "flash")
    ("_xrt_attn_fwd_hopper", "xrt_attention_hopper"),
    ("_xrt_attn_bwd_prep_hopper", "xrt_attention_hopper"),
    ("_xrt_attn_bwd_dkdv_hopper", "xrt_attention_hopper"),
    ("_xrt_attn_bwd_dq_hopper", "xrt_attention_hopper"),
    ("_xrt_attn_bwd_fused_hopper", "xrt_attention_hopper"),
    ("_xrt_attn_bwd_dq_convert_hopper", "xrt_attention_hopper"),
    ("_xrt_attn", "xrt_attention"),
    ("flash", "flash_attention"),
    ("fmha_cutlass", "efficient_attention"),
    ("mem_efficient", "efficient_attention"),
    ("efficient_attention", "efficient_attention"),
    ("cudnn", "cudnn"),
    ("nvjet", "cublasLt"),
    ("cublaslt", "cublasLt"),
    ("gemm", "cublas"),
    ("xmma", "cublas"),
    ("cutlass", "cutlass"),
    ("triton", "triton"),
    ("at::native", "aten"),
)

# library -> the kernel name the policy uses for it, for libraries whose kernels are told
# apart by name with certainty. cuBLAS and cuBLASLt share kernels (cuBLAS calls into
# cuBLASLt's heuristics), so a gemm kernel's name cannot prove which API launched it: matmul
# is verified by reading preferred_blas_library back, not by kernel names. The Hopper kernels
# are left out: ``xrt_flash_hopper`` runs xrt_flash's Triton backward kernels where its Gluon
# backward does not take the call (head size 256), so those kernels under its policy are not a
# fallback, and by name alone they cannot be told apart.
LIBRARY_KERNEL = {
    "xrt_attention": "xrt_flash",
    "flash_attention": "flash_v2",
    "efficient_attention": "efficient",
    "cudnn_attention": "cudnn",
}

# aten op name fragments -> policy op family; the innermost matching profiler op is used.
_OP_FAMILIES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("attention", "sdpa", "flash"), "attention"),
    (("layer_norm", "layernorm"), "layernorm"),
    (("rms_norm", "rmsnorm"), "rmsnorm"),
    (("conv",), "conv"),
    (("mm", "matmul", "linear", "gemm"), "matmul"),
)


def kernel_library(name: str, op: str | None = None) -> str | None:
    """The library a device kernel belongs to, or None when its name says nothing."""
    lowered = name.lower()
    for marker, library in _LIBRARY_MARKERS:
        if marker in lowered:
            if library == "cudnn" and op == "attention":
                return "cudnn_attention"
            return library
    return None


def policy_op(aten_name: str) -> str | None:
    """The kernel-policy op an aten / custom op belongs to (``aten::addmm`` -> ``matmul``)."""
    short = aten_name.rsplit("::", 1)[-1].lower()
    for fragments, family in _OP_FAMILIES:
        if any(fragment in short for fragment in fragments):
            return family
    return None
