"""gluon_launch's cache key: what Triton's JIT specialises an argument on (on the CPU; the
launches themselves run in test_attention_gpu.py on an H100/H200)."""

from __future__ import annotations

import types
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from xpuruntime.kernels.attention.gluon_launch import Repeats, Tma, _arg_key  # noqa: E402


def test_repeats_empty_themselves_at_their_bound() -> None:
    """The forwards' repeated launches are kept up to a bound; the entry that would pass it
    starts them afresh (a workload of ever new shapes keeps only recent ones)."""
    repeats: Repeats[str] = Repeats(bound=2)
    repeats.keep((1,), "a")
    repeats.keep((2,), "b")
    assert dict(repeats) == {(1,): "a", (2,): "b"}
    repeats.keep((3,), "c")
    assert dict(repeats) == {(3,): "c"}
    repeats.keep((3,), "d")
    assert repeats.get((3,)) == "d"


def test_integers_are_keyed_as_the_jit_specialises_them() -> None:
    # equal to 1 (a constant in the compiled kernel), divisible by 16, fitting 32 bits
    assert _arg_key(1) == (True, False, True)
    assert _arg_key(48) == (False, True, True)
    assert _arg_key(7) == (False, False, True)
    assert _arg_key(2**31) == (False, True, False)
    assert _arg_key(-(2**31)) == (False, True, True)
    assert _arg_key(np.int64(32)) == _arg_key(32)  # a subclass goes by isinstance


def test_floats_and_bools_are_keyed_by_type_alone() -> None:
    assert _arg_key(0.125) is _arg_key(3.0) is float
    assert _arg_key(np.float64(0.5)) is float
    assert _arg_key(True) is _arg_key(False) is bool
    assert _arg_key(True) != _arg_key(1)  # a bool is not the integer 1


def test_pointers_are_keyed_by_dtype_and_16_byte_alignment() -> None:
    x = torch.zeros(64, dtype=torch.float16)
    assert _arg_key(x) == (torch.float16, True)
    assert _arg_key(x[1:]) == (torch.float16, False)  # 2 bytes past an aligned base
    assert _arg_key(x[8:]) == (torch.float16, True)
    assert _arg_key(x.float()) == (torch.float32, True)


def test_descriptors_are_keyed_by_dtype_block_and_layout_not_by_the_tensor() -> None:
    a, b = torch.zeros(4, 64, dtype=torch.bfloat16), torch.zeros(8, 128, dtype=torch.bfloat16)
    assert _arg_key(Tma(a, (1, 64), "layout")) == _arg_key(Tma(b, (1, 64), "layout"))
    assert _arg_key(Tma(a, (1, 64), "layout")) != _arg_key(Tma(a, (2, 64), "layout"))
    assert _arg_key(Tma(a, (1, 64), "layout")) != _arg_key(Tma(a, (1, 64), "other"))
    assert _arg_key(Tma(a, (1, 64), "layout")) != _arg_key(Tma(a.half(), (1, 64), "layout"))


def test_a_tensor_type_is_keyed_by_its_own_entry_after_its_first_argument() -> None:
    from xpuruntime.kernels.attention import gluon_launch

    x = torch.nn.Parameter(torch.zeros(64, dtype=torch.float16)[8:])  # a tensor subclass
    first = _arg_key(x)
    assert gluon_launch._KEYS[torch.nn.Parameter] is gluon_launch._pointer_key
    assert _arg_key(x) == first == (torch.float16, True)
    # Numbers of other types are keyed as numbers every time, never as pointers.
    assert _arg_key(np.int64(1)) == _arg_key(1)
    assert np.int64 not in gluon_launch._KEYS


def _recording_kernel(signature: dict[str, str], descriptors: list[dict[str, Any]]) -> Any:
    """A compiled kernel as far as gluon_launch reads one: Triton's own ``CudaLauncher``
    (built without compiling its C module) around Triton's own descriptor wrapper
    (``wrap_handle_tensordesc``), whose C ``launch`` is replaced by one that records the
    arguments it is given. The launch itself runs on a GPU in test_attention_gpu.py."""
    from triton.backends.nvidia import driver as nvidia

    calls: list[tuple[Any, ...]] = []

    def launch(*args: Any) -> None:
        calls.append(args)

    launcher = object.__new__(nvidia.CudaLauncher)
    launcher.num_ctas = 1
    launcher.launch = nvidia.wrap_handle_tensordesc(launch, signature, descriptors)
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, True
    return types.SimpleNamespace(
        run=launcher,
        function=4242,
        packed_metadata=(4, 1, 1000),
        src=types.SimpleNamespace(signature=signature),
        calls=calls,
    )


