"""Runs every CUDA path of the GEMM family once at small shapes, for compute-sanitizer.

    compute-sanitizer --tool memcheck python packages/xpuruntime-core/scripts/gemm_sanitizer_driver.py

cuBLASLt plans (with candidate timing), cuBLAS, all four transpose combinations in fp32,
fp16 and bf16, TF32, batched and broadcast products, every linear epilogue (BIAS, RELU,
GELU, GELU_AUX with a padded pre-activation, DGELU_BGRAD, BGRADB), the activation-gradient
kernel, the fill kernel the timing uses, and a lock replay through cublasLtMatmulAlgoCheck.
Exits non-zero when a result disagrees with PyTorch (the sanitizer's own report decides the
rest).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.policies import KernelPolicy

LT = KernelPolicy(matmul="cublasLt", linear="cublasLt")
CUBLAS = KernelPolicy(matmul="cublas")


def operand(
    rows: int, cols: int, transposed: bool, dtype: torch.dtype, batch: int = 0
) -> torch.Tensor:
    lead = (batch,) if batch else ()
    if transposed:
        return torch.randn(*lead, cols, rows, device="cuda", dtype=dtype).transpose(-1, -2)
    return torch.randn(*lead, rows, cols, device="cuda", dtype=dtype)


def check(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    err = (got.float() - ref.float()).abs().max().item() / max(ref.abs().max().item(), 1e-6)
    if err > 5e-2:
        sys.exit(f"{what}: relative error {err:.3g}")


def main() -> None:
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for layout in ("NN", "NT", "TN", "TT"):
            a = operand(37, 24, layout[0] == "T", dtype)
            b = operand(24, 19, layout[1] == "T", dtype)
            for policy in (LT, CUBLAS):
                check(
                    ops.matmul(a, b, policy=policy),
                    a.float() @ b.float(),
                    f"matmul {layout} {dtype}",
                )
    a = torch.randn(64, 32, device="cuda")
    check(ops.matmul(a, a.T, policy=LT, precision="tf32"), a @ a.T, "tf32")
    a3 = torch.randn(3, 16, 8, device="cuda", dtype=torch.bfloat16)
    b3 = operand(8, 12, True, torch.bfloat16, batch=3)
    for policy in (LT, CUBLAS):
        check(ops.matmul(a3, b3, policy=policy), a3.float() @ b3.float(), "batched")
        check(ops.matmul(a3, b3[0], policy=policy), a3.float() @ b3[0].float(), "broadcast")
    x = torch.randn(20, 48, device="cuda", dtype=torch.float16)
    w = torch.randn(36, 48, device="cuda", dtype=torch.float16) / 8
    bias = torch.randn(36, device="cuda", dtype=torch.float16)
    for act in (None, "relu", "gelu"):
        for bb in (None, bias):
            z = F.linear(x.float(), w.float(), None if bb is None else bb.float())
            ref = {None: z, "relu": F.relu(z), "gelu": F.gelu(z, approximate="tanh")}[act]
            check(ops.linear(x, w, bb, act, policy=LT), ref, f"linear {act}")
    y, pre = ops.linear(x, w, bias, "gelu", save_preactivation=True, policy=LT)  # N=36: padded
    g = torch.randn(20, 10, device="cuda", dtype=torch.float16)
    w2 = torch.randn(10, 36, device="cuda", dtype=torch.float16) / 8
    dz, _db = ops.linear_gelu_grad(g, w2, pre, policy=LT)
    dw, db2 = ops.linear_weight_grad(dz, x, policy=LT)
    check(db2, dz.float().sum(0), "BGRADB bias gradient")
    check(dw, dz.float().T @ x.float(), "BGRADB weight gradient")
    check(ops.activation_grad(g @ w2, pre, "gelu"), dz, "activation_grad vs DGELU")
    entries = rt.dispatcher.export_decisions()
    problems = rt.dispatcher.set_lock("replay", entries)
    if problems:
        sys.exit(f"lock replay rejected exported algorithms: {problems}")
    check(ops.linear(x, w, bias, "gelu", policy=LT), y, "replayed linear")
    rt.dispatcher.set_lock("off")
    torch.cuda.synchronize()
    print("gemm sanitizer driver: all paths ran")


if __name__ == "__main__":
    main()
