"""ONNX Runtime's lockable decisions: the options that change kernels, and tunable-op results.

What a lock pins for ONNX Runtime: the execution providers in order; the CUDA execution
provider's kernel-selecting options as the session reports them (``cudnn_conv_algo_search``,
``use_tf32``, ``sdpa_kernel``, ``prefer_nhwc``, ``fuse_conv_bias``, the tunable-op switches
...), so a new release with other defaults runs as before; the session's graph optimisation
level, execution mode and determinism; and the results of ONNX Runtime's tunable ops
(``InferenceSession.get_tuning_results``), replayed with ``set_tuning_results`` and tuning
switched off. What it cannot pin: the cuDNN algorithm ``EXHAUSTIVE`` search picks per
convolution (ONNX Runtime keeps that cache in memory only) and the kernels of the CPU
execution provider, which has no choice to make.
"""

from __future__ import annotations

import atexit
import weakref
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.engines.ort_options import CUDA_EP, CUDA_PROVIDER_OPTIONS
from xpuruntime.inference.kit.locking import EngineLock, changed_options
from xpuruntime.policies.lock import LockedChoice

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.policies.lock import LockEntry

#: CUDA execution provider options that select kernels (what a lock pins).
KERNEL_OPTIONS: frozenset[str] = frozenset(
    {
        "cudnn_conv_algo_search",
        "cudnn_conv_use_max_workspace",
        "cudnn_conv1d_pad_to_nc1d",
        "enable_skip_layer_norm_strict_mode",
        "fuse_conv_bias",
        "prefer_nhwc",
        "sdpa_kernel",
        "tunable_op_enable",
        "tunable_op_tuning_enable",
        "use_tf32",
    }
)
assert KERNEL_OPTIONS <= CUDA_PROVIDER_OPTIONS  # replay passes them as engine options
_TUNING = "tuning_results"
#: Replay switches tuning off (the locked results are used instead of timing).
_NOT_COMPARED = frozenset({"tunable_op_tuning_enable", _TUNING})


def _effective(session: Any) -> dict[str, Any]:
    """What the ONNX Runtime session runs with (the lockable part)."""
    options = session.get_session_options()
    provider_options = session.get_provider_options()
    effective: dict[str, Any] = {
        "providers": list(session.get_providers()),
        "graph_optimization_level": str(options.graph_optimization_level).rpartition(".")[2],
        "execution_mode": str(options.execution_mode).rpartition(".")[2],
        "use_deterministic_compute": bool(options.use_deterministic_compute),
    }
    cuda = provider_options.get(CUDA_EP)
    if cuda is not None:
        for name in sorted(KERNEL_OPTIONS & set(cuda)):
            effective[f"{CUDA_EP}.{name}"] = str(cuda[name])
    # get_tuning_results() lists validators even when nothing was tuned: results count only
    # when the session ran tunable ops.
    tuning = session.get_tuning_results()
    if tuning and effective.get(f"{CUDA_EP}.tunable_op_enable") == "1":
        effective[_TUNING] = tuning
    return effective


def replay_options(policy: ExecutionPolicy, entry: LockEntry, lock: EngineLock) -> ExecutionPolicy:
    """Replay: the policy with the locked CUDA options added as engine options."""
    prefix = f"{CUDA_EP}."
    locked = {
        name.removeprefix(prefix): value
        for name, value in entry.choice.options.items()
        if name.startswith(prefix)
    }
    if entry.choice.options.get(_TUNING):
        locked["tunable_op_enable"] = "1"
        locked["tunable_op_tuning_enable"] = "0"
    given = policy.engine_options.get("onnxruntime", {})
    conflicts = [
        f"the policy sets {name}={given[name]!r}, the lock {value!r}"
        for name, value in sorted(locked.items())
        if name in given and str(given[name]) != str(value)
    ]
    if conflicts:
        lock.refuse(entry, "; ".join(conflicts))
        return policy
    if not locked:
        return policy
    lock.record.notes.append(
        "lock: CUDA execution provider options replayed as engine options: "
        + ", ".join(f"{k}={v}" for k, v in sorted(locked.items()))
    )
    return policy.replace(
        engine_options={**policy.engine_options, "onnxruntime": {**given, **locked}}
    )


def lock_choice(ort_session: Any, lock: EngineLock) -> LockedChoice:
    """Record: the options the session runs with (and, at exit, its tunable-op results)."""
    effective = _effective(ort_session)
    if effective.get(f"{CUDA_EP}.tunable_op_enable") == "1":
        _save_tuning_at_exit(lock, ort_session)
    return LockedChoice(kernel=effective["providers"][0], options=effective)


def check_replay(ort_session: Any, entry: LockEntry) -> list[str]:
    """Replay: what differs from the entry (empty: the locked options and tuning hold)."""
    effective = _effective(ort_session)
    locked = {
        k: v for k, v in entry.choice.options.items() if k.rpartition(".")[2] not in _NOT_COMPARED
    }
    differences = changed_options(locked, effective)
    if differences:
        return differences
    tuning = entry.choice.options.get(_TUNING)
    if tuning:
        try:
            ort_session.set_tuning_results(tuning, error_on_invalid=True)
        except Exception as exc:  # ONNX Runtime validates the results against this machine
            return [f"ONNX Runtime rejected the locked tuning results: {exc}"]
    return []


def _save_tuning_at_exit(lock: EngineLock, ort_session: Any) -> None:
    """Tunable ops tune during runs: write their results when the process ends, if the
    session is still alive then (a session dropped earlier keeps what was recorded)."""
    alive = weakref.ref(ort_session)

    def save() -> None:
        session = alive()
        if session is None:
            return
        effective = _effective(session)
        if effective.get(_TUNING):
            lock.save(
                LockedChoice(kernel=effective["providers"][0], options=effective),
                reason="options and tunable-op results at process exit",
            )

    atexit.register(save)
