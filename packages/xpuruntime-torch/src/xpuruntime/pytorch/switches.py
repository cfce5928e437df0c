"""PyTorch's own process-global execution switches, read and written by name.

Every switch the kernel policy maps onto lives in :data:`SWITCHES` with a reader, a writer
and an availability check, so the policy layer can snapshot the whole state, apply a plan,
read each value back to verify it took effect, and restore the snapshot later. A switch
missing from the installed PyTorch (older releases) reports ``available() == False`` and the
policy layer records that instead of pretending.

PyTorch 2.9 introduced ``fp32_precision`` attributes and forbids mixing them with the legacy
``allow_tf32`` / ``set_float32_matmul_precision`` API in one process (reading a legacy flag
after writing a new one raises). Only one family is registered: the new one when present.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "SWITCHES",
    "Switch",
    "read",
    "read_all",
    "torch_version",
    "write",
    "write_changed",
]


def torch_version() -> str:
    return str(torch.__version__)


@dataclass(frozen=True)
class Switch:
    """One PyTorch switch: how to tell it exists, read it and write it."""

    name: str
    available: Callable[[], bool]
    read: Callable[[], Any]
    write: Callable[[Any], None]
    since: str  # the PyTorch release that added it, for the "unavailable" note


def _has(obj: object, attribute: str) -> Callable[[], bool]:
    return lambda: hasattr(obj, attribute)


def _blas_read() -> str:
    return str(getattr(torch.backends.cuda.preferred_blas_library(), "name", "")).lower()


def _blas_write(value: str) -> None:
    torch.backends.cuda.preferred_blas_library(value)


def _missing(*_: Any) -> Any:
    raise AttributeError("not in this PyTorch (the switch reports available() == False)")


def _first(*candidates: tuple[object, str]) -> Callable[..., Any]:
    """The first function of ``candidates`` (object, attribute) this PyTorch has."""
    for obj, attribute in candidates:
        function: Callable[..., Any] | None = getattr(obj, attribute, None)
        if function is not None:
            return function
    return _missing


def _sdp(flag: str) -> Switch:
    cuda = torch.backends.cuda
    writer = f"enable_{flag}_sdp"
    # Looked up once, and PyTorch's own functions in torch._C where they are (the public
    # ones only forward to them): a policy scope reads and writes these on every entry.
    get = _first((torch._C, f"_get_{flag}_sdp_enabled"), (cuda, f"{flag}_sdp_enabled"))
    set_ = _first((torch._C, f"_set_sdp_use_{flag}"), (cuda, writer))
    return Switch(
        name=f"sdp.{flag}",
        available=_has(cuda, writer),
        read=lambda: bool(get()),
        write=lambda value: set_(bool(value)),
        since="2.2" if flag == "cudnn" else "2.0",
    )


def _priority_read() -> list[int]:
    return [int(backend) for backend in torch._C._get_sdp_priority_order()]


def _priority_write(order: list[int]) -> None:
    torch._C._set_sdp_priority_order(list(order))


def _deterministic_read() -> str:
    if not torch.are_deterministic_algorithms_enabled():
        return "off"
    return "warn_only" if torch.is_deterministic_algorithms_warn_only_enabled() else "on"


def _deterministic_write(value: str) -> None:
    torch.use_deterministic_algorithms(value != "off", warn_only=value == "warn_only")


def _env(name: str) -> Switch:
    def write(value: str | None) -> None:
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    return Switch(
        name=f"env.{name}",
        available=lambda: True,
        read=lambda: os.environ.get(name),
        write=write,
        since="any",
    )


def _new_fp32_api() -> bool:
    return hasattr(torch.backends, "fp32_precision")


def _fp32_precision(path: str) -> Switch:
    def target() -> Any:
        obj: Any = torch.backends
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj

    def write(value: str) -> None:
        target().fp32_precision = value

    return Switch(
        name=f"{path}.fp32_precision",
        available=_new_fp32_api,
        read=lambda: str(target().fp32_precision),
        write=write,
        since="2.9",
    )


def _legacy(name: str, read: Callable[[], Any], write: Callable[[Any], None]) -> Switch:
    return Switch(
        name=name, available=lambda: not _new_fp32_api(), read=read, write=write, since="1.7"
    )


def _set_cuda_matmul_tf32(value: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = bool(value)


def _set_cudnn(attribute: str) -> Callable[[Any], None]:
    return lambda value: setattr(torch.backends.cudnn, attribute, bool(value))


SWITCHES: dict[str, Switch] = {
    switch.name: switch
    for switch in [
        Switch(
            name="preferred_blas_library",
            available=_has(torch.backends.cuda, "preferred_blas_library"),
            read=_blas_read,
            write=_blas_write,
            since="2.3",
        ),
        _sdp("flash"),
        _sdp("mem_efficient"),
        _sdp("math"),
        _sdp("cudnn"),
        Switch(
            name="sdp.priority_order",
            available=_has(torch._C, "_set_sdp_priority_order"),
            read=_priority_read,
            write=_priority_write,
            since="2.6",
        ),
        _fp32_precision("cuda.matmul"),
        _fp32_precision("cudnn.conv"),
        _fp32_precision("cudnn.rnn"),
        _legacy(
            "cuda.matmul.allow_tf32",
            lambda: bool(torch.backends.cuda.matmul.allow_tf32),
            _set_cuda_matmul_tf32,
        ),
        _legacy(
            "cudnn.allow_tf32",
            lambda: bool(torch.backends.cudnn.allow_tf32),
            _set_cudnn("allow_tf32"),
        ),
        _legacy(
            "float32_matmul_precision",
            torch.get_float32_matmul_precision,
            torch.set_float32_matmul_precision,
        ),
        Switch(
            name="deterministic_algorithms",
            available=lambda: True,
            read=_deterministic_read,
            write=_deterministic_write,
            since="1.8",
        ),
        Switch(
            name="cudnn.deterministic",
            available=lambda: True,
            read=lambda: bool(torch.backends.cudnn.deterministic),
            write=_set_cudnn("deterministic"),
            since="1.0",
        ),
        Switch(
            name="cudnn.enabled",
            available=lambda: True,
            read=lambda: bool(torch.backends.cudnn.enabled),
            write=_set_cudnn("enabled"),
            since="1.0",
        ),
        Switch(
            name="mkldnn.enabled",
            available=torch.backends.mkldnn.is_available,
            read=lambda: bool(torch.backends.mkldnn.enabled),
            write=lambda value: setattr(torch.backends.mkldnn, "enabled", bool(value)),
            since="a build with oneDNN",
        ),
        Switch(
            name="cudnn.benchmark",
            available=lambda: True,
            read=lambda: bool(torch.backends.cudnn.benchmark),
            write=_set_cudnn("benchmark"),
            since="1.0",
        ),
        # cuBLAS needs a fixed workspace configuration to be deterministic; PyTorch refuses
        # deterministic matmuls without it.
        _env("CUBLAS_WORKSPACE_CONFIG"),
    ]
}


def read_all() -> dict[str, Any]:
    """The current value of every available switch (the snapshot a scope restores)."""
    return {name: switch.read() for name, switch in SWITCHES.items() if switch.available()}


def read(name: str) -> Any:
    """The current value of switch ``name``."""
    return SWITCHES[name].read()


def write_changed(
    values: Mapping[str, Any], current: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Write the switches whose current value differs (writes have side effects).

    ``current`` holds values the caller has just read (those switches are not read again).
    Returns PyTorch's refusal per switch it would not set (for example cuBLASLt on a build
    without it); the other switches are still written.
    """
    refused: dict[str, str] = {}
    for name, value in values.items():
        switch = SWITCHES[name]
        now = current[name] if current is not None and name in current else switch.read()
        if now != value:
            write(name, value, refused)
    return refused


def write(name: str, value: Any, refused: dict[str, str]) -> None:
    """Write switch ``name``; PyTorch's refusal goes into ``refused`` instead of raising."""
    try:
        SWITCHES[name].write(value)
    except (RuntimeError, ValueError) as error:
        refused[name] = f"PyTorch refused {name}={value!r}: {error}"
