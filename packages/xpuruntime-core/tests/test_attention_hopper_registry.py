"""xrt_flash_hopper, the Gluon Hopper forward, in the kernel registry and the vocabulary.

Without a GPU (the core's CPU test environment): its registration before xrt_flash (the
automatic choice), its support check's reasons (the compute capability through the pure
helper that takes it), the automatic choice's record of why it was passed over, and a pinned
policy's error. The kernel itself runs in test_attention_gpu.py on an sm_90 GPU.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from typing import Any

import pytest

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.kernels.attention import (
    FP8_KERNEL,
    HOPPER_KERNEL,
    HOPPER_LIBRARY,
    KERNEL,
    LIBRARY,
    hopper_unsupported_reason,
    query_shape,
)
from xpuruntime.kernels.attention.support import hopper_capability_reason, hopper_query_reason
from xpuruntime.policies import ExecutionPolicy, KernelPolicy, PolicyConflictError
from xpuruntime.policies.vocabulary import find_kernel, kernels_for
from xpuruntime.runtime.errors import UnsupportedOperationError
from xpuruntime.runtime.record import ExecutionRecord

PIN = KernelPolicy(attention=HOPPER_KERNEL)


def _shape(**change: Any) -> list[int]:
    fields: dict[str, Any] = dict(
        batch=2, seqlen_q=256, seqlen_k=256, heads=16, kv_heads=4, head_dim=128, causal=True,
        varlen=False,
    )  # fmt: skip
    fields.update(change)
    return query_shape(**fields)


def test_registered_before_xrt_flash() -> None:
    # The automatic choice takes the first kernel that can run a call: the Hopper forward on
    # an sm_90 GPU, xrt_flash elsewhere; the fp8 forward only where a policy names it.
    names = [(k.name, k.library) for k in rt.dispatcher.kernels("attention")]
    assert names[:3] == [
        (HOPPER_KERNEL, HOPPER_LIBRARY),
        (KERNEL, LIBRARY),
        (FP8_KERNEL, "xpuruntime fp8 (Gluon on Hopper, Triton elsewhere)"),
    ]
    assert HOPPER_LIBRARY == "xpuruntime Gluon (Hopper, warp-specialised)"


def test_policy_vocabulary_names_the_kernel() -> None:
    spec = find_kernel("attention", HOPPER_KERNEL)
    assert spec.devices == frozenset({"cuda"})
    # As xrt_flash: PyTorch training (fused_attention) and xpuruntime's own ops run it.
    assert spec.engines == find_kernel("attention", KERNEL).engines
    assert HOPPER_KERNEL in {k.name for k in kernels_for("attention")}
    assert PIN.get("attention") == HOPPER_KERNEL
    with pytest.raises(PolicyConflictError, match=r"pinned to 'xrt_flash_hopper'.*'cpu'"):
        ExecutionPolicy(device="cpu", kernel_policy=PIN)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"device": "cpu"}, "runs on NVIDIA Hopper GPUs only (compute capability 9.0"),
        ({"device": "npu:0"}, "not on npu:0"),
        ({"dtype": "float32"}, "supports float16 and bfloat16, not float32"),
        ({"dtype": "float32", "device": "cpu"}, "not float32"),
        ({"head_dim": 96}, "supports head sizes 64, 128, 256, not 96"),
        ({"head_dim": 32}, "not 32"),  # xrt_flash runs 32; the Hopper kernel does not
        ({"heads": 6, "kv_heads": 4}, "query heads (6) must be a multiple of key/value heads (4)"),
    ],
)
def test_unsupported_reasons(change: dict[str, Any], expected: str) -> None:
    dtype, device = change.pop("dtype", "bfloat16"), change.pop("device", "cuda:0")
    shape = _shape(**change)
    assert expected in hopper_query_reason("attention", shape, dtype, device)
    # The registry's check gives the same reason before it asks for any GPU.
    assert expected in hopper_unsupported_reason("attention", shape, dtype, device)


def test_reason_for_other_ops_and_shapes() -> None:
    assert "implements attention, not matmul" in hopper_unsupported_reason(
        "matmul", _shape(), "bfloat16", "cuda:0"
    )
    assert "expects the attention query shape" in hopper_unsupported_reason(
        "attention", [1, 2], "bfloat16", "cuda:0"
    )


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "packed"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_supported_metadata_on_an_sm90_device(head_dim: int, dtype: str, varlen: bool) -> None:
    # Packed variable-length batches (cu_seqlens) run on it as dense ones do.
    shape = _shape(head_dim=head_dim, kv_heads=1, causal=False, varlen=varlen)
    assert hopper_query_reason("attention", shape, dtype, "cuda:1") == ""
    assert hopper_capability_reason("cuda:1", (9, 0)) == ""


def test_packed_forward_checks_its_arguments_before_the_gpu() -> None:
    torch = pytest.importorskip("torch")
    from xpuruntime.kernels.attention.hopper import hopper_attention_forward
    from xpuruntime.runtime.errors import InvalidArgumentError

    q = torch.zeros(10, 8, 64, dtype=torch.bfloat16)
    kv = torch.zeros(12, 2, 64, dtype=torch.bfloat16)
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 12], dtype=torch.int32)

    def call(q: Any = q, kv: Any = kv, **given: Any) -> None:
        packed = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, **given}
        hopper_attention_forward(q, kv, kv, causal=True, **packed)

    with pytest.raises(InvalidArgumentError, match=r"\(total, heads, head_dim\) with cu_seqlens"):
        call(q=q[None])
    with pytest.raises(InvalidArgumentError, match="both cu_seqlens_q and cu_seqlens_k"):
        call(cu_seqlens_k=None)
    with pytest.raises(InvalidArgumentError, match="cu_seqlens_k must be a 1-D int32 tensor"):
        call(cu_seqlens_k=cu_k.long())
    with pytest.raises(InvalidArgumentError, match="different batch sizes \\(2 and 1\\)"):
        call(cu_seqlens_k=cu_k[:2])
    with pytest.raises(InvalidArgumentError, match=r"query heads \(8\) must be a multiple"):
        call(kv=torch.zeros(12, 3, 64, dtype=torch.bfloat16))
    # Well-formed: refused only for where it runs.
    with pytest.raises(UnsupportedOperationError, match="runs on CUDA tensors; query is on cpu"):
        call(max_seqlen_q=6, max_seqlen_k=7)


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((8, 0), "cuda:0 is compute capability 8.0"),
        ((8, 9), "cuda:0 is compute capability 8.9"),
        ((10, 0), "cuda:0 is compute capability 10.0"),  # sm_90a code does not run there
        (None, "PyTorch sees no CUDA device cuda:0"),
    ],
)
def test_other_gpus_are_refused(capability: tuple[int, int] | None, expected: str) -> None:
    reason = hopper_capability_reason("cuda:0", capability)
    assert expected in reason
    if capability is not None:
        assert "compiled for sm_90a only" in reason


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1",
    reason="xrt_flash runs CPU tensors in Triton's interpreter (the test below covers it)",
)
def test_automatic_choice_on_the_cpu_records_every_refusal() -> None:
    # No attention kernel runs on the CPU outside Triton's interpreter: the error lists each
    # registered kernel's reason, the Hopper forward's first.
    with pytest.raises(UnsupportedOperationError) as caught:
        rt.dispatcher.resolve("attention", _shape(), "bfloat16", "cpu")
    message = str(caught.value)
    hopper = message.index(f"{HOPPER_KERNEL}: runs on NVIDIA Hopper GPUs only")
    flash = message.index(f"{KERNEL}: runs on NVIDIA GPUs of compute capability 8.0")
    assert hopper < flash


def test_pinned_kernel_that_cannot_run_raises_with_the_reason() -> None:
    with pytest.raises(
        UnsupportedOperationError, match=r"pins attention to 'xrt_flash_hopper'.*not 96"
    ):
        rt.dispatcher.resolve("attention", _shape(head_dim=96), "bfloat16", "cuda:0", PIN)
    with pytest.raises(UnsupportedOperationError, match=r"'xrt_flash_hopper'.*not on the CPU"):
        rt.dispatcher.resolve("attention", _shape(), "bfloat16", "cpu", PIN)


def test_pinned_ops_attention_on_cpu_tensors_raises_with_the_reason() -> None:
    torch = pytest.importorskip("torch")
    q = torch.zeros(1, 16, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(UnsupportedOperationError, match=r"'xrt_flash_hopper'.*not on the CPU"):
        ops.attention(q, q, q, policy=PIN)
    with pytest.raises(UnsupportedOperationError, match=r"'xrt_flash_hopper'.*not float32"):
        ops.attention(q.float(), q.float(), q.float(), policy=PIN)


def test_support_check_imports_neither_torch_nor_triton_off_the_gpu() -> None:
    code = (
        "import sys, xpuruntime.ops, xpuruntime.runtime as rt;"
        "rt.dispatcher.kernels('attention');"
        "print(rt.dispatcher.supports('attention', 'xrt_flash_hopper', [1,1,1,1,1,64,0,0],"
        " 'float16', 'cpu')[0]);"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "[]"]


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1"
    or not (importlib.util.find_spec("torch") and importlib.util.find_spec("triton")),
    reason="xrt_flash runs CPU tensors only in Triton's interpreter (TRITON_INTERPRET=1 with "
    "torch and triton: nox -s attention)",
)
def test_automatic_choice_records_why_the_hopper_forward_was_passed_over() -> None:
    import torch

    q = torch.randn(1, 40, 4, 64, dtype=torch.float16)
    record = ExecutionRecord(kind="training")
    ops.attention(q, q, q, causal=True, record=record)
    (decision,) = record.decisions
    assert (decision.kernel, decision.mode) == (KERNEL, "auto")
    assert f"skipped {HOPPER_KERNEL}: runs on NVIDIA Hopper GPUs only" in decision.reason


def test_forward_variant_names_round_trip_and_fp8_takes_its_own() -> None:
    from xpuruntime.kernels.attention import hopper
    from xpuruntime.runtime.errors import InvalidArgumentError

    for head_dim in hopper.HEAD_DIMS:
        for name in hopper.variant_names(head_dim):
            assert hopper.parse_variant(name).name == name
    for head_dim in hopper.FP8_HEAD_DIMS:
        for name in hopper.variant_names(head_dim, fp8=True):
            assert hopper.fp8_variant(head_dim, name).name == name
    assert hopper.parse_variant("m64n128s3pp_e4").exp_emu
    assert not hopper.parse_variant("m64n128s3pp").exp_emu
    lazy = hopper.parse_variant("m64n128s3pp_pe4r")
    assert (lazy.lazy, lazy.exp_emu, lazy.persistent) == (True, True, True)
    assert lazy.name == "m64n128s3pp_pe4r"
    assert not hopper.parse_variant("m64n128s3pp_pe4").lazy
    # fp8 needs 64 query rows a warpgroup (its query scales) and two warpgroups; it takes
    # the 1-D orders.
    for name in ("m128n64s2pp", "m64n128s2pp_w3"):
        with pytest.raises(InvalidArgumentError, match="query scales are per 64 rows"):
            hopper.fp8_variant(128, name)
    assert hopper.fp8_variant(128, "m64n128s2pp_p").persistent
    assert hopper.fp8_variant(128, "m64n128s2pp_l").lpt
    with pytest.raises(InvalidArgumentError, match="is not of the form"):
        hopper.parse_variant("m64n128s2pp_e8")


def test_two_query_buffers_take_a_persistent_variant_and_their_shared_memory() -> None:
    """``q2``: a second query tile per consumer warpgroup, only where a CTA loops over work
    items (persistent); it counts in the shared memory a variant needs, and the 2-D and
    ``_l`` twins a persistent variant runs as drop it."""
    from xpuruntime.kernels.attention import hopper
    from xpuruntime.runtime.errors import InvalidArgumentError

    two = hopper.parse_variant("m64n64s3np_pq2")
    assert (two.q_buffers, two.persistent, two.name) == (2, True, "m64n64s3np_pq2")
    one = hopper.parse_variant("m64n64s3np_p")
    # One more 128 x 128 bf16 query tile: 32 KiB.
    assert two.smem_bytes(128) - one.smem_bytes(128) == 128 * 128 * 2
    # The largest persistent tiles at head size 128 still fit with two query buffers.
    widest = hopper._checked_variant(128, "m64n128s2pp_pq2")
    assert widest.smem_bytes(128) <= widest.smem_limit()
    assert hopper.parse_variant("m64n64s2np_pq2o2").ctas_per_sm == 2
    for name in ("m64n128s2pp_q2", "m64n128s2pp_lq2"):
        with pytest.raises(InvalidArgumentError, match="take a persistent variant"):
            hopper.parse_variant(name)
    with pytest.raises(InvalidArgumentError, match="is not of the form"):
        hopper.parse_variant("m64n128s2pp_q2p")
    assert two.twin(lpt=True).name == "m64n64s3np_l"
    assert two.twin(lpt=False).name == "m64n64s3np"
    assert one.twin(lpt=True) == hopper.parse_variant("m64n64s3np_l")


def test_two_ctas_an_sm_fit_the_register_file_and_shared_memory() -> None:
    """``o2``: 80 registers a thread at launch for two CTAs of three warpgroups (65536 a
    SM), the consumers' share after setmaxnreg within what the producer leaves, half the
    SM's shared memory a CTA; only key blocks of 64 with two consumer warpgroups."""
    from xpuruntime.kernels.attention import hopper
    from xpuruntime.runtime.errors import InvalidArgumentError

    two = hopper.parse_variant("m64n64s2np_po2")
    assert (two.ctas_per_sm, two.persistent, two.pingpong) == (2, True, False)
    assert two.name == "m64n64s2np_po2"
    assert two.maxnreg == 80
    assert 2 * 3 * 128 * two.maxnreg <= 65536
    # The producer's warpgroup drops to 24; the worker consumer takes 104 of what it frees
    # (the default partition gets the remainder, 112: the compile script's setmaxnreg).
    assert (two.producer_regs, two.consumer_regs) == (24, 104)
    assert two.producer_regs + 2 * two.consumer_regs <= 3 * two.maxnreg
    assert 2 * (two.smem_limit() + 1024) <= 228 << 10
    one = hopper.parse_variant("m64n64s2np_p")
    assert (one.ctas_per_sm, one.maxnreg, one.consumer_regs) == (1, None, 240)
    # Head size 64 fits half an SM's shared memory; 128 (a persistent CTA's 128 KiB) does not.
    assert hopper._checked_variant(64, "m64n64s2np_po2").ctas_per_sm == 2
    with pytest.raises(InvalidArgumentError, match="a CTA has 115712"):
        hopper._checked_variant(128, "m64n64s2np_po2")
    for name in ("m64n128s2np_po2", "m64n64s2pp_w3o2", "m128n64s2np_o2"):
        with pytest.raises(InvalidArgumentError, match="two consumer warpgroups of 64 rows"):
            hopper.parse_variant(name)
    with pytest.raises(InvalidArgumentError, match="one or two CTAs an SM, not 3"):
        hopper.Variant(64, 64, 2, False, ctas_per_sm=3)
    # The fp8 kernel carries P in float32: no registers for a second CTA.
    with pytest.raises(InvalidArgumentError, match="carries P in float32"):
        hopper.fp8_variant(128, "m64n64s2np_po2")


