"""How evenly the Hopper forward's persistent schedule deals work, by the per-item cost it assumes.

    python3 packages/xpuruntime-core/scripts/schedule_balance.py [--item-cost 4] [--assumed 1,2,3,4,5]

The persistent variants' schedule (``hopper._schedule_entries``) deals the work items to the
CTAs by their key blocks plus ``hopper._ITEM_BLOCKS``, a work item's cost beyond its blocks.
This script builds the schedule with each ``--assumed`` value in turn, costs every CTA's
items at their key blocks plus ``--item-cost`` (what an item costs beyond its blocks on the
device: about 4 blocks for the fp8 kernel in the SM-clock reads of docs/attention.md), and
prints the busiest CTA's load over the mean: the share of the run the other CTAs wait at
its end. Shapes as the attention benches: head size 128, 16k tokens a batch, 16 heads,
tiles of 128 query rows and 128 keys, 132 CTAs (an H100/H200 SXM's SMs). No GPU needed.
"""

from __future__ import annotations

import argparse

from xpuruntime.kernels.attention import hopper

TOKENS = 16384
HEADS = 16
HEAD_DIM = 128
BLOCK = 128
SMS = 132


def busiest_over_mean(seqlen: int, causal: bool, assumed: int, item_cost: int) -> float:
    """The busiest CTA's load over the mean, for a schedule built with ``assumed`` blocks
    an item and items that cost ``item_cost`` beyond their key blocks."""
    batch = TOKENS // seqlen
    d = hopper._Dims(batch, HEADS, HEADS, seqlen, seqlen, HEAD_DIM)
    section = hopper.l2_section(2 * seqlen * HEAD_DIM, 1, batch * HEADS)  # e4m3 keys, values
    before = hopper._ITEM_BLOCKS
    hopper._ITEM_BLOCKS = assumed
    try:
        entries = hopper._schedule_entries(d, BLOCK, BLOCK, causal, SMS, section)
    finally:
        hopper._ITEM_BLOCKS = before
    bounds, items = entries[: SMS + 1], entries[SMS + 1 :]
    loads = [
        sum(
            hopper._item_key_blocks(d, item, BLOCK, BLOCK, causal, section) + item_cost
            for item in items[bounds[cta] - SMS - 1 : bounds[cta + 1] - SMS - 1]
        )
        for cta in range(SMS)
    ]
    return max(loads) / (sum(loads) / len(loads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--item-cost", type=int, default=4)
    parser.add_argument("--assumed", default="1,2,3,4,5")
    args = parser.parse_args()
    assumed = [int(a) for a in args.assumed.split(",")]
    print(f"busiest CTA's load / mean; items cost {args.item_cost} blocks beyond their keys")
    print(f"{'S':>6} {'causal':>6} " + " ".join(f"{'assumed ' + str(a):>10}" for a in assumed))
    for seqlen in (2048, 4096, 8192, 16384):
        for causal in (False, True):
            cells = " ".join(
                f"{busiest_over_mean(seqlen, causal, a, args.item_cost):10.4f}" for a in assumed
            )
            print(f"{seqlen:>6} {causal!s:>6} {cells}")


if __name__ == "__main__":
    main()
