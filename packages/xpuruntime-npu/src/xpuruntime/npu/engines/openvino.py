"""OpenVINO engine: ONNX (or OpenVINO IR) compiled for NPU, CPU, GPU or AUTO under a policy.

Every ExecutionPolicy setting maps to an OpenVINO property, is read back from the compiled
model, and goes into the record as honoured or not; the devices that actually execute
(``EXECUTION_DEVICES``) are checked against the device the user required.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from xpuruntime.inference.cache import CacheKey, CacheLookup, file_digest, open_entry
from xpuruntime.inference.placement import PlacedNode, classify, record_placement
from xpuruntime.inference.precision import apply_precision
from xpuruntime.npu import openvino_backend
from xpuruntime.npu.engines.claim import claim_session
from xpuruntime.npu.engines.contract import inspect_onnx
from xpuruntime.npu.engines.openvino_session import OpenVINOSession, tensor_infos
from xpuruntime.npu.openvino_devices import OpenVINOTarget, resolve_target, xrt_name
from xpuruntime.npu.openvino_lock import compile_model
from xpuruntime.npu.openvino_model import onnx_io, port_names, refusal, refuse_strings
from xpuruntime.npu.options import engine_options
from xpuruntime.npu.quantized import require_quantized_model
from xpuruntime.npu.shapes import fixed_input_shapes
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.engines import Availability, Engine, EngineSession
from xpuruntime.runtime.record import Choice, SettingRecord

if TYPE_CHECKING:
    from xpuruntime.inference.model_info import ModelInfo
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime.record import ExecutionRecord

# ExecutionPolicy.precision -> (OPTIMIZATION_CAPABILITIES entry, INFERENCE_PRECISION_HINT).
# tf32 and fp8 have no OpenVINO counterpart; int8 comes from a quantized model, not a hint.
_PRECISION_HINTS = {"fp32": ("FP32", "f32"), "fp16": ("FP16", "f16"), "bf16": ("BF16", "bf16")}
_HINT_TO_PRECISION = {hint: name for name, (_, hint) in _PRECISION_HINTS.items()}
#: The substitution rule for a float precision a device does not list in its
#: OPTIMIZATION_CAPABILITIES: the first of these it lists runs instead, set explicitly as
#: INFERENCE_PRECISION_HINT and read back after compiling. The other 16-bit format keeps the
#: width (memory, bandwidth) the policy chose; fp32 is the last resort. A device listing none
#: of them runs its own default (its INFERENCE_PRECISION_HINT). OpenVINO's CPU plugin does
#: the same on its own (an unsupported f16 hint leaves its bf16 default on AVX512-BF16/AMX
#: CPUs, f32 elsewhere); here the choice is made explicit and recorded.
PRECISION_SUBSTITUTES: dict[str, tuple[str, ...]] = {
    "fp32": ("fp16", "bf16"),
    "tf32": ("fp32", "fp16", "bf16"),
    "fp16": ("bf16", "fp32"),
    "bf16": ("fp16", "fp32"),
    "fp8": ("fp16", "bf16", "fp32"),
}
_OPTION_KEYS = ("num_streams",)
_SKIPPED_LAYERS = {"Input", "Output", "Const"}
_INT8_PRECISIONS = {"i8", "u8"}
#: INFERENCE_NUM_THREADS is an int32 property (OpenVINO caps it at the cores itself).
_MAX_THREADS = 2**31 - 1


def _device_default_precision(device: str) -> str:
    """What the device runs when no hint is given (read from the device itself)."""
    hint = openvino_backend.device_property(device, "INFERENCE_PRECISION_HINT")
    return _precision_of(hint) if hint is not None else "default"


def _precision_of(hint: Any) -> str:
    """An INFERENCE_PRECISION_HINT value (an OpenVINO element type) as a policy precision."""
    name = hint.to_string() if hasattr(hint, "to_string") else str(hint)
    return _HINT_TO_PRECISION.get(name, name)


def runtime_precision(rt_info: Any) -> str | None:
    """The element type a runtime-graph op executes in (its ``runtimePrecision`` runtime
    info: ``f32``, ``i8`` ...), as the plugin reports it; None when it reports none."""
    return str(rt_info["runtimePrecision"].astype(str)) if "runtimePrecision" in rt_info else None


def substitute_precision(precision: str, capabilities: Sequence[str]) -> str | None:
    """The precision :data:`PRECISION_SUBSTITUTES` picks for a device with ``capabilities``
    that cannot run ``precision``; None when it lists none of them (the device default runs)."""
    for candidate in PRECISION_SUBSTITUTES.get(precision, ()):
        if _PRECISION_HINTS[candidate][0] in capabilities:
            return candidate
    return None


class _Compilation:
    """One create_session call: policy -> properties -> compiled model, recorded."""

    def __init__(self, policy: ExecutionPolicy, record: ExecutionRecord) -> None:
        self.ov = openvino_backend.import_openvino()
        self.core = openvino_backend.core()
        self.policy = policy
        self.record = record
        self.decisions = Decisions(policy, record=record)
        #: The ONNX model's own facts (None for an OpenVINO IR model).
        self.info: ModelInfo | None = None
        self.options, self.raw = engine_options(
            policy,
            "openvino",
            _OPTION_KEYS,
            str.isupper,
            "OpenVINO properties in upper case (ENABLE_CPU_PINNING, ...), passed as is",
        )
        self.cache: CacheLookup | None = None
        #: Device kind -> the precision it runs instead of the requested one.
        self.substituted: dict[str, str] = {}
        #: (what runs instead, why) once a precision fallback is recorded.
        self.substitution: tuple[str, str] | None = None

    def setting(
        self, name: str, requested: Any, applied: Any, honoured: bool, note: str = ""
    ) -> None:
        self.record.settings.append(SettingRecord(name, requested, applied, honoured, note))

    @property
    def runs_stored_int8(self) -> bool:
        """A quantized ONNX model asked to run in a float precision runs its stored int8, as
        ONNX Runtime's engine records it (the same rule, inference.precision)."""
        return (
            self.info is not None
            and self.info.precision == "int8"
            and self.policy.precision != "int8"
        )

    def precision_properties(self, target: OpenVINOTarget) -> dict[str, Any]:
        """INFERENCE_PRECISION_HINT per device kind that can run the requested precision."""
        precision = self.policy.precision
        if self.runs_stored_int8:
            assert self.info is not None
            chosen = apply_precision(
                self.policy, self.info, engine="openvino", record=self.record, supported=()
            )
            self.setting("precision", precision, chosen, False, self.record.precision.reason)  # type: ignore[union-attr]
            return {}
        if precision == "int8":
            supported = [k for k in target.kinds if "INT8" in openvino_backend.capabilities(k)]
            if not supported:
                self._precision_fallback(
                    target, {k: _device_default_precision(k) for k in target.kinds}
                )
            self.setting(
                "precision",
                "int8",
                "quantized model",
                bool(supported),
                "int8 runs from the quantized model's FakeQuantize/QDQ nodes",
            )
            return {}
        capability, hint = _PRECISION_HINTS.get(precision, (None, None))
        per_device: dict[str, dict[str, Any]] = {}
        substituted: dict[str, str] = {}
        for kind in target.kinds:
            caps = openvino_backend.capabilities(kind)
            if hint is not None and capability in caps:
                per_device[kind] = {"INFERENCE_PRECISION_HINT": hint}
                continue
            substitute = substitute_precision(precision, caps)
            substituted[kind] = substitute or _device_default_precision(kind)
            if substitute is not None:
                per_device[kind] = {"INFERENCE_PRECISION_HINT": _PRECISION_HINTS[substitute][1]}
        self.substituted = substituted
        if substituted and len(substituted) == len(target.kinds):  # no candidate runs it
            self._precision_fallback(target, substituted)
        return per_device

    def _precision_fallback(
        self, target: OpenVINOTarget, substituted: Mapping[str, str], executed: str = ""
    ) -> None:
        """Apply the fallback mode to a precision the device(s) cannot run; what runs
        instead is read back after compiling (``_check_precision``)."""
        precision = self.policy.precision
        chosen = "/".join(dict.fromkeys(substituted.values()))
        caps = {k: list(openvino_backend.capabilities(k)) for k in substituted}
        order = PRECISION_SUBSTITUTES.get(precision, ())
        rule = (
            f"substitution order {' -> '.join((precision, *order))} picks {chosen}"
            if any(substitute_precision(precision, c) for c in caps.values())
            else f"the device default {chosen} runs"
        )
        on = executed or "/".join(substituted)
        why = f"OpenVINO {on} cannot run {precision} (OPTIMIZATION_CAPABILITIES: {caps}); {rule}"
        self.decisions.fallback(what="precision", requested=precision, chosen=chosen, reason=why)
        self.substitution = (chosen, why)

    def properties(self, target: OpenVINOTarget, model_files: Sequence[Path]) -> dict[str, Any]:
        """compile_model properties for ``target``; AUTO gets per-device ones in DEVICE_PROPERTIES."""
        per_device = self.precision_properties(target)
        props: dict[str, Any] = {"PERFORMANCE_HINT": self.policy.performance_hint.upper()}
        self._unmapped_settings()
        if self.policy.num_threads is not None:
            if self.policy.num_threads > _MAX_THREADS:
                raise PolicyError(
                    f"num_threads={self.policy.num_threads} is beyond what OpenVINO takes "
                    f"(INFERENCE_NUM_THREADS is a 32-bit int: 1 to {_MAX_THREADS}); OpenVINO "
                    f"caps it at the CPU's cores anyway"
                )
            for kind in target.kinds:
                per_device.setdefault(kind, {})["INFERENCE_NUM_THREADS"] = self.policy.num_threads
        if "num_streams" in self.options:
            props["NUM_STREAMS"] = self.options["num_streams"]
        if self.policy.profiling:
            props["PERF_COUNT"] = True
            self.setting(
                "profiling", True, "PERF_COUNT=True", True, "per-op counters in the request"
            )
        if self.policy.cache_dir is not None:
            entry = self._cache_entry(target, model_files)
            if entry is not None:
                props["CACHE_DIR"] = str(entry)
        else:
            self.record.cache["openvino"] = {
                "enabled": False,
                "reason": "ExecutionPolicy.cache_dir is None",
            }
        raw = self.raw
        for key, value in raw.items():
            self.setting(
                f"engine_options.openvino.{key}",
                value,
                value,
                True,
                "passed to compile_model as is",
            )
        if target.compile_device.startswith("AUTO"):
            if per_device:
                props["DEVICE_PROPERTIES"] = per_device
        else:
            props.update(per_device.get(target.compile_device.split(".")[0], {}))
        return {**props, **raw}

    def _unmapped_settings(self) -> None:
        """Settings OpenVINO has no switch for, recorded as not honoured with the reason."""
        level = self.policy.graph_optimization
        self.setting(
            "graph_optimization",
            level,
            "all" if level == "all" else None,
            level == "all",
            "OpenVINO's plugins always run their full transformation pipeline; there is no "
            "level to choose",
        )
        memory = self.policy.memory
        self.setting(
            "memory.pool",
            memory.pool,
            None,
            False,
            "OpenVINO has no memory-pool switch: its plugins manage their own memory",
        )
        if memory.limit_bytes is not None:
            self.setting(
                "memory.limit_bytes",
                memory.limit_bytes,
                None,
                False,
                "OpenVINO has no memory limit option",
            )

    def _cache_entry(self, target: OpenVINOTarget, model_files: Sequence[Path]) -> Path | None:
        """The cache folder for model + policy + OpenVINO version + devices (CACHE_DIR); None
        when the cache folder is unusable (a fallback under the policy's mode)."""
        components = {
            "model": file_digest(model_files[0]),
            "policy": self.policy.content_hash(),
            "openvino": self.ov.get_version(),
            "compile_device": target.compile_device,
        }
        if len(model_files) > 1:
            components["weights"] = file_digest(model_files[1])
        for name in target.candidates:
            components[f"device {name}"] = str(
                openvino_backend.device_property(name, "FULL_DEVICE_NAME")
            )
        found = open_entry(
            self.policy.cache_dir,
            CacheKey("openvino", components),
            self.record,
            self.policy.fallback,
        )
        self.cache = found
        return None if found is None else found.entry

    def check_compiled(
        self, compiled: Any, target: OpenVINOTarget, props: Mapping[str, Any]
    ) -> list[str]:
        """Read back what the compiled model runs with; record honoured/not and fallbacks."""
        supported = compiled.get_property("SUPPORTED_PROPERTIES")
        executed = [str(d) for d in compiled.get_property("EXECUTION_DEVICES")]

        def read(name: str) -> Any:
            return compiled.get_property(name) if name in supported else None

        self.setting(
            "performance_hint",
            self.policy.performance_hint,
            str(read("PERFORMANCE_HINT")),
            str(read("PERFORMANCE_HINT")) == props["PERFORMANCE_HINT"],
        )
        if "NUM_STREAMS" in props:
            streams = read("NUM_STREAMS")
            self.setting(
                "engine_options.openvino.num_streams",
                props["NUM_STREAMS"],
                streams,
                str(streams) == str(props["NUM_STREAMS"]),
            )
        self._check_precision(read("INFERENCE_PRECISION_HINT"), target, executed)
        if self.policy.num_threads is not None:
            threads = read("INFERENCE_NUM_THREADS")
            self.setting(
                "num_threads",
                self.policy.num_threads,
                threads,
                threads == self.policy.num_threads,
                "" if threads is not None else f"{target.compile_device} does not report it",
            )
        if self.cache is not None:
            found = self.cache
            blobs = any(found.entry.glob("*.blob"))
            stored = found.commit(self.record) if blobs else found.hit
            self.record.cache["openvino"]["stored"] = stored
            self.setting(
                "cache_dir",
                self.policy.cache_dir,
                str(found.entry),
                stored,
                "" if stored else f"{target.compile_device} wrote no cache blob",
            )
        if self.policy.deterministic:
            self.setting("deterministic", True, None, False, "OpenVINO has no determinism switch")
        self._check_execution_devices(executed, target)
        return executed

    def _check_precision(self, hint: Any, target: OpenVINOTarget, executed: list[str]) -> None:
        precision = self.policy.precision
        if self.runs_stored_int8:
            return  # recorded with the properties (the model's stored int8 runs)
        ran_on = {
            k: p for k, p in self.substituted.items() if any(d.startswith(k) for d in executed)
        }
        if ran_on and self.substitution is None:  # AUTO picked a candidate that substitutes
            self._precision_fallback(target, ran_on, ",".join(executed))
        if precision == "int8" and self.substitution is None:
            return  # decided from the runtime graph's node precisions, in check_int8
        chosen, why = self.substitution or (precision, "")
        if hint is None:  # AUTO does not report its devices' hints back
            self.record.precision = Choice(
                precision,
                chosen,
                f"{why or 'set'} through DEVICE_PROPERTIES; AUTO does not report it back",
            )
            return
        ran = _precision_of(hint)
        if self.substitution is not None:  # the fallback is recorded; say what really runs
            if precision != "int8":  # int8's setting row is written with its properties
                self.setting("precision", precision, ran, False, why)
            self.record.precision = Choice(
                precision, ran, f"{why}; INFERENCE_PRECISION_HINT read back: {ran}"
            )
            return
        honoured = ran == precision
        self.setting("precision", precision, ran, honoured)
        self.record.precision = Choice(precision, ran, "INFERENCE_PRECISION_HINT read back")
        if not honoured:
            self.decisions.fallback(
                what="precision",
                requested=precision,
                chosen=ran,
                reason=f"{target.compile_device} accepted the hint but compiled for {ran}",
            )

    def _check_execution_devices(self, executed: list[str], target: OpenVINOTarget) -> None:
        required = target.required
        chosen = ",".join(executed)
        if required is not None and any(
            d.split(".")[0] != required.split(".")[0] for d in executed
        ):
            # AUTO starts on CPU while the NPU/GPU compiles, or picks another device outright.
            already = any(f.what == "device" for f in self.record.fallbacks)
            if not already:
                self.decisions.fallback(
                    what="device",
                    requested=required,
                    chosen=chosen,
                    reason=f"{target.compile_device} reports EXECUTION_DEVICES={executed}",
                )
        self.record.device = Choice(
            target.requested, chosen, f"EXECUTION_DEVICES of {target.compile_device}"
        )

    def record_nodes(self, compiled: Any, executed: Sequence[str], target: OpenVINOTarget) -> bool:
        """Runtime-graph ops into record.nodes; False when the device exposes no runtime graph."""
        try:
            runtime_model = compiled.get_runtime_model()
        except RuntimeError as exc:  # AUTO and some NPU drivers expose no runtime graph
            self.record.notes.append(f"OpenVINO gave no runtime graph for node records: {exc}")
            return False
        device = ",".join(executed)
        required = target.required
        # OpenVINO runs a compiled model on its EXECUTION_DEVICES as a whole: every layer is
        # where the model is, and off the required device only through the device fallback
        # that _check_execution_devices has already recorded.
        moved = required is not None and any(
            d.split(".")[0] != required.split(".")[0] for d in executed
        )
        requested = required if moved and required is not None else device
        nodes = []
        for op in runtime_model.get_ordered_ops():
            info = op.get_rt_info()
            layer = info["layerType"].astype(str) if "layerType" in info else op.get_type_name()
            if layer in _SKIPPED_LAYERS:
                continue
            nodes.append(
                PlacedNode(
                    name=info["originalLayersNames"].astype(str)
                    if "originalLayersNames" in info
                    else op.get_friendly_name(),
                    op_type=layer,
                    device=device,
                    kernel=info["primitiveType"].astype(str) if "primitiveType" in info else None,
                    precision=runtime_precision(info),
                )
            )
        classified = classify(
            nodes,
            requested=requested,
            analysis=None,
            elsewhere_reason=f"{target.compile_device} reports EXECUTION_DEVICES={executed}",
        )
        record_placement(
            self.record,
            classified,
            requested=requested,
            precision=None,
            fallback=self.policy.fallback,
            host_shape_compute=self.policy.host_shape_compute,
            fallback_recorded=True,
        )
        return True

    def check_int8(self, target: OpenVINOTarget, have_nodes: bool) -> None:
        """int8 holds only if the runtime graph runs some op in i8/u8 (the CPU may emulate
        a FakeQuantize model in f32 instead, which is then a precision fallback)."""
        if self.policy.precision != "int8" or self.record.precision is not None:
            return
        if not have_nodes:
            self.record.precision = Choice(
                "int8", "int8", f"{target.compile_device} shows no runtime graph to verify it"
            )
            return
        integer = [n for n in self.record.nodes if n.precision in _INT8_PRECISIONS]
        if integer:
            self.record.precision = Choice(
                "int8", "int8", f"{len(integer)} runtime op(s) run in i8/u8"
            )
            return
        ran = sorted(
            {
                _HINT_TO_PRECISION.get(n.precision, n.precision)
                for n in self.record.nodes
                if n.precision
            }
        )
        reason = (
            f"{target.compile_device} compiled the quantized model's FakeQuantize ops into "
            f"{'/'.join(ran) or 'float'} kernels: no op runs in i8/u8"
        )
        self.decisions.fallback(
            what="precision", requested="int8", chosen="/".join(ran) or "float", reason=reason
        )
        self.record.precision = Choice("int8", "/".join(ran) or "float", reason)


