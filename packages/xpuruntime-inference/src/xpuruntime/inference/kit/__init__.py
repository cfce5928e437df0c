"""The engine kit: the fixed pipeline every engine runs through, and the behaviour contract
every engine session keeps (PJRT-style: the kit owns the order of steps, an engine adapter
supplies only its own narrow steps).

* :mod:`.adapter`: :class:`EngineAdapter` (what an engine supplies) and :class:`BuildPlan`
  (the one build-plan type);
* :mod:`.pipeline`: :class:`KitEngine` and :func:`build_session` (the fixed pipeline);
* :mod:`.contract`: :class:`KitSession` (names, feeds, outputs, closed, errors);
* :mod:`.locking`: :class:`EngineLock` (one lock entry per engine session);
* :mod:`.inspect`, :mod:`.shapes`, :mod:`.limits`, :mod:`.errors`: the kit's own steps;
* :mod:`.provider_assignment`: node placement as ONNX Runtime's providers report it, and
  :mod:`.ort_retry`: a failed run's move to the CPU EP through the fallback rule (the ONNX
  Runtime and QNN engines).

Engines import the kit, never each other. Importing the kit imports no engine backend.
"""

from __future__ import annotations

from xpuruntime.inference.kit.adapter import BuildPlan, EngineAdapter, Target
from xpuruntime.inference.kit.contract import KitSession
from xpuruntime.inference.kit.locking import EngineLock
from xpuruntime.inference.kit.pipeline import KitEngine, build_session

__all__ = [
    "BuildPlan",
    "EngineAdapter",
    "EngineLock",
    "KitEngine",
    "KitSession",
    "Target",
    "build_session",
]
