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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from xpuruntime.inference.device import cuda_device_count, current_cuda_device, parse_device
from xpuruntime.inference.engine_logs import tensorrt_logger
from xpuruntime.inference.engines.trt_build import (
    BuildPlan,
    build_engine,
    kernel_support,
    shape_ranges,
    supported_precisions,
)
from xpuruntime.inference.engines.trt_lock import (
    TimingCacheRefused,
    locked_timing_cache,
    scratch_folder,
    settle,
)
from xpuruntime.inference.kernel_mapping import apply_kernel_policy
from xpuruntime.inference.lock_apply import EngineLock
from xpuruntime.inference.model_info import read_model_info
from xpuruntime.inference.precision import apply_precision
from xpuruntime.inference.tensors import as_host_array, placement
from xpuruntime.runtime.engines import Availability, Engine, EngineSession, RunStats, TensorInfo
from xpuruntime.runtime.errors import EngineNotInstalledError, UnsupportedOperationError
from xpuruntime.runtime.record import CopyRecord, ExecutionRecord, NodeRecord

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy

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


class TensorRTEngine(Engine):
    """NVIDIA TensorRT on CUDA GPUs."""

    name: ClassVar[str] = "tensorrt"
    aliases: ClassVar[tuple[str, ...]] = ("trt",)
    device_kinds: ClassVar[tuple[str, ...]] = ("cuda",)
    install_hint: ClassVar[str] = _INSTALL

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

    def create_session(
        self,
        model: Path,
        *,
        device: str,
        exec_policy: ExecutionPolicy,
        kernel_policy: KernelPolicy | None,
        record: ExecutionRecord,
    ) -> TensorRTSession:
        import tensorrt as trt

        from xpuruntime.runtime.streams import Stream

        spec = parse_device(device)
        if spec.kind != "cuda":
            raise UnsupportedOperationError(
                f"TensorRT runs on CUDA GPUs only, not on {device!r}; use device='cuda' or "
                f"engine='onnxruntime'"
            )
        info = read_model_info(model)
        supported = supported_precisions(trt)
        precision = apply_precision(
            exec_policy,
            info,
            engine=f"tensorrt {trt.__version__}",
            record=record,
            supported=supported,
        )
        options = apply_kernel_policy(
            kernel_policy,
            engine="tensorrt",
            device=device,
            op_types=info.op_types,
            support=kernel_support(trt),
            record=record,
            fallback=exec_policy.fallback,
        )
        lowering = precision != info.precision
        strongly_typed = (
            hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED") and not lowering
        )
        plan = BuildPlan(
            strongly_typed,
            precision,
            shape_ranges(exec_policy, info.inputs),
            sorted(set(options.values())),
        )
        logger = tensorrt_logger(trt, exec_policy.engine_log_level)
        lock = EngineLock.open(exec_policy, record, "tensorrt", model, device)
        # TensorRT builds and loads on the current GPU.
        with current_cuda_device(spec.ordinal), scratch_folder() as scratch:
            entry, locked_cache = locked_timing_cache(lock, Path(scratch))
            if locked_cache is not None:
                assert lock is not None
                assert entry is not None
                try:
                    serialized, timing = _cached_or_built(
                        trt, logger, model, exec_policy, plan, record, locked_cache
                    )
                except TimingCacheRefused as refusal:
                    lock.refuse(entry, str(refusal))
                    entry = None
            if entry is None:
                # Recording without cache_dir still needs the timing cache the build leaves.
                recording = lock is not None and lock.recording and not exec_policy.cache_dir
                scratch_cache = Path(scratch) / "timing-cache" if recording else None
                serialized, timing = _cached_or_built(
                    trt, logger, model, exec_policy, plan, record, scratch_cache
                )
            runtime = trt.Runtime(logger)
            engine = runtime.deserialize_cuda_engine(serialized)
            if engine is None:
                raise UnsupportedOperationError(
                    f"TensorRT {trt.__version__} could not deserialize the engine for {model}"
                )
            _record_layers(engine, trt, record)
            settle(lock, entry, trt, record, timing)
            stream = Stream(device=spec.ordinal)
            return TensorRTSession(trt, engine, runtime, stream, spec.ordinal)


