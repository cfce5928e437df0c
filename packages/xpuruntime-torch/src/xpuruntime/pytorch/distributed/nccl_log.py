"""NCCL's debug log, read back: each collective's algorithm and protocol, the settings NCCL
read from the environment, and its warnings.

With ``NCCL_DEBUG=INFO`` and the ``TUNING`` subsystem, rank 0 of every communicator logs
one line per collective it launches (``src/enqueue.cc``)::

    host:pid:tid [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..3}

NCCL 2.23 printed the algorithm and protocol as numbers, 2.21 and older also without the
collective's name; paths that bypass the algorithm choice (symmetric-memory kernels, copy
engines) log ``AllReduce [Symmetric]: ... -> Kernel ...``. The ``ENV`` subsystem logs
``NCCL_ALGO set by environment to ...`` when NCCL reads a setting.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CollectiveChoice",
    "DebugLog",
    "LogMessage",
    "SettingRead",
    "expand_debug_file",
    "parse_line",
]

# NCCL's enum orders, for the numeric form of 2.23 and older (ncclAlgoStr, ncclProtoStr).
_ALGORITHMS_BY_NUMBER = (
    "tree",
    "ring",
    "collnet_direct",
    "collnet_chain",
    "nvls",
    "nvls_tree",
    "pat",
)
_PROTOCOLS_BY_NUMBER = ("ll", "ll128", "simple")

_LINE = re.compile(r"\[(?P<device>\d+)\] (?:.*? )?NCCL (?P<level>INFO|WARN) (?P<message>.*)$")
_TUNING = re.compile(
    r"^(?:(?P<collective>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algorithm>\w+)"
    r" proto (?P<protocol>\w+)(?: channel\{Lo\.\.Hi\}=\{(?P<low>\d+)\.\.(?P<high>\d+)\})?"
)
_BYPASS = re.compile(
    r"^(?P<collective>\w+) \[(?P<path>[^\]]+)\]: (?P<bytes>\d+) Bytes -> (?P<what>.*)$"
)
_SETTING = re.compile(r"^(?P<variable>NCCL_\w+) set by environment to (?P<value>.*)$")


@dataclass(frozen=True)
class CollectiveChoice:
    """What NCCL ran one collective with.

    ``algorithm`` and ``protocol`` use the policy's names (``ring``, ``simple``); a path
    that bypasses the choice is named ``symmetric:<kernel>``, ``copy_engine`` or the like,
    with ``protocol`` None. ``collective`` is NCCL's function name (``AllReduce``), or
    ``collective`` where NCCL's line does not name it.
    """

    collective: str
    nbytes: int
    algorithm: str
    protocol: str | None
    channels: tuple[int, int] | None
    device: int


@dataclass(frozen=True)
class SettingRead:
    """NCCL reported reading ``variable`` from the environment as ``value``."""

    variable: str
    value: str


@dataclass(frozen=True)
class LogMessage:
    """Any other line: ``level`` is ``INFO`` or ``WARN``."""

    level: str
    text: str


def parse_line(line: str) -> CollectiveChoice | SettingRead | LogMessage | None:
    """One line of NCCL's debug output; None for what is not an INFO or WARN line."""
    found = _LINE.search(line.rstrip("\n"))
    if found is None:
        return None
    message, device = found["message"], int(found["device"])
    if found["level"] == "INFO":
        tuning = _TUNING.match(message)
        if tuning is not None:
            channels = None
            if tuning["low"] is not None:
                channels = (int(tuning["low"]), int(tuning["high"]))
            return CollectiveChoice(
                collective=tuning["collective"] or "collective",
                nbytes=int(tuning["bytes"]),
                algorithm=_name(tuning["algorithm"], _ALGORITHMS_BY_NUMBER),
                protocol=_name(tuning["protocol"], _PROTOCOLS_BY_NUMBER),
                channels=channels,
                device=device,
            )
        bypass = _BYPASS.match(message)
        if bypass is not None:
            return CollectiveChoice(
                collective=bypass["collective"],
                nbytes=int(bypass["bytes"]),
                algorithm=_bypass_name(bypass["path"], bypass["what"]),
                protocol=None,
                channels=None,
                device=device,
            )
        setting = _SETTING.match(message)
        if setting is not None:
            value = setting["value"].strip()
            if re.fullmatch(r"-?\d+\.", value):  # integer parameters end with a period
                value = value[:-1]
            return SettingRead(setting["variable"], value)
    return LogMessage(found["level"], message)


def _name(text: str, by_number: tuple[str, ...]) -> str:
    if text.isdigit():
        number = int(text)
        return by_number[number] if number < len(by_number) else f"#{number}"
    return text.lower()


def _bypass_name(path: str, what: str) -> str:
    kernel = re.match(r"Kernel (\S+)", what)
    label = re.sub(r"\W+", "_", path.strip().lower()).strip("_")
    return f"{label}:{kernel.group(1)}" if kernel else label


def expand_debug_file(template: str, *, pid: int, hostname: str | None = None) -> Path:
    """The file NCCL writes for ``NCCL_DEBUG_FILE=template`` in process ``pid``.

    NCCL replaces ``%h`` with the host name up to its first dot, ``%p`` with the process id
    and ``%%`` with ``%``; anything else after ``%`` stays as written.
    """
    host = (hostname if hostname is not None else socket.gethostname()).split(".")[0]
    return Path(
        re.sub(
            r"%(.)",
            lambda m: {"%": "%", "h": host, "p": str(pid)}.get(m.group(1), m.group(0)),
            template,
        )
    )


class DebugLog:
    """A debug file NCCL appends to, read incrementally: each call returns the lines
    written since the previous one (a line still being written waits for the next call)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def skip_existing(self) -> None:
        """Start after what the file holds now (a new process group reuses the file)."""
        self._offset = self.path.stat().st_size if self.path.exists() else 0
        self._partial = b""

    def read_new(self) -> list[CollectiveChoice | SettingRead | LogMessage]:
        """The parsed lines added since the last call (none while the file does not exist)."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        parsed = (parse_line(line.decode("utf-8", "replace")) for line in lines)
        return [entry for entry in parsed if entry is not None]
