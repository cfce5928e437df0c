"""``export``: a trained model, its policy and its locked decisions as one bundle for inference.

The bundle (see :mod:`xpuruntime.policies.bundle`) holds the ONNX model written by
``torch.onnx.export(..., dynamo=True)``, the policy the model ran under, the decision
lockfile, the environment fingerprint of this machine and reference inputs/outputs computed
by PyTorch here. ``InferenceSession(bundle_dir)`` loads them together and ``verify()`` runs the
reference inputs through the inference engine and compares the outputs.

xpuruntime's own ops become the ONNX they compute, in the form the installed engines run
(:mod:`xpuruntime.pytorch.onnx_forms`); the bundle records, per op call, that form and the
nodes it became (:mod:`xpuruntime.pytorch.export_map`). Every dimension of the inputs is
exported dynamic where the model allows (``torch.export.Dim.AUTO``) unless ``dynamic_shapes``
says otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.bundle import (
    BundleError,
    BundleManifest,
    ExportError,
    ExportRecord,
    file_sha256,
)
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.policies.lock import Lockfile, artifact_folder
from xpuruntime.pytorch import policy as policy_state
from xpuruntime.pytorch.onnx_forms import Forms, optimise
from xpuruntime.pytorch.switches import torch_version

__all__ = ["export"]

_EXPORT_HINT = "pip install 'xpuruntime-torch[export]' (onnxscript, which torch.onnx.export uses)"


def _flatten(value: Any, prefix: str = "output") -> list[tuple[str, torch.Tensor]]:
    """The tensors of a model's output (tensor, tuple/list, dict), in order."""
    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, Mapping):
        return [item for key, v in value.items() for item in _flatten(v, f"{prefix}.{key}")]
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [item for i, v in enumerate(value) for item in _flatten(v, f"{prefix}.{i}")]
    raise BundleError(
        f"the model returned a {type(value).__name__} at {prefix}; a bundle holds tensor"
        " outputs (a tensor, or tuples, lists and dicts of tensors)"
    )