#: One descriptor's metadata as Triton's compiler records it (bf16 boxes of 64x128).
_BOX = {"swizzle": 128, "elem_size": 2, "elem_type": 8, "block_size": [1, 1, 64, 128],
        "fp4_padded": False}  # fmt: skip


def _stand_in_driver(monkeypatch: pytest.MonkeyPatch, stream: Any) -> list[int]:
    """Install as Triton's active driver (restored after the test: without a GPU there is
    none to reset to) one whose tensor-map encoding returns its arguments and records each
    address it encodes (the list returned), and whose current stream is ``stream(device)``."""
    from triton.runtime import driver

    encoded: list[int] = []

    def fill(*args: Any) -> tuple[Any, ...]:
        encoded.append(args[0])
        return ("tensor map", args[0], args[1], args[2], args[3], tuple(args[4]),
                tuple(args[5]), tuple(args[6]), args[7])  # fmt: skip

    active = types.SimpleNamespace(
        utils=types.SimpleNamespace(fill_tma_descriptor=fill), get_current_stream=stream
    )
    monkeypatch.setattr(driver, "_active", active)
    return encoded


class _OnDevice:
    """A pointer argument that says it is a CUDA tensor (its address is a CPU tensor's)."""

    is_cuda = True

    def __init__(self, x: Any) -> None:
        self.x = x

    def data_ptr(self) -> int:
        return int(self.x.data_ptr())


