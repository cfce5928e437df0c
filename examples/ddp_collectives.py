"""A DDP training step under a pinned NCCL algorithm and protocol, and the record of what
NCCL ran for each collective.

    torchrun --nproc-per-node 2 examples/ddp_collectives.py --algorithm ring --protocol simple

Each rank applies the collective policy before the process group starts
(``xpuruntime.pytorch.distributed.init_process_group``), trains a small MLP with
DistributedDataParallel for a few steps (gradient all-reduces), and reads NCCL's debug log
back: rank 0's record lists every distinct collective with the algorithm/protocol NCCL
used. ``fallback="error"``: a collective NCCL ran otherwise than pinned raises. Without GPUs
the same script runs on gloo (nothing for NCCL to verify; the record says so).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import xpuruntime.pytorch.distributed as xdist
from xpuruntime.policies import CollectivePolicy, ExecutionPolicy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="ring", help="ring, tree, pat, collnet_direct ...")
    parser.add_argument("--protocol", default="simple", help="ll, ll128 or simple")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write rank 0's record here as JSON")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    policy = ExecutionPolicy(
        fallback="error",
        collectives=CollectivePolicy(algorithm=args.algorithm, protocol=args.protocol),
    )
    xdist.init_process_group(
        "nccl" if cuda else "gloo", policy=policy, device_id=device if cuda else None
    )

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(args.steps):
        x = torch.randn(64, 1024, generator=generator).to(device)
        loss = ddp(x).square().mean()
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
    if cuda:
        torch.cuda.synchronize(device)

    record = xdist.collective_record()  # raises if NCCL did not run what was pinned
    if dist.get_rank() == 0:
        for decision in record.decisions:
            print(
                f"{decision.op:>14} {decision.shape:>16}: {decision.kernel:<14} {decision.reason}"
            )
        if args.out is not None:
            args.out.write_text(record.to_json())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
