"""An ONNX Runtime session and its run paths (plain host I/O, or I/O binding on CUDA)."""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import shutil
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xpuruntime.inference.engines.ort_options import CPU_EP, CUDA_EP
from xpuruntime.inference.errors import InputError
from xpuruntime.inference.kit.contract import KitSession
from xpuruntime.inference.kit.ort_retry import ProviderRetry
from xpuruntime.inference.tensors import (
    as_host_array,
    dtype_name,
    onnx_type_to_numpy_name,
    placement,
)
from xpuruntime.runtime.engines import NO_TRANSFERS, RunStats, TensorInfo
from xpuruntime.runtime.record import CopyRecord

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions

_log = logging.getLogger(__name__)


def _run_callable(session: Any) -> Any:
    """The run function to call: ONNX Runtime's pybind session under its Python wrapper.

    ``onnxruntime.InferenceSession.run`` adds two things on top of the pybind
    ``InferenceSession.run`` it calls: a second check of the input names (the pybind session
    checks names, types and shapes itself), and, when an execution provider fails during a
    run, a silent switch of the whole session to the CPU provider (announced with print()).
    The first costs time on every call; the second is taken over by
    :class:`~xpuruntime.inference.kit.ort_retry.ProviderRetry` (through the fallback mode).
    Calling the pybind session skips both. Where the wrapper has no pybind session (another
    ONNX Runtime layout), the public ``run`` is used, its retry disabled.
    """
    native = getattr(session, "_sess", None)
    run = getattr(native, "run", None)
    if callable(run):
        return run
    _log.warning(
        "onnxruntime %s has no InferenceSession._sess.run (a private API xpuruntime relies on, "
        "tested up to onnxruntime 1.31): using the public run(), which re-checks inputs on "
        "every call",
        _ort_version(),
    )
    return session.run


def _ort_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


def _tensor_info(arg: Any) -> TensorInfo:
    shape = tuple(d if isinstance(d, (int, str)) else None for d in arg.shape)
    return TensorInfo(arg.name, onnx_type_to_numpy_name(arg.type), shape)


