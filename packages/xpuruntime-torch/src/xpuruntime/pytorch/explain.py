"""``explain()``: which kernels ran for which ops in one training step, as a record.

Runs the step under ``torch.profiler`` and reads the device kernels PyTorch attributes to
each innermost operator (correlation ids), then writes them into the same
:class:`~xpuruntime.runtime.record.ExecutionRecord` schema the inference package uses
(``kind="training"``): ``kernels`` (name, op, library, count, total time) and ``nodes``
(operator -> kernel). Each op the policy names a kernel for is checked against where and how
it ran: an op that ran on a device its kernel does not run on (``aten::mm`` on the CPU while
``matmul`` is pinned to ``cublasLt``), or a kernel of another library, goes through the
kernel fallback rule, as in inference (a pin under ``fallback="error"`` raises
:class:`~xpuruntime.runtime.errors.UnsupportedOperationError`). An op launching no device
kernel ran on the CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import torch
from torch._C._autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import PROFILER_OPTIONS
from xpuruntime.pytorch.kernels import LIBRARY_KERNEL, kernel_library, policy_op
from xpuruntime.pytorch.mapping import kernel_devices
from xpuruntime.runtime.record import ExecutionRecord, KernelRecord, NodeRecord, RunRecord

__all__ = ["explain", "record_from_events"]


@dataclass
class _Seen:
    op: str
    aten: str
    library: str | None
    count: int = 0
    total_us: float = 0.0


def _family(event: FunctionEvent) -> tuple[str | None, str]:
    """The policy op of the nearest enclosing operator that has one (and that op's name)."""
    current: FunctionEvent | None = event
    while current is not None:
        family = policy_op(current.name)
        if family is not None:
            return family, current.name
        current = current.cpu_parent
    return None, event.name


def _innermost_cpu_ops(events: list[FunctionEvent]) -> list[FunctionEvent]:
    """CPU operators of a policy op family with no child of the same family."""
    found = []
    for event in events:
        family = policy_op(event.name)
        if family is None or event.device_type != DeviceType.CPU:
            continue
        if any(policy_op(child.name) == family for child in event.cpu_children):
            continue
        found.append(event)
    return found


def _requested(op: str) -> str | None:
    kernel_policy = policy.get_kernel_policy()
    return kernel_policy.get(op) if kernel_policy is not None else None


def _checked_request(op: str) -> tuple[str, str] | None:
    """(kernel, mode) to check ``op``'s runs against; None when there is nothing to check
    (no kernel named, or an entry already through the fallback rule when it was set)."""
    kernel, mode = policy.requested_kernel(op)
    return None if mode == "auto" else (kernel, mode)


def _in_custom_op(event: FunctionEvent) -> bool:
    """Inside one of xpuruntime's custom ops, which check their kernel themselves."""
    current: FunctionEvent | None = event
    while current is not None:
        if current.name.startswith("xpuruntime::"):
            return True
        current = current.cpu_parent
    return False


def _check_device(node: NodeRecord, event: FunctionEvent, device: str) -> None:
    """An op that ran on a device its requested kernel does not run on is a fallback."""
    request = _checked_request(node.op_type)
    if request is None or _in_custom_op(event):
        return
    kernel, mode = request
    devices = kernel_devices(node.op_type, kernel)
    if devices is None or device in devices:
        return
    reason = f"{node.name} ran on {device}; {kernel!r} runs on {'/'.join(sorted(devices))}"
    node.placement, node.reason = "fallback", reason
    policy.note_kernel_fallback(
        op=node.op_type,
        kernel=kernel,
        entry_mode=mode,
        chosen=f"{node.name} on {device}",
        reason=reason,
    )


def _check_libraries(seen: dict[str, _Seen]) -> None:
    for name, entry in seen.items():
        request = _checked_request(entry.op)
        chosen = LIBRARY_KERNEL.get(entry.library or "")
        if request is None or chosen is None or chosen == request[0]:
            continue
        if request[0] not in LIBRARY_KERNEL.values():
            continue  # the policy names a kernel the profiler cannot tell apart
        policy.note_kernel_fallback(
            op=entry.op,
            kernel=request[0],
            entry_mode=request[1],
            chosen=chosen,
            reason=f"the profiler saw {name!r} ({entry.library}) run for {entry.aten}",
        )


# CUPTI's own bookkeeping, listed among device events and kernels but not launched by any op.
_CUPTI_BOOKKEEPING = frozenset({"Activity Buffer Request", "Lazy Function Loading"})


def _launcher_rank(event: FunctionEvent) -> tuple[bool, bool, float]:
    # Correlation ids are not unique: CUPTI bookkeeping events ("Lazy Function Loading",
    # "Activity Buffer Request") can carry an operator's id. Prefer PyTorch operators.
    return (
        getattr(event, "activity_type", "cpu_op") == "cpu_op",
        "::" in event.name,
        event.time_range.start,
    )


def _outside_bookkeeping(event: FunctionEvent) -> FunctionEvent:
    """The operator around a CUPTI bookkeeping event that took its correlation id (PyTorch
    2.11 on an H200 attributed whole steps' kernels to "Activity Buffer Request")."""
    while event.name in _CUPTI_BOOKKEEPING and event.cpu_parent is not None:
        event = event.cpu_parent
    return event


def _kernel_instances(events: list[FunctionEvent]) -> list[tuple[str, float, FunctionEvent]]:
    """(kernel name, duration in µs, launching operator), once per kernel that ran.

    A device-side event shares its CUPTI correlation id (``id``) with the runtime or driver
    call that launched it (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ...), and that call's
    parent is the operator: the launch the profiler itself recorded, preferred where present.
    Otherwise the device event's linked id names the operator; reading device events (not each
    operator's ``kernels`` list, which can repeat a kernel under a colliding id) counts every
    launch once.
    """
    cpu_by_id: dict[int, list[FunctionEvent]] = {}
    launch_by_id: dict[int, FunctionEvent] = {}
    for event in events:
        if event.device_type == DeviceType.CPU:
            cpu_by_id.setdefault(event.id, []).append(event)
            if event.name.startswith(_DEVICE_LAUNCHES) and event.cpu_parent is not None:
                launch_by_id[event.id] = event
    found: dict[tuple[str, int, float], tuple[str, float, FunctionEvent]] = {}
    for event in events:
        if event.device_type == DeviceType.CPU or event.name in _CUPTI_BOOKKEEPING:
            continue
        span = event.time_range
        launch = launch_by_id.get(event.id)
        if launch is not None:
            # PyTorch 2.11 on an H200: the first profiled Triton launches' linked id named a
            # parentless "Activity Buffer Request"; their cuLaunchKernelEx call still sat
            # under the operator.
            launcher = _outside_bookkeeping(launch.cpu_parent)  # type: ignore[arg-type]
        else:
            candidates = cpu_by_id.get(getattr(event, "linked_correlation_id", 0), [])
            if not candidates:
                continue
            launched_before = [c for c in candidates if c.time_range.start <= span.start]
            launcher = _outside_bookkeeping(max(launched_before or candidates, key=_launcher_rank))
        key = (event.name, event.device_index, span.start)
        found.setdefault(key, (event.name, float(span.end - span.start), launcher))
    if found or not events or hasattr(events[0], "linked_correlation_id"):
        return list(found.values())
    # PyTorch without linked ids on events: the operators' kernel lists
    return [
        (kernel.name, float(kernel.duration), event)
        for event in events
        if event.name not in _CUPTI_BOOKKEEPING  # colliding ids list the op's kernels twice
        for kernel in event.kernels
        # legacy CUDA timing attached under the op's own name, and CUPTI bookkeeping
        if kernel.name != event.name and kernel.name not in _CUPTI_BOOKKEEPING
    ]


# CUDA runtime/driver calls that put work on a device: an operator under which one ran
# launched device work, even when the profiler could not tie the kernel to it (PyTorch 2.11
# attributes some kernels to CUPTI's bookkeeping events instead of their operator).
_DEVICE_LAUNCHES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset")


def _launchers_and_callers(
    instances: list[tuple[str, float, FunctionEvent]], events: list[FunctionEvent]
) -> set[int]:
    """ids of the operators that launched device work (a kernel attributed to them, or a CUDA
    launch call inside them), and of every operator around them."""
    starts = [launcher for _, _, launcher in instances]
    starts += [e.cpu_parent for e in events if e.name.startswith(_DEVICE_LAUNCHES) and e.cpu_parent]
    found: set[int] = set()
    for launcher in starts:
        current: FunctionEvent | None = launcher
        while current is not None and id(current) not in found:
            found.add(id(current))
            current = current.cpu_parent
    return found


def record_from_events(
    events: list[FunctionEvent], latency_ms: float | None = None
) -> ExecutionRecord:
    """Build a training record from profiler events (``prof.events()``)."""
    seen: dict[str, _Seen] = {}
    launchers: dict[str, FunctionEvent] = {}
    instances = _kernel_instances(events)
    for name, duration_us, launcher in instances:
        op, aten = _family(launcher)
        if launcher.name in _CUPTI_BOOKKEEPING:  # no operator around it to attribute to
            aten = "(unattributed)"
        entry = seen.setdefault(name, _Seen(op=op or aten, aten=aten, library=None))
        launchers.setdefault(name, launcher)
        entry.library = kernel_library(name, op)
        entry.count += 1
        entry.total_us += duration_us
    _check_libraries(seen)
    nodes: dict[tuple[str, str | None], NodeRecord] = {}
    for name, entry in seen.items():
        if (entry.aten, name) in nodes:
            continue
        node = NodeRecord(
            name=entry.aten,
            op_type=entry.op,
            requested=_requested(entry.op),
            chosen=entry.library,
            kernel=name,
        )
        nodes[(entry.aten, name)] = node
        if policy_op(entry.aten) is not None:
            _check_device(node, launchers[name], "cuda")
    # Operators of a policy op that launched no device kernel ran on the CPU: the innermost
    # one names the kernel that ran.
    launching = _launchers_and_callers(instances, events)
    for event in _innermost_cpu_ops(events):
        if id(event) in launching or (event.name, None) in nodes:
            continue
        op = policy_op(event.name)
        assert op is not None
        node = NodeRecord(
            name=event.name, op_type=op, requested=_requested(op), chosen="cpu", kernel=event.name
        )
        nodes[(event.name, None)] = node
        _check_device(node, event, "cpu")
    base = policy.current_record()
    record = msgspec.structs.replace(
        base,
        settings=list(base.settings),
        decisions=list(base.decisions),
        fallbacks=list(base.fallbacks),
        notes=list(base.notes),
        nodes=list(nodes.values()),
        kernels=[
            KernelRecord(
                name=name,
                op=entry.op,
                library=entry.library,
                count=entry.count,
                total_us=round(entry.total_us, 3),
            )
            for name, entry in seen.items()
        ],
        runs=[RunRecord(index=0, latency_ms=latency_ms)] if latency_ms is not None else [],
    )
    if not seen:
        record.notes.append("no device kernels observed (CPU step): nodes name the CPU operators")
    return record


def explain(step: Callable[..., Any], *args: Any, **kwargs: Any) -> ExecutionRecord:
    """Run ``step(*args, **kwargs)`` once under the profiler and record what ran.

    The step runs for real (a training step updates the model). Returns an
    ``ExecutionRecord(kind="training")`` with the policy's verified settings, the ops'
    decisions, the kernels per op and the step's wall time.
    """
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, **PROFILER_OPTIONS) as prof:
        start = time.perf_counter()
        step(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        latency_ms = (time.perf_counter() - start) * 1e3
    return record_from_events(list(prof.events()), latency_ms)
