"""Collective policy for multi-GPU training on ``torch.distributed`` (NCCL).

xpuruntime adds no transport and no scheduler: it writes ``ExecutionPolicy.collectives``
into the environment NCCL reads (``NCCL_ALGO``, ``NCCL_PROTO``, channel counts, buffer size,
P2P/SHM switches; NVLink multicast always off) before the process group starts, and reads
NCCL's own debug log back into a training record::

    import xpuruntime.pytorch.distributed as xdist
    from xpuruntime.policies import CollectivePolicy, ExecutionPolicy

    policy = ExecutionPolicy(collectives=CollectivePolicy(algorithm="ring", protocol="simple"))
    xdist.init_process_group("nccl", policy=policy)      # under torchrun, on every rank
    ...  # DDP / FSDP training steps
    print(xdist.collective_record().to_json())          # per collective: what NCCL ran

A collective that did not run with the pinned algorithm or protocol goes through the
policy's ``fallback`` mode when the record is read.
"""

from __future__ import annotations

from xpuruntime.pytorch.distributed.nccl_settings import NcclSetting, nccl_settings
from xpuruntime.pytorch.distributed.process_group import (
    apply_collective_policy,
    collective_record,
    init_process_group,
    nccl_version,
)
from xpuruntime.pytorch.errors import CollectivePolicyError

__all__ = [
    "CollectivePolicyError",
    "NcclSetting",
    "apply_collective_policy",
    "collective_record",
    "init_process_group",
    "nccl_settings",
    "nccl_version",
]
