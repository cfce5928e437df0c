"""gluon_launch's cache key: what Triton's JIT specialises an argument on (on the CPU; the
launches themselves run in test_attention_gpu.py on an H100/H200)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from xpuruntime.kernels.attention.gluon_launch import Tma, _arg_key  # noqa: E402


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
