"""Which backward runs after an ``xrt_flash_hopper`` forward, and the detail that says why.

Without a GPU: :func:`launch.hopper_backward_plan`'s reasons for passing the Gluon Hopper
backward over; which of its two paths runs (fused with atomic dQ, or deterministic under
``torch.use_deterministic_algorithms`` or when a deterministic variant is named) and that
:func:`launch.hopper_backward` asks for that path and reports it (the kernels replaced by a
stand-in, the device check passed); and, in Triton's CPU interpreter (``TRITON_INTERPRET=1``, ``nox -s
attention``), :func:`launch.hopper_backward` running xrt_flash's Triton backward in its place
with the same gradients as :func:`launch.backward`. The Gluon backward itself runs in
test_attention_gpu.py on an sm_90 GPU.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any, Literal

import pytest

pytest.importorskip("torch")  # the core's test session runs without it
pytest.importorskip("triton")  # the launcher imports it
import torch

from xpuruntime.kernels.attention import hopper_bwd, launch
from xpuruntime.runtime.errors import InvalidArgumentError

FUSED = "backward: gluon hopper backward (fused dK/dV/dQ, fp32 atomic dQ; nondeterministic)"
DETERMINISTIC = (
    "backward: gluon hopper backward (dK/dV + dQ kernels, deterministic: "
    "torch.use_deterministic_algorithms is on)"
)
#: What a causal call's detail adds when its default runs the 1-D longest-first grids.
LONGEST_FIRST = "; causal: longest blocks first on 1-D grids)"


@pytest.mark.parametrize(
    ("dtype", "head_dim", "expected"),
    [
        (torch.float32, 64, "supports bfloat16 and float16, not torch.float32"),
        (torch.bfloat16, 256, "supports head sizes 64 and 128, not 256"),
        (torch.float16, 32, "supports head sizes 64 and 128, not 32"),
        (torch.bfloat16, 128, "runs on CUDA sm_90 GPUs, not cpu"),
    ],
)
def test_plan_says_why_the_triton_backward_runs(
    dtype: torch.dtype, head_dim: int, expected: str
) -> None:
    q = torch.zeros(1, 3, 2, head_dim, dtype=dtype)  # bhsd: 2 heads
    gluon, plan = launch.hopper_backward_plan(q, causal=True, layout="bhsd")
    assert not gluon
    assert plan == f"backward: xrt_flash's Triton kernels (the Hopper backward {expected})"


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="run with TRITON_INTERPRET=1 (nox -s attention)",
)
@pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_hopper_backward_falls_back_to_the_triton_backward(layout: Literal["bshd", "bhsd"]) -> None:
    gen = torch.Generator().manual_seed(0)
    heads_at = 2 if layout == "bshd" else 1

    def tensor(heads: int) -> torch.Tensor:
        shape = [1, 40, 40, 64]
        shape[heads_at] = heads
        return torch.randn(*shape, generator=gen).to(torch.bfloat16)

    q, do = tensor(4), tensor(4)
    k, v = tensor(2), tensor(2)
    out, lse, _ = launch.forward(q, k, v, causal=True, scale=None, layout=layout)
    *grads, detail = launch.hopper_backward(
        do, q, k, v, out, lse, causal=True, scale=None, layout=layout
    )
    assert detail.startswith(
        "backward: xrt_flash's Triton kernels (the Hopper backward runs on CUDA sm_90 GPUs, not "
        "cpu); triton backward dkdv "
    ), detail
    *expected, _ = launch.backward(do, q, k, v, out, lse, causal=True, scale=None, layout=layout)
    for got, want in zip(grads, expected, strict=True):
        assert torch.equal(got, want)


@pytest.fixture
def deterministic_algorithms() -> Iterator[None]:
    """torch.use_deterministic_algorithms(True) for the test, restored after."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.fixture
