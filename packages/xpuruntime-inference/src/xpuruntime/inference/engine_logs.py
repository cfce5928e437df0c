"""Engines' own log output, routed through Python logging (logger ``xpuruntime.engine.<engine>``).

``ExecutionPolicy.engine_log_level`` says which messages an engine emits at all (each engine
maps it to its own severity setting); what it emits goes to the logger of that engine, where
the application's logging configuration decides what is shown. A library adds no handler
of its own (Python's logging guide): without a logging configuration, nothing reaches the
terminal.

ONNX Runtime writes its messages from C++ straight to the process's stderr: its Python API
has no logging hook (the global environment is created at import with no custom logger;
microsoft/onnxruntime#28437). Two mechanisms route them:

- while a session is created, :func:`native_stderr_to_logging` captures file descriptor 2
  into a file and re-emits every line with the severity ONNX Runtime printed, also keeping
  the lines for the engine's decisions (the partitioner's placement reports);
- from the first ONNX Runtime session on, :func:`route_engine_stderr` keeps a process-wide
  relay on file descriptor 2 for what ONNX Runtime prints while runs are in flight (output
  size warnings, its thread pool's lines). The relay logs the lines in ONNX Runtime's format
  and passes every other byte through unchanged, at once, to where stderr went before, so
  runs in any number of threads proceed as before and nobody else's output is held back.
  At interpreter exit the relay drains and puts the old stderr back.

OpenVINO has a logging hook in its C API (``ov_util_set_log_callback``):
:func:`route_openvino_log` installs it, so whatever OpenVINO logs goes to
``xpuruntime.engine.openvino``. Release builds of OpenVINO log little through it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import logging
import os
import queue
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOGGER_PREFIX = "xpuruntime.engine"

#: ExecutionPolicy.engine_log_level -> the Python logging level messages are emitted at.
PYTHON_LEVELS = {
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "verbose": logging.DEBUG,
}

# "2026-11-23 16:24:15.27 [W:onnxruntime:Default, session_state.cc:1166 Verify...] text",
# possibly wrapped in ANSI colour codes when ONNX Runtime thinks stderr is a terminal.
_ORT_LINE = re.compile(r"\[(?P<severity>[VIWEF]):onnxruntime:[^,\]]*,\s*(?P<where>[^\]]*)\]\s?")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ORT_SEVERITIES = {
    "V": logging.DEBUG,
    "I": logging.INFO,
    "W": logging.WARNING,
    "E": logging.ERROR,
    "F": logging.CRITICAL,
}
# The start of a line ONNX Runtime prints: a timestamp, possibly after an ANSI colour code. A
# fragment that could still become one is held until its line ends; anything else passes on.
_ORT_LINE_START = re.compile(rb"(\x1b\[[0-9;]*m)?[0-9]")
# One redirection of fd 2 at a time: a second thread's would restore the wrong descriptor.
_redirect_lock = threading.Lock()

logging.getLogger(LOGGER_PREFIX).addHandler(logging.NullHandler())


def engine_logger(engine: str) -> logging.Logger:
    """The logger an engine's own messages go to."""
    return logging.getLogger(f"{LOGGER_PREFIX}.{engine}")


@contextlib.contextmanager
def native_stderr_to_logging(engine: str, level: str) -> Iterator[list[tuple[int, str]]]:
    """Capture what native code writes to stderr in the block; log it, line by line.

    Lines in ONNX Runtime's format keep their severity; other lines are logged as
    warnings. Lines below ``level`` (an ``engine_log_level``) are not logged. The block gets
    a list that holds every captured ``(level, message)`` once it ends, logged or not: what
    the engine reported about its decisions (ONNX Runtime's partitioner, for one).
    """
    logger = engine_logger(engine)
    threshold = PYTHON_LEVELS[level]
    lines: list[tuple[int, str]] = []
    with _redirect_lock, tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            yield lines
        finally:  # also when session creation failed: its messages say why
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", errors="replace").splitlines():
                severity, message = parse_native_line(line)
                if not message:
                    continue
                lines.append((severity, message))
                if severity >= threshold:
                    logger.log(severity, message)


def parse_native_line(line: str) -> tuple[int, str]:
    """(logging level, message) of one line an engine printed."""
    plain = _ANSI.sub("", line).strip()
    match = _ORT_LINE.search(plain)
    if match is None:
        return logging.WARNING, plain
    message = plain[match.end() :]
    return _ORT_SEVERITIES[match["severity"]], f"{message} ({match['where'].strip()})"


