"""Where a work item's time goes in the Gluon Hopper forward, read from the SM's own clock.

    python3 packages/xpuruntime-core/scripts/attention_item_phases.py [--seqlens 4096]
        [--kinds fp8,bf16]

Each consumer warpgroup of the kernel (``_hopper_kernels._consumer``) is given ``%clock``
reads at the edges of a work item's phases, through a copy of the kernel's source patched
in memory (:func:`patch`; the installed module is not touched), and writes the phases'
cycles over its first log-sum-exp rows, which this script reads back (so the run's
log-sum-exp is not one; the output is). Per (kind, sequence length, mask) it prints the
median and mean cycles over all (item, warpgroup) pairs of:

- ``start``: from the item's first instruction (its work item's indices) to S_0's result,
  through the query's and the first key tile's waits, and the fp8 scales' loads;
- ``unmasked``: block 0's softmax and the key blocks every row sees in full (the overlapped
  loop), also per block;
- ``masked``: the causal diagonal's and the key tail's blocks;
- ``last P·V``: the last block's P·V, issued and waited for;
- ``epilogue``: the statistics, the normalisation and the output's store;
- ``gap``: from one item's end to the next one's start (the loop's own work).

The clock reads are volatile, but the compiler may still move pure arithmetic across them
(a phase boundary is approximate to a few dozen instructions), and the reads themselves
cost a few registers (the fp8 kernel spills a few bytes outside its loop). Shapes as the
attention benches: hd128, 16k tokens a batch, 16 heads. Needs an H100/H200; the kernel is
the default variant of each kind (``XPURUNTIME_HOPPER_FP8_VARIANT`` and
``XPURUNTIME_HOPPER_ATTENTION_VARIANT`` choose others).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

PHASES = ("start", "unmasked", "masked", "last P·V", "epilogue", "gap")

_CLOCK = """
@gluon.jit
def _clock(x):
    return gl.inline_asm_elementwise(
        "mov.u32 $0, %clock;", "=r,r", [x], dtype=gl.int32, is_pure=False, pack=1
    )
"""

# Row i of a warpgroup's log-sum-exp gets phase i's cycles; rows 6 and 7 the item's numbers
# of unmasked and of all key blocks (the gap is -1 for a warpgroup's first item).
_WRITE = """            c5 = _clock(rows)
            i = rows - row0
            d = gl.where(i == 0, c1 - c0, gl.where(i == 1, c2 - c1, gl.where(i == 2, c3 - c2,
                gl.where(i == 3, c4 - c3, gl.where(i == 4, c5 - c4, gl.where(i == 5, c0 - c_end,
                gl.where(i == 6, n_full, n_mine)))))))
            d = gl.where(count == 0, gl.where(i == 5, -1, d), d)
            gl.store(lse_ptrs, d.to(gl.float32), mask=(i < 8) & (rows < len_q))
            c_end = c5
            if OWN_BLOCKS:
                # Release the tile's blocks this warpgroup skipped"""

# (anchor in the kernel's source, what goes in its place): every anchor must occur.
_EDITS = (
    ("\n@gluon.jit\ndef _box(", _CLOCK + "\n@gluon.jit\ndef _box("),
    (
        "    for tile in range(first, end):\n        b, h, bh, start_m = _work(\n            entry,",
        "    c_end = gl.full([BLOCK_M_WG], 0, gl.int32, layout=row_s)\n"
        "    for tile in range(first, end):\n"
        "        c0 = _clock(gl.arange(0, BLOCK_M_WG, layout=row_s))\n"
        "        b, h, bh, start_m = _work(\n            entry,",
    ),
    (
        "            s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))\n"
        "            _release(k_empty.index(slot0))\n",
        "            s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))\n"
        "            c1 = _clock(rows)\n"
        "            _release(k_empty.index(slot0))\n",
    ),
    (
        "            )  # fmt: skip\n            acc, acc_l, p, alpha, m_i, l_i = _consumer_blocks(\n"
        "                gl.maximum(n_full, 1)",
        "            )  # fmt: skip\n            c2 = _clock(rows)\n"
        "            acc, acc_l, p, alpha, m_i, l_i = _consumer_blocks(\n"
        "                gl.maximum(n_full, 1)",
    ),
    (
        "            if PERSISTENT:\n                # Every S GEMM of this item is done",
        "            c3 = _clock(rows)\n"
        "            if PERSISTENT:\n                # Every S GEMM of this item is done",
    ),
    (
        "            _release(v_empty.index(last % NUM_STAGES))\n\n",
        "            _release(v_empty.index(last % NUM_STAGES))\n            c4 = _clock(rows)\n\n",
    ),
    (
        "            if OWN_BLOCKS:\n                # Release the tile's blocks this warpgroup skipped",
        _WRITE,
    ),
)


