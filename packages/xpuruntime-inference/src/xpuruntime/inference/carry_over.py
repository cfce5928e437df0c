"""Training decisions of a lockfile, carried over to an inference engine where it can take them.

A lock recorded in training holds the PyTorch extension's decisions (SDPA backend per call
signature, BLAS library, TF32 mode, cuDNN benchmark) and the core dispatcher's (kernel and
cuBLASLt algorithm per GEMM shape). An inference engine can express some of them as options;
the rest it cannot, and the record says which and why, one setting per decision group
(``lock.carry_over.<domain>.<op>``), honoured or not. Options the policy sets itself win.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.settings import add_setting

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.policies.lock import LockEntry, Lockfile
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = ["carry_over"]

#: fused_attention backend -> bit of the CUDA execution provider's ``sdpa_kernel`` mask.
SDPA_KERNEL_BITS = {"flash_v2": 1, "efficient": 2, "cudnn": 8, "math": 16}
_TRAINING_DOMAINS = ("pytorch", "core")


def _groups(lock: Lockfile) -> dict[tuple[str, str], list[LockEntry]]:
    groups: dict[tuple[str, str], list[LockEntry]] = defaultdict(list)
    for entry in lock:
        if entry.domain in _TRAINING_DOMAINS:
            kind = "switches" if entry.layout == "switches" else "calls"
            groups[(entry.domain, f"{entry.op} {kind}")].append(entry)
    return dict(sorted(groups.items()))


class _Mapping:
    """The decisions of one group mapped onto one engine and device."""

    def __init__(self, engine: str, device: str) -> None:
        self.engine = engine
        self.on_cuda = engine == "onnxruntime" and device.startswith("cuda")
        self.options: dict[str, Any] = {}

    def map(self, domain: str, group: str, entries: list[LockEntry]) -> tuple[Any, Any, str]:
        """(training choice, engine option applied or None, why)."""
        choices = sorted({entry.chosen() for entry in entries})
        requested: Any = choices[0] if len(choices) == 1 else choices
        if domain == "core":
            return (
                requested,
                None,
                (
                    f"{self.engine} runs its own kernels for {group.split()[0]}; no option takes"
                    " the core dispatcher's kernel or a cuBLASLt algorithm"
                ),
            )
        op = group.split()[0]
        if op == "attention" and group.endswith("calls"):
            return self._attention(entries, requested)
        if op == "matmul":
            return self._matmul(entries[0], requested)
        if op == "conv":
            return self._conv(entries[0], requested)
        if op == "determinism":
            return requested, None, "determinism follows the policy's 'deterministic' setting"
        return requested, None, f"{self.engine} has no counterpart of PyTorch's {op} switches"

    def _attention(self, entries: list[LockEntry], requested: Any) -> tuple[Any, Any, str]:
        backends = sorted({str(entry.choice.backend) for entry in entries})
        if not self.on_cuda:
            return (
                requested,
                None,
                (
                    f"{self.engine} on this device has no SDPA backend option (the CUDA execution"
                    " provider's sdpa_kernel is the only one)"
                ),
            )
        if len(backends) > 1:
            return (
                backends,
                None,
                (
                    f"training ran different SDPA backends per shape ({', '.join(backends)});"
                    " ONNX Runtime takes one sdpa_kernel mask per session"
                ),
            )
        bit = SDPA_KERNEL_BITS.get(backends[0])
        if bit is None:
            return backends[0], None, f"sdpa_kernel has no bit for {backends[0]!r}"
        self.options["sdpa_kernel"] = str(bit)
        return (
            backends[0],
            f"sdpa_kernel={bit}",
            (
                "applies to ONNX Runtime's fused attention ops (MultiHeadAttention, GroupQuery"
                "Attention); plain MatMul/Softmax graphs are not fused attention"
            ),
        )

    def _matmul(self, entry: LockEntry, requested: Any) -> tuple[Any, Any, str]:
        options = entry.choice.options
        tf32 = options.get("cuda.matmul.fp32_precision") == "tf32" or bool(
            options.get("cuda.matmul.allow_tf32")
        )
        if not self.on_cuda:
            return requested, None, f"{self.engine} here has no BLAS library or TF32 option"
        self.options["use_tf32"] = "1" if tf32 else "0"
        library = entry.choice.backend
        note = (
            "the CUDA execution provider runs MatMul/Gemm through cuBLAS, as training did"
            if library == "cublas"
            else f"the CUDA execution provider always uses cuBLAS; {library!r} cannot be chosen"
        )
        return requested, f"use_tf32={self.options['use_tf32']}", note

    def _conv(self, entry: LockEntry, requested: Any) -> tuple[Any, Any, str]:
        options = entry.choice.options
        if not self.on_cuda:
            return requested, None, f"{self.engine} here has no cuDNN algorithm search option"
        if options.get("cudnn.deterministic"):
            return requested, None, "deterministic cuDNN: the policy's 'deterministic' decides"
        search = "EXHAUSTIVE" if options.get("cudnn.benchmark") else "HEURISTIC"
        self.options["cudnn_conv_algo_search"] = search
        return (
            requested,
            f"cudnn_conv_algo_search={search}",
            (
                "cuDNN benchmark mode maps to an exhaustive search, heuristics to HEURISTIC; the"
                " algorithms themselves are searched again (cuDNN's cache cannot be saved)"
            ),
        )


def carry_over(
    lock: Lockfile,
    engine: str,
    device: str,
    policy: ExecutionPolicy,
    record: ExecutionRecord,
) -> ExecutionPolicy:
    """Record what of the lock's training decisions ``engine`` on ``device`` takes, and
    return the policy with those as engine options (the policy's own options win)."""
    groups = _groups(lock)
    if not groups:
        return policy
    mapping = _Mapping(engine, device)
    for (domain, group), entries in groups.items():
        requested, applied, note = mapping.map(domain, group, entries)
        add_setting(
            record,
            f"lock.carry_over.{domain}.{group.replace(' ', '_')}",
            requested,
            applied,
            applied is not None,
            f"{len(entries)} training decision(s): {note}",
        )
    given = policy.engine_options.get(engine, {})
    taken = {k: v for k, v in mapping.options.items() if k not in given}
    for name in sorted(set(mapping.options) - set(taken)):
        record.notes.append(
            f"lock: carried-over {name}={mapping.options[name]} not applied: the policy (or the"
            f" engine's own locked entry) sets {name}={given[name]!r}"
        )
    if not taken:
        return policy
    return policy.replace(engine_options={**policy.engine_options, engine: {**given, **taken}})
