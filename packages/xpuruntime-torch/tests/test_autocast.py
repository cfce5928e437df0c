"""autocast(): dtype / fp16 forms, device type, policy precision default."""

from __future__ import annotations

import pytest
import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy, PolicyError


def _mm_dtype() -> torch.dtype:
    a = torch.randn(4, 4)
    return (a @ a).dtype


def test_explicit_dtype_on_cpu() -> None:
    with xrt_torch.autocast(dtype=torch.bfloat16, device_type="cpu"):
        assert _mm_dtype() == torch.bfloat16
    assert _mm_dtype() == torch.float32


def test_fp16_shorthand() -> None:
    with xrt_torch.autocast(fp16=True, device_type="cpu") as context:
        assert context.fast_dtype == torch.float16
        assert _mm_dtype() == torch.float16


def test_fp16_false_disables() -> None:
    with xrt_torch.autocast(fp16=False, device_type="cpu"):
        assert _mm_dtype() == torch.float32


def test_disabled() -> None:
    with xrt_torch.autocast(dtype=torch.bfloat16, enabled=False, device_type="cpu"):
        assert _mm_dtype() == torch.float32


def test_default_follows_execution_policy_precision() -> None:
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(precision="fp16")):
        context = xrt_torch.autocast(device_type="cpu")
        assert context.fast_dtype == torch.float16


def test_default_device_type_is_the_training_device() -> None:
    context = xrt_torch.autocast()
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert context.device == expected


def test_contradicting_arguments_are_rejected() -> None:
    with pytest.raises(PolicyError, match="contradict"):
        xrt_torch.autocast(dtype=torch.bfloat16, fp16=True)


def test_unknown_device_type_lists_choices() -> None:
    with pytest.raises(PolicyError, match=r"\['cuda', 'cpu'\]"):
        xrt_torch.autocast(device_type="mps")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_cuda_autocast_without_gpu_says_so() -> None:
    with pytest.raises(PolicyError, match="no CUDA device"):
        xrt_torch.autocast(device_type="cuda")
