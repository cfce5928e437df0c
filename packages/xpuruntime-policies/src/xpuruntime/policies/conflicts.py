"""Settings that are each valid but cannot hold together.

Checked whenever an ExecutionPolicy or a policy document is built. Engines call
:func:`check_conflicts` again with the engine and device they actually chose, which a policy
with ``engines=[...]`` and ``device="auto"`` leaves open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpuruntime.policies import vocabulary
from xpuruntime.policies.errors import PolicyConflictError

if TYPE_CHECKING:
    from xpuruntime.policies.execution_section import ExecutionSection
    from xpuruntime.policies.kernel_policy import KernelPolicy

#: Precisions that exist only as CUDA math modes / CUDA tensor-core formats.
CUDA_ONLY_PRECISIONS = frozenset({"tf32", "fp8"})


def device_kind(device: str) -> str | None:
    """``"cuda:1"`` -> ``"cuda"``; None for ``"auto"``."""
    kind = device.split(":", 1)[0]
    return None if kind == "auto" else kind


def find_conflicts(
    execution: ExecutionSection,
    kernel: KernelPolicy | None = None,
    *,
    engine: str | None = None,
    device: str | None = None,
) -> list[str]:
    """Each contradiction, as a sentence that says what to change; empty when none.

    ``engine`` and ``device`` narrow the check to what a session chose (``engine`` replaces
    the policy's engine list, ``device`` its device).
    """
    specs = [vocabulary.engine_spec(name) for name in ([engine] if engine else execution.engines)]
    engines = [spec.name for spec in specs]
    kind = device_kind(device or execution.device)
    found: list[str] = []

    if kind is not None:
        if not any(kind in spec.devices for spec in specs):
            known = vocabulary.engines().items()
            able = sorted(name for name, spec in known if kind in spec.devices)
            found.append(
                f"device {kind!r} is not run by any of engines {engines}; add one of {able}"
                " to engines, or change device"
            )
        if execution.cuda_graphs and kind != "cuda":
            found.append(
                f"cuda_graphs=True needs a CUDA device, but device is {kind!r};"
                " set cuda_graphs=False or device='cuda'"
            )
        if execution.precision in CUDA_ONLY_PRECISIONS and kind != "cuda":
            found.append(
                f"precision {execution.precision!r} exists only on CUDA GPUs, but device is"
                f" {kind!r}; choose fp32, fp16, bf16 or int8, or device='cuda'"
            )

    needs_quantized = bool(specs) and all(spec.int8_needs_quantized_model for spec in specs)
    if execution.precision == "int8" and execution.quantized_model is None and needs_quantized:
        found.append(
            f"precision 'int8' on {engines} runs only a quantized (QDQ) model, and"
            " quantized_model is not set; set quantized_model to its path (the model itself"
            " if it is already quantized), or list an engine that can quantize"
        )

    if kernel is not None:
        for op, entry in kernel.entries.items():
            if entry.mode != "pin" or entry.kernel is None:
                continue  # prefer and auto fall back by design, recorded at run time
            spec = vocabulary.find_kernel(op, entry.kernel)
            if kind is not None and kind not in spec.devices:
                runnable = sorted(k.name for k in vocabulary.kernels_for(op) if kind in k.devices)
                alternative = (
                    f"pin one of {runnable}," if runnable else f"no {op} kernel runs on {kind}:"
                )
                found.append(
                    f"{op} is pinned to {spec.name!r}, which runs on {sorted(spec.devices)},"
                    f" but device is {kind!r}; {alternative} use mode 'prefer' or 'auto',"
                    " or change device"
                )
            inference = spec.engines - vocabulary.TRAINING_RUNTIMES
            # A kernel only training runs (torch, xpuruntime ops) is not bound by the
            # inference engine list; one that some engine runs must have that engine listed.
            if inference and not inference & set(engines):
                found.append(
                    f"{op} is pinned to {spec.name!r}, which engines {sorted(inference)} run,"
                    f" but engines are {engines}; add one of them to engines, use mode"
                    " 'prefer' or 'auto', or pin another kernel"
                )
    return found


def check_conflicts(
    execution: ExecutionSection,
    kernel: KernelPolicy | None = None,
    *,
    engine: str | None = None,
    device: str | None = None,
) -> None:
    """Raise PolicyConflictError naming every contradiction :func:`find_conflicts` finds."""
    found = find_conflicts(execution, kernel, engine=engine, device=device)
    if len(found) == 1:
        raise PolicyConflictError(f"contradictory settings: {found[0]}")
    if found:
        raise PolicyConflictError(
            "contradictory settings:\n" + "\n".join(f"  - {line}" for line in found)
        )
