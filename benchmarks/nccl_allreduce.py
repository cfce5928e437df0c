"""All-reduce bus bandwidth per NCCL algorithm and protocol, pinned through xpuruntime.

    python benchmarks/nccl_allreduce.py [--out DIR] [--quick]              # every local GPU
    torchrun --nnodes N --nproc-per-node G ... benchmarks/nccl_allreduce.py  # several nodes

For each configuration (NCCL's own choice first, then each pinned algorithm x protocol) the
ranks create a process group with ``xpuruntime.pytorch.distributed.init_process_group``
(the policy becomes ``NCCL_ALGO``/``NCCL_PROTO`` before NCCL starts), time float32
all-reduces from 1 MiB to 1 GiB with CUDA events, and destroy the group; NCCL reads
``NCCL_ALGO``/``NCCL_PROTO`` again for every new communicator, so all configurations run in
the same processes, interleaved with nothing else. Bus bandwidth follows nccl-tests:
``busbw = bytes / time * 2 (n - 1) / n``. Each configuration's figures are also given as a
ratio to NCCL's own choice at the same size, together with the algorithm/protocol NCCL
reported in its debug log (the policy's record) and any pin it did not honour.

Writes ``nccl_allreduce.json`` to ``--out`` (rank 0) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import xpuruntime.pytorch.distributed as xdist
from xpuruntime.policies import CollectivePolicy, ExecutionPolicy

MIB = 1 << 20
#: (algorithm, protocol); (None, None) is NCCL's own choice, the baseline of the ratios.
CONFIGURATIONS: list[tuple[str | None, str | None]] = [
    (None, None),
    ("ring", "ll"),
    ("ring", "ll128"),
    ("ring", "simple"),
    ("tree", "ll"),
    ("tree", "ll128"),
    ("tree", "simple"),
]


def _label(algorithm: str | None, protocol: str | None) -> str:
    return "default" if algorithm is None and protocol is None else f"{algorithm}/{protocol}"


def _time_all_reduce(tensor: torch.Tensor, warmup: int, iterations: int) -> float:
    """Seconds per all-reduce: the median of ``iterations`` timed one by one."""
    for _ in range(warmup):
        dist.all_reduce(tensor)
    times = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        dist.all_reduce(tensor)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _run_configuration(
    algorithm: str | None, protocol: str | None, sizes: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    policy = ExecutionPolicy(
        fallback="allow",  # record what NCCL did instead of a pin; the table shows it
        collectives=CollectivePolicy(algorithm=algorithm, protocol=protocol),  # type: ignore[arg-type]
    )
    xdist.init_process_group(
        "nccl", policy=policy, device_id=device, log_dir=args.out / "nccl-logs"
    )
    world = dist.get_world_size()
    results = []
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        iterations = args.iterations if size <= 64 * MIB else max(5, args.iterations // 4)
        seconds = _time_all_reduce(tensor, args.warmup, iterations)
        # Every rank's time: the slowest rank bounds the collective.
        slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        algbw = size / slowest.item() / 1e9
        results.append(
            {
                "bytes": size,
                "time_us": slowest.item() * 1e6,
                "algbw_gbs": algbw,
                "busbw_gbs": algbw * 2 * (world - 1) / world,
            }
        )
    torch.cuda.synchronize(device)
    record = xdist.collective_record()
    used = {d.shape: d.kernel for d in record.decisions if d.op == "AllReduce"}
    for entry in results:
        entry["nccl_used"] = used.get(f"{entry['bytes']} bytes")
    configuration = {
        "configuration": _label(algorithm, protocol),
        "algorithm": algorithm,
        "protocol": protocol,
        "environment": sorted({str(s.applied) for s in record.settings if s.applied}),
        "not_honoured": [f"{f.what}: {f.requested} -> {f.chosen}" for f in record.fallbacks],
        "sizes": results,
    }
    dist.destroy_process_group()
    return configuration


def _worker(local_rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    """A rank started by this script (single node) instead of torchrun."""
    os.environ.update(
        {
            "RANK": str(local_rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    _benchmark(args)


def _benchmark(args: argparse.Namespace) -> None:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    top = 64 * MIB if args.quick else 1024 * MIB
    sizes = [size for size in (MIB << k for k in range(11)) if size <= top]
    configurations = [_run_configuration(a, p, sizes, args) for a, p in CONFIGURATIONS]
    if int(os.environ["RANK"]) != 0:
        return
    baseline = {e["bytes"]: e["busbw_gbs"] for e in configurations[0]["sizes"]}
    for configuration in configurations:
        for entry in configuration["sizes"]:
            entry["ratio_to_default"] = entry["busbw_gbs"] / baseline[entry["bytes"]]
    report = {
        "benchmark": "nccl_allreduce",
        "world_size": int(os.environ["WORLD_SIZE"]),
        "gpu": torch.cuda.get_device_name(),
        "nccl": ".".join(map(str, xdist.nccl_version() or ())),
        "torch": torch.__version__,
        "dtype": "float32",
        "configurations": configurations,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nccl_allreduce.json").write_text(json.dumps(report, indent=1))
    _print_table(report)


def _print_table(report: dict[str, Any]) -> None:
    sizes = [e["bytes"] for e in report["configurations"][0]["sizes"]]
    print(
        f"all-reduce bus bandwidth GB/s (ratio to NCCL's default), {report['world_size']} x"
        f" {report['gpu']}, NCCL {report['nccl']}"
    )
    print(f"{'config':>14} " + " ".join(f"{s // MIB:>14} MiB" for s in sizes))
    for configuration in report["configurations"]:
        cells = [
            f"{e['busbw_gbs']:7.1f} ({e['ratio_to_default']:4.2f})" for e in configuration["sizes"]
        ]
        print(f"{configuration['configuration']:>14} " + " ".join(f"{c:>18}" for c in cells))
        for problem in configuration["not_honoured"]:
            print(f"{'':>14} not honoured: {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-results"))
    parser.add_argument("--quick", action="store_true", help="sizes up to 64 MiB only")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    args.out = args.out.resolve()
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        sys.exit("needs CUDA GPUs and a PyTorch with NCCL")
    if "LOCAL_RANK" in os.environ:  # started by torchrun (any number of nodes)
        _benchmark(args)
        return
    world = torch.cuda.device_count()
    if world < 2:
        sys.exit(f"an all-reduce benchmark needs at least 2 GPUs; this machine has {world}")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_worker, args=(world, port, args), nprocs=world, join=True)


if __name__ == "__main__":
    main()