class _StderrRelay:
    """File descriptor 2 as a pipe: ONNX Runtime's lines to logging, all other bytes through.

    One thread only reads the pipe (it never writes anything, so whoever writes to stderr,
    the logging handlers included, can never wait on a full pipe for it); a second one
    routes what was read."""

    _HOLD_S = 0.05  # how long a fragment that may start an ONNX Runtime line waits for its end

    def __init__(self) -> None:
        sys.stderr.flush()
        self._target = os.dup(2)  # where stderr went before: everything else goes on there
        read_end, self._write_end = os.pipe()
        os.dup2(self._write_end, 2)
        self._chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._drained: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._marker_lock = threading.Lock()
        self._markers = 0
        self._closed = False
        self._logger = engine_logger("onnxruntime")
        threading.Thread(
            target=self._read, args=(read_end,), name="xpuruntime-stderr-read", daemon=True
        ).start()
        threading.Thread(target=self._route, name="xpuruntime-stderr-route", daemon=True).start()
        if faulthandler.is_enabled():
            # A fatal error's traceback must not wait in the pipe for a thread that no longer runs.
            self._fault_file = os.fdopen(os.dup(self._target), "w")
            faulthandler.enable(file=self._fault_file)
        atexit.register(self.close)

    def _read(self, read_end: int) -> None:
        while True:
            chunk = os.read(read_end, 65536)
            if not chunk:
                return
            self._chunks.put(chunk)

    def _route(self) -> None:
        pending = b""
        while True:
            try:
                chunk = self._chunks.get(timeout=self._HOLD_S if pending else None)
            except queue.Empty:  # the held fragment did not become a line: it is not ours
                self._write(pending)
                pending = b""
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._line(line)
            if pending and not _ORT_LINE_START.match(pending):
                self._write(pending)
                pending = b""

    def _line(self, line: bytes) -> None:
        try:
            self._route_line(line)
        except Exception:  # the router must outlive any one bad line
            self._write(line + b"\n")

    def _route_line(self, line: bytes) -> None:
        before, marker, number = line.partition(_DRAINED)
        if marker:  # drain()'s marker, possibly after a fragment that had no newline
            self._write(before)
            self._drained.put(number)
            return
        text = line.decode("utf-8", errors="replace")
        if _ORT_LINE.search(_ANSI.sub("", text)) is None:
            self._write(line + b"\n")
            return
        severity, message = parse_native_line(text)
        self._logger.log(severity, message)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._target, view) :]
        except OSError:  # the old stderr is gone (closed, a broken pipe): nowhere to put it
            pass

    def drain(self, timeout: float = 2.0) -> bool:
        """Wait until everything written to stderr before this call has been routed."""
        with self._marker_lock:
            self._markers += 1
            number = str(self._markers).encode()
        os.write(self._write_end, _DRAINED + number + b"\n")
        try:
            while self._drained.get(timeout=timeout) != number:
                pass
        except queue.Empty:
            return False
        return True

    def close(self) -> None:
        """Route what is still in the pipe, then give file descriptor 2 back to the old stderr."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        self.drain()
        if _same_file(2, self._write_end):  # unless somebody else took fd 2 over since
            os.dup2(self._target, 2)


def _same_file(fd: int, other: int) -> bool:
    try:
        a, b = os.fstat(fd), os.fstat(other)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


_DRAINED = b"\0xpuruntime-stderr-drained:"
_relay: _StderrRelay | None = None
_relay_lock = threading.Lock()


def route_engine_stderr() -> _StderrRelay:
    """Start the process-wide stderr relay (once); what ONNX Runtime prints from now on is logged."""
    global _relay
    with _relay_lock:
        if _relay is None or _relay._closed:
            _relay = _StderrRelay()
        return _relay


_OV_LEVEL = re.compile(r"^\s*\[\s*(?P<level>ERROR|WARNING|INFO|DEBUG)\s*\]\s*")
_ov_callback: Any = None  # the ctypes callback: it must live as long as OpenVINO may call it


def _openvino_message(message: bytes | None) -> None:
    text = _ANSI.sub("", (message or b"").decode("utf-8", errors="replace")).strip()
    if not text:
        return
    match = _OV_LEVEL.match(text)
    level = int(getattr(logging, match["level"])) if match else logging.WARNING
    engine_logger("openvino").log(level, text[match.end() :] if match else text)


def route_openvino_log(openvino: Any) -> Any:
    """Install OpenVINO's C-API log callback (once): its messages go to the openvino logger.

    Returns the installed callback, or None where this OpenVINO has no ``libopenvino_c``
    with ``ov_util_set_log_callback`` (then it prints as it always did)."""
    global _ov_callback
    if _ov_callback is not None:
        return _ov_callback
    libraries = sorted(Path(openvino.__file__).parent.glob("libs/libopenvino_c.so*"))
    if not libraries:
        return None
    try:
        c_api = ctypes.CDLL(str(libraries[0]))
        setter = c_api.ov_util_set_log_callback
    except (OSError, AttributeError):
        return None
    callback = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(_openvino_message)
    setter.argtypes = [ctypes.c_void_p]
    setter.restype = None
    setter(ctypes.cast(callback, ctypes.c_void_p))
    _ov_callback = callback
    return callback


def tensorrt_logger(trt: Any, level: str) -> Any:
    """A ``tensorrt.ILogger`` that sends TensorRT's messages to ``xpuruntime.engine.tensorrt``."""
    logger = engine_logger("tensorrt")
    severities = {
        trt.Logger.INTERNAL_ERROR: logging.CRITICAL,
        trt.Logger.ERROR: logging.ERROR,
        trt.Logger.WARNING: logging.WARNING,
        trt.Logger.INFO: logging.INFO,
        trt.Logger.VERBOSE: logging.DEBUG,
    }
    threshold = PYTHON_LEVELS[level]

    class _ToLogging(trt.ILogger):  # type: ignore[misc]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            python_level = severities.get(severity, logging.WARNING)
            if python_level >= threshold:
                logger.log(python_level, msg)

    return _ToLogging()
