"""A :class:`CollectivePolicy` as the NCCL environment variables that carry it.

NCCL takes its configuration from the environment only, and reads it when a communicator is
created (debug settings: once per process, at its first log line). So the policy becomes a
set of variables written into ``os.environ`` before the process group exists; processes the
program starts later inherit them.

Names and syntax follow NCCL's own parser (``src/graph/tuning.cc``): algorithm and protocol
names are matched case-insensitively; since NCCL 2.24 ``NCCL_ALGO`` takes per-collective
entries (``AllReduce:Tree``), so an algorithm that only some collectives implement is pinned
for those and the others keep NCCL's choice (before 2.24 the name applies to every
collective, and one that cannot run it fails with ``ncclInvalidUsage``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xpuruntime.policies import CollectivePolicy
from xpuruntime.policies.errors import PolicyConflictError

__all__ = [
    "ALGORITHM_COLLECTIVES",
    "DEBUG_VARIABLES",
    "POLICY_VARIABLES",
    "PROTOCOL_NAMES",
    "READ_ONCE_VARIABLES",
    "NcclSetting",
    "debug_environment",
    "nccl_settings",
]

#: NCCL's name of each algorithm the policy can pin (``ncclAlgoStr``).
ALGORITHM_NAMES = {
    "ring": "Ring",
    "tree": "Tree",
    "collnet_direct": "CollNetDirect",
    "collnet_chain": "CollNetChain",
    "pat": "PAT",
}

#: The collectives (NCCL's function names) each algorithm implements; None: every one.
ALGORITHM_COLLECTIVES: dict[str, tuple[str, ...] | None] = {
    "ring": None,
    "tree": ("AllReduce",),
    "collnet_direct": ("AllReduce", "AllGather", "ReduceScatter"),
    "collnet_chain": ("AllReduce",),
    "pat": ("AllGather", "ReduceScatter"),
}

#: Algorithms NCCL runs with the Simple protocol only.
_SIMPLE_ONLY = ("collnet_direct", "collnet_chain", "pat")

PROTOCOL_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}

#: The first NCCL that reads per-collective ``NCCL_ALGO`` entries.
PER_COLLECTIVE_ALGO_SINCE = (2, 24, 0)

#: Every variable a policy sets, fixed ones included (what a running process group is
#: compared against).
POLICY_VARIABLES = (
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_BUFFSIZE",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
)

#: Variables NCCL reads once per process (cached parameters); NCCL_ALGO and NCCL_PROTO are
#: read again whenever a communicator is created.
READ_ONCE_VARIABLES = (
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_BUFFSIZE",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
)

#: What NCCL's debug log needs for the read-back: INFO level, the TUNING (per-collective
#: choice) and ENV (settings read) subsystems, and a file per process.
DEBUG_VARIABLES = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
_READ_BACK_SUBSYSTEMS = ("ENV", "TUNING")

_MULTICAST_NOTE = (
    "NVLink multicast stays off in every xpuruntime process (NCCL's NVLS algorithms and"
    " PyTorch symmetric-memory multicast); a policy cannot enable it"
)


@dataclass(frozen=True)
class NcclSetting:
    """One environment variable a policy setting maps to (``setting`` is its dotted path)."""

    setting: str
    requested: object
    variable: str
    value: str
    note: str = ""


def nccl_settings(
    policy: CollectivePolicy, *, nccl_version: tuple[int, ...] | None = None
) -> list[NcclSetting]:
    """The environment variables that carry ``policy``, fixed NVLS/multicast ones included.

    ``nccl_version`` (``torch.cuda.nccl.version()``) picks the ``NCCL_ALGO`` syntax; None
    means a current NCCL. Raises :class:`PolicyConflictError` for a combination NCCL would
    refuse at its first collective (an algorithm that runs only the Simple protocol with
    protocol ``ll``/``ll128``).
    """
    algorithm, protocol = policy.algorithm, policy.protocol
    if algorithm in _SIMPLE_ONLY and protocol not in (None, "simple"):
        runs = ", ".join(ALGORITHM_COLLECTIVES[algorithm] or ())
        raise PolicyConflictError(
            f"NCCL runs algorithm {algorithm!r} with the Simple protocol only: with"
            f" protocol={protocol!r} it has no algorithm left for {runs} and fails the first"
            " such collective (ncclInvalidUsage). Set protocol='simple' or leave it to NCCL",
            location="collectives.protocol",
        )
    settings: list[NcclSetting] = []
    if algorithm is not None:
        value, note = _algorithm_value(algorithm, nccl_version)
        settings.append(NcclSetting("collectives.algorithm", algorithm, "NCCL_ALGO", value, note))
    if protocol is not None:
        note = (
            "NCCL enables LL128 by default only on hardware it has validated it on; the"
            " policy forces it on"
            if protocol == "ll128"
            else ""
        )
        settings.append(
            NcclSetting(
                "collectives.protocol", protocol, "NCCL_PROTO", PROTOCOL_NAMES[protocol], note
            )
        )
    for name, variable in (
        ("min_channels", "NCCL_MIN_NCHANNELS"),
        ("max_channels", "NCCL_MAX_NCHANNELS"),
        ("buffer_size", "NCCL_BUFFSIZE"),
    ):
        number = getattr(policy, name)
        if number is not None:
            settings.append(NcclSetting(f"collectives.{name}", number, variable, str(number)))
    for name, variable in (("p2p", "NCCL_P2P_DISABLE"), ("shm", "NCCL_SHM_DISABLE")):
        allowed = getattr(policy, name)
        if allowed is not None:
            value = "0" if allowed else "1"
            settings.append(NcclSetting(f"collectives.{name}", allowed, variable, value))
    settings.append(
        NcclSetting("collectives.nvls", False, "NCCL_NVLS_ENABLE", "0", _MULTICAST_NOTE)
    )
    settings.append(
        NcclSetting(
            "collectives.nvls", False, "TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", _MULTICAST_NOTE
        )
    )
    return settings


def _algorithm_value(algorithm: str, nccl_version: tuple[int, ...] | None) -> tuple[str, str]:
    name = ALGORITHM_NAMES[algorithm]
    collectives = ALGORITHM_COLLECTIVES[algorithm]
    if collectives is None:
        return name, ""
    only = ", ".join(collectives)
    if nccl_version is not None and tuple(nccl_version) < PER_COLLECTIVE_ALGO_SINCE:
        found = ".".join(str(part) for part in nccl_version)
        return name, (
            f"NCCL {found} applies NCCL_ALGO to every collective, and {algorithm} runs only"
            f" {only}: any other collective fails with ncclInvalidUsage (NCCL >= 2.24 pins it"
            " for those collectives only)"
        )
    value = ";".join(f"{collective}:{name}" for collective in collectives)
    return value, f"{algorithm} runs only {only}; other collectives keep NCCL's choice"


def debug_environment(environ: Mapping[str, str], debug_file: str) -> dict[str, str]:
    """The debug variables that make NCCL log its choices into ``debug_file``.

    A level of INFO or TRACE and subsystems the user chose are kept, with ENV and TUNING
    added; ``debug_file`` is used unless the user named a file.
    """
    level = environ.get("NCCL_DEBUG", "").strip().upper()
    subsystems = environ.get("NCCL_DEBUG_SUBSYS", "").strip()
    return {
        "NCCL_DEBUG": level if level in ("INFO", "TRACE") else "INFO",
        "NCCL_DEBUG_SUBSYS": _with_read_back_subsystems(subsystems),
        "NCCL_DEBUG_FILE": environ.get("NCCL_DEBUG_FILE") or debug_file,
    }


def _with_read_back_subsystems(subsystems: str) -> str:
    if not subsystems:
        return "INIT,BOOTSTRAP," + ",".join(_READ_BACK_SUBSYSTEMS)  # NCCL's default + TUNING
    names = [name.strip() for name in subsystems.lstrip("^").split(",") if name.strip()]
    if subsystems.startswith("^"):  # "everything but": take ours out of the exclusions
        kept = [name for name in names if name.upper() not in _READ_BACK_SUBSYSTEMS]
        return "^" + ",".join(kept) if kept else "ALL"
    if "ALL" in (name.upper() for name in names):
        return subsystems
    missing = [s for s in _READ_BACK_SUBSYSTEMS if s not in (n.upper() for n in names)]
    return ",".join([*names, *missing])
