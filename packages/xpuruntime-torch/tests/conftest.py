"""Shared fixtures: every test starts and ends without a policy and with PyTorch's switches
as they were, since the switches are process-global."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.switches import read_all


@pytest.fixture(autouse=True, scope="session")
def sdpa_initialised() -> None:
    """PyTorch sets its SDPA backend priority for the GPU (cuDNN first on Hopper) on its
    first scaled_dot_product_attention call: that happens here, before any test's
    snapshot of the switches, instead of inside the first test that calls SDPA."""
    if torch.cuda.is_available():
        query = torch.zeros(1, 1, 8, 64, device="cuda", dtype=torch.float16)
        torch.nn.functional.scaled_dot_product_attention(query, query, query)


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
