"""InferenceSession: run an ONNX model under an explicit policy and say what ran."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import msgspec

from xpuruntime.inference.device import CPU, resolve_device
from xpuruntime.inference.errors import (
    EngineRunError,
    InputError,
    InputNameError,
    InputShapeWarning,
    SessionClosedError,
    did_you_mean,
)
from xpuruntime.inference.lock_apply import create_session
from xpuruntime.inference.model_source import open_model
from xpuruntime.inference.selection import availability_of, choose_engine, supports
from xpuruntime.inference.validation import FeedValidator, describe_tensor
from xpuruntime.policies import ExecutionPolicy, LayeredPolicy, PolicyDocument, layered_policy
from xpuruntime.policies._suggest import choices_hint
from xpuruntime.policies.errors import PolicyError, UnknownFieldError, XpuRuntimeError
from xpuruntime.policies.layering import ARGUMENT_LAYER, merge
from xpuruntime.runtime.record import Choice, ExecutionRecord, RunRecord

if TYPE_CHECKING:
    import onnx

    from xpuruntime.inference.bundle import BundleVerification
    from xpuruntime.policies import KernelPolicy
    from xpuruntime.runtime.engines import EngineSession, RunStats, TensorInfo

_clock = time.perf_counter

#: What ``exec_policy`` may be: a policy object or document, the path of a policy file, None
#: (then ``$XPURUNTIME_POLICY_FILE``, else the defaults), or a LayeredPolicy whose layers a
#: caller (the CLI) has already applied.
PolicySource = ExecutionPolicy | PolicyDocument | LayeredPolicy | str | os.PathLike[str] | None

#: How many runs the record keeps (the most recent); the count of all runs is kept too.
RUN_HISTORY = 1000


#: ExecutionPolicy settings ``InferenceSession`` takes as keywords (``fallback="warn"``);
#: device and kernel_policy are named parameters of their own.
SETTING_KEYWORDS: frozenset[str] = frozenset(ExecutionPolicy.__struct_fields__) - {
    "device",
    "kernel_policy",
}


def _settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword settings as the execution section of the arguments layer; anything that is
    not an ExecutionPolicy setting is refused (engine options go in ``engine_options``)."""
    unknown = sorted(set(settings) - SETTING_KEYWORDS)
    if unknown:
        raise UnknownFieldError(
            f"InferenceSession() got unknown keyword argument(s) {', '.join(map(repr, unknown))}:"
            f" keywords are ExecutionPolicy settings. {choices_hint(unknown[0], SETTING_KEYWORDS)}"
            f" Engine options go in engine_options={{'<engine>': {{...}}}}, for example "
            f"engine_options={{'onnxruntime': {{{unknown[0]!r}: ...}}}}",
            location=f"execution.{unknown[0]}",
            source=ARGUMENT_LAYER,
        )
    # Policy objects given as values (MemoryPolicy ...) become the document's plain values.
    return {name: msgspec.to_builtins(value) for name, value in settings.items()}