def _cached_or_built(
    trt: Any,
    logger: Any,
    model: Path,
    policy: ExecutionPolicy,
    plan: BuildPlan,
    record: ExecutionRecord,
    lock_cache: Path | None,
) -> tuple[bytes, bytes | None]:
    """The plan bytes, and the timing cache the build left (None when nothing was built).

    ``lock_cache``: the timing cache of a lockfile (to replay, when it exists, or to record
    into), used instead of the one in ``cache_dir``.
    """
    replaying = lock_cache is not None and lock_cache.is_file()
    if not policy.cache_dir:
        record.cache["tensorrt-engine"] = {
            "hit": False,
            "explanation": "disabled: set ExecutionPolicy(cache_dir=...) to keep engines",
        }
        serialized = build_engine(
            trt, logger, model, policy, plan, record, lock_cache, require_cached=replaying
        )
        return serialized, _read(lock_cache)
    from xpuruntime.inference.cache import (
        CacheKey,
        cache_root,
        file_digest,
        open_entry,
        stable_digest,
    )
    from xpuruntime.runtime.fingerprint import fingerprint_hash

    environment = record.environment_hash or fingerprint_hash()
    key = CacheKey(
        "tensorrt-engine",
        {
            "model": file_digest(model),
            "policy": policy.content_hash(),
            "shapes": stable_digest({k: list(v) for k, v in plan.profiles.items()}),
            "environment": environment,
            "engine": f"tensorrt {trt.__version__}",
        },
    )
    lookup = open_entry(policy.cache_dir, key, record, policy.fallback)
    if lookup is None:  # an unusable cache folder, recorded as a fallback
        serialized = build_engine(
            trt, logger, model, policy, plan, record, lock_cache, require_cached=replaying
        )
        return serialized, _read(lock_cache)
    plan_file = lookup.entry / "engine.plan"
    # Tactic timings depend on the GPU, driver and TensorRT: one timing cache per environment.
    timing_name = f"{environment}-tensorrt-{trt.__version__}.cache"
    timing = lock_cache or cache_root(policy.cache_dir) / "tensorrt-timing" / timing_name
    if lookup.hit:
        return plan_file.read_bytes(), _read(timing)
    serialized = build_engine(
        trt, logger, model, policy, plan, record, timing, require_cached=replaying
    )
    plan_file.write_bytes(serialized)
    lookup.commit(record)
    return serialized, _read(timing)


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


class TensorRTSession(EngineSession):
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
        self._inputs = tuple(self._info(n) for n in names if is_input[n])
        self._outputs = tuple(self._info(n) for n in names if not is_input[n])
        self._stats = RunStats()

    def _info(self, name: str) -> TensorInfo:
        dtype = self._engine.get_tensor_dtype(name)
        try:
            dtype_name = np.dtype(self._trt.nptype(dtype)).name
        except (TypeError, KeyError):  # no numpy type (bfloat16, fp8)
            dtype_name = "bfloat16" if "BF16" in str(dtype) else str(dtype).lower()
        shape = tuple(d if d >= 0 else None for d in self._engine.get_tensor_shape(name))
        return TensorInfo(name, dtype_name, shape)

    @property
    def inputs(self) -> Sequence[TensorInfo]:
        return self._inputs

    @property
    def outputs(self) -> Sequence[TensorInfo]:
        return self._outputs

    def run_stats(self) -> RunStats:
        return self._stats

    def run(
        self, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
    ) -> dict[str, Any]:
        with current_cuda_device(self._device_index):  # the context enqueues on its own GPU
            return self._run_on_device(feeds, output_names)

    def _run_on_device(
        self, feeds: Mapping[str, Any], output_names: Sequence[str] | None
    ) -> dict[str, Any]:
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
        wanted = list(output_names) if output_names else [o.name for o in self._outputs]
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
