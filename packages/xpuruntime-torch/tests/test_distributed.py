"""Collective policy on torch.distributed: the NCCL environment mapping and its checks, the
debug-log read-back, and a 2-process gloo run under torchrun proving the policy is in the
environment before the process group starts.

NCCL itself needs GPUs; test_distributed_gpu.py runs it. Here, the read-back is fed lines in
the formats NCCL prints (``src/enqueue.cc``, ``src/misc/param.cc``, ``src/debug.cc``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import xpuruntime.pytorch.distributed as xdist
from xpuruntime.policies import CollectivePolicy, ExecutionPolicy
from xpuruntime.policies.errors import PolicyConflictError, PolicyValidationError
from xpuruntime.pytorch.distributed import process_group
from xpuruntime.pytorch.distributed.choices import decisions, judge
from xpuruntime.pytorch.distributed.nccl_log import (
    CollectiveChoice,
    DebugLog,
    LogMessage,
    SettingRead,
    expand_debug_file,
    parse_line,
)
from xpuruntime.pytorch.distributed.nccl_settings import debug_environment
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.record import FallbackWarning

WORKER = Path(__file__).with_name("distributed_worker.py")


@pytest.fixture
def clean_process() -> Iterator[None]:
    """The policy is process state (os.environ, NCCL's one debug file): restore both."""
    environ = dict(os.environ)
    for name in [n for n in os.environ if n.startswith(("NCCL_", "XPURUNTIME_POLICY_"))]:
        del os.environ[name]
    yield
    os.environ.clear()
    os.environ.update(environ)
    process_group._applied = None
    process_group._debug_log = None
    process_group._original = None
    process_group._nccl_read_once = None


def variables(policy: CollectivePolicy, **kwargs: object) -> dict[str, str]:
    return {s.variable: s.value for s in xdist.nccl_settings(policy, **kwargs)}  # type: ignore[arg-type]


# -- the mapping --------------------------------------------------------------------------


def test_every_setting_maps_to_its_nccl_variable() -> None:
    policy = CollectivePolicy(
        algorithm="ring",
        protocol="ll128",
        min_channels=2,
        max_channels=16,
        buffer_size=8 << 20,
        p2p=False,
        shm=True,
    )
    assert variables(policy) == {
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "LL128",
        "NCCL_MIN_NCHANNELS": "2",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": str(8 << 20),
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "0",
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    }


def test_the_default_policy_only_keeps_multicast_off() -> None:
    assert variables(CollectivePolicy()) == {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    }


@pytest.mark.parametrize(
    ("algorithm", "value"),
    [
        ("tree", "AllReduce:Tree"),
        ("collnet_chain", "AllReduce:CollNetChain"),
        (
            "collnet_direct",
            "AllReduce:CollNetDirect;AllGather:CollNetDirect;ReduceScatter:CollNetDirect",
        ),
        ("pat", "AllGather:PAT;ReduceScatter:PAT"),
    ],
)
def test_an_algorithm_pins_only_the_collectives_that_implement_it(
    algorithm: str, value: str
) -> None:
    policy = CollectivePolicy(algorithm=algorithm)  # type: ignore[arg-type]
    assert variables(policy)["NCCL_ALGO"] == value
    assert variables(policy, nccl_version=(2, 27, 3))["NCCL_ALGO"] == value


def test_nccl_before_2_24_gets_the_global_form_and_a_note_why() -> None:
    (setting,) = [
        s
        for s in xdist.nccl_settings(CollectivePolicy(algorithm="tree"), nccl_version=(2, 21, 5))
        if s.variable == "NCCL_ALGO"
    ]
    assert setting.value == "Tree"
    assert "NCCL 2.21.5 applies NCCL_ALGO to every collective" in setting.note


@pytest.mark.parametrize("algorithm", ["pat", "collnet_direct", "collnet_chain"])
@pytest.mark.parametrize("protocol", ["ll", "ll128"])
def test_a_simple_only_algorithm_with_another_protocol_is_refused(
    algorithm: str, protocol: str
) -> None:
    policy = CollectivePolicy(algorithm=algorithm, protocol=protocol)  # type: ignore[arg-type]
    with pytest.raises(PolicyConflictError, match="Simple protocol only") as caught:
        xdist.nccl_settings(policy)
    assert caught.value.location == "collectives.protocol"
    simple = CollectivePolicy(algorithm=algorithm, protocol="simple")  # type: ignore[arg-type]
    assert variables(simple)["NCCL_PROTO"] == "Simple"


@pytest.mark.parametrize(
    "settings", [{"nvls": True}, {"algorithm": "nvls"}, {"algorithm": "nvls_tree"}]
)
def test_nvlink_multicast_cannot_be_turned_on(settings: dict[str, object]) -> None:
    with pytest.raises(PolicyValidationError, match="NVLink multicast"):
        CollectivePolicy(**settings)  # type: ignore[arg-type]


def test_nvlink_multicast_cannot_be_turned_on_from_the_environment(clean_process: None) -> None:
    os.environ["XPURUNTIME_POLICY_COLLECTIVES_NVLS"] = "true"
    with pytest.raises(PolicyValidationError, match="NVLink multicast"):
        xdist.apply_collective_policy()
    assert "NCCL_NVLS_ENABLE" not in os.environ


@pytest.mark.parametrize(
    ("environ", "level", "subsystems"),
    [
        ({}, "INFO", "INIT,BOOTSTRAP,ENV,TUNING"),
        ({"NCCL_DEBUG": "WARN"}, "INFO", "INIT,BOOTSTRAP,ENV,TUNING"),
        ({"NCCL_DEBUG": "trace", "NCCL_DEBUG_SUBSYS": "INIT,NET"}, "TRACE", "INIT,NET,ENV,TUNING"),
        ({"NCCL_DEBUG_SUBSYS": "init,tuning"}, "INFO", "init,tuning,ENV"),
        ({"NCCL_DEBUG_SUBSYS": "^TUNING,NET"}, "INFO", "^NET"),
        ({"NCCL_DEBUG_SUBSYS": "^ENV"}, "INFO", "ALL"),
        ({"NCCL_DEBUG_SUBSYS": "ALL"}, "INFO", "ALL"),
    ],
)
def test_debug_output_keeps_the_users_choices_and_adds_what_the_read_back_needs(
    environ: dict[str, str], level: str, subsystems: str
) -> None:
    assert debug_environment(environ, "/logs/nccl.%p.log") == {
        "NCCL_DEBUG": level,
        "NCCL_DEBUG_SUBSYS": subsystems,
        "NCCL_DEBUG_FILE": "/logs/nccl.%p.log",
    }
    named = debug_environment({"NCCL_DEBUG_FILE": "/mine/%h.log"}, "/logs/nccl.%p.log")
    assert named["NCCL_DEBUG_FILE"] == "/mine/%h.log"


# -- reading NCCL's log ---------------------------------------------------------------------

PREFIX = "node7:4242:4250 [1] NCCL INFO "


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (  # NCCL >= 2.25
            "AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..7}",
            CollectiveChoice("AllReduce", 1 << 20, "ring", "ll128", (0, 7), 1),
        ),
        (
            "ReduceScatter: 4096 Bytes -> Algo COLLNET_DIRECT proto SIMPLE channel{Lo..Hi}={2..3}",
            CollectiveChoice("ReduceScatter", 4096, "collnet_direct", "simple", (2, 3), 1),
        ),
        (  # NCCL 2.23: numbers, with the collective's name
            "AllGather: 65536 Bytes -> Algo 6 proto 2 time 12.500000",
            CollectiveChoice("AllGather", 65536, "pat", "simple", None, 1),
        ),
        (  # NCCL 2.21 and older: numbers, no name
            "8388608 Bytes -> Algo 0 proto 0 time 88.000000",
            CollectiveChoice("collective", 8 << 20, "tree", "ll", None, 1),
        ),
        (  # symmetric-memory kernels bypass the algorithm choice
            "AllReduce [Symmetric]: 2097152 Bytes -> Kernel AllReduce_AGxLL_R nchannels 4 nthreads 512 nWorks 1",
            CollectiveChoice("AllReduce", 2 << 20, "symmetric:AllReduce_AGxLL_R", None, None, 1),
        ),
        (
            "AllGather [Copy Engine]: 1024 Bytes -> cudaMemcpyBatchAsync",
            CollectiveChoice("AllGather", 1024, "copy_engine", None, None, 1),
        ),
        ("NCCL_MAX_NCHANNELS set by environment to 4.", SettingRead("NCCL_MAX_NCHANNELS", "4")),
        (
            "NCCL_ALGO set by environment to AllReduce:Tree",
            SettingRead("NCCL_ALGO", "AllReduce:Tree"),
        ),
        ("NCCL_P2P_DISABLE set by environment to 1", SettingRead("NCCL_P2P_DISABLE", "1")),
        ("Channel 00/02 : 0 1", LogMessage("INFO", "Channel 00/02 : 0 1")),
    ],
)
def test_nccl_lines_are_read(message: str, expected: object) -> None:
    assert parse_line(PREFIX + message + "\n") == expected


