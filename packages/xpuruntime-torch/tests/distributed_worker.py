"""One rank of the gloo run in test_distributed.py, started by ``torchrun --nproc-per-node 2``.

It proves the collective policy is in the environment before the process group starts: a
rendezvous handler, which torch.distributed calls inside init_process_group before it
builds the process group, captures the NCCL variables it sees. Then it checks that a child
process inherits them, that a different policy is refused once the group exists, and that
the group works (an all_reduce). Each rank writes what it saw as JSON to ``argv[1]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.rendezvous import register_rendezvous_handler, rendezvous

import xpuruntime.pytorch.distributed as xdist
from xpuruntime.policies import CollectivePolicy, ExecutionPolicy

VARIABLES = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS", "NCCL_NVLS_ENABLE",
             "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NCCL_DEBUG", "NCCL_DEBUG_FILE")  # fmt: skip
seen_at_rendezvous: dict[str, str | None] = {}


def checking_rendezvous(url: str, **kwargs: object) -> object:
    seen_at_rendezvous.update({name: os.environ.get(name) for name in VARIABLES})
    seen_at_rendezvous["process_group_existed"] = str(dist.is_initialized())
    return rendezvous("env://", **kwargs)


def main() -> None:
    register_rendezvous_handler("xpuruntimecheck", checking_rendezvous)
    before = {name: os.environ.get(name) for name in VARIABLES}
    policy = ExecutionPolicy(
        fallback="error",
        collectives=CollectivePolicy(algorithm="ring", protocol="simple", max_channels=4),
    )
    record = xdist.init_process_group(
        "gloo", policy=policy, init_method="xpuruntimecheck://", log_dir=sys.argv[2]
    )
    rank = dist.get_rank()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('NCCL_ALGO'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    try:
        xdist.apply_collective_policy(CollectivePolicy(algorithm="tree"))
        late = "accepted"
    except xdist.CollectivePolicyError as error:
        late = str(error)
    same = xdist.apply_collective_policy(policy)  # the policy already in effect: accepted
    Path(sys.argv[1] % rank).write_text(
        json.dumps(
            {
                "rank": rank,
                "before": before,
                "at_rendezvous": seen_at_rendezvous,
                "all_reduce": total.item(),
                "child_nccl_algo": child.stdout.strip(),
                "late_application": late,
                "record": record.to_dict(),
                "same_policy_again": same.to_dict(),
            }
        )
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