def patch(source: str) -> str:
    """The kernel module's source with the clock reads and their store (see the module
    docstring); raises ValueError naming an anchor the source no longer has."""
    for anchor, replacement in _EDITS:
        if source.count(anchor) != 1:
            raise ValueError(
                f"_hopper_kernels.py has {source.count(anchor)} copies of this anchor, not one "
                f"(update attention_item_phases.py with the kernel):\n{anchor}"
            )
        source = source.replace(anchor, replacement)
    return source


def _install_patched() -> None:
    """Import the patched copy as ``_hopper_kernels`` (the launchers import it by name)."""
    import xpuruntime.kernels.attention as package
    from xpuruntime.kernels.attention import _hopper_kernels

    name = _hopper_kernels.__name__
    # Triton's JIT reads a kernel's source from its file, so the copy is a real file.
    path = Path(tempfile.mkdtemp(prefix="xrt_item_phases_")) / "_hopper_kernels_clocked.py"
    path.write_text(patch(Path(_hopper_kernels.__file__).read_text()))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    package._hopper_kernels = module  # type: ignore[attr-defined]


def _phases(kind: str, seqlen: int, causal: bool) -> Any:
    """(item x warpgroup, 8) cycles and block counts of one call (see ``_WRITE``)."""
    import torch

    from xpuruntime.kernels.attention import fp8, launch

    batch, heads = 16384 // seqlen, 16
    q, k, v = (
        torch.randn(batch, heads, seqlen, 128, device="cuda", dtype=torch.bfloat16)
        for _ in range(3)
    )
    qz = fp8.quantize(q, k, v, layout="bhsd") if kind == "fp8" else None
    for _ in range(3):  # the first call compiles
        if qz is not None:
            _, lse, detail = fp8.forward(qz, causal=causal, scale=None, layout="bhsd")
        else:
            _, lse, detail = launch.hopper_forward(
                q, k, v, causal=causal, scale=None, layout="bhsd"
            )
    torch.cuda.synchronize()
    rows = lse.view(batch * heads, seqlen // 64, 64)[:, :, :8].reshape(-1, 8).cpu()
    return rows, detail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlens", default="4096", help="comma-separated key lengths")
    parser.add_argument("--kinds", default="fp8,bf16", help="fp8 and/or bf16")
    args = parser.parse_args()
    seqlens = [int(x) for x in args.seqlens.split(",")]
    if any(n % 128 or not 128 <= n <= 16384 for n in seqlens):
        # Whole tiles: each warpgroup's first 8 rows are its own (16k tokens a batch).
        parser.error(f"--seqlens takes multiples of 128 from 128 to 16384, got {seqlens}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs an sm_90 GPU (H100/H200)")
        return 1
    _install_patched()
    print(f"{torch.cuda.get_device_name()}: cycles a work item and warpgroup, median / mean")
    for seqlen in seqlens:
        for causal in (False, True):
            for kind in args.kinds.split(","):
                rows, detail = _phases(kind, seqlen, causal)
                cells = []
                for i, name in enumerate(PHASES):
                    col = rows[:, i]
                    col = col[col >= 0] if name == "gap" else col
                    cells.append(f"{name} {col.median():.0f} / {col.mean():.0f}")
                per_block = (rows[:, 1] / rows[:, 6].clamp(min=1)).median()
                total = rows[:, :5].sum(1).mean() + rows[:, 5][rows[:, 5] >= 0].mean()
                print(
                    f"{kind} S{seqlen} {'causal' if causal else 'full'} "
                    f"({detail.split('(')[1].split(')')[0]}): "
                    + ", ".join(cells)
                    + f"; unmasked per block {per_block:.0f}; item {total:.0f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