def test_warnings_and_foreign_lines() -> None:
    warn = "node7:4242:4250 [0] enqueue.cc:2063 (topoGetAlgoInfo) NCCL WARN No algorithm/protocol available"
    assert parse_line(warn) == LogMessage("WARN", "No algorithm/protocol available")
    assert parse_line("node7:4242:4242 [0] NCCL TRACE ...") is None
    assert parse_line("some other program's output") is None


def test_the_debug_file_name_is_expanded_like_nccl_does() -> None:
    assert expand_debug_file("/l/%h/n.%p.%%.%x", pid=12, hostname="gpu3.cluster.org") == Path(
        "/l/gpu3/n.12.%.%x"
    )
    assert expand_debug_file("/l/%h", pid=1) == Path(f"/l/{socket.gethostname().split('.')[0]}")


def test_the_debug_log_is_read_incrementally(tmp_path: Path) -> None:
    log = DebugLog(tmp_path / "nccl.log")
    assert log.read_new() == []  # NCCL has not opened it yet
    line = PREFIX + "AllReduce: 64 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}\n"
    with log.path.open("a") as handle:
        handle.write(line + line[:30])  # NCCL is half-way through the second line
    assert [c.algorithm for c in log.read_new()] == ["tree"]  # type: ignore[union-attr]
    with log.path.open("a") as handle:
        handle.write(line[30:])
    assert [c.nbytes for c in log.read_new()] == [64]  # type: ignore[union-attr]
    assert log.read_new() == []