class OnnxRuntimeSession(KitSession):
    """Runs one ``onnxruntime.InferenceSession``; counts the host<->device copies it makes.

    On the CUDA execution provider, inputs that already live on the session's GPU are bound
    with I/O binding (``OrtValue.from_dlpack``, no host round trip) and the outputs stay on
    the GPU as ``OrtValue`` objects (DLPack producers: ``torch.from_dlpack(out)``). Host
    inputs run through ``InferenceSession.run``, which copies each input in and each output
    out; the record counts those copies.
    """

    def __init__(
        self,
        session: Any,
        *,
        provider: str,
        device_index: int,
        profile_dir: str | None,
        keep_alive: Sequence[Any],
        decisions: Decisions,
        stream_handle: int | None = None,
    ) -> None:
        import onnxruntime as ort

        super().__init__(
            tuple(_tensor_info(a) for a in session.get_inputs()),
            tuple(_tensor_info(a) for a in session.get_outputs()),
            engine="onnxruntime",
        )
        self.session = session
        self.provider = provider
        # A CUDA EP failure during a run moves the session to the CPU EP under the fallback
        # mode (on the CPU EP, a failure has nowhere to go and is raised).
        self._retry = ProviderRetry(ort, session, provider, decisions)
        self._run = _run_callable(session)
        self._on_cuda = provider == CUDA_EP
        self._device_index = device_index
        self._profile_dir = profile_dir
        self._keep_alive = list(keep_alive)  # the compute stream must outlive the session
        self._stream_handle = stream_handle
        self._input_count = len(self._inputs)
        self._stats = NO_TRANSFERS
        # Profiles live in a private temporary folder: removed on close() or garbage collection.
        self._release = weakref.finalize(self, _end_profiling, session, profile_dir)

    def release(self) -> None:
        self._release()
        # The pybind session is released with the last reference; run() fails from now on.
        self.session = self._run = None

    # ONNX Runtime rejects wrong names, element types, ranks and fixed dimensions itself.
    checks_inputs = True

    def run_stats(self) -> RunStats:
        return self._stats

    def execute(self, feeds: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        if len(feeds) < self._input_count:
            # The pybind session notices a missing input only inside a kernel (and logs an
            # error there); the caller's check names it.
            raise ValueError(f"{self._input_count - len(feeds)} input(s) missing")
        if not self._on_cuda:
            for x in feeds.values():
                if type(x) is not np.ndarray:
                    return self._run_host(feeds, names)
            # All numpy on the CPU provider, the common case: no conversion, no copies.
            self._stats = NO_TRANSFERS
            outputs = self._run(names, feeds, None)
            # zip's strict= keyword costs measurably on this per-call path; lengths match.
            return dict(zip(names, outputs))  # noqa: B905
        try:
            if any(placement(x).on_device for x in feeds.values()):
                return self._run_bound(feeds, names)
            return self._run_host(feeds, names)
        except self._retry.failure as exc:
            self._leave_cuda(exc)
        return self.execute(feeds, names)

    def _leave_cuda(self, exc: BaseException) -> None:
        """The CUDA EP failed a run: move the session to the CPU EP (the fallback mode
        decides), with its new pybind session and host I/O only from now on (device inputs
        are fetched, outputs are numpy arrays)."""
        self._retry.leave(self.session, exc)
        self.provider = CPU_EP
        self._on_cuda = False
        self._run = _run_callable(self.session)

    def _run_host(self, feeds: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        """Run with host arrays (fetching device tensors first); count the copies."""
        host, fetched, fetched_bytes = self._host_feeds(feeds)
        outputs = self._run(names, host, None)
        copies = []
        if self._on_cuda:  # ONNX Runtime uploads every input and downloads every output
            copies += [
                CopyRecord("host_to_device", len(host), sum(int(a.nbytes) for a in host.values())),
                CopyRecord("device_to_host", len(outputs), sum(int(o.nbytes) for o in outputs)),
            ]
        if fetched:
            copies.append(CopyRecord("device_to_host", fetched, fetched_bytes))
        self._stats = RunStats(tuple(copies), syncs=int(self._on_cuda) + fetched)
        return dict(zip(names, outputs, strict=False))

    def _host_feeds(self, feeds: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int, int]:
        """Feeds as numpy arrays, and how many device tensors had to be fetched (and bytes)."""
        host: dict[str, np.ndarray] = {}
        fetched = fetched_bytes = 0
        for name, x in feeds.items():
            array, copied = as_host_array(x)
            host[name] = array
            if copied:
                fetched += 1
                fetched_bytes += int(array.nbytes)
        return host, fetched, fetched_bytes

    def _run_bound(self, feeds: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        import onnxruntime as ort

        binding = self.session.io_binding()
        uploads = upload_bytes = 0
        for name, x in feeds.items():
            where = placement(x)
            if where.kind == "cuda":
                if where.index != self._device_index:
                    raise InputError(
                        f"input {name!r} is on cuda:{where.index} but the session runs on "
                        f"cuda:{self._device_index}; move it there first"
                    )
                binding.bind_ortvalue_input(name, self._device_value(ort, x))
            else:
                array, _ = as_host_array(x)
                binding.bind_cpu_input(name, array)
                uploads += 1
                upload_bytes += int(array.nbytes)
        for name in names:
            binding.bind_output(name, "cuda", self._device_index)
        self.session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        copies = (CopyRecord("host_to_device", uploads, upload_bytes),) if uploads else ()
        self._stats = RunStats(copies, syncs=1, io_binding=True)
        return dict(zip(names, outputs, strict=False))

    def _device_value(self, ort: Any, x: Any) -> Any:
        """A device tensor as an OrtValue sharing its memory, ready on the compute stream.

        DLPack's ``stream`` argument makes the producer (PyTorch, CuPy) order its pending
        work before the consumer's stream, so ONNX Runtime never reads a half-written input.
        """
        if self._stream_handle is None or dtype_name(x) == "bool":
            return ort.OrtValue.from_dlpack(x)  # bool needs the object (dtype detection)
        try:
            capsule = x.__dlpack__(stream=self._stream_handle)
        except TypeError:  # a producer without the stream argument
            capsule = x.__dlpack__()
        return ort.OrtValue.from_dlpack(capsule)

    def profile_events(self) -> list[dict[str, Any]]:
        if self._profile_dir is None or self.session is None:
            return []
        start_ns = int(self.session.get_profiling_start_time_ns())
        path = self.session.end_profiling()
        if not path:  # already ended: read the file it wrote then
            found = sorted(glob.glob(f"{self._profile_dir}/onnxruntime*.json"))
            if not found:
                return []
            path = found[-1]
        return read_profile(path, start_ns)


def _end_profiling(session: Any, profile_dir: str | None) -> None:
    if profile_dir is None:
        return
    with contextlib.suppress(Exception):  # ended already, or the session is gone
        session.end_profiling()
    shutil.rmtree(profile_dir, ignore_errors=True)


def read_profile(path: str, start_ns: int) -> list[dict[str, Any]]:
    """ONNX Runtime's profile JSON as Chrome trace events on the core profiler's clock.

    ONNX Runtime writes ``ts`` in microseconds since its profiling start, and gives that
    start (``get_profiling_start_time_ns``) on ``high_resolution_clock``, which is the wall
    clock with libstdc++. The core profiler uses ``perf_counter_ns`` (CLOCK_MONOTONIC), so a
    wall-clock start is moved onto the monotonic axis.
    """
    wall_minus_mono = time.time_ns() - time.perf_counter_ns()
    if abs(start_ns - time.time_ns()) < abs(start_ns - time.perf_counter_ns()):
        start_ns -= wall_minus_mono
    offset_us = start_ns / 1000.0
    events = []
    for event in json.loads(Path(path).read_text()):
        shifted = dict(event)
        shifted["ts"] = float(event.get("ts", 0)) + offset_us
        shifted["pid"] = "onnxruntime"
        events.append(shifted)
    return events