def test_one_gemm_in_flight_is_a_flag_of_its_own_that_the_kernel_receives() -> None:
    """``g1`` (one GEMM in flight a consumer warpgroup) parses in its place among the flags,
    round-trips through the name, reaches the kernel as ``ONE_GEMM`` and changes nothing
    else of the variant; without it the kernel keeps its overlapped GEMMs."""
    import dataclasses

    from xpuruntime.kernels.attention import hopper
    from xpuruntime.runtime.errors import InvalidArgumentError

    for name in ("m64n64s2np_po2g1", "m64n64s2np_o2g1", "m64n64s2np_po2g1r", "m64n128s2pp_pg1"):
        variant = hopper.parse_variant(name)
        assert variant.one_gemm
        assert variant.name == name
        assert dataclasses.replace(variant, one_gemm=False).name == name.replace("g1", "")
        constants = hopper.kernel_constants(variant, 64, True, varlen=False, k_scale_block=None)
        assert constants["ONE_GEMM"] is True
    assert hopper.parse_variant("m64n64s2np_po2g1r").lazy
    plain = hopper.parse_variant("m64n64s2np_po2")
    assert not plain.one_gemm
    assert (
        hopper.kernel_constants(plain, 64, True, varlen=False, k_scale_block=None)["ONE_GEMM"]
        is False
    )
    # Offered by name, so the every-variant GPU test and the scripts' "all" time it.
    assert {"m64n64s2np_po2g1", "m64n64s2np_o2g1"} <= set(hopper.variant_names(64))
    with pytest.raises(InvalidArgumentError, match="is not of the form"):
        hopper.parse_variant("m64n64s2np_g1o2")


