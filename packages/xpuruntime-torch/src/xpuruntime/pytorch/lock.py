"""The decision lockfile in PyTorch training: switches and SDPA backends, recorded and replayed.

What PyTorch decides that a lock can pin:

* its process-wide switches in effect under the policy (preferred BLAS library, TF32 and
  fp32 precision modes, the enabled SDPA backends and their priority, cuDNN enabled /
  benchmark / deterministic, deterministic algorithms): one entry per group (``matmul``,
  ``conv``, ``attention``, ``determinism``). Replay writes the locked values the policy
  leaves to PyTorch, and reads every one back;
* the SDPA backend of each :func:`~xpuruntime.pytorch.ops.fused_attention` call signature
  (shapes, dtype, device, mask, causal, dropout, whether gradients flow): record asks
  PyTorch's own selector (``torch._fused_sdp_choice``) which backend it runs; replay runs
  exactly that backend.

What it cannot pin: which algorithm cuDNN's benchmark mode picks per convolution (PyTorch
neither exposes nor persists that cache) and which cuBLAS kernel a matmul runs inside the
chosen library. A choice that cannot be honoured (another GPU, another PyTorch, a backend
that refuses the call) goes through the policy's fallback mode with the reason, and so does
a signature missing from the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend

from xpuruntime.policies.lock import LockedChoice, LockEntry, Signature
from xpuruntime.pytorch import _state
from xpuruntime.pytorch.mapping import ATTENTION_BACKENDS
from xpuruntime.pytorch.switches import SWITCHES, read_all, torch_version, write_changed
from xpuruntime.runtime import lock as core_lock
from xpuruntime.runtime.lockstore import LockStore, find_replayable, lock_store, new_entry
from xpuruntime.runtime.record import DecisionRecord

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime.decisions import Decisions
    from xpuruntime.runtime.record import DecisionStatus, ExecutionRecord

__all__ = ["apply_switch_lock", "attention_kernel", "sdpa_backend"]

#: Lock entry op of each switch group.
_SWITCH_OPS = {
    "preferred_blas_library": "matmul",
    "cuda.matmul.fp32_precision": "matmul",
    "cuda.matmul.allow_tf32": "matmul",
    "float32_matmul_precision": "matmul",
    "cudnn.conv.fp32_precision": "conv",
    "cudnn.rnn.fp32_precision": "conv",
    "cudnn.allow_tf32": "conv",
    "cudnn.deterministic": "conv",
    "cudnn.enabled": "conv",
    "mkldnn.enabled": "conv",
    "cudnn.benchmark": "conv",
    "sdp.flash": "attention",
    "sdp.mem_efficient": "attention",
    "sdp.math": "attention",
    "sdp.cudnn": "attention",
    "sdp.priority_order": "attention",
    "deterministic_algorithms": "determinism",
    "env.CUBLAS_WORKSPACE_CONFIG": "determinism",
}
_NOTES = {
    "matmul": "the BLAS library and fp32 matmul precision; the kernel inside the library is"
    " the library's choice",
    "conv": "cuDNN and oneDNN switches; the algorithms cuDNN benchmark mode picks are not exposed by"
    " PyTorch and cannot be locked",
    "attention": "SDPA backends enabled process-wide and their priority",
    "determinism": "deterministic algorithms and the cuBLAS workspace configuration",
}
_BACKEND_NAMES = {backend: name for name, (backend, _) in ATTENTION_BACKENDS.items()}
_mutex = threading.Lock()
#: (lock file, mode, signature) -> (kernel, mode) already resolved in this process.
_resolved: dict[tuple[str, str, Signature], tuple[str, str]] = {}


#: Switches that change nothing a CPU-only process runs: on such a machine they are neither
#: recorded nor replayed (a CPU run's lock must not name cuBLAS).
_CUDA_ONLY = frozenset(
    {
        "preferred_blas_library",
        "sdp.flash",
        "sdp.mem_efficient",
        "sdp.cudnn",
        "cuda.matmul.fp32_precision",
        "cuda.matmul.allow_tf32",
        "cudnn.conv.fp32_precision",
        "cudnn.rnn.fp32_precision",
        "cudnn.allow_tf32",
        "cudnn.deterministic",
        "cudnn.enabled",
        "cudnn.benchmark",
        "env.CUBLAS_WORKSPACE_CONFIG",
    }
)


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _lockable(name: str) -> bool:
    """Whether switch ``name`` decides something here (all do on a CUDA machine)."""
    return name not in _CUDA_ONLY or torch.cuda.is_available()


def _switch_groups() -> list[str]:
    """The switch groups that decide something here."""
    return sorted(
        {op for name, op in _SWITCH_OPS.items() if _lockable(name) and SWITCHES[name].available()}
    )


def _switch_signature(op: str) -> Signature:
    return ("pytorch", op, "", "", _device(), "switches", "")


def apply_switch_lock(
    kernel: KernelPolicy | None,
    execution: ExecutionPolicy | None,
    policy_writes: Mapping[str, Any],
    decisions: Decisions,
) -> None:
    """Record or replay PyTorch's switches after a policy was applied.

    ``policy_writes`` are the switch values the policy itself set: replay never overrides
    those (a locked value that contradicts them is a fallback, with the reason).
    """
    record = decisions.record
    if execution is None or execution.lock == "off":
        core_lock.deactivate()
        return
    assert execution.lock_file is not None  # ExecutionPolicy checks it
    combined = execution.replace(kernel_policy=kernel) if kernel is not None else execution
    # The core dispatcher's ops (fused_layernorm on the core's kernels, ...) follow the lock.
    core_lock.activate(combined, record)
    store = lock_store(execution.lock_file)
    current = read_all()
    if execution.lock == "record":
        groups: dict[str, dict[str, Any]] = {}
        for name, value in current.items():
            if not _lockable(name):
                continue
            groups.setdefault(_SWITCH_OPS.get(name, "other"), {})[name] = value
        entries = [
            new_entry(
                "pytorch",
                op,
                LockedChoice(
                    backend=values.get("preferred_blas_library") if op == "matmul" else None,
                    options=values,
                ),
                policy=combined,
                device=_device(),
                layout="switches",
                reason=f"PyTorch {torch_version()} switches in effect: {_NOTES.get(op, op)}",
            )
            for op, values in sorted(groups.items())
        ]
        store.record(entries)
        for entry in entries:
            _note(record, entry, "decided", f"switches recorded to {store.path.name}")
        return
    _replay_switches(store, policy_writes, current, decisions)


def follow_state(state: _state.State) -> None:
    """The dispatcher's lock follows the policy back in effect after a scope ends or the
    policy is cleared: a lock that policy does not name is flushed (the file is written at
    scope exit) and stops recording; a lock it names is (re)activated."""
    active = core_lock.active()
    execution = state.execution
    if execution is None or execution.lock == "off" or execution.lock_file is None:
        if active is not None:
            core_lock.deactivate()
        return
    policy = active.policy if active is not None else None
    if policy is None or (policy.lock, policy.lock_file) != (execution.lock, execution.lock_file):
        kernel = state.kernel_policy
        combined = execution.replace(kernel_policy=kernel) if kernel is not None else execution
        core_lock.activate(combined, state.record)


def _replay_switches(
    store: LockStore,
    policy_writes: Mapping[str, Any],
    current: Mapping[str, Any],
    decisions: Decisions,
) -> None:
    lock = store.read()
    record = decisions.record
    target = dict(current)
    locked_ops: list[str] = []
    for op in _switch_groups():
        what = f"PyTorch {op} switches"
        found = find_replayable(lock, _switch_signature(op))
        if not found.entry:
            decisions.replay_fallback(
                what=what,
                locked="locked switches",
                chosen="the policy's and PyTorch's defaults",
                reason=found.reason,
            )
            continue
        conflicts = []
        for name, value in found.entry.choice.options.items():
            if name not in SWITCHES or not SWITCHES[name].available():
                conflicts.append(f"{name} does not exist in PyTorch {torch_version()}")
            elif name in policy_writes and policy_writes[name] != value:
                conflicts.append(
                    f"the policy sets {name}={policy_writes[name]!r}, the lock {value!r}"
                )
            else:
                target[name] = value
        if conflicts:
            decisions.replay_fallback(
                what=what,
                locked=found.entry.chosen(),
                chosen="the policy's values",
                reason="; ".join(conflicts),
            )
        locked_ops.append(op)
    refused = write_changed(target)
    for op in locked_ops:
        entry = find_replayable(lock, _switch_signature(op)).entry
        assert entry is not None
        replayed = {
            name: value
            for name, value in entry.choice.options.items()
            if name in SWITCHES and SWITCHES[name].available() and name not in policy_writes
        }
        wrong = {
            name: SWITCHES[name].read()
            for name, value in replayed.items()
            if SWITCHES[name].read() != value
        }
        if wrong:
            reasons = [
                refused.get(name, f"PyTorch reports {name}={v!r}") for name, v in wrong.items()
            ]
            decisions.replay_fallback(
                what=f"PyTorch {op} switches",
                locked=entry.chosen(),
                chosen=str(wrong),
                reason="; ".join(reasons),
            )
        _note(
            record,
            entry,
            "fallen_back" if wrong else "locked",
            f"switches replayed from {store.path.name}",
        )


def _note(record: ExecutionRecord, entry: LockEntry, status: DecisionStatus, reason: str) -> None:
    record.decisions.append(
        DecisionRecord(
            op=entry.op,
            kernel=entry.chosen(),
            mode="switches",
            reason=reason,
            device=entry.device,
            status=status,
        )
    )


# -- SDPA --------------------------------------------------------------------------------


def _shape(tensor: Tensor | None) -> str:
    return "none" if tensor is None else "x".join(str(size) for size in tensor.shape)


def _signature(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
) -> Signature:
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    mask = "none" if attn_mask is None else f"{str(attn_mask.dtype).removeprefix('torch.')}"
    layout = (
        f"mask={mask}:{_shape(attn_mask)},causal={int(is_causal)},dropout={int(dropout_p > 0)},"
        f"scale={'default' if scale is None else 'given'},grad={int(needs_grad)},"
        f"contiguous={int(all(t.is_contiguous() for t in (query, key, value)))}"
    )
    shape = f"q={_shape(query)},k={_shape(key)},v={_shape(value)}"
    dtype = str(query.dtype).removeprefix("torch.")
    return ("pytorch", "attention", shape, dtype, str(query.device), layout, "")


def sdpa_backend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> str:
    """The SDPA backend PyTorch selects for this call under the switches in effect, asked
    from its own selector (``flash_v2``, ``efficient``, ``cudnn``, ``math``)."""
    extra: dict[str, Any] = {"scale": scale}
    if query.shape[-3:-2] != key.shape[-3:-2]:
        extra["enable_gqa"] = True
    choice = torch._fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, **extra)
    backend = SDPBackend(int(choice))
    return _BACKEND_NAMES.get(backend, backend.name.lower())


def attention_kernel(
    kernel: str,
    mode: str,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
) -> tuple[str, str]:
    """(kernel, mode) for one fused_attention call under the lock of the policy in effect.

    Without a lock, or when the policy itself names the backend, the request is returned
    unchanged. Recording notes PyTorch's choice for the signature; replaying returns the
    locked backend with mode ``"locked"`` (the op then runs exactly that backend, and a
    refusal goes through the fallback mode). Each signature is resolved once per process.
    """
    execution = _state.get_execution_policy()
    if execution is None or execution.lock == "off" or execution.lock_file is None:
        return kernel, mode
    signature = _signature(query, key, value, attn_mask, dropout_p, is_causal, scale)
    memo = (execution.lock_file, execution.lock, signature)
    known = _resolved.get(memo)
    if known is not None:
        return known
    with _mutex:
        if execution.lock == "record":
            result = _record_attention(execution, kernel, mode, signature, query, key, value,
                                       attn_mask, dropout_p, is_causal, scale)  # fmt: skip
        elif kernel != "auto":
            result = (kernel, mode)  # the policy names the backend: nothing to replay
        else:
            result = _replay_attention(execution, signature)
        _resolved[memo] = result
    return result


def _record_attention(
    execution: ExecutionPolicy,
    kernel: str,
    mode: str,
    signature: Signature,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
) -> tuple[str, str]:
    if kernel == "auto":
        chosen = sdpa_backend(query, key, value, attn_mask, dropout_p, is_causal, scale)
        reason = f"PyTorch {torch_version()}'s SDPA selection (torch._fused_sdp_choice)"
    else:
        chosen, reason = kernel, f"the kernel policy's {mode} of {kernel}"
    _, op, shape, dtype, device, layout, _ = signature
    assert execution.lock_file is not None
    combined = execution.replace(kernel_policy=_state.get_kernel_policy())
    lock_store(execution.lock_file).record(
        [
            new_entry(
                "pytorch",
                op,
                LockedChoice(backend=chosen),
                policy=combined,
                shape=shape,
                dtype=dtype,
                device=device,
                layout=layout,
                mode=mode,
                reason=reason,
            )
        ]
    )
    if kernel == "auto" and chosen in ATTENTION_BACKENDS:
        # Run exactly what was recorded (PyTorch's own choice), so the decision names it.
        return str(chosen), "recorded"
    return kernel, mode


def _replay_attention(execution: ExecutionPolicy, signature: Signature) -> tuple[str, str]:
    assert execution.lock_file is not None
    found = find_replayable(lock_store(execution.lock_file).read(), signature)
    backend = found.entry.choice.backend if found.entry is not None else None
    if backend in ATTENTION_BACKENDS:
        return str(backend), "locked"
    reason = found.reason or f"locked backend {backend!r} is not one PyTorch has"
    _state.note_fallback(
        what=f"lock: attention {signature[2]} {signature[3]} on {signature[4]}",
        requested=str(backend or "a locked backend"),
        chosen="PyTorch's selection",
        reason=reason,
    )
    return "auto", "auto"