def test_a_direct_launch_passes_what_tritons_launcher_wrappers_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gluon_launch._Direct builds the C launcher's arguments itself; for a signature that
    mixes descriptors, pointers, scalars and constants they must be exactly those Triton's
    CudaLauncher and descriptor wrapper build for CompiledKernel.run, but for CUDA tensors
    passed as their addresses. (The tensor-map encoding needs the CUDA driver: both paths
    call the same stand-in here, and the real one on a GPU.)"""
    pytest.importorskip("triton.backends.nvidia.driver", reason="needs Triton's CUDA backend")
    from xpuruntime.kernels.attention import gluon_launch
    from xpuruntime.runtime.errors import XpuRuntimeError

    _stand_in_driver(monkeypatch, lambda device: 700 + device)
    signature = {
        "q": "tensordesc<bf16[1,1,64,128]>", "k": "tensordesc<bf16[1,1,64,128]>",
        "out": "*bf16", "lse": "*fp32", "n": "i32", "one": "constexpr", "scale": "fp32",
        "v": "tensordesc<bf16[1,1,64,128]>", "none": "constexpr", "big": "i64",
        "C1": "constexpr", "C2": "constexpr",
    }  # fmt: skip
    kernel = _recording_kernel(signature, [dict(_BOX), dict(_BOX), dict(_BOX)])
    kept = gluon_launch.Kept(kernel, (64, True), 0)
    assert kept.direct is not None
    x = torch.zeros(2, 3, 64, 128)
    out, lse = _OnDevice(torch.zeros(16)), _OnDevice(torch.zeros(8))
    box_of = (1, 1, 64, 128)
    args = (gluon_launch.Tma(x, box_of, None), gluon_launch.Tma(x[1:], box_of, None), out, lse,
            5, 1, 0.5, gluon_launch.Tma(x, box_of, None), None, 2**40)  # fmt: skip
    kept.launch((3, 2), args)
    kept.direct = None  # the same launch through CompiledKernel.run
    kept.launch((3, 2), list(args))
    direct, through_run = kernel.calls
    assert direct[:13] == (3, 2, 1, 700, 4242, False, True, None, None, (4, 1, 1000),
                           None, None, None)  # fmt: skip
    assert direct[13] == ("tensor map", x.data_ptr(), 128, 2, 10, (1, 1, 64, 128),
                          (2, 3, 64, 128), (24576, 8192, 128, 1), 0)  # fmt: skip
    addresses = [a.data_ptr() if isinstance(a, _OnDevice) else a for a in through_run]
    assert list(direct) == addresses
    assert out in through_run  # Triton's wrappers pass the tensor,
    assert out not in direct  # the direct launch its address
    assert out.data_ptr() in direct

    # A descriptor whose inner stride is not 1 is refused, as Triton's wrapper refuses it.
    kept.direct = gluon_launch._Direct.of(kernel)
    rows = torch.zeros(2, 3, 128, 64).transpose(2, 3)
    bad = (gluon_launch.Tma(rows, box_of, None), *args[1:])
    with pytest.raises(XpuRuntimeError, match="inner stride"):
        kept.launch((3, 2), bad)

    # Scratch memory (allocated per launch by CudaLauncher.__call__): no direct launch.
    kernel.run.global_scratch_size = 16
    assert gluon_launch._Direct.of(kernel) is None


def test_a_bound_launch_passes_what_a_direct_launch_of_the_new_tensors_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gluon_launch.Bound lays one launch out and launches it again with other tensors in
    place of its sources: the C launcher must get exactly what a direct launch built from
    the new tensors gives it; a tensor that is not a source stays as bound; a tensor map is
    encoded again only where its address changed; a launch hook sends the caller back to
    the launcher's own path."""
    pytest.importorskip("triton.backends.nvidia.driver", reason="needs Triton's CUDA backend")
    from triton import knobs

    from xpuruntime.kernels.attention import gluon_launch

    streams = iter(range(700, 800))
    encoded = _stand_in_driver(monkeypatch, lambda device: next(streams))
    signature = {
        "q": "tensordesc<bf16[1,1,64,128]>", "k": "tensordesc<bf16[1,1,64,128]>",
        "out": "*bf16", "lse": "*fp32", "sched": "*i32", "n": "i32", "scale": "fp32",
        "cu": "*bf16", "qs": "*fp32", "C1": "constexpr",
    }  # fmt: skip
    kernel = _recording_kernel(signature, [dict(_BOX), dict(_BOX)])
    kept = gluon_launch.Kept(kernel, (64,), 0)
    box_of = (1, 1, 64, 128)

    def call(q: Any, k: Any, out: Any, lse: Any, sched: Any) -> tuple[Any, ...]:
        # The output and lse fill unused pointers too, as the Hopper forward's do.
        return (gluon_launch.Tma(q, box_of, None), gluon_launch.Tma(k, box_of, None),
                out, lse, sched, 5, 0.5, out, lse)  # fmt: skip

    def tensors() -> tuple[Any, ...]:
        return (torch.zeros(2, 3, 64, 128), torch.zeros(2, 3, 64, 128),
                _OnDevice(torch.zeros(16)), _OnDevice(torch.zeros(8)))  # fmt: skip

    sched = _OnDevice(torch.zeros(4, dtype=torch.int32))  # the same in every call
    first = tensors()
    bound = kept.bind((3, 2), call(*first, sched), first)
    assert bound is not None
    encoded.clear()
    second = tensors()
    assert bound.launch(second)
    kept.launch((3, 2), call(*second, sched))  # the direct launch of the same tensors
    by_bound, by_direct = kernel.calls
    assert by_bound[:3] == by_direct[:3] == (3, 2, 1)
    assert (by_bound[3], by_direct[3]) == (700, 701)  # each launch's current stream
    assert by_bound[4:] == by_direct[4:]
    assert by_bound.count(second[2].data_ptr()) == 2  # a source's new address, in each slot
    assert by_bound.count(second[3].data_ptr()) == 2
    assert sched.data_ptr() in by_bound  # not a source: as bound
    assert encoded == [second[0].data_ptr(), second[1].data_ptr()] * 2  # bound, then direct

    # The same addresses again: the last encodings are taken, none is made.
    encoded.clear()
    assert bound.launch(second)
    assert encoded == []
    assert kernel.calls[-1][4:] == by_direct[4:]

    # A new query at another address: its map alone is encoded again, the key's is taken.
    third = (torch.zeros(2, 3, 64, 128), *second[1:])
    encoded.clear()
    assert bound.launch(third)
    assert encoded == [third[0].data_ptr()]
    kept.launch((3, 2), call(*third, sched))
    assert kernel.calls[-2][4:] == kernel.calls[-1][4:]

    # A launch hook installed: nothing launched, the caller takes the launcher's path.
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: None)
    assert not bound.launch(second)
    assert len(kernel.calls) == 5

    # Sources that are one tensor: which one an argument stands for is ambiguous.
    same = (first[0], first[0], first[2], first[3])
    assert kept.bind((3, 2), call(*same, sched), same) is None
    # A kernel that does not launch directly binds nothing.
    kept.direct = None
    assert kept.bind((3, 2), call(*first, sched), first) is None
