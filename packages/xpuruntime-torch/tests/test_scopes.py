"""kernel_policy() scopes: restore on exit, nesting, exceptions, overlapping threads."""

from __future__ import annotations

import threading

import pytest
import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.pytorch.switches import read_all

# Kernels decided for a CUDA device, so CUDA kernels set PyTorch's switches on any machine
# (without it, a CPU-only machine rightly records them as fallbacks and switches nothing).
CUDA = ExecutionPolicy(device="cuda")


def _blas() -> str:
    return torch.backends.cuda.preferred_blas_library().name.lower()


def test_scope_applies_and_restores() -> None:
    before = read_all()
    with xrt_torch.kernel_policy(matmul="cublas", attention="math", exec_policy=CUDA) as record:
        assert _blas() == "cublas"
        assert not torch.backends.cuda.flash_sdp_enabled()
        assert all(setting.honoured for setting in record.settings)
        assert xrt_torch.get_kernel_policy() == KernelPolicy(matmul="cublas", attention="math")
    assert read_all() == before
    assert xrt_torch.get_kernel_policy() is None


def test_nested_scopes_restore_the_outer_policy() -> None:
    xrt_torch.set_kernel_policy(attention="math")
    with xrt_torch.kernel_policy(attention="flash_v2", exec_policy=CUDA):
        with xrt_torch.kernel_policy(matmul="cublas", exec_policy=CUDA):
            assert xrt_torch.get_kernel_policy() == KernelPolicy(matmul="cublas")
            assert torch.backends.cuda.math_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
        assert not torch.backends.cuda.math_sdp_enabled()
    assert not torch.backends.cuda.flash_sdp_enabled()
    assert xrt_torch.get_kernel_policy() == KernelPolicy(attention="math")


def test_scope_restores_after_an_exception() -> None:
    before = read_all()
    with pytest.raises(KeyError), xrt_torch.kernel_policy(attention="efficient", exec_policy=CUDA):
        raise KeyError("boom")
    assert read_all() == before


def test_empty_scope_runs_without_policy_and_restores_it() -> None:
    xrt_torch.set_kernel_policy(attention="math")
    with xrt_torch.kernel_policy():
        assert xrt_torch.get_kernel_policy() is None
        assert torch.backends.cuda.flash_sdp_enabled()
    assert not torch.backends.cuda.flash_sdp_enabled()


def test_overlapping_scopes_in_threads_restore_in_any_exit_order() -> None:
    """A enters, B enters, A leaves (B still active), B leaves: original state returns."""
    before = read_all()
    a_entered, b_entered, a_left = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def thread_a() -> None:
        with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(precision="tf32")):
            a_entered.set()
            b_entered.wait(10)
        a_left.set()

    def thread_b() -> None:
        a_entered.wait(10)
        with xrt_torch.kernel_policy(attention="math"):
            b_entered.set()
            a_left.wait(10)
            # A left first: B's policy must still be the one in effect
            seen["policy"] = xrt_torch.get_kernel_policy()
            seen["flash"] = torch.backends.cuda.flash_sdp_enabled()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert seen == {"policy": KernelPolicy(attention="math"), "flash": False}
    assert read_all() == before
    assert xrt_torch.get_kernel_policy() is None


def test_many_threads_switching_concurrently_leave_a_consistent_state() -> None:
    before = read_all()
    errors: list[BaseException] = []

    def worker(kernel: str) -> None:
        try:
            for _ in range(50):
                with xrt_torch.kernel_policy(attention=kernel, exec_policy=CUDA):
                    pass
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    threads = [
        threading.Thread(target=worker, args=(k,)) for k in ("math", "flash_v2", "efficient")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert read_all() == before
