"""QNN engine: ONNX Runtime with the QNN plugin execution provider (Qualcomm HTP/NPU, GPU).

The session is bound to one QNN EP device (``add_provider_for_devices``) with a backend
(htp/gpu/cpu) and HTP performance mode from the policy; the QNN context binary is cached by
content (``ep.context_enable``); after creation, ONNX Runtime's per-node EP assignment says
which nodes QNN did not take, and each such fallback goes through the policy's fallback mode.
On x86_64 the QNN EP offers a CPU device on which the HTP backend runs QNN's HTP simulator.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from xpuruntime.inference.cache import CacheKey, CacheLookup, file_digest, open_entry
from xpuruntime.inference.kit.provider_assignment import assigned_nodes, record_assignment
from xpuruntime.inference.errors import InvalidModelError
from xpuruntime.inference.precision import apply_precision
from xpuruntime.inference.tensors import onnx_type_to_numpy_name
from xpuruntime.npu import qnn_backend
from xpuruntime.npu.engines.claim import claim_session
from xpuruntime.npu.engines.contract import (
    closed,
    host_feeds,
    inspect_onnx,
    list_dtypes,
    wanted_outputs,
)
from xpuruntime.npu.errors import StaticShapeRequiredError, unknown_device
from xpuruntime.npu.onnx_model import graph_inputs, graph_io_qdq, load_inferred_graph
from xpuruntime.npu.options import engine_options
from xpuruntime.npu.qnn_backend import Backend
from xpuruntime.npu.quantized import require_quantized_model
from xpuruntime.npu.shapes import fixed_input_shapes
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.engines import Availability, Engine, EngineSession, TensorInfo
from xpuruntime.runtime.errors import UnsupportedOperationError
from xpuruntime.runtime.record import Choice, NodeRecord, SettingRecord

if TYPE_CHECKING:
    from xpuruntime.inference.model_info import ModelInfo
    from xpuruntime.npu.qnn_backend import QnnDevice
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime.record import ExecutionRecord

_OPTION_KEYS = ("backend_type", "htp_performance_mode")
# QNN EP provider options (onnxruntime-qnn 2.x) passed through engine_options["qnn"] as is.
_PROVIDER_OPTIONS = frozenset(
    {
        "soc_model",
        "htp_arch",
        "device_id",
        "vtcm_mb",
        "rpc_control_latency",
        "profiling_level",
        "profiling_file_path",
        "qnn_context_priority",
        "htp_graph_finalization_optimization_mode",
        "enable_htp_fp16_precision",
        "htp_bf16_enable",
        "enable_htp_spill_fill_buffer",
        "offload_graph_io_quantization",
        "enable_htp_shared_memory_allocator",
        "extended_udma",
        "enable_vtcm_backup_buffer_sharing",
        "htp_share_resource_optimization",
        "op_packages",
        "enable_block_quant_weight_optimization",
        "dump_json_qnn_graph",
        "json_qnn_graph_dir",
        "enable_framework_op_trace",
        "framework_op_trace_dir",
        "skip_qnn_version_check",
        "disable_file_mapped_weights",
        "num_graph_prepare_threads",
    }
)
_BACKENDS: tuple[Backend, ...] = ("htp", "gpu", "cpu")
_PERF_MODES = (
    "burst",
    "balanced",
    "default",
    "high_performance",
    "high_power_saver",
    "low_balanced",
    "low_power_saver",
    "power_saver",
    "extreme_power_saver",
    "sustained_high_performance",
)
_PERF_MODE_FOR_HINT = {"latency": "burst", "throughput": "sustained_high_performance"}
_GRAPH_OPT = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
_CONTEXT_MODEL = "model_ctx.onnx"


def _tensor_infos(args: Sequence[Any]) -> list[TensorInfo]:
    return [
        TensorInfo(
            a.name,
            onnx_type_to_numpy_name(a.type),
            tuple(d if isinstance(d, (int, str)) else None for d in a.shape),
        )
        for a in args
    ]


class QNNSession(EngineSession):
    """An ONNX Runtime session bound to one QNN EP device."""

    # ONNX Runtime rejects wrong names, element types, ranks and fixed dimensions itself, and
    # takes whatever it can run (string arrays of any numpy string type included).
    checks_inputs = True

    def __init__(self, session: Any) -> None:
        self._session: Any = session
        self._inputs = _tensor_infos(session.get_inputs())
        self._outputs = _tensor_infos(session.get_outputs())
        self._output_names = [o.name for o in self._outputs]
        self._list_dtypes = list_dtypes(self._inputs)

    def close(self) -> None:
        self._session = None  # released with the last reference

    @property
    def inputs(self) -> Sequence[TensorInfo]:
        return self._inputs

    @property
    def outputs(self) -> Sequence[TensorInfo]:
        return self._outputs

    def run(
        self, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
    ) -> dict[str, Any]:
        session = self._session
        if session is None:
            raise closed("QNN")
        names = wanted_outputs(output_names, self._output_names)
        arrays = host_feeds(feeds, self._list_dtypes)
        return dict(zip(names, session.run(names, arrays), strict=True))


def _select_device(device: str, found: Sequence[QnnDevice], *, decisions: Decisions) -> QnnDevice:
    """The QNN EP device for ``device``; a missing NPU/GPU falls back to the CPU device."""
    text = device.strip().lower()
    by_name = {d.name: d for d in found}
    cpu = by_name.get("cpu")
    if text == "auto":
        for kind in ("npu", "gpu", "cpu"):
            match = next((d for d in found if d.kind == kind), None)
            if match is not None:
                return match
    kind, _, index = text.partition(":")
    if kind in ("npu", "gpu", "cuda") and (not index or index.isdigit()):
        wanted = f"{'gpu' if kind == 'cuda' else kind}:{index or 0}"
        if kind != "cuda" and wanted in by_name:
            return by_name[wanted]
        if cpu is not None:
            emulated = " (the HTP backend runs QNN's HTP simulator there)"
            decisions.fallback(
                what="device",
                requested=text,
                chosen="cpu",
                reason=f"the QNN EP has no {text} device here; its devices: {sorted(by_name)}"
                + emulated,
            )
            return cpu
    if text == "cpu" and cpu is not None:
        return cpu
    raise unknown_device(device, engine="The QNN engine", known=[*by_name, "auto"])


class _QnnBuild:
    """One create_session call: policy -> EP options + session options, recorded."""

    def __init__(self, policy: ExecutionPolicy, record: ExecutionRecord, info: ModelInfo) -> None:
        self.ort, _ = qnn_backend.import_qnn()
        self.policy = policy
        self.record = record
        self.decisions = Decisions(policy, record=record)
        #: The ONNX model's own facts (its stored precision decides what a QDQ model runs).
        self.info = info
        self.options, self.raw = engine_options(
            policy,
            "qnn",
            _OPTION_KEYS,
            _PROVIDER_OPTIONS.__contains__,
            f"QNN provider options {sorted(_PROVIDER_OPTIONS)}",
        )
        self.pending_cache: CacheLookup | None = None
        #: The cache lookup of this session (None: no cache_dir, or the folder is unusable).
        self.cache: CacheLookup | None = None
        #: Why a cached context model was discarded ("" when none was).
        self.discarded = ""
        #: While True, settings are not recorded again (session options rebuilt for a retry).
        self.quiet = False

    def setting(
        self, name: str, requested: Any, applied: Any, honoured: bool = True, note: str = ""
    ) -> None:
        if not self.quiet:
            self.record.settings.append(SettingRecord(name, requested, applied, honoured, note))

    def backend(self, target: QnnDevice) -> Backend:
        requested = self.options.get("backend_type")
        if requested is not None and requested not in _BACKENDS:
            raise PolicyError(
                f"engine_options['qnn']['backend_type'] = {requested!r}; valid: {list(_BACKENDS)}"
            )
        default: Backend = {"npu": "htp", "gpu": "gpu", "cpu": "htp"}[target.kind]  # type: ignore[assignment]
        backend: Backend = requested or default
        note = "HTP simulator on x86_64" if backend == "htp" and target.emulated_htp else ""
        self.setting("engine_options.qnn.backend_type", requested, backend, True, note)
        return backend

    def provider_options(self, backend: Backend, library: str) -> dict[str, str]:
        options: dict[str, str] = {"backend_path": library}
        if backend == "htp":
            mode = (
                self.options.get("htp_performance_mode")
                or _PERF_MODE_FOR_HINT[self.policy.performance_hint]
            )
            if mode not in _PERF_MODES:
                raise PolicyError(
                    f"engine_options['qnn']['htp_performance_mode'] = {mode!r}; valid: {list(_PERF_MODES)}"
                )
            options["htp_performance_mode"] = mode
            self.setting(
                "performance_hint", self.policy.performance_hint, f"htp_performance_mode={mode}"
            )
            options.update(self._precision_options())
        else:
            self.setting(
                "performance_hint",
                self.policy.performance_hint,
                None,
                False,
                f"the QNN {backend} backend has no performance mode",
            )
            self._precision_on(backend)
        raw = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in self.raw.items()}
        for key, value in raw.items():
            self.setting(
                f"engine_options.qnn.{key}",
                self.raw[key],
                value,
                True,
                "passed to the QNN EP as is",
            )
        return {**options, **raw}

    def _precision_options(self) -> dict[str, str]:
        """HTP precision: fp16 (its float default), fp32, int8 from a QDQ model, bf16 on SoC >= 88."""
        precision = self.policy.precision
        soc = str(self.raw.get("soc_model", "0"))
        if self.info.precision == "int8" and precision != "int8":
            # HTP runs a QDQ model's stored int8, as ONNX Runtime's engine records it.
            chosen = apply_precision(
                self.policy, self.info, engine="qnn", record=self.record, supported=()
            )
            self.setting("precision", precision, chosen, False, "the model's Q/DQ precision runs")
            return {}
        if precision == "fp32" or (precision == "fp16" and soc != "0"):
            flag = "1" if precision == "fp16" else "0"
            self.setting("precision", precision, f"enable_htp_fp16_precision={flag}")
            self.record.precision = Choice(precision, precision, "HTP float precision switch")
            return {"enable_htp_fp16_precision": flag}
        if precision == "int8":
            self.setting(
                "precision", "int8", "QDQ model", True, "HTP runs the model's Q/DQ precision"
            )
            self.record.precision = Choice("int8", "int8", "quantized (QDQ) model")
            return {}
        if precision == "bf16" and soc.isdigit() and int(soc) >= 88:
            self.setting("precision", "bf16", "htp_bf16_enable=1")
            self.record.precision = Choice("bf16", "bf16", f"HTP bf16 on soc_model {soc}")
            return {"htp_bf16_enable": "1"}
        why = {
            "fp16": "onnxruntime-qnn enables HTP fp16 only with the SoC named: set "
            "engine_options={'qnn': {'soc_model': '69'}} (your SoC's number)",
            "bf16": "HTP bf16 needs engine_options['qnn']['soc_model'] >= 88 (for example SM8750)",
        }.get(precision, f"the QNN HTP backend has no {precision}")
        self._fallback_precision("fp32", why)
        return {"enable_htp_fp16_precision": "0"}

    def _precision_on(self, backend: Backend) -> None:
        if self.info.precision == "int8" and self.policy.precision != "int8":
            apply_precision(self.policy, self.info, engine="qnn", record=self.record, supported=())
            return
        if self.policy.precision in ("fp32", "int8"):
            self.record.precision = Choice(
                self.policy.precision, self.policy.precision, f"QNN {backend}"
            )
            self.setting("precision", self.policy.precision, self.policy.precision)
            return
        self._fallback_precision(
            "fp32", f"xpuruntime maps only fp32/int8 on the QNN {backend} backend"
        )

    def _fallback_precision(self, chosen: str, why: str) -> None:
        self.decisions.fallback(
            what="precision", requested=self.policy.precision, chosen=chosen, reason=why
        )
        self.setting("precision", self.policy.precision, chosen, False, why)
        self.record.precision = Choice(self.policy.precision, chosen, why)

    def session_options(
        self, shapes: Mapping[str, Sequence[int]], inputs: Sequence[TensorInfo]
    ) -> Any:
        """SessionOptions: placement recording, graph optimization, threads, pinned shapes."""
        so = self.ort.SessionOptions()
        so.log_severity_level = 3  # QNN's info/warning chatter goes to stderr otherwise
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        so.graph_optimization_level = getattr(
            self.ort.GraphOptimizationLevel, _GRAPH_OPT[self.policy.graph_optimization]
        )
        self.setting(
            "graph_optimization",
            self.policy.graph_optimization,
            _GRAPH_OPT[self.policy.graph_optimization],
        )
        if self.policy.num_threads is not None:
            so.intra_op_num_threads = self.policy.num_threads
            self.setting(
                "num_threads",
                self.policy.num_threads,
                self.policy.num_threads,
                True,
                "threads of the CPU EP part; QNN manages its own",
            )
        if self.policy.profiling and "profiling_level" not in self.raw:
            self.setting(
                "profiling",
                True,
                None,
                False,
                "QNN profiles to CSV: set engine_options['qnn'] profiling_level and "
                "profiling_file_path",
            )
        if self.policy.deterministic:
            so.use_deterministic_compute = True
            self.setting("deterministic", True, True, True, "ONNX Runtime deterministic compute")
        self._fix_dims(so, shapes, inputs)
        return so

    def _fix_dims(
        self, so: Any, shapes: Mapping[str, Sequence[int]], inputs: Sequence[TensorInfo]
    ) -> None:
        """Pin symbolic dims with free-dimension overrides (QNN compiles one shape)."""
        pinned: dict[str, int] = {}
        for info in inputs:
            for axis, (dim, value) in enumerate(zip(info.shape, shapes[info.name], strict=True)):
                if isinstance(dim, int):
                    continue
                if dim is None:
                    raise StaticShapeRequiredError(
                        f"input {info.name!r} axis {axis} is dynamic without a name, so ONNX Runtime "
                        f"cannot pin it; fix it in the model, for example: python -m "
                        f"onnxruntime.tools.make_dynamic_shape_fixed --input_name {info.name} "
                        f"--input_shape {','.join(map(str, shapes[info.name]))} in.onnx out.onnx"
                    )
                if pinned.setdefault(dim, value) != value:
                    raise PolicyError(
                        f"input_shapes give dimension {dim!r} two values ({pinned[dim]} and {value}); "
                        f"every input sharing {dim!r} must use one size"
                    )
        for name, value in pinned.items():
            so.add_free_dimension_override_by_name(name, value)
        self.setting(
            "input_shapes",
            self.policy.input_shapes,
            {k: list(v) for k, v in shapes.items()},
            True,
            f"free dimensions pinned: {pinned}" if pinned else "model already static",
        )

    def context_cache(
        self,
        so: Any,
        model: Path,
        backend: Backend,
        target: QnnDevice,
        shapes: Mapping[str, Sequence[int]],
    ) -> Path:
        """Use or make the QNN context binary cached for this content; returns the model to load."""
        if self.policy.cache_dir is None:
            self.record.cache["qnn"] = {
                "enabled": False,
                "reason": "ExecutionPolicy.cache_dir is None",
            }
            return model
        components = {
            "model": file_digest(model),
            "policy": self.policy.content_hash(),
            "backend": backend,
            "device": f"{target.name} vendor={target.vendor_id:#x} id={target.device_id:#x}",
            "input_shapes": repr(sorted((k, list(v)) for k, v in shapes.items())),
            **qnn_backend.versions(),
        }
        found = open_entry(
            self.policy.cache_dir, CacheKey("qnn", components), self.record, self.policy.fallback
        )
        self.cache = found
        if found is None:  # an unusable cache folder, recorded as a fallback
            return model
        if self.discarded:
            self.record.cache["qnn"]["explanation"] = (
                f"miss: the stored context model failed to load ({self.discarded}); "
                f"discarded and rebuilt"
            )
        context_model = found.entry / _CONTEXT_MODEL
        if found.hit and context_model.is_file():
            return context_model
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_embed_mode", "1")
        so.add_session_config_entry("ep.context_file_path", str(context_model))
        self.pending_cache = found
        return model

    def commit_cache(self, fresh_options: Callable[[], Any]) -> None:
        """Publish the context model ONNX Runtime wrote, once it has loaded in a session of
        its own: ONNX Runtime writes EPContext models it cannot load again (a model with CPU
        fallback nodes: "Failed to setup QNN input tensors"), and those are not cached."""
        if self.pending_cache is None:
            return
        found = self.pending_cache
        context_model = found.entry / _CONTEXT_MODEL
        note = "QNN context binary (EPContext model)"
        problem = "" if context_model.is_file() else "QNN wrote no context model"
        if not problem:
            try:
                self.create(context_model, fresh_options())
            except Exception as exc:  # typed by create(); the message is what matters here
                problem = f"the EPContext model ONNX Runtime wrote does not load again: {exc}"
        stored = not problem and found.commit(self.record)
        if problem:
            found.discard()
            self.record.cache["qnn"]["store_problem"] = problem
        self.record.cache["qnn"]["stored"] = stored
        self.setting("cache_dir", self.policy.cache_dir, str(found.path), stored, problem or note)

    def discard_hit(self, problem: str) -> None:
        """A cached context model that failed to load: removed, so that the next lookup
        misses and the rebuild replaces it; that lookup records the miss with this reason."""
        assert self.cache is not None
        shutil.rmtree(self.cache.path, ignore_errors=True)
        self.discarded = problem

    def create(self, model: Path, so: Any) -> Any:
        """Create the session; ONNX Runtime's own silent retry on the CPU EP is caught here.

        When the EP fails to initialise, onnxruntime's Python InferenceSession (up to 1.31)
        prints the error to stdout and retries with the CPU EP only: that retry is a fallback
        like any other. Later releases raise instead, and so does this engine (typed).
        """
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed), warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                session = self.ort.InferenceSession(str(model), sess_options=so)
        except Exception as exc:
            message = " ".join(str(exc).split())
            if "CreateProvider" in message or "creating execution provider" in message:
                raise UnsupportedOperationError(
                    f"the QNN EP failed to start and ONNX Runtime "
                    f"{self.ort.__version__} refused to run without it: {message}. Check "
                    f"engine_options['qnn'] against the QNN EP's provider options"
                ) from exc
            raise InvalidModelError(
                f"ONNX Runtime {self.ort.__version__} with the QNN EP cannot load {model}: "
                f"{message}"
            ) from exc
        if qnn_backend.EP_NAME not in session.get_providers():
            message = " ".join(printed.getvalue().replace("*", "").split()) or "no reason given"
            self.decisions.fallback(
                what="execution provider",
                requested=qnn_backend.EP_NAME,
                chosen=", ".join(session.get_providers()),
                reason=f"the QNN EP failed to start and ONNX Runtime retried without it: {message}",
            )
        return session

    def check_assignment(self, session: Any, model: Path, offload_io: bool) -> None:
        """Per-node EP assignment into the record, classified (host-side shape computation or
        fallback) like every engine's.

        With ``offload_graph_io_quantization=1`` (QNN's default) the Q/DQ nodes at the graph's
        inputs and outputs run on the CPU EP by design: recorded as requested there.
        """
        nodes = assigned_nodes(session) or []
        graph = None
        if any(n.device != qnn_backend.EP_NAME for n in nodes):
            graph = load_inferred_graph(model)
        io_qdq = graph_io_qdq(graph) if offload_io and graph is not None else frozenset()
        offloaded = [n for n in nodes if n.name in io_qdq and n.device != qnn_backend.EP_NAME]
        record_assignment(
            self.record,
            [n for n in nodes if n not in offloaded],
            requested=qnn_backend.EP_NAME,
            policy=self.policy,
            graph=graph,
            precision=self.policy.precision,
            fallback_recorded=qnn_backend.EP_NAME not in session.get_providers(),
        )
        self.record.nodes.extend(
            NodeRecord(
                n.name,
                n.op_type,
                requested=n.device,
                chosen=n.device,
                placement="requested",
                reason="offload_graph_io_quantization=1: QNN hands graph-I/O (de)quantization "
                "to the CPU EP",
            )
            for n in offloaded
        )
        if offloaded:
            self.record.notes.append(
                f"{len(offloaded)} graph-I/O Q/DQ node(s) run on {offloaded[0].device}: QNN's "
                f"offload_graph_io_quantization=1 hands input/output (de)quantization to the CPU"
            )


class QNNEngine(Engine):
    """Qualcomm QNN through ONNX Runtime's QNN plugin EP (onnxruntime-qnn 2.x)."""

    name: ClassVar[str] = "qnn"
    aliases: ClassVar[tuple[str, ...]] = ("qnn-ep",)
    device_kinds: ClassVar[tuple[str, ...]] = ("npu",)
    install_hint: ClassVar[str] = qnn_backend.INSTALL_HINT

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

    def create_session(
        self,
        model: Path,
        *,
        device: str,
        exec_policy: ExecutionPolicy,
        kernel_policy: KernelPolicy | None,
        record: ExecutionRecord,
    ) -> EngineSession:
        qnn_backend.import_qnn()  # a missing plugin is said first
        model = Path(model)
        info = inspect_onnx(model)  # a damaged file is an InvalidModelError before anything
        claim_session(
            self.name, kernel_policy, record, model=model, device=device,
            fallback=exec_policy.fallback,
        )  # fmt: skip
        model_path = require_quantized_model(model, exec_policy, record)
        build = _QnnBuild(
            exec_policy, record, info if model_path == model else inspect_onnx(model_path)
        )
        target = _select_device(device, qnn_backend.devices(), decisions=build.decisions)
        backend = build.backend(target)
        library = qnn_backend.backend_library(backend)
        if library is None:
            raise PolicyError(
                f"the QNN {backend} backend library is not shipped with this onnxruntime-qnn "
                f"({qnn_backend.versions()['onnxruntime-qnn']}); valid here: "
                f"{[b for b in _BACKENDS if qnn_backend.backend_library(b)]}. Set "
                f"engine_options={{'qnn': {{'backend_type': 'htp'}}}}."
            )
        emulated = backend == "htp" and target.emulated_htp
        record.device = Choice(
            device,
            target.name,
            f"QNN {backend} backend on {target.vendor} {target.kind}"
            + (" (HTP simulator, not an NPU)" if emulated else ""),
        )
        inputs = graph_inputs(build.info.graph)
        shapes = fixed_input_shapes(
            inputs,
            exec_policy.input_shapes,
            static_shape=exec_policy.static_shape,
            device=f"QNN {backend}",
            device_needs_static=True,
        )
        assert shapes is not None  # device_needs_static: every input is fixed or it raised
        options = build.provider_options(backend, library)

        def fresh_options() -> Any:
            """The same session options again, for a second session (recorded once)."""
            build.quiet = True
            try:
                so = build.session_options(shapes, inputs)
            finally:
                build.quiet = False
            so.add_provider_for_devices([target.ep_device], options)
            return so

        so = build.session_options(shapes, inputs)
        load = build.context_cache(so, model_path, backend, target, shapes)
        so.add_provider_for_devices([target.ep_device], options)
        try:
            session = build.create(load, so)
        except InvalidModelError as exc:
            if load == model_path:
                raise
            build.discard_hit(str(exc))
            so = fresh_options()
            load = build.context_cache(so, model_path, backend, target, shapes)
            session = build.create(load, so)
        build.commit_cache(fresh_options)
        build.check_assignment(
            session, load, options.get("offload_graph_io_quantization", "1") == "1"
        )
        return QNNSession(session)
