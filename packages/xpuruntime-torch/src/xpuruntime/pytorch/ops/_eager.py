"""When an op call may skip PyTorch's dispatcher, and how torch.compile sees an op whose eager
fast path is a C function: shared by the custom ops' eager fast paths."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from xpuruntime.pytorch._compat import is_compiling

__all__ = ["plain_eager", "trace_in_place_of"]

_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def plain_eager(*tensors: torch.Tensor | None) -> bool:
    """True for an eager call on plain tensors that nothing intercepts: no compiler or tracer,
    no dispatch or function mode (fake tensors, functionalisation), no functorch transform,
    no tensor subclass. Only then may a call skip PyTorch's dispatcher (two trips into Python
    are most of a Python custom op's host time)."""
    for tensor in tensors:
        if tensor is not None and type(tensor) not in _PLAIN_TENSORS:
            return False
    return not (
        is_compiling()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._are_functorch_transforms_active()
        or torch._C._get_tracing_state() is not None
    )


def trace_in_place_of(c_function: Callable[..., Any], function: Callable[..., Any]) -> None:
    """Have dynamo (torch.compile, torch.export) trace ``function`` where it meets
    ``c_function``, an op's C function whose slow path ``function`` is (dynamo cannot trace C):
    ``torch.compiler.substitute_in_graph``. Registered once dynamo is imported: importing it
    costs seconds, which a process that never compiles should not pay."""

    def register() -> None:
        torch.compiler.substitute_in_graph(c_function)(function)

    if "torch._dynamo" in sys.modules:
        register()
    else:
        sys.meta_path.insert(0, _AfterImport("torch._dynamo", register))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then`` right after the module ``name`` is first imported (loaded by the finders
    that would load it anyway), then leaves ``sys.meta_path``."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self._name = name
        self._then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module
        then = self._then

        def exec_module(module: ModuleType) -> None:
            load(module)
            then()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
