"""The ``onnxruntime`` engine: ONNX Runtime's CPU and CUDA execution providers.

``import onnxruntime`` happens inside methods only (listing engines stays cheap).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from xpuruntime.inference.device import cuda_device_count, parse_device
from xpuruntime.inference.engine_logs import native_stderr_to_logging
from xpuruntime.inference.engines.ort_kernels import kernel_support
from xpuruntime.inference.engines.ort_options import (
    CPU_EP,
    CUDA_EP,
    ORT_SEVERITIES,
    build_config,
    free_dimension_overrides,
)
from xpuruntime.inference.engines.ort_placement import (
    RECORD_ASSIGNMENT,
    assigned_nodes,
    cpu_preferred_nodes,
    record_assignment,
)
from xpuruntime.inference.engines.ort_session import OnnxRuntimeSession
from xpuruntime.inference.errors import InvalidModelError
from xpuruntime.inference.kernel_mapping import apply_kernel_policy
from xpuruntime.inference.model_info import ModelInfo, read_model_info
from xpuruntime.inference.placement import name_nodes
from xpuruntime.inference.precision import apply_precision
from xpuruntime.inference.settings import add_setting
from xpuruntime.runtime.engines import Availability, Engine
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import Choice, ExecutionRecord

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy


class OnnxRuntimeEngine(Engine):
    """ONNX Runtime with the CPU execution provider, and the CUDA one where installed."""

    name: ClassVar[str] = "onnxruntime"
    aliases: ClassVar[tuple[str, ...]] = ("onnxrt", "ort")
    device_kinds: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    install_hint: ClassVar[str] = (
        "pip install 'xpuruntime[cpu]' (or 'xpuruntime[cuda]' for the CUDA execution provider)"
    )

    @classmethod
    def availability(cls) -> Availability:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            return Availability(False, f"onnxruntime is not importable ({exc})", cls.install_hint)
        providers = ort.get_available_providers()
        devices = ["cpu"]
        reason = ""
        if CUDA_EP in providers:
            count = cuda_device_count()
            devices += [f"cuda:{i}" for i in range(count)]
            if not count:
                reason = "the CUDA execution provider is installed but no CUDA device is visible"
        else:
            reason = "no CUDA execution provider (CPU build of onnxruntime)"
        return Availability(
            True,
            reason,
            cls.install_hint,
            tuple(devices),
            {"onnxruntime": ort.__version__, "providers": ",".join(providers)},
        )

    def create_session(
        self,
        model: Path,
        *,
        device: str,
        exec_policy: ExecutionPolicy,
        kernel_policy: KernelPolicy | None,
        record: ExecutionRecord,
    ) -> OnnxRuntimeSession:
        import onnxruntime as ort

        model = _pick_model(model, exec_policy, record)
        info = read_model_info(model)
        provider, device_index = _choose_provider(device, exec_policy, record)
        if provider == CUDA_EP:
            _load_cuda_libraries(ort, record)
        precision = apply_precision(
            exec_policy,
            info,
            engine="onnxruntime",
            record=record,
            supported={"fp32", "tf32"} if provider == CUDA_EP else {"fp32"},
        )
        kernel_options = apply_kernel_policy(
            kernel_policy,
            engine="onnxruntime",
            device=(record.device.chosen if record.device else None) or device,
            op_types=info.op_types,
            support=kernel_support(provider),
            record=record,
            fallback=exec_policy.fallback,
        )
        _record_static_shape(exec_policy, info, record)
        stream = _core_stream(device_index) if provider == CUDA_EP else None
        stream_handle = None if stream is None else int(stream.handle)
        config = build_config(
            exec_policy,
            provider=provider,
            device_index=device_index,
            record=record,
            engine_options=exec_policy.engine_options.get("onnxruntime", {}),
            kernel_options=kernel_options,
            free_dims=free_dimension_overrides(exec_policy.input_shapes, info.inputs),
            stream_handle=stream_handle,
        )
        cached = _optimized_model_cache(model, exec_policy, provider, config, record)
        load_path = cached.entry / "model.onnx" if cached is not None and cached.hit else model
        with native_stderr_to_logging("onnxruntime", exec_policy.engine_log_level) as logged:
            # The partitioner reports, at level info on the default logger, each node it
            # keeps on the CPU as cheap shape work: read that while the session is made.
            if provider != CPU_EP:
                ort.set_default_logger_severity(ORT_SEVERITIES["info"])
            try:
                session = _create(ort, load_path, config, provider)
            finally:
                ort.set_default_logger_severity(ORT_SEVERITIES[exec_policy.engine_log_level])
        if cached is not None and not cached.hit:
            cached.commit(
                record
            )  # ONNX Runtime wrote the optimized model while creating the session
        if provider == CUDA_EP and CUDA_EP not in session.get_providers():
            record.fallback(
                what="execution provider",
                requested=CUDA_EP,
                chosen=CPU_EP,
                reason="ONNX Runtime could not initialise the CUDA execution provider (are the "
                "CUDA/cuDNN libraries loadable? `import torch` first, or call "
                "onnxruntime.preload_dlls())",
                mode=exec_policy.fallback,
            )
            provider = CPU_EP
        nodes = assigned_nodes(session)
        if nodes is None:
            add_setting(
                record,
                "node_assignment",
                True,
                None,
                False,
                f"onnxruntime {ort.__version__} cannot report node placement (needs >= 1.22)",
            )
        else:
            record_assignment(
                record,
                nodes,
                requested=provider,
                policy=exec_policy,
                graph=info.graph,
                precision=precision,
                cpu_preferred=cpu_preferred_nodes(logged),
            )
            _fill_node_precision(record, info)
        return OnnxRuntimeSession(
            session,
            provider=provider,
            device_index=device_index,
            profile_dir=config.profile_dir,
            keep_alive=[stream, config],
            stream_handle=stream_handle,
        )


def _pick_model(model: Path, policy: ExecutionPolicy, record: ExecutionRecord) -> Path:
    """The quantized model the policy names, when it asks for int8 and gives one."""
    if policy.precision != "int8" or not policy.quantized_model:
        return model
    quantized = Path(policy.quantized_model).expanduser()
    if not quantized.is_file():
        from xpuruntime.inference.errors import ModelNotFoundError

        raise ModelNotFoundError(
            f"ExecutionPolicy.quantized_model {str(quantized)!r} does not exist; quantize the "
            f"model first (onnxruntime.quantization.quantize_static) or remove the setting"
        )
    add_setting(
        record,
        "quantized_model",
        str(quantized),
        str(quantized),
        True,
        "runs the quantized model instead of the fp32 one",
    )
    return quantized


def _load_cuda_libraries(ort: Any, record: ExecutionRecord) -> None:
    """Load the CUDA and cuDNN libraries the CUDA EP needs from the pip packages
    (``onnxruntime-gpu[cuda,cudnn]``, or PyTorch's) before the session starts; without this
    the EP fails to start unless something (``import torch``) loaded them first."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:  # ONNX Runtime < 1.21: the libraries must be on the loader's path
        return
    try:
        preload()
    except Exception as exc:  # a missing package: the EP start check below says what failed
        add_setting(record, "cuda_libraries", "preload", None, False, f"preload_dlls(): {exc}")
        return
    add_setting(record, "cuda_libraries", "preload", "onnxruntime.preload_dlls()", True)


def _choose_provider(
    device: str, policy: ExecutionPolicy, record: ExecutionRecord
) -> tuple[str, int]:
    """The execution provider for ``device``; a missing one goes through the fallback mode."""
    import onnxruntime as ort

    spec = parse_device(device)
    if spec.kind == "cpu":
        return CPU_EP, 0
    if spec.kind == "npu":
        reason = (
            "ONNX Runtime's NPU providers are engines of xpuruntime-npu: use "
            "engine='openvino' or engine='qnn' (pip install 'xpuruntime[openvino]')"
        )
        wanted = "NPU execution provider"
    elif CUDA_EP not in ort.get_available_providers():
        reason = (
            f"onnxruntime {ort.__version__} here has no CUDA execution provider "
            f"(available: {', '.join(ort.get_available_providers())}); install the CUDA "
            f"build: pip install 'xpuruntime[cuda]'"
        )
        wanted = CUDA_EP
    elif cuda_device_count() == 0:
        reason = "no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides it)"
        wanted = CUDA_EP
    else:
        return CUDA_EP, spec.ordinal
    record.fallback(
        what=f"device {spec}", requested=wanted, chosen=CPU_EP, reason=reason, mode=policy.fallback
    )
    record.device = Choice(device, "cpu", reason)
    return CPU_EP, 0


def _core_stream(device_index: int) -> Any:
    """A stream of the core's, handed to the CUDA EP as its compute stream."""
    from xpuruntime.runtime.streams import Stream

    return Stream(device=device_index)


def _record_static_shape(policy: ExecutionPolicy, info: ModelInfo, record: ExecutionRecord) -> None:
    if not policy.static_shape:
        return
    symbolic = sorted({d for dims in info.inputs.values() for d in dims if isinstance(d, str)})
    fixed = set()
    for name, shape in (policy.input_shapes or {}).items():
        fixed |= {
            d for d, _ in zip(info.inputs.get(name, ()), shape, strict=False) if isinstance(d, str)
        }
    left = [s for s in symbolic if s not in fixed]
    add_setting(
        record,
        "static_shape",
        True,
        "fixed by input_shapes" if not left else None,
        not left,
        ""
        if not left
        else f"symbolic dimensions {left} stay dynamic: give "
        f"ExecutionPolicy.input_shapes for every input",
    )


def _optimized_model_cache(
    model: Path, policy: ExecutionPolicy, provider: str, config: Any, record: ExecutionRecord
) -> Any:
    """Reuse ONNX Runtime's optimized graph across processes, keyed by content."""
    if not policy.cache_dir:
        return None
    import onnxruntime as ort

    from xpuruntime.inference.cache import CacheKey, file_digest, open_entry, stable_digest
    from xpuruntime.runtime.fingerprint import fingerprint_hash

    key = CacheKey(
        "onnxruntime-optimized-model",
        {
            "model": file_digest(model),
            "policy": policy.content_hash(),
            "shapes": stable_digest(policy.input_shapes or {}),
            "environment": record.environment_hash or fingerprint_hash(),
            "engine": f"onnxruntime {ort.__version__} {provider}",
        },
    )
    lookup = open_entry(policy.cache_dir, key, record, policy.fallback)
    if lookup is None:  # an unusable cache folder, recorded as a fallback
        return None
    if lookup.hit:
        # The cached graph is already optimized for this key; optimizing again only costs time.
        config.options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    else:
        config.options.optimized_model_filepath = str(lookup.entry / "model.onnx")
    return lookup


def _create(ort: Any, path: Path, config: Any, provider: str) -> Any:
    names = [p for p, _ in config.providers]
    options = [o for _, o in config.providers]
    try:
        return ort.InferenceSession(
            str(path), sess_options=config.options, providers=names, provider_options=options
        )
    except Exception as exc:
        message = str(exc)
        if "fallback to CPU EP has been explicitly disabled" in message or (
            "disable_cpu_ep_fallback" in message
        ):
            raise FallbackError(_strict_refusal(ort, path, config, provider, message)) from exc
        if type(exc).__name__ == "NotImplemented":
            raise UnsupportedOperationError(
                f"ONNX Runtime {ort.__version__} has no kernel for a node of {path}: {message}"
            ) from exc
        raise InvalidModelError(
            f"ONNX Runtime {ort.__version__} cannot load {path}: {message}"
        ) from exc


def _strict_refusal(ort: Any, path: Path, config: Any, provider: str, message: str) -> str:
    """Name the nodes ONNX Runtime would have put on the CPU (a placement-only session)."""
    probe = ort.SessionOptions()
    probe.graph_optimization_level = config.options.graph_optimization_level
    probe.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    try:
        session = ort.InferenceSession(
            str(path),
            sess_options=probe,
            providers=[p for p, _ in config.providers],
            provider_options=[o for _, o in config.providers],
        )
        nodes = [n for n in assigned_nodes(session) or [] if n.device != provider]
        which = name_nodes(nodes) if nodes else "(ONNX Runtime did not say which)"
    except Exception as exc:  # the probe is best effort: the refusal is raised regardless
        which = f"(could not list them: {exc})"
    return (
        f"nodes {which} would run on {CPU_EP} instead of {provider}: {provider} has no "
        f"kernel for them or declined them. ONNX Runtime: {message}. The policy says "
        f"fallback='error'; set ExecutionPolicy(fallback='warn') or 'allow' to run them on "
        f"the CPU and record it"
    )


def _fill_node_precision(record: ExecutionRecord, info: ModelInfo) -> None:
    for node in record.nodes:
        node.precision = info.node_precision(node.name) or node.precision
