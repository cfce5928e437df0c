"""Kernel attribution from profiler events, on the id collision seen on an H200.

PyTorch 2.11's profiler gave a CUPTI bookkeeping event ("Lazy Function Loading") the same
correlation id as the ``aten::_flash_attention_forward`` that launched a kernel, and listed
the kernel under both. The events below reproduce that trace's shape with PyTorch's own
FunctionEvent class; explain must count the kernel once, for the operator.
"""

from __future__ import annotations

import inspect

import pytest
from torch._C._autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.pytorch.explain import record_from_events
from xpuruntime.runtime.errors import UnsupportedOperationError

# The events are a CUDA step's: the policy is decided for CUDA, as on the machine that ran it.
CUDA = ExecutionPolicy(device="cuda")


def _event(id: int, name: str, start: float, **extra: object) -> FunctionEvent:
    # FunctionEvent's keyword arguments differ between releases (2.11 has neither
    # activity_type nor linked_correlation_id, 2.13 has both); explain reads attributes, so
    # whatever this PyTorch's constructor does not take is set on the event afterwards.
    accepted = inspect.signature(FunctionEvent.__init__).parameters
    event = FunctionEvent(
        id=id,
        name=name,
        thread=1,
        start_us=start,
        end_us=start + 5.0,
        fwd_thread=1,
        input_shapes=[],
        stack=[],
        **{k: v for k, v in extra.items() if k in accepted},
    )
    for key, value in extra.items():
        if key not in accepted:
            setattr(event, key, value)
    return event


def test_colliding_ids_attribute_the_kernel_to_the_operator_once() -> None:
    sdpa = _event(3080, "aten::_scaled_dot_product_flash_attention", 0.0, activity_type="cpu_op")
    forward = _event(3083, "aten::_flash_attention_forward", 1.0, activity_type="cpu_op")
    forward.cpu_parent = sdpa
    lazy = _event(3083, "Lazy Function Loading", 2.0, activity_type="overhead")
    kernel = _event(
        9001,
        "void pytorch_flash::flash_fwd_kernel<...>",
        10.0,
        device_type=DeviceType.CUDA,
        linked_correlation_id=3083,
    )
    launch = _event(3084, "cudaLaunchKernel", 3.0, linked_correlation_id=3083)
    with xrt_torch.kernel_policy(attention="flash_v2", exec_policy=CUDA):
        record = record_from_events([sdpa, forward, lazy, launch, kernel, kernel])
    assert len(record.kernels) == 1
    seen = record.kernels[0]
    assert (seen.op, seen.library, seen.count) == ("attention", "flash_attention", 1)
    assert record.nodes[0].name == "aten::_flash_attention_forward"
    assert record.nodes[0].requested == "flash_v2"
    assert record.fallbacks == []


def test_a_kernel_of_another_backend_than_pinned_goes_through_fallback() -> None:
    op = _event(7, "aten::_efficient_attention_forward", 0.0, activity_type="cpu_op")
    kernel = _event(
        8,
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80",
        2.0,
        device_type=DeviceType.CUDA,
        linked_correlation_id=7,
    )
    with (
        xrt_torch.kernel_policy(
            attention="flash_v2", exec_policy=ExecutionPolicy(device="cuda", fallback="error")
        ),
        pytest.raises(UnsupportedOperationError, match=r"pins attention='flash_v2'.*fmha_cutlassF"),
    ):
        record_from_events([op, kernel])


def test_a_device_kernel_for_an_op_asking_for_a_cpu_kernel_is_a_fallback() -> None:
    op = _event(5, "aten::mm", 0.0, activity_type="cpu_op")
    kernel = _event(
        6, "ampere_sgemm_128x64_nn", 2.0, device_type=DeviceType.CUDA, linked_correlation_id=5
    )
    preferred = KernelPolicy().set("matmul", "cpu", "prefer")
    allow = ExecutionPolicy(device="cpu", fallback="allow")
    with xrt_torch.kernel_policy(preferred, exec_policy=allow):
        record = record_from_events([op, kernel])
    (node,) = record.nodes
    assert (node.placement, node.reason) == ("fallback", "aten::mm ran on cuda; 'cpu' runs on cpu")
    (fallback,) = record.fallbacks
    assert (fallback.requested, fallback.chosen, fallback.mode) == (
        "cpu",
        "aten::mm on cuda",
        "allow",
    )
    with (
        xrt_torch.kernel_policy(matmul="cpu", exec_policy=ExecutionPolicy(fallback="error")),
        pytest.raises(UnsupportedOperationError, match=r"pins matmul='cpu'.*aten::mm ran on cuda"),
    ):
        record_from_events([op, kernel])


def test_a_triton_launch_is_attributed_through_its_launch_call() -> None:
    # The shape of the first profiled xrt_flash step on an H200 (PyTorch 2.11): the kernel's
    # linked id named only a parentless "Activity Buffer Request"; the cuLaunchKernelEx call
    # sharing the kernel's correlation id sat under the custom op's autograd wrapper.
    op = _event(1, "xpuruntime::xrt_flash_attention", 0.0, activity_type="cpu_op")
    wrapper = _event(
        2,
        "GeneratedBackwardFor_xpuruntime_xrt_flash_attention_default",
        1.0,
        activity_type="cpu_op",
    )
    wrapper.cpu_parent = op
    buffer = _event(600, "Activity Buffer Request", 1.5, activity_type="overhead")
    launch = _event(25, "cuLaunchKernelEx", 2.0, linked_correlation_id=2)
    launch.cpu_parent = wrapper
    kernel = _event(
        25, "_xrt_attn_fwd", 10.0, device_type=DeviceType.CUDA, linked_correlation_id=600
    )
    with xrt_torch.kernel_policy(attention="xrt_flash", exec_policy=CUDA):
        record = record_from_events([op, wrapper, buffer, launch, kernel])
    (seen,) = record.kernels
    assert (seen.name, seen.op, seen.library, seen.count) == (
        "_xrt_attn_fwd",
        "attention",
        "xrt_attention",
        1,
    )
    assert record.fallbacks == []