def _host(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    if tensor.dtype == torch.bfloat16:  # NumPy, and so the engines' feeds, have no bfloat16
        raise ExportError(
            "the model takes or returns bfloat16 tensors, which a bundle's reference inputs"
            " and outputs (NumPy) and the engines' feeds cannot hold; export it in float16"
            " or float32 (model.to(torch.float16) and inputs to match)"
        )
    array: np.ndarray[Any, Any] = tensor.detach().to("cpu").contiguous().numpy()
    return array


def _lock_of(lock: str | os.PathLike[str] | Lockfile | None, policy: ExecutionPolicy) -> Any:
    """(Lockfile, its artifact folder or None) to put in the bundle, or (None, None)."""
    if isinstance(lock, Lockfile):
        return lock, None
    path = lock if lock is not None else policy.lock_file
    if path is None:
        return None, None
    if lock is None and policy.lock == "off":
        return None, None
    return Lockfile.load(path), artifact_folder(path)


def export(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...] | torch.Tensor,
    path: str | os.PathLike[str],
    *,
    policy: ExecutionPolicy | None = None,
    lock: str | os.PathLike[str] | Lockfile | None = None,
    dynamic_shapes: Any = None,
    rtol: float = 1e-3,
    atol: float = 1e-5,
    overwrite: bool = False,
    forms: Forms | None = None,
) -> Path:
    """Write ``model`` as a bundle directory at ``path`` and return the path.

    ``policy`` defaults to the execution policy in effect (``set_kernel_policy``), else the
    default one; ``lock`` (a path or a :class:`~xpuruntime.policies.lock.Lockfile`) to the
    policy's ``lock_file`` when it records or replays one. ``example_inputs`` are the
    reference inputs: the model runs on them here (under ``torch.no_grad``) and the outputs
    are stored with ``rtol``/``atol`` for :meth:`InferenceSession.verify`. ``dynamic_shapes``
    goes to ``torch.onnx.export`` as ``torch.export`` takes it; by default every dimension
    of the tensor inputs is ``Dim.AUTO`` (dynamic unless the model fixes it; torch.export
    also fixes a dimension of size 0 or 1 in the example). A model or op that cannot export
    raises :class:`~xpuruntime.policies.bundle.ExportError` naming it. ``forms`` overrides
    the ONNX forms chosen from the installed engines (:func:`~xpuruntime.pytorch.onnx_forms.
    choose_forms` with the probes of the engines that will serve the model, when those are
    not installed here).
    """
    try:
        from xpuruntime.pytorch._onnx_ops import onnx_translations
    except ImportError as error:  # onnxscript: torch.onnx's dynamo exporter needs it too
        raise ImportError(f"exporting a bundle needs onnxscript: {_EXPORT_HINT}") from error
    folder = Path(path)
    if folder.exists():
        if not overwrite:
            raise BundleError(
                f"{folder} exists; pass overwrite=True to replace it, or choose another path"
            )
        shutil.rmtree(folder)
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    execution = policy or policy_state.get_execution_policy() or ExecutionPolicy()
    kernel = policy_state.get_kernel_policy() if policy is None else None
    if kernel is not None and execution.kernel_policy is None:
        execution = execution.replace(kernel_policy=kernel)
    from xpuruntime.runtime import lock as core_lock

    active = core_lock.active()
    if active is not None:
        active.flush()  # the dispatcher's decisions so far go into the lockfile first
    locked, artifacts = _lock_of(lock, execution)
    from xpuruntime.pytorch.export_map import trained_kernels

    trained = trained_kernels(policy_state.current_record().decisions)

    with torch.no_grad():
        expected = _flatten(model(*args))
    tensors = [t for t in args if isinstance(t, torch.Tensor)]
    # Host copies first: a tensor a bundle cannot hold is refused before the export's cost.
    reference_in = [_host(t) for t in tensors]
    reference_out = [_host(t) for _, t in expected]
    folder.mkdir(parents=True)
    onnx_path = folder / "model.onnx"
    if forms is None:
        from xpuruntime.pytorch.onnx_forms import choose_forms

        forms = choose_forms(dtype=_float_dtype(model, args))
    if dynamic_shapes is None:
        dynamic_shapes = _auto_dynamic(args)
    # Traced with PyTorch's own switches: tracing does not depend on them, and torch.export
    # calls cudnn.set_flags(), which refuses per-op fp32_precision values (as a policy
    # writes them) next to an unset global one.
    with policy_state.kernel_policy():
        try:
            program = torch.onnx.export(
                model,
                args,
                dynamo=True,
                opset_version=forms.opset,
                dynamic_shapes=dynamic_shapes,
                custom_translation_table=onnx_translations(forms),
                optimize=False,  # optimised below, with only the fusions the engines run
                verbose=False,
            )
            assert program is not None
            fused = optimise(program.model, forms)
            program.save(str(onnx_path), external_data=False)
        except Exception as error:
            shutil.rmtree(folder, ignore_errors=True)
            raise _export_error(error) from error
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False)
    input_names, output_names = _io_names(graph)
    if len(output_names) != len(expected):
        raise BundleError(
            f"the ONNX model has {len(output_names)} outputs but the model returned"
            f" {len(expected)} tensors; export models whose outputs are all tensors"
        )
    if len(tensors) != len(input_names):
        raise BundleError(
            f"the ONNX model has inputs {input_names} but example_inputs hold {len(tensors)}"
            " tensors; pass the model's tensor inputs positionally"
        )
    reference = {f"input/{n}": a for n, a in zip(input_names, reference_in, strict=True)}
    reference.update({f"output/{n}": a for n, a in zip(output_names, reference_out, strict=True)})
    np.savez(folder / "reference.npz", **reference)  # type: ignore[arg-type]

    from xpuruntime.policies.lock import served_policy_hash
    from xpuruntime.runtime.fingerprint import environment_fingerprint

    served = execution.replace(lock="off", lock_file=None)
    served.save(folder / "policy.json")
    (folder / "environment.json").write_text(
        json.dumps(environment_fingerprint(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    from xpuruntime.pytorch.export_map import exported_ops, input_shapes, model_lock

    ops = exported_ops(graph, forms, trained)
    lock_name = None
    if locked is not None:
        lock_name = "lock.json"
        locked, left_out = model_lock(locked, ops)
        if left_out:
            warnings.warn(
                f"export: {len(left_out)} lock entries for ops this model does not hold were "
                f"left out of the bundle (another model's training): {left_out[:4]}",
                stacklevel=2,
            )
        locked.save(folder / lock_name)
        if artifacts is not None and artifacts.is_dir():
            shutil.copytree(artifacts, artifact_folder(folder / lock_name))

    record = ExportRecord(
        opset=forms.opset,
        engines={f"{probe.engine} {probe.version}": dict(probe.results) for probe in forms.engines},
        probed_dtype=forms.dtype,
        forms={family: forms.describe(family) for family in forms.forms},
        fused=fused,
        ops=ops,
        input_shapes=input_shapes(graph, input_names),
    )
    files = {
        p.relative_to(folder).as_posix(): file_sha256(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    BundleManifest(
        lock=lock_name,
        inputs=input_names,
        outputs=output_names,
        rtol=rtol,
        atol=atol,
        files=files,
        exported_with={
            "torch": torch_version(),
            "policy_hash": served_policy_hash(execution),
        },
        export=record,
    ).save(folder)
    return folder


def _float_dtype(model: torch.nn.Module, args: tuple[Any, ...]) -> str:
    """The floating dtype the model computes in: its first floating parameter's, else its
    first floating input's, else float32."""
    tensors = [*model.parameters(), *(a for a in args if isinstance(a, torch.Tensor))]
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
    return str(dtype).removeprefix("torch.")


def _auto_dynamic(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Every dimension of every tensor argument ``Dim.AUTO``: dynamic unless the model (or
    a size-0/1 example dimension) fixes it."""
    auto = torch.export.Dim.AUTO
    return tuple(
        {axis: auto for axis in range(arg.dim())} if isinstance(arg, torch.Tensor) else None
        for arg in args
    )


_MISSING = re.compile(r"No ONNX function found for <OpOverload\(op='(?P<op>[\w.]+)'")


def _export_error(error: BaseException) -> XpuRuntimeError:
    """The typed error for a failed export: an xpuruntime error a translation raised, or one
    naming the op the exporter has no ONNX for, or the exporter's own summary."""
    cause: BaseException | None = error
    innermost = error
    while cause is not None:
        if isinstance(cause, XpuRuntimeError):
            return ExportError(str(cause))
        innermost, cause = cause, cause.__cause__
    text = str(error)
    missing = _MISSING.search(text)
    if missing is not None:
        op = missing["op"].replace(".", "::", 1)
        return ExportError(
            f"{op} has no ONNX translation: torch.onnx.export cannot write it. Replace the"
            f" call with ops that have one (xpuruntime's own ops all do), or pass a"
            f" custom_translation_table entry for {op} to torch.onnx.export yourself"
        )
    summary = f"{type(innermost).__name__}: {str(innermost).strip()[:500]}"
    return ExportError(
        f"torch.onnx.export could not export the model: {summary} (the exporter's own"
        " traceback is chained to this error)"
    )


def _io_names(model: Any) -> tuple[list[str], list[str]]:
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    return (
        [i.name for i in graph.input if i.name not in initializers],
        [o.name for o in graph.output],
    )
