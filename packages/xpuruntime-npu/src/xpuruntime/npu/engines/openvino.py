"""OpenVINO engine: ONNX (or OpenVINO IR) compiled for NPU, CPU, GPU or AUTO under a policy.

An adapter over the engine kit (:mod:`xpuruntime.inference.kit`): the kit inspects the model,
applies the precision rule, the kernel table, the limits, the cache and the lockfile; this
adapter maps the rest of the policy to OpenVINO properties, compiles, reads every setting
back from the compiled model (honoured or not), checks the devices that actually execute
(``EXECUTION_DEVICES``) and records the runtime graph's ops.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from xpuruntime.inference.errors import CacheError
from xpuruntime.inference.kit import BuildPlan, EngineAdapter, KitEngine, Target
from xpuruntime.inference.kit.inspect import NATIVE_FORMATS
from xpuruntime.inference.precision import precision_given
from xpuruntime.npu import openvino_backend
from xpuruntime.npu.engines.kernels import kernel_support
from xpuruntime.npu.engines.openvino_placement import check_int8, record_nodes
from xpuruntime.npu.engines.openvino_session import OpenVINOSession, tensor_infos
from xpuruntime.npu.engines.openvino_settings import float_precisions, properties, read_back
from xpuruntime.npu.openvino_devices import OpenVINOTarget, resolve_target, xrt_name
from xpuruntime.npu.openvino_lock import import_locked, locked_choice, replay_differences
from xpuruntime.npu.openvino_model import onnx_io, port_names, refusal, refuse_strings
from xpuruntime.npu.quantized import is_quantized, require_quantized_model
from xpuruntime.npu.shapes import fixed_input_shapes
from xpuruntime.runtime.engines import Availability

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from xpuruntime.inference.kernel_mapping import SupportTable
    from xpuruntime.inference.kit import EngineLock, KitSession
    from xpuruntime.policies.lock import LockedChoice, LockEntry
    from xpuruntime.runtime.decisions import Decisions


def _ov(target: Target) -> OpenVINOTarget:
    device: OpenVINOTarget = target.native
    return device


class OpenVINOAdapter(EngineAdapter):
    """OpenVINO's steps of the kit's pipeline."""

    name: ClassVar[str] = "openvino"
    cache_kind: ClassVar[str | None] = "openvino"
    lockable: ClassVar[bool] = True

    def __init__(self) -> None:
        self.ov = openvino_backend.import_openvino()
        self.core = openvino_backend.core()
        self.lock: EngineLock | None = None

    def version(self, target: Target | None = None) -> str:
        where = f" {_ov(target).compile_device}" if target is not None else ""
        return f"OpenVINO {self.ov.get_version()}{where}"

    def choose_model(self, model: Path, decisions: Decisions) -> Path:
        return require_quantized_model(model, decisions.policy, decisions.record)

    def target(self, device: str, decisions: Decisions) -> Target:
        found = resolve_target(device, self.core.available_devices, decisions=decisions)
        return Target(device, found)

    def precisions(self, target: Target) -> Collection[str]:
        return float_precisions(_ov(target))

    def kernel_support(self, target: Target) -> SupportTable | None:
        return kernel_support(self.name, target.device.split(":", 1)[0].lower())

    def configure(self, plan: BuildPlan, decisions: Decisions) -> None:
        native = plan.model.suffix.lower() in NATIVE_FORMATS  # OpenVINO IR: no ONNX facts
        if native and not precision_given(decisions) and is_quantized(plan.model):
            # An IR model carries its own FakeQuantize precision, as a QDQ ONNX model does
            # (which the kit's rule reads from the graph): int8, verified in read_placement.
            plan.precision = "int8"
        plan.options["properties"] = properties(
            plan.policy, decisions, _ov(plan.target), plan.precision
        )

    def cache_components(self, plan: BuildPlan) -> Mapping[str, str]:
        from xpuruntime.inference.cache import file_digest

        found = _ov(plan.target)
        components = {"compile_device": found.compile_device}
        weights = plan.model.with_suffix(".bin")
        if plan.model.suffix == ".xml" and weights.exists():
            components["weights"] = file_digest(weights)
        for name in found.candidates:
            full = openvino_backend.device_property(name, "FULL_DEVICE_NAME")
            components[f"device {name}"] = str(full)
        return components

    def build(self, plan: BuildPlan, decisions: Decisions) -> Any:
        found = _ov(plan.target)
        if plan.info is not None:
            refuse_strings(plan.info, plan.model)
        version = self.ov.get_version()
        try:
            model = self.core.read_model(str(plan.model))
        except RuntimeError as exc:
            raise refusal(exc, plan.model, version, "read") from exc
        inputs, outputs = onnx_io(plan.info)
        names = port_names(model.inputs, inputs), port_names(model.outputs, outputs)
        plan.options["names"] = names
        self._fix_shapes(model, plan, names[0], decisions)
        props = dict(plan.options["properties"])
        if plan.cache is not None:
            props["CACHE_DIR"] = str(plan.cache.entry)
        compiled = None
        if plan.locked is not None and self.lock is not None:
            compiled = import_locked(self.lock, plan.locked, self.core, found.compile_device, props)
            plan.locked = None if compiled is None else plan.locked
        if compiled is None:
            try:
                compiled = self.core.compile_model(model, found.compile_device, props)
            except RuntimeError as exc:
                raise refusal(exc, plan.model, version, "compile") from exc
            if plan.cache is not None and plan.cache.hit and not _loaded_from_cache(compiled):
                # OpenVINO recompiles over a blob it cannot import without raising: the kit
                # then discards the entry and records the miss, instead of claiming a hit.
                raise CacheError(
                    f"OpenVINO did not load the cached blob in {plan.cache.entry} "
                    "(LOADED_FROM_CACHE is false after compile_model)"
                )
        executed = read_back(
            compiled, props, policy=plan.policy, decisions=decisions, target=found,
            precision=plan.precision,
        )  # fmt: skip
        plan.options["executed"] = executed
        if plan.cache is not None:
            self._record_cache(plan, decisions)
        return compiled

    def _fix_shapes(
        self, model: Any, plan: BuildPlan, names: list[str], decisions: Decisions
    ) -> None:
        """Reshape to fixed input shapes where the policy or an NPU asks for them."""
        found = _ov(plan.target)
        asked_npu = "NPU" in found.asked_kinds
        shapes = fixed_input_shapes(
            tensor_infos(model.inputs, names),
            plan.policy.input_shapes,
            static_shape=plan.policy.static_shape,
            device=f"OpenVINO {'NPU' if asked_npu else found.compile_device}",
            # Checked against what was asked, so a fallback run here does not hide the NPU's needs.
            device_needs_static=asked_npu,
        )
        if not shapes:
            return
        model.reshape(
            {i: self.ov.PartialShape(list(shapes[n])) for i, n in enumerate(names) if n in shapes}
        )
        from xpuruntime.inference.settings import add_setting

        applied = {k: list(v) for k, v in shapes.items()}
        add_setting(decisions.record, "input_shapes", plan.policy.input_shapes, applied, True)

    def _record_cache(self, plan: BuildPlan, decisions: Decisions) -> None:
        from xpuruntime.inference.settings import add_setting

        assert plan.cache is not None
        blobs = any(plan.cache.entry.glob("*.blob"))
        device = _ov(plan.target).compile_device
        note = "" if blobs else f"{device} wrote no cache blob"
        add_setting(
            decisions.record, "cache_dir", plan.policy.cache_dir, str(plan.cache.path), blobs, note
        )

    def read_placement(self, built: Any, plan: BuildPlan, decisions: Decisions) -> None:
        found = _ov(plan.target)
        graph = record_nodes(built, plan.options["executed"], found, decisions)
        if plan.precision == "int8":
            check_int8(found, decisions, graph)

    def replay(self, plan: BuildPlan, entry: LockEntry, lock: EngineLock) -> None:
        self.lock = lock  # the blob is imported in build(), in place of compiling

    def lock_choice(self, built: Any, plan: BuildPlan, lock: EngineLock) -> LockedChoice | None:
        return locked_choice(built, _ov(plan.target).compile_device, lock)

    def check_replay(self, built: Any, plan: BuildPlan, entry: LockEntry) -> list[str]:
        return replay_differences(built, entry)

    def session(self, built: Any, plan: BuildPlan) -> KitSession:
        inputs, outputs = plan.options["names"]
        return OpenVINOSession(built, inputs, outputs)


class OpenVINOEngine(KitEngine):
    """Intel OpenVINO: Intel NPU, CPU and GPU, and AUTO device selection."""

    name: ClassVar[str] = "openvino"
    aliases: ClassVar[tuple[str, ...]] = ("ov",)
    device_kinds: ClassVar[tuple[str, ...]] = ("cpu", "gpu", "npu")
    install_hint: ClassVar[str] = openvino_backend.INSTALL_HINT
    adapter: ClassVar[type[EngineAdapter]] = OpenVINOAdapter

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


def _loaded_from_cache(compiled: Any) -> bool:
    """OpenVINO's own answer: was this compiled model imported from CACHE_DIR?"""
    return bool(compiled.get_property("LOADED_FROM_CACHE"))
