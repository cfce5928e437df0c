from __future__ import annotations

import pytest

import xpuruntime.runtime as rt
from xpuruntime.runtime.device import DeviceSpec, get_device, split_device, split_kind_index


def test_cpu_is_always_listed_last() -> None:
    devices = rt.get_all_devices()
    assert len(devices) == rt.get_device_count() + 1
    cpu = devices[-1]
    assert cpu.kind == "cpu"
    assert cpu.spec == "cpu"
    assert cpu.total_memory > 0
    assert 0 < cpu.free_memory <= cpu.total_memory
    assert cpu.sm_count >= 1


def test_cuda_available_matches_device_count() -> None:
    assert rt.cuda_available() == (rt.get_device_count() > 0)


def test_index_out_of_range_says_how_many_exist() -> None:
    n = rt.get_device_count()
    with pytest.raises(rt.InvalidArgumentError, match="out of range") as info:
        rt.set_current_device(n + 3)
    expected = "no CUDA device exists" if n == 0 else f"{n} CUDA device"
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, rt.XpuRuntimeError)


def test_device_specs_parse_or_explain() -> None:
    assert get_device("cpu").kind == "cpu"
    with pytest.raises(rt.InvalidArgumentError, match="expected 'cpu', 'cuda' or 'cuda:N'"):
        get_device("gpu:0")


def test_synchronize_without_devices_is_a_no_op() -> None:
    if rt.get_device_count() == 0:
        rt.synchronize()
        with pytest.raises(rt.InvalidArgumentError, match="no CUDA device"):
            rt.get_current_device()


@pytest.mark.parametrize(
    ("text", "kind_index", "spec"),
    [
        ("cpu", ("cpu", None), DeviceSpec("cpu")),
        (" CUDA:1 ", ("cuda", 1), DeviceSpec("cuda", 1)),
        ("npu", ("npu", None), DeviceSpec("npu")),
        ("gpu:2", ("gpu", 2), None),  # an engine's kind (OpenVINO, QNN), not xpuruntime's
        ("npu:", None, None),
        ("cuda:x", None, None),
        ("cuda:-1", None, None),
        ("", None, None),
    ],
)
def test_one_device_string_parser(
    text: str, kind_index: tuple[str, int | None] | None, spec: DeviceSpec | None
) -> None:
    assert split_kind_index(text) == kind_index
    assert split_device(text) == spec
    if spec is not None:
        assert str(spec) == text.strip().lower()
