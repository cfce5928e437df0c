"""The ``onnxruntime`` engine: ONNX Runtime's CPU and CUDA execution providers, as an
adapter of the engine kit (:mod:`xpuruntime.inference.kit`).

``import onnxruntime`` happens inside methods only (listing engines stays cheap).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from xpuruntime.inference.device import cuda_device_count, parse_device
from xpuruntime.inference.engine_logs import native_stderr_to_logging, route_engine_stderr
from xpuruntime.inference.engines import ort_lock
from xpuruntime.inference.engines.ort_kernels import kernel_support
from xpuruntime.inference.engines.ort_options import (
    CPU_EP,
    CUDA_EP,
    ORT_SEVERITIES,
    build_config,
)
from xpuruntime.inference.engines.ort_session import OnnxRuntimeSession
from xpuruntime.inference.kit import BuildPlan, EngineAdapter, KitEngine, Target
from xpuruntime.inference.kit.provider_assignment import (
    RECORD_ASSIGNMENT,
    assigned_nodes,
    cpu_preferred_nodes,
    record_assignment,
)
from xpuruntime.inference.placement import name_nodes
from xpuruntime.inference.settings import add_setting
from xpuruntime.runtime.engines import Availability
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from xpuruntime.inference.kernel_mapping import SupportTable
    from xpuruntime.inference.kit.locking import EngineLock
    from xpuruntime.policies.lock import LockedChoice, LockEntry
    from xpuruntime.runtime.decisions import Decisions

_INSTALL = "pip install 'xpuruntime[cpu]' (or 'xpuruntime[cuda]' for the CUDA execution provider)"


class OnnxRuntimeAdapter(EngineAdapter):
    """ONNX Runtime's steps of the kit's pipeline."""

    name: ClassVar[str] = "onnxruntime"
    cache_kind: ClassVar[str | None] = "onnxruntime-optimized-model"
    lockable: ClassVar[bool] = True

    def version(self, target: Target | None = None) -> str:
        import onnxruntime as ort

        provider = f" {target.native}" if target is not None else ""
        return f"onnxruntime {ort.__version__}{provider}"

    def target(self, device: str, decisions: Decisions) -> Target:
        """The execution provider for ``device``; a missing one goes through the fallback."""
        import onnxruntime as ort

        spec = parse_device(device)
        if spec.kind == "cpu":
            return Target("cpu", CPU_EP)
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
            reason = (
                "no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides it)"
            )
            wanted = CUDA_EP
        else:
            return Target(f"cuda:{spec.ordinal}", CUDA_EP)
        decisions.fallback(what=f"device {spec}", requested=wanted, chosen=CPU_EP, reason=reason)
        decisions.record.device = Choice(device, "cpu", reason)
        return Target("cpu", CPU_EP)

    def precisions(self, target: Target) -> Collection[str]:
        return ("fp32", "tf32") if target.native == CUDA_EP else ("fp32",)

    def kernel_support(self, target: Target) -> SupportTable:
        return kernel_support(str(target.native))

    def replay(self, plan: BuildPlan, entry: LockEntry, lock: EngineLock) -> None:
        plan.policy = ort_lock.replay_options(plan.policy, entry, lock)

    def configure(self, plan: BuildPlan, decisions: Decisions) -> None:
        import onnxruntime as ort

        on_cuda = plan.target.native == CUDA_EP
        index = parse_device(plan.target.device).ordinal
        if on_cuda:
            _load_cuda_libraries(ort, decisions)
        stream = _core_stream(index) if on_cuda else None
        config = build_config(
            plan.policy,
            provider=str(plan.target.native),
            device_index=index,
            record=decisions.record,
            engine_options=plan.policy.engine_options.get("onnxruntime", {}),
            kernel_options=plan.kernel_options,
            free_dims=plan.free_dims,
            stream_handle=None if stream is None else int(stream.handle),
            strict_fallback=decisions.fallback_raises,
        )
        plan.options.update(config=config, device_index=index, stream=stream)
        plan.keep_alive += [stream, config]

    def build(self, plan: BuildPlan, decisions: Decisions) -> Any:
        import onnxruntime as ort

        config = plan.options["config"]
        options = config.options
        load_path = plan.model
        cached = plan.cache
        if cached is not None and cached.hit:
            # The cached graph is already optimized for this key: optimizing again only costs.
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            load_path = cached.entry / "model.onnx"
        elif cached is not None:
            options.graph_optimization_level = plan.options.setdefault(
                "optimization_level", options.graph_optimization_level
            )
            options.optimized_model_filepath = str(cached.entry / "model.onnx")
        provider = str(plan.target.native)
        policy = plan.policy
        with native_stderr_to_logging("onnxruntime", policy.engine_log_level) as logged:
            # The partitioner reports, at level info on the default logger, each node it
            # keeps on the CPU as cheap shape work: read that while the session is made.
            if provider != CPU_EP:
                ort.set_default_logger_severity(ORT_SEVERITIES["info"])
            try:
                session = _create(ort, load_path, config, provider)
            finally:
                ort.set_default_logger_severity(ORT_SEVERITIES[policy.engine_log_level])
        route_engine_stderr()  # what ONNX Runtime prints during runs goes to logging as well
        plan.options.update(logged=logged, load_path=load_path, decisions=decisions)
        if provider == CUDA_EP and CUDA_EP not in session.get_providers():
            decisions.fallback(
                what="execution provider",
                requested=CUDA_EP,
                chosen=CPU_EP,
                reason="ONNX Runtime could not initialise the CUDA execution provider (are the "
                "CUDA/cuDNN libraries loadable? `import torch` first, or call "
                "onnxruntime.preload_dlls())",
            )
            plan.target = Target("cpu", CPU_EP)
        return session

    def read_placement(self, built: Any, plan: BuildPlan, decisions: Decisions) -> None:
        import onnxruntime as ort

        record = decisions.record
        nodes = assigned_nodes(built)
        if nodes is None:
            add_setting(
                record,
                "node_assignment",
                True,
                None,
                False,
                f"onnxruntime {ort.__version__} cannot report node placement (needs >= 1.22)",
            )
            return
        record_assignment(
            decisions,
            nodes,
            requested=str(plan.target.native),
            graph=plan.info.graph,
            precision=plan.precision,
            cpu_preferred=cpu_preferred_nodes(plan.options.get("logged", ())),
            partitioned=lambda: _partitioned_graph(ort, plan),
        )
        for node in record.nodes:
            node.precision = plan.info.node_precision(node.name) or node.precision

    def lock_choice(self, built: Any, plan: BuildPlan, lock: EngineLock) -> LockedChoice:
        return ort_lock.lock_choice(built, lock)

    def check_replay(self, built: Any, plan: BuildPlan, entry: LockEntry) -> list[str]:
        return ort_lock.check_replay(built, entry)

    def session(self, built: Any, plan: BuildPlan) -> OnnxRuntimeSession:
        stream = plan.options.get("stream")
        return OnnxRuntimeSession(
            built,
            provider=str(plan.target.native),
            device_index=plan.options["device_index"],
            profile_dir=plan.options["config"].profile_dir,
            keep_alive=plan.keep_alive,
            decisions=plan.options["decisions"],
            stream_handle=None if stream is None else int(stream.handle),
        )


class OnnxRuntimeEngine(KitEngine):
    """ONNX Runtime with the CPU execution provider, and the CUDA one where installed."""

    name: ClassVar[str] = "onnxruntime"
    aliases: ClassVar[tuple[str, ...]] = ("onnxrt", "ort")
    device_kinds: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    install_hint: ClassVar[str] = _INSTALL
    adapter: ClassVar[type[EngineAdapter]] = OnnxRuntimeAdapter

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


def _load_cuda_libraries(ort: Any, decisions: Decisions) -> None:
    """Load the CUDA and cuDNN libraries the CUDA EP needs from the pip packages
    (``onnxruntime-gpu[cuda,cudnn]``, or PyTorch's) before the session starts; without this
    the EP fails to start unless something (``import torch``) loaded them first."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:  # ONNX Runtime < 1.21: the libraries must be on the loader's path
        return
    record = decisions.record
    try:
        preload()
    except Exception as exc:  # a missing package: the EP start check says what failed
        add_setting(record, "cuda_libraries", "preload", None, False, f"preload_dlls(): {exc}")
        return
    add_setting(record, "cuda_libraries", "preload", "onnxruntime.preload_dlls()", True)


def _core_stream(device_index: int) -> Any:
    """A stream of the core's, handed to the CUDA EP as its compute stream."""
    from xpuruntime.runtime.streams import Stream

    return Stream(device=device_index)


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
        raise  # the kit types it (memory-class failures, else InvalidModelError)


def _partitioned_graph(ort: Any, plan: BuildPlan) -> Any:
    """The GraphProto ONNX Runtime partitions for ``plan``: a second session with the same
    options and providers writes its optimized graph, where the nodes ONNX Runtime made (the
    function bodies it inlined for ops the provider lacks) appear with the names the placement
    reports. Only called when placed nodes remain that the model graph does not show."""
    import tempfile

    import onnx

    config = plan.options["config"]
    options = config.options
    saved = options.optimized_model_filepath, options.enable_profiling
    with tempfile.TemporaryDirectory(prefix="xpuruntime-partitioned-") as folder:
        path = Path(folder) / "partitioned.onnx"
        options.optimized_model_filepath = str(path)
        options.enable_profiling = False  # the probe session is no run of the user's
        try:
            with native_stderr_to_logging("onnxruntime", plan.policy.engine_log_level):
                _create(ort, plan.options["load_path"], config, str(plan.target.native))
        finally:
            options.optimized_model_filepath, options.enable_profiling = saved
        return onnx.load(str(path), load_external_data=False).graph


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