# -- judging what NCCL ran --------------------------------------------------------------------


def choice(collective: str, algorithm: str, protocol: str | None) -> CollectiveChoice:
    return CollectiveChoice(collective, 1 << 20, algorithm, protocol, (0, 1), 0)


def test_judging_against_the_pins() -> None:
    tree_ll = CollectivePolicy(algorithm="tree", protocol="ll")
    assert not judge(choice("AllReduce", "tree", "ll"), tree_ll).fell_back
    # Broadcast has no tree: the pinned algorithm does not bind it, the protocol does.
    broadcast = judge(choice("Broadcast", "ring", "ll"), tree_ll)
    assert (broadcast.requested, broadcast.fell_back) == ("*/ll", False)
    wrong = judge(choice("AllReduce", "ring", "simple"), tree_ll)
    assert wrong.fell_back
    assert (
        "algorithm 'ring' instead of 'tree' and protocol 'simple' instead of 'll'" in wrong.reason
    )
    assert judge(choice("collective", "ring", "ll"), tree_ll).fell_back  # NCCL <= 2.21
    bypass = judge(choice("AllReduce", "symmetric:AllReduce_RSxLD", None), tree_ll)
    assert bypass.fell_back
    assert "does not use NCCL_ALGO" in bypass.reason
    free = judge(choice("AllReduce", "symmetric:k", None), CollectivePolicy())
    assert (free.pinned, free.fell_back) == (False, False)


