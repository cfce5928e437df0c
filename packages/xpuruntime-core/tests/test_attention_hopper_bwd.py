"""The Gluon Hopper backward's host side without a GPU: variant names and input checks.

The kernels themselves run in ``scripts/hopper_attention_bwd_check.py`` on an sm_90 GPU and
compile offline in ``scripts/hopper_attention_bwd_compile.py``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")  # the core's test session runs without it
import torch

from xpuruntime.kernels.attention import hopper_bwd
from xpuruntime.runtime.errors import InvalidArgumentError, UnsupportedOperationError


def test_variant_names_round_trip() -> None:
    for head_dim in hopper_bwd.HEAD_DIMS:
        for name in hopper_bwd.variant_names(head_dim):
            assert hopper_bwd.parse_variant(name).name == name
    variant = hopper_bwd.parse_variant("m64s3n128s2")
    assert (variant.dkdv_block_m, variant.dkdv_stages) == (64, 3)
    assert (variant.dq_block_n, variant.dq_stages) == (128, 2)
    assert not variant.dkdv_overlap
    # ``o`` after the dK/dV kernel's stages: its steps issue the next Sᵀ GEMM early.
    for name, flags in (("m64s3on64s3_l", (True, True)), ("m64s2on64s2", (True, False))):
        variant = hopper_bwd.parse_variant(name)
        assert (variant.dkdv_overlap, variant.lpt) == flags
        assert variant.name == name
    fused = hopper_bwd.parse_variant("fm64s2cto_l")
    assert (fused.tma_dq, fused.overlap, fused.lpt) == (True, True, True)
    assert fused.name == "fm64s2cto_l"
    # ``w``: dQ by the copy engine, its reduce-adds issued by a writer warp.
    fused = hopper_bwd.parse_variant("fm64s2cw_l")
    assert (fused.tma_dq, fused.dq_writer, fused.overlap, fused.lpt) == (True, True, False, True)
    assert fused.name == "fm64s2cw_l"
    assert not hopper_bwd.parse_variant("fm64s2cto").dq_writer
    # ``o`` with ``w``: the next step's Sᵀ behind the dK GEMM.
    fused = hopper_bwd.parse_variant("fm64s3cwo")
    assert (fused.dq_writer, fused.overlap, fused.lpt) == (True, True, False)
    assert fused.name == "fm64s3cwo"


@pytest.mark.parametrize(
    "name",
    [
        "m64s2",
        "m32s2n64s2",
        "m64s5n64s2",
        "m64s2n64s2pp",
        "m64s2n64s2_lo",
        "m64os2n64s2",
        "m64s2n64s2o",
        "fm64s2co",
        "fm64s2cot",
        "fm64s2ctw",
        "fm64s2cwt",
    ],
)
def test_bad_variant_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        hopper_bwd.parse_variant(name)


def test_cpu_tensors_are_refused() -> None:
    q = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16)
    lse = torch.zeros(1, 2, 16)
    with pytest.raises(UnsupportedOperationError, match="CUDA"):
        hopper_bwd.hopper_attention_backward(q, q, q, q, q, lse, causal=True)
