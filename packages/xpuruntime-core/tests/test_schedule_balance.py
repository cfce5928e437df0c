"""scripts/schedule_balance.py: the persistent schedule's busiest CTA against the mean, on the
schedule the launcher builds (no GPU)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from xpuruntime.kernels.attention import hopper


def test_full_attention_items_leave_the_last_wave_short(
    core_script: Callable[[str], ModuleType],
) -> None:
    """2048 equal items on 132 CTAs: the busiest takes 16, the mean 2048 / 132."""
    script = core_script("schedule_balance")
    for assumed in (1, 4):
        ratio = script.busiest_over_mean(4096, False, assumed, 4)
        assert ratio == pytest.approx(16 / (2048 / 132))


def test_causal_schedules_stay_within_a_percent_and_keep_the_setting(
    core_script: Callable[[str], ModuleType],
) -> None:
    script = core_script("schedule_balance")
    before = hopper._ITEM_BLOCKS
    for seqlen in (4096, 16384):
        ratios = [script.busiest_over_mean(seqlen, True, a, 4) for a in (1, 4)]
        assert all(1.0 <= r < 1.01 for r in ratios), ratios
    assert before == hopper._ITEM_BLOCKS  # restored after each build
    # At 4096 keys causal the schedule built with the cost it is charged balances better
    # (1.0061 against 1.0092: docs/attention.md).
    assert script.busiest_over_mean(4096, True, 4, 4) <= script.busiest_over_mean(4096, True, 1, 4)