# NCCL's own report of each collective (src/enqueue.cc), and what a tree pin makes of it.
TREE_PIN_LINES = {
    "AllReduce: 1048576 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..3}": (
        "honoured",
        "pin",
    ),
    "Broadcast: 4096 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}": (
        "not_applicable",
        "not_applicable",
    ),
    "AllGather: 4096 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}": (
        "not_applicable",
        "not_applicable",
    ),
    "AllReduce: 256 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}": (
        "not_honoured",
        "pin",
    ),
}


@pytest.mark.parametrize(("line", "expected"), TREE_PIN_LINES.items())
def test_a_tree_pin_is_honoured_not_applicable_or_not_honoured_per_collective(
    line: str, expected: tuple[str, str]
) -> None:
    parsed = parse_line(PREFIX + line)
    assert isinstance(parsed, CollectiveChoice)
    tree = CollectivePolicy(algorithm="tree")
    assert judge(parsed, tree).outcome == expected[0]
    (decision,) = decisions({parsed: 1}, tree)
    assert decision.mode == expected[1]
    assert decision.status == ("fallen_back" if expected[0] == "not_honoured" else "decided")
    # Without a pin nothing is claimed pinned, honoured or not applicable.
    assert judge(parsed, CollectivePolicy()).outcome == "free"


def test_on_gloo_the_collective_policy_is_not_applicable_never_honoured(
    clean_process: None, tmp_path: Path
) -> None:
    """A real gloo process group (world size 1): NCCL never runs, so no NCCL setting is
    honoured and no collective decision is recorded, even under fallback='error'."""
    import torch
    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    policy = ExecutionPolicy(
        fallback="error", collectives=CollectivePolicy(algorithm="ring", protocol="simple")
    )
    xdist.init_process_group(
        "gloo",
        policy=policy,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=0,
        world_size=1,
        log_dir=tmp_path,
    )
    try:
        total = torch.ones(4)
        dist.all_reduce(total)
        dist.broadcast(total, src=0)
        record = xdist.collective_record()
    finally:
        dist.destroy_process_group()
    assert record.engine is not None
    assert record.engine.chosen == "torch.distributed gloo"
    assert record.decisions == []
    assert record.fallbacks == []
    algorithm = next(s for s in record.settings if s.name == "collectives.algorithm")
    assert not algorithm.honoured
    assert "not applicable: the process group's backend is gloo" in algorithm.note
    assert not any(s.honoured for s in record.settings)
    assert any("collective policy is not applicable" in note for note in record.notes)


# -- applying and reading back in this process --------------------------------------------------


def nccl_writes(log_dir: Path, *messages: str) -> None:
    """Append lines to this process's debug file as NCCL would (the read-back's input)."""
    with (log_dir / f"nccl.{os.getpid()}.log").open("a") as handle:
        handle.writelines(PREFIX.replace("[1]", "[0]") + m + "\n" for m in messages)


