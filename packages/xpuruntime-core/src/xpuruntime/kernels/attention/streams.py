"""The device and stream an attention launch runs on: shared by the Triton launcher
(:mod:`.launch`), the fp8 forward and the Gluon Hopper kernels, so none imports another for
it. Imports torch: imported only when a kernel runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["on_device"]


@contextmanager
def on_device(device: torch.device, stream: int | None) -> Iterator[None]:
    """Make ``device`` current and, given a raw ``cudaStream_t``, that stream; both are
    restored on exit (the caller's current stream is left as it was)."""
    if device.type != "cuda":
        yield
        return
    with torch.cuda.device(device):
        if stream is None:
            yield
        else:
            external = torch.cuda.ExternalStream(stream, device=device)  # type: ignore[no-untyped-call]
            with torch.cuda.stream(external):
                yield