class OpenVINOEngine(Engine):
    """Intel OpenVINO: Intel NPU, CPU and GPU, and AUTO device selection."""

    name: ClassVar[str] = "openvino"
    aliases: ClassVar[tuple[str, ...]] = ("ov",)
    device_kinds: ClassVar[tuple[str, ...]] = ("cpu", "gpu", "npu")
    install_hint: ClassVar[str] = openvino_backend.INSTALL_HINT

    @classmethod
    def availability(cls) -> Availability:
        try:
            ov = openvino_backend.import_openvino()
        except ImportError as exc:
            return Availability(False, reason=str(exc), install_hint=cls.install_hint)
        return Availability(
            True,
            devices=tuple(xrt_name(d) for d in openvino_backend.core().available_devices),
            versions={"openvino": ov.get_version()},
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
        job = _Compilation(exec_policy, record)
        model = Path(model)
        if _is_onnx(model):  # a damaged file is an InvalidModelError before anything reads it
            job.info = inspect_onnx(model)
        claim_session(
            self.name,
            kernel_policy,
            record,
            model=model,
            device=device,
            fallback=exec_policy.fallback,
        )
        target = resolve_target(
            device, job.core.available_devices, record=record, fallback=exec_policy.fallback
        )
        model_path = require_quantized_model(model, exec_policy, record)
        if model_path != model:
            job.info = inspect_onnx(model_path) if _is_onnx(model_path) else None
        if job.info is not None:
            refuse_strings(job.info, model_path)
        version = job.ov.get_version()
        try:
            ov_model = job.core.read_model(str(model_path))
        except RuntimeError as exc:
            raise refusal(exc, model_path, version, "read") from exc
        declared_inputs, declared_outputs = onnx_io(job.info)
        input_names = port_names(ov_model.inputs, declared_inputs)
        output_names = port_names(ov_model.outputs, declared_outputs)
        shapes = fixed_input_shapes(
            tensor_infos(ov_model.inputs, input_names),
            exec_policy.input_shapes,
            static_shape=exec_policy.static_shape,
            device=f"OpenVINO {'NPU' if 'NPU' in target.asked_kinds else target.compile_device}",
            # Checked against what was asked, so a fallback run here does not hide the NPU's needs.
            device_needs_static="NPU" in target.asked_kinds,
        )
        if shapes:
            ov_model.reshape(
                {
                    index: job.ov.PartialShape(list(shapes[name]))
                    for index, name in enumerate(input_names)
                    if name in shapes
                }
            )
            record.settings.append(
                SettingRecord(
                    "input_shapes",
                    exec_policy.input_shapes,
                    {k: list(v) for k, v in shapes.items()},
                )
            )
        model_files = [model_path]
        if model_path.suffix == ".xml" and model_path.with_suffix(".bin").exists():
            model_files.append(model_path.with_suffix(".bin"))
        props = job.properties(target, model_files)
        try:
            compiled = compile_model(
                job.core, ov_model, target.compile_device, props, policy=exec_policy,
                record=record, model_files=model_files, requested_device=device,
            )  # fmt: skip
        except RuntimeError as exc:
            raise refusal(exc, model_path, version, "compile") from exc
        executed = job.check_compiled(compiled, target, props)
        job.check_int8(target, job.record_nodes(compiled, executed, target))
        return OpenVINOSession(compiled, input_names, output_names)


def _is_onnx(path: Path) -> bool:
    """An OpenVINO IR model is an .xml file; everything else is read as ONNX."""
    return path.suffix.lower() != ".xml"
