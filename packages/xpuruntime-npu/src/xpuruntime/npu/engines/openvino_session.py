"""A compiled OpenVINO model with one infer request, addressed by the model's own names."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xpuruntime.inference.kit import KitSession
from xpuruntime.inference.tensors import as_host_array
from xpuruntime.runtime.engines import TensorInfo


def _dims(shape: Any) -> tuple[int | str | None, ...]:
    """An OpenVINO PartialShape as TensorInfo dims (dynamic -> None)."""
    return tuple(d.get_length() if d.is_static else None for d in shape)


def tensor_infos(ports: Sequence[Any], names: Sequence[str]) -> list[TensorInfo]:
    """TensorInfo of each port under the model's own name for it."""
    return [
        TensorInfo(
            name, np.dtype(p.get_element_type().to_dtype()).name, _dims(p.get_partial_shape())
        )
        for p, name in zip(ports, names, strict=True)
    ]


class OpenVINOSession(KitSession):
    """A compiled OpenVINO model with one infer request (the kit's behaviour contract)."""

    def __init__(self, compiled: Any, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        super().__init__(
            tensor_infos(compiled.inputs, inputs),
            tensor_infos(compiled.outputs, outputs),
            engine="OpenVINO",
        )
        self._compiled: Any = compiled
        self._request: Any = compiled.create_infer_request()
        # One infer request owns its input/output buffers: concurrent run() calls take turns.
        self._lock = threading.Lock()
        self._port_of = {name: index for index, name in enumerate(inputs)}
        self._names = list(outputs)

    @property
    def execution_devices(self) -> list[str]:
        """EXECUTION_DEVICES of the compiled model (AUTO may change it after startup)."""
        return [str(d) for d in self._compiled.get_property("EXECUTION_DEVICES")]

    def release(self) -> None:
        with self._lock:
            self._compiled = self._request = None

    def execute(self, feeds: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        # By port index: the compiled ports' own names may be internal ones.
        by_port = {
            self._port_of.get(name, name): np.ascontiguousarray(as_host_array(value)[0])
            for name, value in feeds.items()
        }
        with self._lock:
            try:
                results = self._request.infer(by_port)  # outputs copied out (share_outputs=False)
            except Exception:
                # A failed infer can leave the request's shape state broken for every later
                # shape (a batch-0 feed does on some models): the next run gets a fresh one.
                if self._compiled is not None:
                    self._request = self._compiled.create_infer_request()
                raise
            values = results.to_tuple()
        by_name = dict(zip(self._names, values, strict=True))
        return {name: by_name[name] for name in names}
