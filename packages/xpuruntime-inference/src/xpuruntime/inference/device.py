"""Device strings ("auto", "cpu", "cuda", "cuda:1", "npu", "npu:0") and their presence."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from xpuruntime.inference.errors import DeviceNotFoundError
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.device import DeviceSpec, split_device

__all__ = [
    "CPU",
    "VALID_DEVICES",
    "DeviceSpec",
    "check_present",
    "cuda_device_count",
    "current_cuda_device",
    "parse_device",
    "resolve_device",
]

VALID_DEVICES = "'auto', 'cpu', 'cuda', 'cuda:N', 'npu', 'npu:N'"
CPU = DeviceSpec("cpu")


def parse_device(text: str) -> DeviceSpec:
    """Parse a device string other than "auto"; a typo gets the valid forms."""
    spec = split_device(text)
    if spec is None:
        raise PolicyError(f"invalid device {text!r}; valid devices: {VALID_DEVICES}")
    if spec.kind == "cpu" and spec.index not in (None, 0):
        raise PolicyError(f"invalid device {text!r}: there is one CPU device, 'cpu'")
    return CPU if spec.kind == "cpu" else spec


def cuda_device_count() -> int:
    """CUDA devices the core sees (0 without a CUDA build, a driver or a GPU)."""
    from xpuruntime.runtime.device import cuda_available, get_device_count

    return int(get_device_count()) if cuda_available() else 0


def resolve_device(text: str) -> tuple[DeviceSpec, str]:
    """The device to use and why: "auto" means the first CUDA device if any, else the CPU."""
    if text.strip().lower() != "auto":
        spec = parse_device(text)
        check_present(spec)
        return spec, "requested"
    count = cuda_device_count()
    if count:
        return DeviceSpec("cuda", 0), f"device='auto': {count} CUDA device(s) present"
    return CPU, "device='auto': no CUDA device present"


def check_present(spec: DeviceSpec) -> None:
    """Raise when a numbered CUDA device is out of range on a machine that has CUDA devices.

    A CUDA device on a machine with none is not raised here: it is a fallback the session
    records or refuses according to the policy's ``fallback`` mode.
    """
    if spec.kind != "cuda" or spec.index is None:
        return
    count = cuda_device_count()
    if count and spec.index >= count:
        raise DeviceNotFoundError(
            f"device {str(spec)!r} does not exist: this machine has {count} CUDA device(s) "
            f"(cuda:0 .. cuda:{count - 1}); pick one of those or device='auto'"
        )


@contextmanager
def current_cuda_device(index: int) -> Iterator[None]:
    """Make CUDA device ``index`` current for this thread inside the block, then restore.

    Libraries such as TensorRT build, load and enqueue on the thread's current device; a
    session on ``cuda:N`` makes N current around those calls without changing the caller's
    device (PyTorch's ``torch.cuda.current_device()`` included) after them.
    """
    from xpuruntime.runtime.native import core

    previous = int(core().current_device())
    if previous == index:
        yield
        return
    core().set_current_device(index)
    try:
        yield
    finally:
        core().set_current_device(previous)