def gluon_backward(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The device check passed and the Gluon backward replaced by a stand-in that records
    its ``deterministic`` argument (zero gradients); no variant named in the environment;
    the fused kernel on 2-D grids is the default at both head sizes and masks, and so is
    the deterministic one on 2-D grids (tests that want other defaults set them)."""
    monkeypatch.setattr(launch, "_hopper_backward_unsupported", lambda q, layout, batch: "")
    monkeypatch.delenv(hopper_bwd.VARIANT_ENV, raising=False)
    for head_dim in hopper_bwd.HEAD_DIMS:
        for causal in (False, True):
            key = (head_dim, causal)
            monkeypatch.setitem(hopper_bwd._DEFAULT, key, hopper_bwd._FUSED[head_dim][0])
            monkeypatch.setitem(hopper_bwd._DETERMINISTIC_DEFAULT, key, "m64s2n64s2")
    asked: list[bool] = []

    def stand_in(
        grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        *args: object, deterministic: bool, **kwargs: object,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        asked.append(deterministic)
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)

    monkeypatch.setattr(hopper_bwd, "hopper_attention_backward", stand_in)
    return asked


def _run(layout: Literal["bshd", "bhsd"] = "bhsd", head_dim: int = 128) -> str:
    q = torch.zeros(1, 2, 8, head_dim, dtype=torch.bfloat16)
    lse = torch.zeros(1, 2, 8)
    *_, detail = launch.hopper_backward(q, q, q, q, q, lse, causal=True, scale=None, layout=layout)
    return detail


def test_a_fused_default_runs_and_says_it_is_nondeterministic(gluon_backward: list[bool]) -> None:
    assert not torch.are_deterministic_algorithms_enabled()
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    assert launch.hopper_backward_plan(q, causal=False, layout="bshd") == (True, FUSED)
    assert _run() == FUSED
    variant, origin = hopper_bwd.choose_variant(128, causal=True, deterministic=False)
    assert isinstance(variant, hopper_bwd.FusedVariant)
    assert origin == "default"
    assert gluon_backward == [False]


@pytest.mark.usefixtures("deterministic_algorithms")
def test_deterministic_algorithms_take_the_deterministic_backward(
    gluon_backward: list[bool],
) -> None:
    q = torch.zeros(1, 2, 8, 128, dtype=torch.bfloat16)
    assert launch.hopper_backward_plan(q, causal=False, layout="bhsd") == (True, DETERMINISTIC)
    assert _run("bshd") == DETERMINISTIC
    assert _run(head_dim=64) == DETERMINISTIC
    assert gluon_backward == [True, True]
    variant, _ = hopper_bwd.choose_variant(64, causal=False, deterministic=True)
    assert isinstance(variant, hopper_bwd.BwdVariant)


def test_a_deterministic_default_says_why(
    gluon_backward: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(hopper_bwd._DEFAULT, (128, True), "m64s2n64s2")
    assert _run() == (
        "backward: gluon hopper backward (dK/dV + dQ kernels, deterministic: the default at "
        "this head size, measured faster than the fused kernel)"
    )
    assert _run(head_dim=64) == FUSED  # the other head size's default is still fused
    assert gluon_backward == [False, False]  # nothing asked the backward to be deterministic


@pytest.mark.usefixtures("deterministic_algorithms")
def test_a_fused_variant_named_under_deterministic_algorithms_is_passed_over(
    gluon_backward: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hopper_bwd.VARIANT_ENV, "fm64s2c")
    assert _run() == (
        f"{DETERMINISTIC[:-1]}; fm64s2c from {hopper_bwd.VARIANT_ENV} is fused, not deterministic)"
    )
    assert gluon_backward == [True]


def test_a_named_variant_picks_the_path_and_the_detail_says_so(
    gluon_backward: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hopper_bwd.VARIANT_ENV, "m64s2n64s2")
    assert _run() == (
        "backward: gluon hopper backward (dK/dV + dQ kernels, deterministic; variant "
        f"m64s2n64s2 from {hopper_bwd.VARIANT_ENV})"
    )
    monkeypatch.setenv(hopper_bwd.VARIANT_ENV, "fm64s3ct")
    assert _run() == f"{FUSED[:-1]}; variant fm64s3ct from {hopper_bwd.VARIANT_ENV})"
    # The Gluon backward chose the path: nothing asked it to be deterministic.
    assert gluon_backward == [False, False]


def test_the_causal_defaults_run_longest_first_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "_hopper_backward_unsupported", lambda q, layout, batch: "")
    monkeypatch.delenv(hopper_bwd.VARIANT_ENV, raising=False)
    q = torch.zeros(1, 2, 8, 128, dtype=torch.bfloat16)
    for causal in (False, True):
        for deterministic in (False, True):
            variant, origin = hopper_bwd.choose_variant(
                128, causal=causal, deterministic=deterministic
            )
            assert variant.lpt == causal
            assert origin == "default"
        _, plan = launch.hopper_backward_plan(q, causal=causal, layout="bhsd")
        assert plan.endswith(LONGEST_FIRST) == causal
        # The defaults at head size 128 are the fused kernel's (with its dQ writer warp).
        assert plan.startswith(FUSED[:-1]), plan
        assert hopper_bwd.choose_variant(128, causal=causal, deterministic=False)[0].dq_writer
    # A named variant without _l runs 2-D grids, causal or not, and the detail names it.
    monkeypatch.setenv(hopper_bwd.VARIANT_ENV, "m64s2n64s2")
    assert not hopper_bwd.choose_variant(128, causal=True, deterministic=False)[0].lpt
    _, plan = launch.hopper_backward_plan(q, causal=True, layout="bhsd")
    assert plan.endswith(f"variant m64s2n64s2 from {hopper_bwd.VARIANT_ENV})")


@pytest.mark.usefixtures("deterministic_algorithms")
def test_a_fused_variant_passed_over_gives_way_to_the_causal_deterministic_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under deterministic algorithms a named fused variant gives way to the deterministic
    default of the head size and mask: at head size 128 causal the 1-D longest-first one,
    which the detail says after naming what was passed over."""
    monkeypatch.setattr(launch, "_hopper_backward_unsupported", lambda q, layout, batch: "")
    monkeypatch.setenv(hopper_bwd.VARIANT_ENV, "fm64s2c")
    q = torch.zeros(1, 2, 8, 128, dtype=torch.bfloat16)
    variant, _ = hopper_bwd.choose_variant(128, causal=True, deterministic=True)
    assert variant.name == "m64s2n64s2_l"
    _, plan = launch.hopper_backward_plan(q, causal=True, layout="bhsd")
    assert plan == (
        f"{DETERMINISTIC[:-1]}; fm64s2c from {hopper_bwd.VARIANT_ENV} is fused, not "
        f"deterministic{LONGEST_FIRST}"
    )
    _, plan = launch.hopper_backward_plan(q, causal=False, layout="bhsd")
    assert plan == (
        f"{DETERMINISTIC[:-1]}; fm64s2c from {hopper_bwd.VARIANT_ENV} is fused, not deterministic)"
    )


PACKED = (
    "backward: gluon hopper backward (dK/dV + dQ kernels, deterministic, on 2-D grids: packed "
    "sequences take these)"
)


@pytest.fixture
def backward_kwargs(gluon_backward: list[bool], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The keyword arguments of the last call of :func:`gluon_backward`'s stand-in."""
    passed: dict[str, Any] = {}
    stand_in = hopper_bwd.hopper_attention_backward

    def recording(*args: Any, **kwargs: Any) -> Any:
        passed.update(kwargs)
        return stand_in(*args, **kwargs)

    monkeypatch.setattr(hopper_bwd, "hopper_attention_backward", recording)
    return passed


def test_packed_sequences_take_the_deterministic_kernels_on_2d_grids(
    backward_kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Packed sequences (``layout="thd"``) run the deterministic kernels on 2-D grids, whether
    the default is fused, named fused or named with ``_l``, and the detail says so; their
    offsets reach the backward."""
    q = torch.zeros(10, 2, 128, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    # (The stand-in reads no offsets: the longest lengths are what the plan goes by.)
    varlen = launch.Varlen(cu, cu, 2048, 6)

    def run() -> str:
        *_, detail = launch.hopper_backward(
            q, q, q, q, q, torch.zeros(2, 10), causal=True, scale=None, layout="thd",
            varlen=varlen,
        )  # fmt: skip
        return detail

    assert run() == PACKED  # the default here is fused (the fixture)
    assert backward_kwargs["cu_seqlens_q"] is cu
    assert backward_kwargs["max_seqlen_q"] == 2048
    variant, origin = hopper_bwd.choose_variant(128, causal=True, deterministic=False, packed=True)
    assert (variant.name, origin) == ("m64s2n64s2", "default")
    monkeypatch.setenv(hopper_bwd.VARIANT_ENV, "fm64s2c")
    assert run() == (
        f"{PACKED[:-1]}; fm64s2c from {hopper_bwd.VARIANT_ENV} is fused, packed sequences "
        "take deterministic ones)"
    )
    monkeypatch.setenv(hopper_bwd.VARIANT_ENV, "m64s3n64s3_l")
    assert run() == (
        f"{PACKED[:-1]}; variant m64s3n64s3 from {hopper_bwd.VARIANT_ENV} (its 2-D grids on "
        "packed sequences))"
    )
    # A longest-first default gives way to its 2-D twin without a word: the detail says 2-D.
    monkeypatch.delenv(hopper_bwd.VARIANT_ENV)
    monkeypatch.setitem(hopper_bwd._DEFAULT, (128, True), "m64s2n64s2_l")
    assert run() == PACKED
    assert (
        hopper_bwd.choose_variant(128, causal=True, deterministic=False, packed=True)[0].name
        == "m64s2n64s2"
    )


@pytest.mark.usefixtures("deterministic_algorithms")
def test_packed_sequences_under_deterministic_algorithms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under deterministic algorithms packed sequences run the same deterministic kernels,
    and the detail is the packed one (the setting changes nothing there)."""
    monkeypatch.setattr(launch, "_hopper_backward_unsupported", lambda q, layout, batch: "")
    monkeypatch.delenv(hopper_bwd.VARIANT_ENV, raising=False)
    q = torch.zeros(10, 2, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    varlen = launch.Varlen(cu, cu, 2048, 2048)
    for causal in (False, True):
        plan = launch.hopper_backward_plan(q, causal=causal, layout="thd", varlen=varlen)
        assert plan == (True, PACKED)
        variant, _ = hopper_bwd.choose_variant(64, causal=causal, deterministic=True, packed=True)
        assert isinstance(variant, hopper_bwd.BwdVariant)
        assert not variant.lpt


def test_short_packed_causal_sequences_run_the_triton_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below PACKED_CAUSAL_MIN_ROWS query rows a packed causal batch runs xrt_flash's Triton
    backward (measured faster there) and the plan says why; full attention and longer
    sequences keep the Gluon kernels."""
    monkeypatch.setattr(launch, "_hopper_backward_unsupported", lambda q, layout, batch: "")
    monkeypatch.delenv(hopper_bwd.VARIANT_ENV, raising=False)
    q = torch.zeros(10, 2, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    below = hopper_bwd.PACKED_CAUSAL_MIN_ROWS - 1

    def plan(causal: bool, rows: int) -> tuple[bool, str]:
        varlen = launch.Varlen(cu, cu, rows, rows)
        return launch.hopper_backward_plan(q, causal=causal, layout="thd", varlen=varlen)

    assert plan(True, below) == (
        False,
        f"backward: xrt_flash's Triton kernels (packed causal sequences of at most {below} "
        "query rows: there the Gluon Hopper backward measured slower than xrt_flash's, below "
        f"{hopper_bwd.PACKED_CAUSAL_MIN_ROWS})",
    )
    assert plan(False, below) == (True, PACKED)
    assert plan(True, hopper_bwd.PACKED_CAUSAL_MIN_ROWS) == (True, PACKED)


def test_packed_lse_buffers_give_each_sequence_128_aligned_padded_rows() -> None:
    """The packed backward's lse₂/delta layout: each sequence starts on a multiple of 128 rows
    (TMA's innermost coordinate must be 16-byte aligned) and gets its query count rounded up
    to 128 rows; the buffers' length, bounded without reading the offsets, holds them all."""
    lengths = [0, 1, 127, 128, 129, 300]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    packed = hopper_bwd._padded(cu, cu, 300, 300, total_q=int(cu[-1]) + 5)
    assert packed.cu_pad.tolist() == [0, 0, 128, 256, 384, 640, 1024]
    assert packed.cu_pad.dtype == torch.int32
    assert packed.batch == len(lengths)
    assert packed.pad_rows >= packed.cu_pad[-1].item()
    gen = torch.Generator().manual_seed(3)
    for _ in range(50):
        lens = torch.randint(
            0, 700, (int(torch.randint(1, 40, (1,), generator=gen)),), generator=gen
        )
        cu = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)]).int()
        packed = hopper_bwd._padded(cu, cu, int(lens.max()), int(lens.max()), int(cu[-1]))
        assert packed.pad_rows >= packed.cu_pad[-1].item(), lens.tolist()
        assert not (packed.cu_pad % 128).any()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cu_seqlens_k": None}, "give both cu_seqlens_q and cu_seqlens_k"),
        ({"cu_seqlens_q": torch.tensor([0, 4, 10])}, "must be a 1-D int32 tensor"),
        ({"cu_seqlens_k": torch.tensor([0, 10], dtype=torch.int32)}, "different batch sizes"),
        ({"q": torch.zeros(1, 10, 2, 64, dtype=torch.bfloat16)}, "(total, heads, head_dim)"),
    ],
)
def test_packed_backward_rejects_malformed_offsets_and_shapes(
    change: dict[str, Any], message: str
) -> None:
    """Checked before anything runs (no GPU needed): both offsets, int32, one count, and
    packed (total, heads, head_dim) tensors."""
    q = torch.zeros(10, 2, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    args: dict[str, Any] = {"q": q, "cu_seqlens_q": cu, "cu_seqlens_k": cu} | change
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        hopper_bwd.hopper_attention_backward(
            q, args["q"], q, q, q, torch.zeros(2, 10), causal=True,
            cu_seqlens_q=args["cu_seqlens_q"], cu_seqlens_k=args["cu_seqlens_k"],
        )  # fmt: skip


def test_variant_names_round_trip() -> None:
    for head_dim in hopper_bwd.HEAD_DIMS:
        names = hopper_bwd.variant_names(head_dim)
        for causal in (False, True):
            assert hopper_bwd._DEFAULT[head_dim, causal] in names
            assert hopper_bwd._DETERMINISTIC_DEFAULT[head_dim, causal] in names
        assert isinstance(hopper_bwd.parse_variant(names[0]), hopper_bwd.FusedVariant)
        for name in names:
            assert hopper_bwd.parse_variant(name).name == name
    for name in ("fm64s2kt", "fm64s2kw"):
        with pytest.raises(InvalidArgumentError, match="t or w \\(dQ by the copy engine"):
            hopper_bwd.parse_variant(name)
