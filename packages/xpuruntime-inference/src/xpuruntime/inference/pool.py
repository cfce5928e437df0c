"""SessionPool: one InferenceSession per listed device under one policy, runs balanced.

    pool = SessionPool("model.onnx", devices=["cuda:0", "cuda:1"], exec_policy=policy)
    out = pool.run({"input": x})                  # from any number of threads
    outputs = pool.map([{"input": x} for x in batches])
    print(pool.record().to_json())                # every run with the device it ran on

Each session runs one call at a time (an engine session's run statistics belong to one
call), so a run waits for a free session; free sessions are taken in turn, which spreads a
light load over the devices. Inputs already on a GPU (PyTorch, CuPy, DLPack) go to a
session on that GPU.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import msgspec

from xpuruntime.inference.device import cuda_device_count
from xpuruntime.inference.errors import InputError
from xpuruntime.inference.session import RUN_HISTORY, InferenceSession
from xpuruntime.inference.tensors import placement
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.record import Choice, ExecutionRecord

if TYPE_CHECKING:
    from xpuruntime.policies import KernelPolicy

__all__ = ["SessionPool", "default_devices"]


def default_devices(policy: ExecutionPolicy) -> list[str]:
    """Every CUDA device for a policy on "auto" or "cuda" (else the CPU); the policy's own
    device when it names one."""
    if policy.device in ("auto", "cuda"):
        count = cuda_device_count()
        if count:
            return [f"cuda:{index}" for index in range(count)]
        return ["cpu"] if policy.device == "auto" else ["cuda"]
    return [policy.device]


@dataclass
class _Slot:
    session: InferenceSession
    busy: bool = False
    runs: int = 0  # successful runs: the index the session gives its next run


class SessionPool:
    """One :class:`InferenceSession` per device (``sessions_per_device`` each), same policy.

    ``devices`` lists device strings (``["cuda:0", "cuda:1"]``, ``["cpu", "cpu"]``); by
    default every CUDA device, else the CPU. The other arguments are those of
    :class:`InferenceSession`. ``run`` is thread-safe; :meth:`record` merges the sessions'
    records, each run marked with its device.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        devices: Sequence[str] | None = None,
        *,
        engine: str = "auto",
        exec_policy: ExecutionPolicy | None = None,
        kernel_policy: KernelPolicy | None = None,
        fp16: bool = False,
        sessions_per_device: int = 1,
        **settings: Any,
    ) -> None:
        policy = exec_policy if exec_policy is not None else ExecutionPolicy()
        if isinstance(devices, str):
            raise PolicyError(
                f"devices must be a list of device strings, got the string {devices!r};"
                f" write [{devices!r}]"
            )
        listed = list(devices) if devices is not None else default_devices(policy)
        if not listed:
            raise PolicyError("devices is empty: list at least one device, e.g. ['cuda:0']")
        if policy.device != "auto" and any(d != policy.device for d in listed):
            raise PolicyError(
                f"ExecutionPolicy(device={policy.device!r}) pins one device but the pool places"
                f" sessions on {listed}; leave the policy's device at 'auto'"
            )
        if isinstance(sessions_per_device, bool) or not (
            isinstance(sessions_per_device, int) and sessions_per_device >= 1
        ):
            raise PolicyError(
                f"sessions_per_device must be a positive integer, got {sessions_per_device!r}"
            )
        self._policy = policy
        self._requested = listed
        # Interleaved (d0, d1, d0, d1 ...): a light load reaches every device first.
        self._slots = [
            _Slot(
                InferenceSession(
                    model,
                    device=device,
                    engine=engine,
                    exec_policy=policy.replace(device="auto"),
                    kernel_policy=kernel_policy,
                    fp16=fp16,
                    **settings,
                )
            )
            for _ in range(sessions_per_device)
            for device in listed
        ]
        self._changed = threading.Condition()
        self._next = 0
        # (slot, the session's run index) per run, pool order, the most recent kept.
        self._log: deque[tuple[int, int]] = deque(maxlen=RUN_HISTORY)

    @property
    def sessions(self) -> tuple[InferenceSession, ...]:
        return tuple(slot.session for slot in self._slots)

    @property
    def devices(self) -> list[str]:
        """The device each session runs on (after any recorded fallback), in slot order."""
        return [slot.session.device for slot in self._slots]

    @property
    def policy(self) -> ExecutionPolicy:
        return self._policy

    def __len__(self) -> int:
        return len(self._slots)

    def __repr__(self) -> str:
        return f"SessionPool({self.devices})"

    # -- running ------------------------------------------------------------------------------
    def run(
        self, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Run once on the next free session (a session on the inputs' GPU for GPU inputs)."""
        index = self._acquire(self._device_of(feeds))
        slot = self._slots[index]
        succeeded = False
        try:
            outputs = slot.session.run(feeds, output_names)
            succeeded = True
            return outputs
        finally:
            with self._changed:
                if succeeded:
                    self._log.append((index, slot.runs))
                    slot.runs += 1
                slot.busy = False
                self._changed.notify_all()

    def map(
        self, feeds: Iterable[Mapping[str, Any]], output_names: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Run every feed, as many at once as there are sessions; outputs in feed order."""
        with ThreadPoolExecutor(max_workers=len(self._slots)) as executor:
            return list(executor.map(lambda f: self.run(f, output_names), feeds))

    def _device_of(self, feeds: Mapping[str, Any]) -> str | None:
        """The GPU the inputs live on (None for host inputs); mixed GPUs are refused."""
        if not isinstance(cast(object, feeds), Mapping):
            return None  # the session explains what a feed must be
        found = {f"cuda:{p.index}" for p in map(placement, feeds.values()) if p.kind == "cuda"}
        if len(found) > 1:
            raise InputError(
                f"inputs live on several GPUs ({', '.join(sorted(found))}); put them on one"
            )
        if found and not any(device in found for device in self.devices):
            raise InputError(
                f"inputs live on {found.pop()} but the pool's sessions run on"
                f" {', '.join(sorted(set(self.devices)))}; move them to one of those or to the host"
            )
        return found.pop() if found else None

    def _acquire(self, device: str | None) -> int:
        with self._changed:
            while True:
                count = len(self._slots)
                for step in range(count):
                    index = (self._next + step) % count
                    slot = self._slots[index]
                    if not slot.busy and (device is None or slot.session.device == device):
                        slot.busy = True
                        self._next = (index + 1) % count
                        return index
                self._changed.wait()

    # -- explaining --------------------------------------------------------------------------
    def records(self) -> list[ExecutionRecord]:
        """Each session's own record, in slot order."""
        return [self._session_record(index) for index in range(len(self._slots))]

    def _session_record(self, index: int) -> ExecutionRecord:
        """A session's record, read while no run holds it (the record reads its run list)."""
        slot = self._slots[index]
        with self._changed:
            while slot.busy:
                self._changed.wait()
            slot.busy = True
        try:
            return slot.session.record()
        finally:
            with self._changed:
                slot.busy = False
                self._changed.notify_all()

    def record(self) -> ExecutionRecord:
        """One record for the pool: what every session decided (identical entries once),
        and the latest runs in pool order, each with the device it ran on."""
        with self._changed:
            log = list(self._log)
            total = self._dispatched_total()
        records = self.records()
        devices = self.devices
        runs_by_slot = [{run.index: run for run in record.runs} for record in records]
        runs = []
        for position, (slot, index) in enumerate(log, start=total - len(log)):
            run = runs_by_slot[slot].get(index)
            if run is not None:  # older than the session's own history
                runs.append(msgspec.structs.replace(run, index=position, device=devices[slot]))
        first = records[0]
        per_device = Counter(devices[slot] for slot, _ in log)
        notes = _unique(note for record in records for note in record.notes)
        notes.append(
            f"session pool: {len(records)} session(s) on {', '.join(devices)}; runs per device"
            f" (latest {len(log)} of {total}): "
            + ", ".join(
                f"{device} {per_device.get(device, 0)}" for device in dict.fromkeys(devices)
            )
        )
        return msgspec.structs.replace(
            first,
            policy=self._policy.to_dict(),
            policy_hash=self._policy.content_hash(),
            engine=_merged_choice([r.engine for r in records], devices),
            device=Choice(
                ", ".join(self._requested),
                ", ".join(devices),
                "session pool: one session per listed device"
                + "".join(
                    f"; {device}: {r.device.reason}"
                    for device, r in zip(devices, records, strict=True)
                    if r.device is not None and r.device.reason not in ("", "requested")
                ),
            ),
            precision=_merged_choice([r.precision for r in records], devices),
            settings=_unique(entry for r in records for entry in r.settings),
            nodes=_unique(entry for r in records for entry in r.nodes),
            decisions=_unique(entry for r in records for entry in r.decisions),
            fallbacks=_unique(entry for r in records for entry in r.fallbacks),
            runs=runs,
            kernels=_unique(entry for r in records for entry in r.kernels),
            cache=_merged_cache([r.cache for r in records], devices),
            notes=notes,
        )

    def _dispatched_total(self) -> int:
        return sum(slot.runs for slot in self._slots)


def _unique(entries: Iterable[Any]) -> list[Any]:
    """Entries in order, each distinct one once (the sessions mostly decide alike)."""
    seen: set[bytes] = set()
    kept = []
    for entry in entries:
        key = msgspec.json.encode(entry)
        if key not in seen:
            seen.add(key)
            kept.append(entry)
    return kept


def _merged_choice(choices: list[Choice | None], devices: list[str]) -> Choice | None:
    """One choice when every session made it; otherwise each device's, named."""
    distinct = _unique(choices)
    if len(distinct) <= 1:
        return distinct[0] if distinct else None
    present = [(d, c) for d, c in zip(devices, choices, strict=True) if c is not None]
    return Choice(
        present[0][1].requested,
        ", ".join(f"{d}: {c.chosen}" for d, c in present),
        "; ".join(f"{d}: {c.reason}" for d, c in present if c.reason),
    )


def _merged_cache(caches: list[dict[str, Any]], devices: list[str]) -> dict[str, Any]:
    """One entry per cache kind when every session found the same; else one per session."""
    merged: dict[str, Any] = {}
    for kind in dict.fromkeys(kind for cache in caches for kind in cache):
        values = [
            (f"{kind} (session {index}, {device})", cache[kind])
            for index, (device, cache) in enumerate(zip(devices, caches, strict=True))
            if kind in cache
        ]
        if len(_unique(value for _, value in values)) == 1:
            merged[kind] = values[0][1]
        else:
            merged.update(values)
    return merged
