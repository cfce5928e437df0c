"""The ``tensorrt`` engine: TensorRT's own runtime, built from the ONNX model.

Engines are content-addressed in ``ExecutionPolicy.cache_dir`` (model bytes, policy hash,
shape profiles, environment fingerprint, TensorRT version); a rebuild says which of those
changed. Under a decision lockfile the timing cache is the tactic lock (``trt_lock``). Device buffers for host inputs and for outputs come from CuPy or PyTorch (whichever
is installed); device-resident inputs are used in place.

TensorRT cannot be installed on the project's CI machines; this module is written against
its Python API and its tests skip there.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from xpuruntime.inference.device import cuda_device_count, current_cuda_device, parse_device
from xpuruntime.inference.engine_logs import tensorrt_logger
from xpuruntime.inference.engines.trt_build import (
    BuilderSettings,
    build_engine,
    kernel_support,
    shape_ranges,
    supported_precisions,
)
from xpuruntime.inference.engines.trt_lock import (
    TimingCacheRefused,
    locked_timing_cache,
    recorded_choice,
    replay_differences,
    scratch_folder,
)
from xpuruntime.inference.kit import BuildPlan, EngineAdapter, KitEngine, KitSession, Target
from xpuruntime.inference.tensors import as_host_array, placement
from xpuruntime.runtime.engines import Availability, RunStats, TensorInfo
from xpuruntime.runtime.errors import EngineNotInstalledError, UnsupportedOperationError
from xpuruntime.runtime.record import CopyRecord, ExecutionRecord, NodeRecord

if TYPE_CHECKING:
    from xpuruntime.inference.kernel_mapping import SupportTable
    from xpuruntime.inference.kit.locking import EngineLock
    from xpuruntime.policies.lock import LockedChoice, LockEntry
    from xpuruntime.runtime.decisions import Decisions

_INSTALL = "pip install 'xpuruntime[tensorrt]' (TensorRT's wheels come from NVIDIA's package index)"
_PRECISION_WORDS = {
    "Half": "fp16",
    "Float": "fp32",
    "Int8": "int8",
    "BFloat16": "bf16",
    "FP8": "fp8",
    "Int32": "int32",
    "Int64": "int64",
    "Bool": "bool",
}


class TensorRTAdapter(EngineAdapter):
    """TensorRT's steps of the kit's pipeline."""

    name: ClassVar[str] = "tensorrt"
    cache_kind: ClassVar[str | None] = "tensorrt-engine"
    lockable: ClassVar[bool] = True

    def __init__(self) -> None:
        import tensorrt as trt

        self.trt = trt
        self.lock: EngineLock | None = None

    def version(self, target: Target | None = None) -> str:
        return f"tensorrt {self.trt.__version__}"

    def target(self, device: str, decisions: Decisions) -> Target:
        spec = parse_device(device)
        if spec.kind != "cuda":
            raise UnsupportedOperationError(
                f"TensorRT runs on CUDA GPUs only, not on {device!r}; use device='cuda' or "
                f"engine='onnxruntime'"
            )
        return Target(f"cuda:{spec.ordinal}", spec.ordinal)

    def precisions(self, target: Target) -> Collection[str]:
        return supported_precisions(self.trt)

    def kernel_support(self, target: Target) -> SupportTable:
        support: SupportTable = kernel_support(self.trt)
        return support

    def replay(self, plan: BuildPlan, entry: LockEntry, lock: EngineLock) -> None:
        """The locked timing cache, written where the build reads it."""
        self.lock = lock
        scratch = scratch_folder()
        plan.keep_alive.append(scratch)
        plan.options["locked_cache"] = locked_timing_cache(lock, entry, Path(scratch.name))

    def configure(self, plan: BuildPlan, decisions: Decisions) -> None:
        trt = self.trt
        lowering = plan.precision != plan.info.precision
        strongly_typed = (
            hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED") and not lowering
        )
        plan.options["builder"] = BuilderSettings(
            strongly_typed,
            plan.precision,
            shape_ranges(plan.policy, plan.info.inputs),
            sorted(set(plan.kernel_options.values())),
        )
        plan.options["logger"] = tensorrt_logger(trt, plan.policy.engine_log_level)
        if not plan.policy.cache_dir:
            decisions.record.cache["tensorrt-engine"] = {
                "hit": False,
                "explanation": "disabled: set ExecutionPolicy(cache_dir=...) to keep engines",
            }

    def cache_components(self, plan: BuildPlan) -> Mapping[str, str]:
        from xpuruntime.inference.cache import stable_digest

        profiles = plan.options["builder"].profiles
        return {"profiles": stable_digest({k: list(v) for k, v in profiles.items()})}

    def build(self, plan: BuildPlan, decisions: Decisions) -> Any:
        """Build (or load the cached plan), then deserialize: (engine, runtime)."""
        trt = self.trt
        ordinal = int(plan.target.native)
        with current_cuda_device(ordinal):  # TensorRT builds and loads on the current GPU
            serialized = self._serialized(plan, decisions)
            runtime = trt.Runtime(plan.options["logger"])
            engine = runtime.deserialize_cuda_engine(serialized)
        if engine is None:
            raise UnsupportedOperationError(
                f"TensorRT {trt.__version__} could not deserialize the engine for {plan.model}"
            )
        return engine, runtime

    def _serialized(self, plan: BuildPlan, decisions: Decisions) -> bytes:
        locked: Path | None = plan.options.get("locked_cache")
        if locked is not None and plan.locked is not None and self.lock is not None:
            try:
                return self._cached_or_built(plan, decisions, locked)
            except TimingCacheRefused as refusal:
                self.lock.refuse(plan.locked, str(refusal))
                plan.locked = None
        # Recording without cache_dir still needs the timing cache the build leaves.
        recording = plan.policy.lock == "record" and not plan.policy.cache_dir
        scratch = None
        if recording:
            folder = scratch_folder()
            plan.keep_alive.append(folder)
            scratch = Path(folder.name) / "timing-cache"
        return self._cached_or_built(plan, decisions, scratch)

    def _cached_or_built(
        self, plan: BuildPlan, decisions: Decisions, lock_cache: Path | None
    ) -> bytes:
        """The plan bytes; ``plan.options["timing"]`` the timing cache the build left.

        ``lock_cache``: the timing cache of a lockfile (to replay, when it exists, or to
        record into), used instead of the one in ``cache_dir``.
        """
        trt, policy = self.trt, plan.policy
        replaying = lock_cache is not None and lock_cache.is_file() and plan.locked is not None
        timing = lock_cache
        cached = plan.cache
        if cached is not None and lock_cache is None:
            from xpuruntime.inference.cache import cache_root

            # Tactic timings depend on the GPU, driver and TensorRT: one cache per environment.
            from xpuruntime.runtime.fingerprint import fingerprint_hash

            environment = decisions.record.environment_hash or fingerprint_hash()
            timing_name = f"{environment}-tensorrt-{trt.__version__}.cache"
            timing = cache_root(policy.cache_dir) / "tensorrt-timing" / timing_name
        if cached is not None and cached.hit:
            plan.options["timing"] = _read(timing)
            return (cached.entry / "engine.plan").read_bytes()
        serialized = build_engine(
            trt,
            plan.options["logger"],
            plan.model,
            policy,
            plan.options["builder"],
            decisions.record,
            timing,
            require_cached=replaying,
        )
        if cached is not None:
            (cached.entry / "engine.plan").write_bytes(serialized)
        plan.options["timing"] = _read(timing)
        return serialized

    def read_placement(self, built: Any, plan: BuildPlan, decisions: Decisions) -> None:
        _record_layers(built[0], self.trt, decisions.record)

    def lock_choice(self, built: Any, plan: BuildPlan, lock: EngineLock) -> LockedChoice:
        return recorded_choice(lock, self.trt, plan.options.get("timing"))

    def check_replay(self, built: Any, plan: BuildPlan, entry: LockEntry) -> list[str]:
        assert self.lock is not None
        return replay_differences(entry, self.lock.record)

    def session(self, built: Any, plan: BuildPlan) -> TensorRTSession:
        from xpuruntime.runtime.streams import Stream

        engine, runtime = built
        ordinal = int(plan.target.native)
        return TensorRTSession(self.trt, engine, runtime, Stream(device=ordinal), ordinal)


class TensorRTEngine(KitEngine):
    """NVIDIA TensorRT on CUDA GPUs."""

    name: ClassVar[str] = "tensorrt"
    aliases: ClassVar[tuple[str, ...]] = ("trt",)
    device_kinds: ClassVar[tuple[str, ...]] = ("cuda",)
    install_hint: ClassVar[str] = _INSTALL
    adapter: ClassVar[type[EngineAdapter]] = TensorRTAdapter

    @classmethod
    def availability(cls) -> Availability:
        try:
            import tensorrt as trt
        except ImportError as exc:
            return Availability(False, f"tensorrt is not installed ({exc})", _INSTALL)
        count = cuda_device_count()
        versions = {"tensorrt": str(trt.__version__)}
        if not count:
            return Availability(
                False, "TensorRT needs a CUDA device and none is visible", _INSTALL, (), versions
            )
        return Availability(True, "", _INSTALL, tuple(f"cuda:{i}" for i in range(count)), versions)


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None and path.is_file() else None


def _record_layers(engine: Any, trt: Any, record: ExecutionRecord) -> None:
    """Per-layer type, tactic and output precision from TensorRT's engine inspector."""
    if not hasattr(engine, "create_engine_inspector"):
        return
    inspector = engine.create_engine_inspector()
    layers = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON)).get(
        "Layers", []
    )
    for layer in layers:
        if isinstance(layer, str):  # built without detailed profiling verbosity
            record.nodes.append(NodeRecord(layer, "", "tensorrt", "tensorrt"))
            continue
        outputs = layer.get("Outputs") or [{}]
        fmt = str(outputs[0].get("Format/Datatype", ""))
        precision = next((p for word, p in _PRECISION_WORDS.items() if word in fmt), None)
        record.nodes.append(
            NodeRecord(
                name=str(layer.get("Name", "")),
                op_type=str(layer.get("LayerType", "")),
                requested="tensorrt",
                chosen="tensorrt",
                kernel=layer.get("TacticName") or None,
                precision=precision,
            )
        )


