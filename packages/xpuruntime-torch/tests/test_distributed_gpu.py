"""NCCL on every GPU of the machine (at least 2): a DDP step under a pinned algorithm and
protocol, and the record of what NCCL ran, read from NCCL's own debug log.

Runs examples/ddp_collectives.py under torchrun, as a user would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from xpuruntime.runtime.record import ExecutionRecord

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ddp_collectives.py"
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        GPUS < 2 or not dist.is_nccl_available(),
        reason=f"needs 2 or more CUDA GPUs and NCCL (found {GPUS} GPU(s), torch {torch.__version__})",
    ),
]


def ddp(tmp_path: Path, algorithm: str, protocol: str) -> subprocess.CompletedProcess[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(GPUS),
        "--master-addr", "127.0.0.1", "--master-port", str(port), str(EXAMPLE),
        "--algorithm", algorithm, "--protocol", protocol, "--out", str(tmp_path / "record.json"),
    ]  # fmt: skip
    return subprocess.run(
        command,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("algorithm", "protocol"), [("ring", "simple"), ("ring", "ll"), ("tree", "ll128")]
)
def test_a_ddp_step_runs_with_the_pinned_algorithm_and_protocol(
    tmp_path: Path, algorithm: str, protocol: str
) -> None:
    result = ddp(tmp_path, algorithm, protocol)
    assert result.returncode == 0, result.stdout + result.stderr
    record = ExecutionRecord.from_json((tmp_path / "record.json").read_text())
    all_reduces = [d for d in record.decisions if d.op == "AllReduce"]
    assert all_reduces, f"NCCL logged no AllReduce: {record.decisions} {record.notes}"
    assert {d.kernel for d in all_reduces} == {f"{algorithm}/{protocol}"}
    assert {(d.mode, d.status) for d in all_reduces} == {("pin", "decided")}
    # DDP broadcasts the parameters first: Broadcast has only ring; the protocol binds it.
    assert {d.kernel.partition("/")[2] for d in record.decisions} == {protocol}
    assert record.fallbacks == []
    read = {s.name: s.note for s in record.settings}
    assert "NCCL read NCCL_ALGO=" in read["collectives.algorithm"]
    assert "NCCL read NCCL_PROTO=" in read["collectives.protocol"]
    assert "backend nccl" in " ".join(record.notes)


def test_a_pin_nccl_cannot_run_here_never_passes_silently(tmp_path: Path) -> None:
    # CollNet needs network (SHARP) support a single node lacks. NCCL >= 2.24 refuses the
    # collective ("No algorithm/protocol available"); older NCCL ran ring or tree instead,
    # which the read-back turns into a FallbackError under fallback="error".
    result = ddp(tmp_path, "collnet_direct", "simple")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "No algorithm/protocol available" in output or "fallback='error'" in output, output
