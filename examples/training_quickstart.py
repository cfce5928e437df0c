"""Seed quick start (training): the same policy ideas, applied to a PyTorch training step.

    python examples/training_quickstart.py

Needs `pip install xpuruntime[torch]`. On a CUDA machine it pins cuBLASLt and FlashAttention,
runs under fp16 autocast and captures the step into a CUDA graph; on a CPU-only machine it
pins PyTorch's CPU GEMM and runs the same step eagerly under bf16 autocast. Either way it
prints the execution record: the policy, the environment, the device, the precision, and the
operators and kernels the step launched.
"""

from __future__ import annotations

import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy


def main() -> None:
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    if cuda:
        xrt_torch.set_kernel_policy(
            attention="flash_v2",
            matmul="cublasLt",
            exec_policy=ExecutionPolicy(device="cuda", precision="fp16"),
        )
    else:
        xrt_torch.set_kernel_policy(
            matmul="cpu", linear="cpu", exec_policy=ExecutionPolicy(device="cpu", precision="bf16")
        )
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)
    ).to(device)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(32, 64, device=device)
    t = torch.randint(0, 10, (32,), device=device)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=False)
        with xrt_torch.autocast(fp16=True) if cuda else xrt_torch.autocast(torch.bfloat16):
            y = model(x)
            loss = criterion(y, t)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(3):  # warm-up (also required before graph capture)
        step()
    if cuda:
        with xrt_torch.capture_graph() as graph:
            graphed_loss = step()
        graph.replay()  # re-runs the captured kernels; graphed_loss is updated in place
        print(f"graphed step loss={float(graphed_loss):.4f}")
    record = xrt_torch.explain(step)
    print(f"loss={float(step()):.4f}")
    print(record.to_json())


if __name__ == "__main__":
    main()