def _device_arrays() -> Any:
    """CuPy, else PyTorch: the library that allocates and copies device buffers."""
    try:
        import cupy

        return cupy
    except ImportError:
        pass
    try:
        import torch

        return torch
    except ImportError as exc:
        raise EngineNotInstalledError(
            "TensorRT sessions move tensors with CuPy or PyTorch and neither is installed: "
            "pip install cupy-cuda12x (or torch)"
        ) from exc


def _pointer(x: Any) -> int:
    interface = getattr(x, "__cuda_array_interface__", None)
    if interface is not None:
        return int(interface["data"][0])
    return int(x.data_ptr())  # torch


class TensorRTSession(KitSession):
    """Runs a deserialized engine with ``execute_async_v3`` on the core's stream."""

    def __init__(self, trt: Any, engine: Any, runtime: Any, stream: Any, device_index: int) -> None:
        self._trt = trt
        self._engine = engine
        self._runtime = runtime  # the engine must not outlive its runtime
        self._context = engine.create_execution_context()
        self._stream = stream
        self._device_index = device_index
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        is_input = {n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        super().__init__(
            tuple(self._info(n) for n in names if is_input[n]),
            tuple(self._info(n) for n in names if not is_input[n]),
            engine="tensorrt",
        )
        self._stats = RunStats()

    def _info(self, name: str) -> TensorInfo:
        dtype = self._engine.get_tensor_dtype(name)
        try:
            dtype_name = np.dtype(self._trt.nptype(dtype)).name
        except (TypeError, KeyError):  # no numpy type (bfloat16, fp8)
            dtype_name = "bfloat16" if "BF16" in str(dtype) else str(dtype).lower()
        shape = tuple(d if d >= 0 else None for d in self._engine.get_tensor_shape(name))
        return TensorInfo(name, dtype_name, shape)

    def run_stats(self) -> RunStats:
        return self._stats

    def release(self) -> None:
        # The context before the engine before the runtime, as TensorRT requires.
        self._context = self._engine = self._runtime = None

    def execute(self, feeds: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        with current_cuda_device(self._device_index):  # the context enqueues on its own GPU
            return self._run_on_device(feeds, names)

    def _run_on_device(self, feeds: Mapping[str, Any], wanted: list[str]) -> dict[str, Any]:
        from xpuruntime.runtime.device import synchronize

        xp = _device_arrays()
        keep: list[Any] = []
        uploads = upload_bytes = 0
        all_on_device = True
        for name, x in feeds.items():
            if placement(x).kind == "cuda":
                buffer = x
            else:
                all_on_device = False
                host = np.ascontiguousarray(as_host_array(x)[0])
                buffer = self._upload(xp, host)
                uploads += 1
                upload_bytes += int(host.nbytes)
            keep.append(buffer)
            self._context.set_input_shape(name, tuple(int(d) for d in buffer.shape))
            self._context.set_tensor_address(name, _pointer(buffer))
        outputs: dict[str, Any] = {}
        for info in self._outputs:
            shape = tuple(self._context.get_tensor_shape(info.name))
            out = self._empty(xp, shape, info.dtype)
            outputs[info.name] = out
            self._context.set_tensor_address(info.name, _pointer(out))
        synchronize(self._device_index)  # uploads ran on the array library's stream
        if not self._context.execute_async_v3(self._stream.handle):
            raise UnsupportedOperationError("TensorRT execute_async_v3 reported a failure")
        self._stream.synchronize()
        copies = [CopyRecord("host_to_device", uploads, upload_bytes)] if uploads else []
        if all_on_device:
            self._stats = RunStats(tuple(copies), syncs=2, io_binding=True)
            return {n: outputs[n] for n in wanted}
        host_out = {n: as_host_array(outputs[n])[0] for n in wanted}
        copies.append(
            CopyRecord(
                "device_to_host", len(host_out), sum(int(a.nbytes) for a in host_out.values())
            )
        )
        self._stats = RunStats(tuple(copies), syncs=2)
        return host_out

    def _upload(self, xp: Any, host: np.ndarray) -> Any:
        if xp.__name__ == "cupy":
            with xp.cuda.Device(self._device_index):
                return xp.asarray(host)
        return xp.from_numpy(host).to(f"cuda:{self._device_index}")

    def _empty(self, xp: Any, shape: tuple[int, ...], dtype: str) -> Any:
        if xp.__name__ == "cupy":
            with xp.cuda.Device(self._device_index):
                return xp.empty(shape, dtype=dtype)
        return xp.empty(shape, dtype=getattr(xp, dtype), device=f"cuda:{self._device_index}")