def test_sums_by_the_tensor_cores_are_an_fp8_flag_the_kernel_receives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``u`` (the rows' sums of P by a GEMM against tiles of ones) parses last among the
    flags, round-trips, reaches the fp8 kernel as ``SUM_MMA`` with its tiles' rows, adds
    those tiles (one per ring stage) to the shared memory, and is refused for 16-bit calls,
    where it measured slower, with ``g1``, which has no overlapped P·V to issue it beside,
    and with key blocks under 128 (its rows of ones are 128 bytes). The fp8 default takes
    it (measured the fastest on an H200); the 16-bit candidates do not offer it."""
    import dataclasses

    from xpuruntime.kernels.attention import hopper
    from xpuruntime.runtime.errors import InvalidArgumentError

    for name in ("m64n128s3pp_pru", "m64n128s3pp_pe4ru"):
        variant = hopper.parse_variant(name)
        assert variant.sum_mma
        assert variant.lazy
        assert variant.persistent
        assert variant.name == name
        plain = dataclasses.replace(variant, sum_mma=False)
        assert plain.name == name[:-1]
        ones = variant.num_stages * hopper.SUM_COLUMNS * variant.block_n
        assert variant.smem_bytes(128, 1) == plain.smem_bytes(128, 1) + ones
        assert hopper.fp8_variant(128, name) == variant
        constants = hopper.kernel_constants(variant, 128, False, varlen=False, k_scale_block=128)
        assert constants["SUM_MMA"] is True
        assert constants["SUM_COLUMNS"] == hopper.SUM_COLUMNS
        with pytest.raises(InvalidArgumentError, match="fp8 kernel"):
            hopper.kernel_constants(variant, 128, False, varlen=False, k_scale_block=None)
    monkeypatch.delenv(hopper.FP8_VARIANT_ENV, raising=False)
    default = hopper.fp8_variant(128)
    assert default.name == "m64n128s3np_pq2rub"
    assert default.q_buffers == 2
    assert default.half_bits
    assert not default.pingpong
    # Packed calls and graph captures before the schedule exist run its 1-D twin (one query
    # tile a warpgroup).
    assert default.twin(lpt=True).name == "m64n128s3np_lrub"
    assert hopper.kernel_constants(default, 128, False, varlen=False, k_scale_block=128)["SUM_MMA"]
    # The fp8 default before it (without u) stays a candidate, and receives no sums.
    before = hopper.fp8_variant(128, "m64n128s3pp_pe4r")
    assert before.name in hopper.variant_names(128, fp8=True)
    assert not hopper.kernel_constants(before, 128, False, varlen=False, k_scale_block=128)[
        "SUM_MMA"
    ]
    assert {"m64n128s3np_pru", "m64n128s3pp_pru", "m64n128s3pp_pe4ru", "m64n128s3np_prub"} <= set(
        hopper.variant_names(128, fp8=True)
    )
    assert not any(hopper.parse_variant(n).sum_mma for n in hopper.variant_names(128))
    with pytest.raises(InvalidArgumentError, match="overlapped P·V"):
        hopper.parse_variant("m64n128s2np_pg1u")
    with pytest.raises(InvalidArgumentError, match="key blocks of 128 or more"):
        hopper.parse_variant("m64n64s2np_po2g1u")
    with pytest.raises(InvalidArgumentError, match="is not of the form"):
        hopper.parse_variant("m64n128s3pp_pue4")


def test_half_bits_are_an_fp8_flag_after_the_sums_gemm() -> None:
    """``b`` (P from a half's bits, no exponential) parses after ``u``, round-trips, reaches
    the kernel as ``EXP_MODE`` = ``exp_modes.HALF_BITS`` (``e4`` as ``POLY4``, neither as
    ``SFU``), and is refused without ``u`` (its P is not summed in float32) and with ``e4``
    (it replaces every exponential), each with its own reason; 16-bit calls refuse it with
    ``u``. No 16-bit candidate offers it."""
    from xpuruntime.kernels.attention import exp_modes, hopper
    from xpuruntime.runtime.errors import InvalidArgumentError

    variant = hopper.parse_variant("m64n128s3np_prub")
    assert (variant.half_bits, variant.sum_mma, variant.exp_emu) == (True, True, False)
    assert variant.name == "m64n128s3np_prub"
    assert hopper.parse_variant("m64n128s3np_pru").name == "m64n128s3np_pru"
    modes = {
        name: hopper.kernel_constants(
            hopper.parse_variant(name), 128, True, varlen=False, k_scale_block=128
        )["EXP_MODE"]
        for name in ("m64n128s3np_prub", "m64n128s3pp_pe4ru", "m64n128s3np_pru")
    }
    assert modes == {
        "m64n128s3np_prub": exp_modes.HALF_BITS,
        "m64n128s3pp_pe4ru": exp_modes.POLY4,
        "m64n128s3np_pru": exp_modes.SFU,
    }
    refused = {
        "m64n128s3np_prb": "take u with b",
        "m64n128s3pp_pe4rub": "take b or e4",
        "m64n128s3np_prbu": "is not of the form",
    }
    for name, reason in refused.items():
        with pytest.raises(InvalidArgumentError, match=reason):
            hopper.parse_variant(name)
    with pytest.raises(InvalidArgumentError, match="fp8 kernel"):
        hopper.kernel_constants(variant, 128, False, varlen=False, k_scale_block=None)
    assert not any(
        hopper.parse_variant(n).half_bits for d in hopper.HEAD_DIMS for n in hopper.variant_names(d)
    )


def test_forward_kernel_never_specialises_the_key_length() -> None:
    """Triton compiles an integer argument equal to 1 as a constant unless told not to; with
    ``seqlen_k`` a constant 1 the fp8 P conversion met a ptxas 12.8 bug (the kernel's
    comment), so the forward's JIT function keeps it an argument."""
    pytest.importorskip("triton.experimental.gluon")
    from xpuruntime.kernels.attention import _hopper_kernels

    kernel = _hopper_kernels._xrt_attn_fwd_hopper
    unspecialised = {p.name for p in kernel.params if p.do_not_specialize}
    assert unspecialised == {"seqlen_k"}


def test_forward_default_follows_head_size_mask_and_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """Key blocks of 64 without ping-pong at head size 64 causal below 8192 keys (persistent,
    two CTAs an SM, one GEMM in flight), on the shortest causal ones at 128 (three stages);
    persistent variants on short sequences and causal ones at 128, with two query buffers on
    the shortest, three consumer warpgroups on longer ones at head size 64; a given name,
    then the environment, come before the defaults, and the reason says which."""
    from xpuruntime.kernels.attention import hopper

    monkeypatch.delenv(hopper.VARIANT_ENV, raising=False)

    def name(head_dim: int, causal: bool, keys: int) -> str:
        return hopper._variant(head_dim, None, causal, keys)[0].name

    assert name(64, False, 512) == "m64n128s2pp_pq2"
    assert name(64, False, 1024) == "m64n128s2pp_p"
    assert name(64, False, 2048) == "m64n128s2pp_w3"
    assert name(64, True, 512) == "m64n64s2np_po2g1"
    assert name(64, True, 4096) == "m64n64s2np_po2g1"
    assert name(64, True, 8191) == "m64n64s2np_po2g1"
    assert name(64, True, 8192) == "m64n128s2pp_w3l"
    assert name(128, False, 1024) == "m64n128s2pp_pq2"
    assert name(128, False, 2048) == "m64n128s2pp_p"
    assert name(128, False, 8192) == "m64n128s2pp_p"
    assert name(128, False, 16384) == "m64n128s2pp"
    assert name(128, True, 512) == "m64n64s3np_pq2"
    assert name(128, True, 1024) == "m64n128s2pp_p"
    assert name(128, True, 16384) == "m64n128s2pp_p"
    assert name(256, True, 512) == "m64n64s2pp"
    assert (
        hopper._variant(128, None, True, 2048)[1]
        == "the default at head size 128, causal, 2048 keys"
    )
    assert hopper._variant(64, "m64n128s3pp", True, 8192) == (
        hopper.parse_variant("m64n128s3pp"),
        "given",
    )
    # Packed sequences run on the 2-D grid: the 2-D defaults, by the longest key length.
    assert hopper._variant(64, None, False, 1024, packed=True) == (
        hopper.parse_variant("m64n64s2np_o2g1"),
        "the default at head size 64, full, packed sequences of up to 1024 keys",
    )
    assert hopper._variant(64, None, False, 2048, packed=True)[0].name == "m64n128s2pp_w3"
    assert hopper._variant(64, None, True, 2048, packed=True)[0].name == "m64n64s2np_o2g1"
    assert hopper._variant(64, None, True, 4096, packed=True)[0].name == "m64n128s2pp"
    assert hopper._variant(64, None, True, 8192, packed=True)[0].name == "m64n128s2pp_w3"
    assert hopper._variant(128, None, True, 512, packed=True)[0].name == "m64n64s3np"
    assert hopper._variant(128, None, True, 2048, packed=True)[0].name == "m64n128s2pp"
    assert hopper._variant(128, None, False, 512, packed=True)[0].name == "m64n128s2pp"
    # Every default is a candidate (the scripts' --variants all, the GPU tests' variants).
    for table in (hopper._DEFAULTS, hopper._PACKED_DEFAULTS):
        for (head_dim, _causal), rules in table.items():
            for _below, default in rules:
                assert default in hopper.variant_names(head_dim), default
    monkeypatch.setenv(hopper.VARIANT_ENV, "m64n128s2np")
    assert hopper._variant(128, None, True, 2048) == (
        hopper.parse_variant("m64n128s2np"),
        f"from {hopper.VARIANT_ENV}",
    )


def test_persistent_schedule_deals_every_item_once_and_balances_causal_work() -> None:
    """The persistent kernel's schedule: bounds, then each CTA's items; every item once; the
    CTAs' key blocks within 2 % of each other on causal shapes where dealing item ``i`` to
    CTA ``i % grid`` leaves one CTA over 10 % above the mean."""
    import math

    from xpuruntime.kernels.attention import hopper

    def loads(entries: list[int], grid: int, d: hopper._Dims, section: int) -> list[int]:
        num_m, batch_heads = math.ceil(d.seqlen_q / 128), d.batch * d.heads

        def blocks(item: int) -> int:
            first_bh = (item // (section * num_m)) * section
            m = num_m - 1 - (item % (section * num_m)) // min(section, batch_heads - first_bh)
            return math.ceil(min(m * 128 + 128, d.seqlen_k) / 128) + hopper._ITEM_BLOCKS

        bounds = entries[: grid + 1]
        return [sum(blocks(i) for i in entries[bounds[c] : bounds[c + 1]]) for c in range(grid)]

    for seq, batch, heads, section in ((2048, 8, 16, 32), (16384, 1, 16, 4), (1000, 3, 5, 15)):
        d = hopper._Dims(batch, heads, heads, seq, seq, 128)
        items = math.ceil(seq / 128) * batch * heads
        grid = min(items, 132)
        entries = hopper._schedule_entries(d, 128, 128, True, grid, section)
        assert entries[0] == grid + 1
        assert entries[grid] == len(entries)
        assert sorted(entries[grid + 1 :]) == list(range(items))
        balanced = loads(entries, grid, d, section)
        assert max(balanced) <= 1.02 * sum(balanced) / grid or items < 2 * grid
        if seq == 2048:
            dealt = [
                grid + 1 + sum(1 for i in range(items) if i % grid < c) for c in range(grid + 1)
            ]
            dealt += sorted(range(items), key=lambda i: i % grid)
            fixed = loads(dealt, grid, d, section)
            assert max(fixed) > 1.1 * sum(fixed) / grid
