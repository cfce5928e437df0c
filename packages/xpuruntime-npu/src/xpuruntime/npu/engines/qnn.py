"""QNN engine: ONNX Runtime with the QNN plugin execution provider (Qualcomm HTP/NPU, GPU).

An adapter over the engine kit (:mod:`xpuruntime.inference.kit`): the kit inspects the model,
applies the precision rule, the kernel table, the limits, the cache and the lockfile. Here the
session is bound to one QNN EP device (``add_provider_for_devices``) with a backend
(htp/gpu/cpu) and HTP performance mode from the policy; the QNN context binary is what the
kit caches (``ep.context_enable``), kept only once it loads again; after creation, ONNX
Runtime's per-node EP assignment says which nodes QNN did not take, each classified and
recorded. On x86_64 the QNN EP offers a CPU device on which the HTP backend runs QNN's HTP
simulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from xpuruntime.inference.kit import BuildPlan, EngineAdapter, KitEngine, Target
from xpuruntime.inference.kit.locking import changed_options
from xpuruntime.npu import qnn_backend
from xpuruntime.npu.engines.kernels import kernel_support
from xpuruntime.npu.engines.qnn_options import (
    BACKENDS,
    QnnOptions,
    choose_backend,
    htp_precisions,
    provider_options,
    session_options,
    session_settings,
)
from xpuruntime.npu.engines.qnn_session import QNNSession, check_assignment, create, zero_feeds
from xpuruntime.npu.errors import unknown_device
from xpuruntime.npu.onnx_model import graph_inputs
from xpuruntime.npu.quantized import require_quantized_model
from xpuruntime.npu.shapes import fixed_input_shapes
from xpuruntime.policies.errors import PolicyError
from xpuruntime.policies.lock import LockedChoice
from xpuruntime.runtime.device import split_kind_index
from xpuruntime.runtime.engines import Availability
from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from pathlib import Path

    from xpuruntime.inference.kernel_mapping import SupportTable
    from xpuruntime.inference.kit import EngineLock, KitSession
    from xpuruntime.npu.qnn_backend import Backend, QnnDevice
    from xpuruntime.policies.lock import LockEntry
    from xpuruntime.runtime.decisions import Decisions

_CONTEXT_MODEL = "model_ctx.onnx"
#: Provider options that say where files are on this machine, not what was decided.
_LOCAL_OPTIONS = frozenset({"backend_path", "profiling_file_path", "json_qnn_graph_dir"})


@dataclass(frozen=True)
class _QnnTarget:
    device: QnnDevice
    backend: Backend
    library: str
    #: Float precisions the backend computes an fp32 model in here.
    floats: tuple[str, ...]

    @property
    def emulated(self) -> bool:
        return self.backend == "htp" and self.device.emulated_htp


def _qnn(target: Target) -> _QnnTarget:
    found: _QnnTarget = target.native
    return found


def _select_device(device: str, found: Sequence[QnnDevice], decisions: Decisions) -> QnnDevice:
    """The QNN EP device for ``device``; a missing NPU/GPU falls back to the CPU device."""
    text = device.strip().lower()
    by_name = {d.name: d for d in found}
    cpu = by_name.get("cpu")
    if text == "auto":
        for kind in ("npu", "gpu", "cpu"):
            match = next((d for d in found if d.kind == kind), None)
            if match is not None:
                return match
    parts = split_kind_index(text)
    if parts is not None and parts[0] in ("npu", "gpu", "cuda"):
        kind, index = parts
        wanted = f"{'gpu' if kind == 'cuda' else kind}:{index or 0}"
        if kind != "cuda" and wanted in by_name:
            return by_name[wanted]
        if cpu is not None:
            decisions.fallback(
                what="device",
                requested=text,
                chosen="cpu",
                reason=f"the QNN EP has no {text} device here; its devices: {sorted(by_name)} "
                f"(the HTP backend runs QNN's HTP simulator there)",
            )
            return cpu
    if text == "cpu" and cpu is not None:
        return cpu
    raise unknown_device(device, engine="The QNN engine", known=[*by_name, "auto"])


class QNNAdapter(EngineAdapter):
    """The QNN EP's steps of the kit's pipeline."""

    name: ClassVar[str] = "qnn"
    cache_kind: ClassVar[str | None] = "qnn"
    lockable: ClassVar[bool] = True

    def __init__(self) -> None:
        self.ort, _ = qnn_backend.import_qnn()

    def version(self, target: Target | None = None) -> str:
        versions = qnn_backend.versions()
        where = f" {_qnn(target).backend} on {target.device}" if target is not None else ""
        return (
            f"ONNX Runtime {versions['onnxruntime']} with the QNN EP "
            f"{versions['onnxruntime-qnn']} (QAIRT {versions['qnn-sdk']}){where}"
        )

    def choose_model(self, model: Path, decisions: Decisions) -> Path:
        return require_quantized_model(model, decisions.policy, decisions.record)

    def target(self, device: str, decisions: Decisions) -> Target:
        found = _select_device(device, qnn_backend.devices(), decisions)
        backend = choose_backend(decisions.policy, found.kind)
        library = qnn_backend.backend_library(backend)
        if library is None:
            raise PolicyError(
                f"the QNN {backend} backend library is not shipped with this onnxruntime-qnn "
                f"({qnn_backend.versions()['onnxruntime-qnn']}); valid here: "
                f"{[b for b in BACKENDS if qnn_backend.backend_library(b)]}. Set "
                f"engine_options={{'qnn': {{'backend_type': 'htp'}}}}."
            )
        floats = htp_precisions(decisions.policy) if backend == "htp" else ("fp32",)
        chosen = _QnnTarget(found, backend, library, floats)
        decisions.record.device = Choice(
            device,
            found.name,
            f"QNN {backend} backend on {found.vendor} {found.kind}"
            + (" (HTP simulator, not an NPU)" if chosen.emulated else ""),
        )
        return Target(found.name, chosen)

    def precisions(self, target: Target) -> Collection[str]:
        return _qnn(target).floats

    def kernel_support(self, target: Target) -> SupportTable | None:
        return kernel_support(self.name, "npu")

    def configure(self, plan: BuildPlan, decisions: Decisions) -> None:
        found = _qnn(plan.target)
        inputs = graph_inputs(plan.info.graph)
        shapes = fixed_input_shapes(
            inputs,
            plan.policy.input_shapes,
            static_shape=plan.policy.static_shape,
            device=f"QNN {found.backend}",
            device_needs_static=True,
        )
        assert shapes is not None  # device_needs_static: every input is fixed or it raised
        options = session_settings(plan.policy, decisions, inputs, shapes)
        options.provider = provider_options(
            plan.policy, decisions, backend=found.backend, library=found.library,
            precision=plan.precision, emulated=found.emulated,
        )  # fmt: skip
        plan.options["qnn"] = options
        plan.options["fixed"] = shapes
        plan.options["shapes"] = repr(sorted((k, list(v)) for k, v in shapes.items()))

    def cache_components(self, plan: BuildPlan) -> Mapping[str, str]:
        found = _qnn(plan.target)
        device = found.device
        return {
            "backend": found.backend,
            "device": f"{device.name} vendor={device.vendor_id:#x} id={device.device_id:#x}",
            "input_shapes": plan.options["shapes"],
        }

    def build(self, plan: BuildPlan, decisions: Decisions) -> Any:
        options: QnnOptions = plan.options["qnn"]
        ep_device = _qnn(plan.target).device.ep_device
        so = session_options(self.ort, options, ep_device)
        load = plan.model
        cache = plan.cache
        if cache is not None:
            context = cache.entry / _CONTEXT_MODEL
            if cache.hit:
                load = context
            else:
                so.add_session_config_entry("ep.context_enable", "1")
                so.add_session_config_entry("ep.context_embed_mode", "1")
                so.add_session_config_entry("ep.context_file_path", str(context))
        session = create(self.ort, load, so, decisions)
        plan.options["loaded"] = load
        plan.options["decisions"] = decisions
        if cache is not None and not cache.hit:
            self._keep_if_it_runs(
                cache.entry / _CONTEXT_MODEL, options, ep_device, plan.options["fixed"], decisions
            )
        return session

    def _keep_if_it_runs(
        self,
        context: Path,
        options: QnnOptions,
        ep_device: Any,
        shapes: Mapping[str, tuple[int, ...]],
        decisions: Decisions,
    ) -> None:
        """Keep the context model ONNX Runtime wrote only once it loads and runs (zeros of the
        fixed input shapes) in a session of its own: ONNX Runtime writes EPContext models
        that fail again, at loading ("Failed to setup QNN input tensors") or at every run
        (ddddocr's captcha model: "ORT Tensor data size does not match QNN tensor data size",
        where the CPU retry a fresh model gets cannot run an EPContext node); those are not
        cached. (One extra run per stored entry.)"""
        record = decisions.record
        if not context.is_file():
            record.cache["qnn"]["store_problem"] = "QNN wrote no context model"
            return
        doing = "load"
        try:
            loaded = create(
                self.ort, context, session_options(self.ort, options, ep_device), decisions
            )
            doing = "run"
            loaded.disable_fallback()
            loaded.run(None, zero_feeds(loaded.get_inputs(), shapes))
        except Exception as exc:  # whatever the reason, this entry must not be served
            context.unlink()
            record.cache["qnn"]["store_problem"] = (
                f"the EPContext model ONNX Runtime wrote does not {doing} again: "
                f"{type(exc).__name__}: {exc}"
            )

    def read_placement(self, built: Any, plan: BuildPlan, decisions: Decisions) -> None:
        options: QnnOptions = plan.options["qnn"]
        offload = options.provider.get("offload_graph_io_quantization", "1") == "1"
        check_assignment(built, plan.options["loaded"], offload, decisions, plan.precision)

    def lock_choice(self, built: Any, plan: BuildPlan, lock: EngineLock) -> LockedChoice | None:
        return LockedChoice(kernel=f"QNN {_qnn(plan.target).backend}", options=self._decided(plan))

    def check_replay(self, built: Any, plan: BuildPlan, entry: LockEntry) -> list[str]:
        return changed_options(entry.choice.options, self._decided(plan))

    @staticmethod
    def _decided(plan: BuildPlan) -> dict[str, str]:
        """The provider options the session runs with (machine-local paths left out)."""
        options: QnnOptions = plan.options["qnn"]
        return {k: v for k, v in options.provider.items() if k not in _LOCAL_OPTIONS}

    def session(self, built: Any, plan: BuildPlan) -> KitSession:
        return QNNSession(self.ort, built, plan.options["decisions"])


class QNNEngine(KitEngine):
    """Qualcomm QNN through ONNX Runtime's QNN plugin EP (onnxruntime-qnn 2.x)."""

    name: ClassVar[str] = "qnn"
    aliases: ClassVar[tuple[str, ...]] = ("qnn-ep",)
    device_kinds: ClassVar[tuple[str, ...]] = ("npu",)
    install_hint: ClassVar[str] = qnn_backend.INSTALL_HINT
    adapter: ClassVar[type[EngineAdapter]] = QNNAdapter

    @classmethod
    def availability(cls) -> Availability:
        try:
            found = qnn_backend.devices()
        except ImportError as exc:
            return Availability(False, reason=str(exc), install_hint=cls.install_hint)
        return Availability(
            bool(found),
            reason="" if found else "the QNN EP registered but offers no device",
            install_hint=cls.install_hint,
            devices=tuple(d.name for d in found),
            versions=qnn_backend.versions(),
        )
