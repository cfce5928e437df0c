"""Shared fixtures: every test starts and ends without a policy and with PyTorch's switches
as they were, since the switches are process-global."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.switches import read_all


@pytest.fixture(autouse=True)
def clean_policy() -> Iterator[None]:
    before = read_all()
    yield
    xrt_torch.clear_kernel_policy()
    assert read_all() == before, "a test leaked PyTorch switch changes"


requires_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason=f"needs a CUDA GPU (torch {torch.__version__}, cuda available: False)",
)