def _arguments(
    *,
    device: str,
    fp16: bool,
    kernel_policy: KernelPolicy | None,
    settings: Mapping[str, Any],
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The keyword shortcuts and settings as the arguments layer (a partial policy document)."""
    execution: dict[str, Any] = _settings(settings)
    if device != "auto":
        execution["device"] = device
    if fp16:
        if execution.get("precision", "fp16") != "fp16":
            raise PolicyError(
                f"fp16=True and precision={execution['precision']!r} disagree; pass one"
            )
        execution["precision"] = "fp16"
    arguments: dict[str, Any] = {"execution": execution} if execution else {}
    if kernel_policy is not None:
        arguments["kernel"] = kernel_policy.to_section()
    return merge(arguments, extra) if extra else arguments


def _layered(
    exec_policy: PolicySource, arguments: Mapping[str, Any]
) -> tuple[ExecutionPolicy, dict[str, str]]:
    """defaults < ``exec_policy`` < ``XPURUNTIME_POLICY_*`` < ``arguments``, and who set what.

    A LayeredPolicy comes with its layers applied (the environment included): only the
    arguments go on top, and its own sources are kept.
    """
    if isinstance(exec_policy, LayeredPolicy):
        if not arguments:
            return exec_policy.policy, dict(exec_policy.sources)
        on_top = layered_policy(exec_policy.policy, arguments=arguments, environ={})
        argued = {k: v for k, v in on_top.sources.items() if v == ARGUMENT_LAYER}
        return on_top.policy, {**exec_policy.sources, **argued}
    base = Path(exec_policy) if isinstance(exec_policy, os.PathLike) else exec_policy
    layered = layered_policy(base, arguments=arguments, environ=os.environ)
    return layered.policy, dict(layered.sources)


class InferenceSession:
    """A model loaded by one engine on one device under an :class:`ExecutionPolicy`.

    >>> sess = InferenceSession("model.onnx", engine="onnxrt")          # doctest: +SKIP
    >>> out = sess.run({"input": x})                                     # doctest: +SKIP
    >>> print(sess.explain())                                            # doctest: +SKIP

    ``engine``/``backend``: an engine name or alias ("onnxruntime"/"onnxrt", "tensorrt",
    "openvino", "qnn") or "auto" (the first of ``ExecutionPolicy.engines`` that runs on the
    device). ``device``: "auto", "cpu", "cuda", "cuda:N", "npu". ``fp16=True`` is
    ``ExecutionPolicy(precision="fp16")``. Other keyword arguments are ExecutionPolicy
    settings (``fallback="warn"``, ``num_threads=4``, ``engine_options={"onnxruntime":
    {...}}``); a keyword that is not one is an UnknownFieldError naming the valid ones.

    The policy comes in layers, later ones winning per setting: the defaults;
    ``exec_policy`` (an ExecutionPolicy, a PolicyDocument or a policy file path; None reads
    ``$XPURUNTIME_POLICY_FILE``); the ``XPURUNTIME_POLICY_*`` environment variables (an unknown
    one is a PolicyError); then the explicit arguments: ``device``, ``fp16``,
    ``kernel_policy``, keyword settings and ``policy_arguments`` (a partial policy document,
    ``{"execution": {"fallback": "error"}}``: what a command line's flags become). The record
    says which layer set each setting (``ExecutionRecord.policy_sources``).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes | onnx.ModelProto,
        device: str = "auto",
        engine: str = "auto",
        kernel_policy: KernelPolicy | None = None,
        exec_policy: PolicySource = None,
        fp16: bool = False,
        backend: str | None = None,
        *,
        policy_arguments: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        if backend is not None:
            if engine not in ("auto", backend):
                raise PolicyError(
                    f"engine={engine!r} and backend={backend!r} disagree; "
                    f"backend is an alias of engine, pass one"
                )
            engine = backend
        bundle = None
        if isinstance(model, (str, os.PathLike)) and Path(model).expanduser().is_dir():
            # A bundle: model, policy and lockfile travel together. Its policy (with the lock
            # replayed) is the policy layer unless exec_policy names another.
            from xpuruntime.inference.bundle import open_bundle

            bundle = open_bundle(Path(model).expanduser())
            exec_policy = bundle.policy(exec_policy)
            model = bundle.model
        arguments = _arguments(
            device=device,
            fp16=fp16,
            kernel_policy=kernel_policy,
            settings=settings,
            extra=policy_arguments,
        )
        policy, sources = _layered(exec_policy, arguments)
        self._model_source = source = open_model(model)
        path = source.path
        spec, device_reason = resolve_device(policy.device)
        chosen = choose_engine(engine, spec, policy.engines)
        if policy.device == "auto" and spec != CPU:
            # "auto" means the best device an installed engine can use, not a device to
            # fall back from: with a GPU but no engine for it, the CPU is the choice.
            found = availability_of(chosen.engine)
            if not supports(found, spec):
                device_reason = (
                    f"device='auto': {spec} is present but {chosen.engine.name} cannot use it "
                    f"({found.reason or 'no such device in its list'}); using the CPU"
                )
                spec = CPU
                chosen = choose_engine(engine, spec, policy.engines)
        from xpuruntime.runtime import profiler
        from xpuruntime.runtime.fingerprint import environment_fingerprint, fingerprint_hash

        environment = environment_fingerprint()
        record = ExecutionRecord(
            kind="inference",
            model=source.description,
            policy_sources=sources,
            policy=policy.to_dict(),
            policy_hash=policy.content_hash(),
            environment=environment,
            environment_hash=fingerprint_hash(environment),
            engine=chosen.choice,
            device=Choice(policy.device, str(spec), device_reason),
        )
        self._bundle = bundle
        self._engine_session: EngineSession = create_session(
            chosen.engine(),
            path,
            device=str(spec),
            exec_policy=policy,
            kernel_policy=policy.kernel_policy,
            record=record,
        )
        if bundle is not None:  # after the build: the record names the engine's nodes
            bundle.describe(record, chosen.engine.name)
        self._record = record
        self._policy = policy
        self._engine_name = chosen.engine.name
        self._validator = FeedValidator(self._engine_session.inputs)
        # Engines that check feeds themselves are checked only after a failure (to explain
        # it). Named dimensions that disagree are warned about, never rejected: no engine
        # enforces dimension names.
        self._check_feeds = not self._engine_session.checks_inputs
        self._shared_dimensions = self._validator.has_shared_dimensions
        self._warned_dimensions: set[str] = set()
        self._output_names = tuple(o.name for o in self._engine_session.outputs)
        self._runs: deque[tuple[int, float, RunStats]] = deque(maxlen=RUN_HISTORY)
        self._run_count = 0
        # Guards _runs and _run_count for record(): held for an append or a copy, never
        # across a run, so readers never wait for the engine.
        self._history = threading.Lock()
        self._profiling = policy.profiling
        self._closed = False
        if policy.profiling:
            profiler.enable()

    def close(self) -> None:
        """Release the engine session and the session's temporary files (profiles, an
        in-memory model's copy). Running afterwards raises SessionClosedError; closing twice
        does nothing. Also what leaving a ``with InferenceSession(...) as sess:`` block does."""
        if self._closed:
            return
        self._closed = True
        self._engine_session.close()
        self._model_source.close()

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- metadata -------------------------------------------------------------------------
    @property
    def inputs(self) -> Sequence[TensorInfo]:
        """The model's inputs (name, numpy dtype name, shape with symbolic dimensions)."""
        return self._engine_session.inputs

    @property
    def outputs(self) -> Sequence[TensorInfo]:
        return self._engine_session.outputs

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self._output_names)

    @property
    def engine(self) -> str:
        """The engine that runs the model (its canonical name)."""
        return self._engine_name

    @property
    def device(self) -> str:
        """The device the model runs on (after any recorded fallback)."""
        assert self._record.device is not None
        return str(self._record.device.chosen)

    @property
    def policy(self) -> ExecutionPolicy:
        return self._policy

    @property
    def engine_session(self) -> EngineSession:
        """The engine's own session object (for engine-specific inspection)."""
        return self._engine_session

    def __repr__(self) -> str:
        ins = ", ".join(describe_tensor(i) for i in self.inputs)
        return (
            f"InferenceSession({self._record.model!r}, engine={self.engine!r}, "
            f"device={self.device!r}, inputs=[{ins}])"
        )

    # -- running --------------------------------------------------------------------------
    def run(
        self, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Run once: ``feeds`` maps input names to numpy/PyTorch/CuPy/DLPack tensors.

        Returns a dict of output name -> tensor (numpy on the host; device tensors with
        DLPack when the inputs were device-resident on a CUDA session). ``output_names``
        selects outputs. A bad input raises an :class:`InputError` and leaves the session
        usable. ``output_names`` None or empty: every output, in model order.
        """
        if self._closed:
            raise SessionClosedError(
                f"this session of {self._record.model} was closed; create a new one"
            )
        if self._check_feeds or output_names is not None or type(feeds) is not dict:
            self._check_call(feeds, output_names)
        if self._shared_dimensions:
            self._warn_dimensions(feeds)
        engine_session = self._engine_session
        start = _clock()
        try:
            if self._profiling:
                from xpuruntime.runtime import profiler

                with profiler.range(f"InferenceSession.run[{self._engine_name}]", "inference"):
                    outputs = engine_session.run(feeds, output_names)
            else:
                outputs = engine_session.run(feeds, output_names)
        except XpuRuntimeError:
            raise
        except Exception as exc:
            if self._closed:
                raise SessionClosedError(
                    f"this session of {self._record.model} was closed; create a new one"
                ) from exc
            if not self._check_feeds:
                self._validator.check(feeds)  # a bad feed: raise the typed error that says so
            hints = self._validator.disagreements(feeds) if self._shared_dimensions else {}
            raise EngineRunError(
                f"{self._engine_name} failed to run {self._record.model}: "
                f"{type(exc).__name__}: {exc}"
                + "".join(f". Perhaps because the {h}" for h in hints.values())
            ) from exc
        elapsed = _clock() - start
        # RunRecords are built in record(): a tuple here keeps the per-run cost small.
        with self._history:
            self._runs.append((self._run_count, elapsed, engine_session.run_stats()))
            self._run_count += 1
        return outputs

    def _check_call(self, feeds: Mapping[str, Any], output_names: Sequence[str] | None) -> None:
        """The checks a plain ``run(dict)`` on a self-checking engine does not need."""
        if not isinstance(cast(object, feeds), Mapping):
            example = (
                f" for example sess.run({{{self.input_names[0]!r}: x}})" if self.inputs else ""
            )
            raise InputError(
                f"feeds must be a mapping of input name to tensor, got "
                f"{type(feeds).__name__};{example}"
            )
        if self._check_feeds:
            self._validator.check(feeds)
        if output_names is not None:
            self._check_output_names(output_names)

    def _warn_dimensions(self, feeds: Mapping[str, Any]) -> None:
        """Warn (once per dimension name) and note in the record where a named dimension
        takes two sizes in one call."""
        for symbol, message in self._validator.disagreements(feeds).items():
            if symbol not in self._warned_dimensions:
                self._warned_dimensions.add(symbol)
                with self._history:
                    self._record.notes.append(f"inputs: {message}")
                warnings.warn(message, InputShapeWarning, stacklevel=3)

    def _check_output_names(self, output_names: Sequence[str]) -> None:
        if isinstance(output_names, str):
            raise InputNameError(
                f"output_names must be a list of names, got the string {output_names!r}; "
                f"write [{output_names!r}]"
            )
        for name in output_names:
            if name not in self._output_names:
                raise InputNameError(
                    f"unknown output {name!r}{did_you_mean(name, self._output_names)}; the "
                    f"model's outputs are: {', '.join(self._output_names)}"
                )

    # -- explaining -----------------------------------------------------------------------
    def record(self) -> ExecutionRecord:
        """The execution record: settings, node placement, fallbacks and the latest runs.

        A snapshot: safe to call while other threads run the session, and unaffected by
        later runs."""
        with self._history:
            history = list(self._runs)
            count = self._run_count
            notes = list(self._record.notes)
        if count > len(history):
            notes.append(f"runs: the last {len(history)} of {count} runs are kept")
        runs = [
            RunRecord(index, seconds * 1e3, list(stats.copies), stats.syncs, stats.io_binding)
            for index, seconds, stats in history
        ]
        return msgspec.structs.replace(self._record, runs=runs, notes=notes)

    def explain(self, *, width: int = 110) -> str:
        """The record as readable text (tables of settings, nodes, fallbacks and runs)."""
        from xpuruntime.inference.report import render_text

        return render_text(self.record(), width=width)

    def verify(
        self,
        *,
        rtol: float | None = None,
        atol: float | None = None,
        raise_on_failure: bool = True,
    ) -> BundleVerification:
        """Run a bundle's reference inputs and compare with its reference outputs.

        Only for sessions opened from a bundle directory. Tolerances default to the ones
        exported with the bundle; a mismatch raises VerificationError (or is returned with
        ``passed=False`` when ``raise_on_failure=False``).
        """
        if self._bundle is None:
            raise PolicyError(
                "verify() compares with a bundle's reference outputs; open the session from a"
                " bundle directory written by xpuruntime.pytorch.export"
            )
        from xpuruntime.inference.bundle import verify_session

        return verify_session(
            self, self._bundle, rtol=rtol, atol=atol, raise_on_failure=raise_on_failure
        )

    def export_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write a Chrome trace merging the engine's profile with the core profiler's events.

        Needs ``ExecutionPolicy(profiling=True)``; open the file in Perfetto or
        chrome://tracing.
        """
        if not self._profiling:
            raise PolicyError(
                "this session was created without profiling; pass "
                "exec_policy=ExecutionPolicy(profiling=True) to record a trace"
            )
        from xpuruntime.runtime import profiler

        target = Path(path)
        profiler.export_chrome_trace(
            str(target), extra_events=self._engine_session.profile_events()
        )
        return target
