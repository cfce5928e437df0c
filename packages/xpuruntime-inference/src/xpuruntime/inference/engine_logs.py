"""Engines' own log output, routed through Python logging (logger ``xpuruntime.engine.<engine>``).

``ExecutionPolicy.engine_log_level`` says which messages an engine emits at all (each engine
maps it to its own severity setting); what it emits goes to the logger of that engine, where
the application's logging configuration decides what is shown. A library adds no handler
of its own (Python's logging guide): without a logging configuration, nothing reaches the
terminal.

ONNX Runtime writes its messages from C++ straight to the process's stderr, with no Python
hook to redirect them. :func:`native_stderr_to_logging` therefore captures file descriptor 2
while a session is created (where nearly all of them come from) and re-emits every line
through logging with the severity ONNX Runtime printed. What ONNX Runtime's own threads
print later (its thread pool's verbose lines, at levels "info" and "verbose") is outside
that window and reaches stderr as ONNX Runtime writes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
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