def test_apply_writes_the_environment_and_says_what_it_replaced(
    clean_process: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    os.environ["NCCL_ALGO"] = "Tree"
    os.environ["NCCL_BUFFSIZE"] = "1048576"
    with caplog.at_level(logging.WARNING, logger="xpuruntime.engine.nccl"):
        record = xdist.apply_collective_policy(
            CollectivePolicy(algorithm="ring", max_channels=2), log_dir=tmp_path
        )
    assert os.environ["NCCL_ALGO"] == "Ring"
    assert os.environ["NCCL_MAX_NCHANNELS"] == "2"
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    assert os.environ["NCCL_DEBUG_FILE"] == f"{tmp_path.resolve()}/nccl.%p.log"
    algorithm = next(s for s in record.settings if s.name == "collectives.algorithm")
    assert algorithm.applied == "NCCL_ALGO=Ring"
    assert "replaced NCCL_ALGO='Tree' from the environment" in algorithm.note
    assert "NCCL_ALGO='Tree'" in caplog.text
    assert "NCCL_BUFFSIZE='1048576' comes from the environment, not from the policy" in record.notes
    assert record.kind == "training"
    assert record.policy["execution"]["collectives"]["max_channels"] == 2


def test_a_later_policy_puts_back_what_it_leaves_to_nccl(
    clean_process: None, tmp_path: Path
) -> None:
    os.environ["NCCL_PROTO"] = "LL"
    xdist.apply_collective_policy(
        CollectivePolicy(algorithm="tree", protocol="simple"), log_dir=tmp_path
    )
    assert (os.environ["NCCL_ALGO"], os.environ["NCCL_PROTO"]) == ("AllReduce:Tree", "Simple")
    record = xdist.apply_collective_policy(CollectivePolicy(), log_dir=tmp_path)
    assert "NCCL_ALGO" not in os.environ
    assert os.environ["NCCL_PROTO"] == "LL"
    assert "NCCL_PROTO='LL' comes from the environment, not from the policy" in record.notes


def test_settings_nccl_reads_once_per_process_cannot_change_after_it_ran(
    clean_process: None, tmp_path: Path
) -> None:
    xdist.apply_collective_policy(CollectivePolicy(max_channels=4), log_dir=tmp_path)
    nccl_writes(tmp_path, "NCCL_MAX_NCHANNELS set by environment to 4.")  # NCCL has run
    with pytest.raises(FallbackError, match="NCCL setting NCCL_MAX_NCHANNELS"):
        xdist.apply_collective_policy(
            ExecutionPolicy(fallback="error", collectives=CollectivePolicy(max_channels=8)),
            log_dir=tmp_path,
        )
    assert os.environ["NCCL_MAX_NCHANNELS"] == "4"  # refused before anything changed
    with pytest.warns(FallbackWarning, match="reads this setting once per process"):
        record = xdist.apply_collective_policy(
            ExecutionPolicy(
                fallback="warn", collectives=CollectivePolicy(algorithm="ring", max_channels=8)
            ),
            log_dir=tmp_path,
        )
    (stale,) = record.fallbacks
    assert (stale.what, stale.requested, stale.chosen) == (
        "NCCL setting NCCL_MAX_NCHANNELS",
        "8",
        "4",
    )
    # The algorithm, read again for each communicator, changes without a fallback.
    assert os.environ["NCCL_ALGO"] == "Ring"


def test_policy_sources_follow_the_layering(clean_process: None, tmp_path: Path) -> None:
    os.environ["XPURUNTIME_POLICY_COLLECTIVES_PROTOCOL"] = "ll"
    record = xdist.apply_collective_policy(
        ExecutionPolicy(collectives=CollectivePolicy(algorithm="ring")), log_dir=tmp_path
    )
    assert os.environ["NCCL_PROTO"] == "LL"
    assert record.policy_sources == {
        "execution.collectives.algorithm": "policy",
        "execution.collectives.protocol": "environment (XPURUNTIME_POLICY_COLLECTIVES_PROTOCOL)",
    }


def test_the_record_shows_what_nccl_read_and_ran(clean_process: None, tmp_path: Path) -> None:
    policy = ExecutionPolicy(
        fallback="allow", collectives=CollectivePolicy(algorithm="tree", max_channels=4)
    )
    record = xdist.apply_collective_policy(policy, log_dir=tmp_path)
    assert record.decisions == []
    assert any("NCCL has not written" in note for note in record.notes)
    nccl_writes(
        tmp_path,
        "NCCL_ALGO set by environment to AllReduce:Tree",
        "NCCL_MAX_NCHANNELS set by environment to 4.",
        "AllReduce: 1048576 Bytes -> Algo TREE proto LL128 channel{Lo..Hi}={0..3}",
        "AllReduce: 1048576 Bytes -> Algo TREE proto LL128 channel{Lo..Hi}={0..3}",
        "Broadcast: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}",
    )
    record = xdist.collective_record()
    assert [(d.op, d.kernel, d.mode, d.shape, d.status) for d in record.decisions] == [
        ("AllReduce", "tree/ll128", "pin", "1048576 bytes", "decided"),
        # The tree pin does not bind Broadcast (NCCL has no tree Broadcast): not "pin".
        ("Broadcast", "ring/ll", "not_applicable", "4096 bytes", "decided"),
    ]
    assert record.decisions[0].reason.startswith("pinned tree/* honoured: 2 call(s); channels 0..3")
    assert "'tree' does not apply to Broadcast" in record.decisions[1].reason
    channels = next(s for s in record.settings if s.name == "collectives.max_channels")
    assert (channels.honoured, channels.note) == (True, "NCCL read NCCL_MAX_NCHANNELS=4")
    assert record.fallbacks == []


def test_a_pin_nccl_did_not_honour_follows_the_fallback_mode(
    clean_process: None, tmp_path: Path
) -> None:
    pinned = CollectivePolicy(algorithm="collnet_direct", protocol="simple")
    xdist.apply_collective_policy(
        ExecutionPolicy(fallback="warn", collectives=pinned), log_dir=tmp_path
    )
    nccl_writes(tmp_path, "AllReduce: 256 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}")
    with pytest.warns(FallbackWarning, match="NCCL AllReduce of 256 bytes"):
        record = xdist.collective_record()
    (fallback,) = record.fallbacks
    assert (fallback.requested, fallback.chosen, fallback.mode) == (
        "collnet_direct/simple",
        "ring/simple",
        "warn",
    )
    assert record.decisions[0].status == "fallen_back"
    assert xdist.collective_record().fallbacks == record.fallbacks  # recorded once

    xdist.apply_collective_policy(
        ExecutionPolicy(fallback="error", collectives=pinned), log_dir=tmp_path
    )
    nccl_writes(tmp_path, "AllGather: 512 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}")
    with pytest.raises(FallbackError, match=r"NCCL AllGather of 512 bytes.*fallback='error'"):
        xdist.collective_record()


def test_nccl_warnings_go_to_python_logging(
    clean_process: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    xdist.apply_collective_policy(CollectivePolicy(), log_dir=tmp_path)
    with (tmp_path / f"nccl.{os.getpid()}.log").open("a") as handle:
        handle.write("\nnode7:1:2 [0] init.cc:1 (init) NCCL WARN Cuda failure 'out of memory'\n")
    with caplog.at_level(logging.WARNING, logger="xpuruntime.engine.nccl"):
        xdist.collective_record()
    assert "NCCL: Cuda failure 'out of memory'" in caplog.text


def test_the_record_needs_an_applied_policy(clean_process: None) -> None:
    with pytest.raises(xdist.CollectivePolicyError, match="no collective policy has been applied"):
        xdist.collective_record()


def test_verify_off_leaves_nccl_debug_output_alone(clean_process: None) -> None:
    record = xdist.apply_collective_policy(CollectivePolicy(protocol="simple"), verify=False)
    assert "NCCL_DEBUG" not in os.environ
    assert "NCCL_DEBUG_FILE" not in os.environ
    assert any(note.startswith("not verified") for note in record.notes)


# -- torchrun ---------------------------------------------------------------------------------


def test_torchrun_gloo_applies_the_policy_before_the_process_group(tmp_path: Path) -> None:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "XPURUNTIME_POLICY_"))
    }
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(port),
        str(WORKER), str(tmp_path / "rank%d.json"), str(tmp_path / "logs"),
    ]  # fmt: skip
    # Each rank names its output file by rank: torchrun passes the same arguments to all.
    environ["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "error.json")
    result = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for seen in ranks:
        assert seen["before"]["NCCL_ALGO"] is None
        assert seen["at_rendezvous"] == {
            "NCCL_ALGO": "Ring",
            "NCCL_PROTO": "Simple",
            "NCCL_MAX_NCHANNELS": "4",
            "NCCL_NVLS_ENABLE": "0",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_FILE": str(
                (tmp_path / "logs").resolve() / f"nccl-rank{seen['rank']}.%p.log"
            ),
            "process_group_existed": "False",
        }
        assert seen["all_reduce"] == 3.0
        assert seen["child_nccl_algo"] == "Ring"
        assert "a torch.distributed process group already exists" in seen["late_application"]
        assert "NCCL_ALGO='Ring' (the policy sets 'AllReduce:Tree')" in seen["late_application"]
        record = seen["record"]
        assert record["engine"]["chosen"] == "torch.distributed gloo"
        assert f"rank {seen['rank']} of 2, backend gloo" in record["notes"]
        assert any("NCCL has not written" in note for note in record["notes"])
        assert "the process group existed before" in seen["same_policy_again"]["notes"][0]
