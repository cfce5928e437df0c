"""ONNX Runtime's retry of a run its execution provider failed, taken over so that it goes
through the fallback mode and into the record.

onnxruntime's Python ``InferenceSession.run`` answers an ``EPFail`` (a provider that took
part of the graph and then cannot execute it) by moving the whole session to the CPU EP for
good and running again, announced with ``print()`` only, unless ``disable_fallback()`` was
called. Shared by the ONNX Runtime engine (its CUDA EP) and the QNN engine (the QNN EP is an
ONNX Runtime provider): both disable that retry and call :meth:`ProviderRetry.leave`.
"""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions

__all__ = ["CPU_EP", "ProviderRetry"]

CPU_EP = "CPUExecutionProvider"


class ProviderRetry:
    """One session's move from ``provider`` to the CPU EP after ``provider`` failed a run.

    ``failure`` is the exception class to catch around a run; on it, call :meth:`leave`,
    then run again (the session runs on the CPU EP from then on).
    """

    def __init__(self, ort: Any, session: Any, provider: str, decisions: Decisions) -> None:
        session.disable_fallback()  # ONNX Runtime's own retry: silent, and for good
        self.failure: type[BaseException] = ort.capi.onnxruntime_pybind11_state.EPFail
        self.provider = provider
        self._decisions = decisions
        self._switch = threading.Lock()

    def leave(self, session: Any, exc: BaseException) -> None:
        """``exc`` came from a run of ``session`` on :attr:`provider`: move the session to
        the CPU EP, as ONNX Runtime would, once the fallback mode allows it
        (``fallback="error"`` raises FallbackError and leaves the session as it was)."""
        with self._switch:
            if self.provider not in session.get_providers():
                return  # another run already moved it
            message = " ".join(str(exc).split())
            self._decisions.fallback(
                what="execution provider",
                requested=self.provider,
                chosen=CPU_EP,
                reason=f"{self.provider} failed while running ({message}); every later run "
                f"of this session runs on {CPU_EP}, as ONNX Runtime's own retry does",
            )
            with warnings.catch_warnings():  # "SessionOptions has already been configured"
                warnings.simplefilter("ignore")
                session.set_providers([CPU_EP])
