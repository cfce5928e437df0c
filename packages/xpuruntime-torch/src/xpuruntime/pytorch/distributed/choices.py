"""What NCCL ran each collective with, judged against the policy and written as decisions.

A pinned algorithm binds only the collectives that implement it (``tree`` pins AllReduce;
a Broadcast keeps running ``ring``, the only algorithm NCCL has for it); a pinned protocol
binds every collective. A collective that ran otherwise than pinned is a fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xpuruntime.policies import CollectivePolicy
from xpuruntime.pytorch.distributed.nccl_log import CollectiveChoice
from xpuruntime.pytorch.distributed.nccl_settings import ALGORITHM_COLLECTIVES
from xpuruntime.runtime.record import DecisionRecord

__all__ = ["Judgement", "decisions", "judge"]


@dataclass(frozen=True)
class Judgement:
    """``requested`` is ``algorithm/protocol`` with ``*`` for what the policy leaves to NCCL;
    ``reason`` is empty unless NCCL did not run what was pinned."""

    requested: str
    chosen: str
    pinned: bool
    reason: str = ""

    @property
    def fell_back(self) -> bool:
        return bool(self.reason)


def _binds(algorithm: str, collective: str) -> bool:
    collectives = ALGORITHM_COLLECTIVES.get(algorithm)
    # Lines of NCCL <= 2.21 do not name the collective; NCCL then pins every collective.
    return collectives is None or collective == "collective" or collective in collectives


def chosen_name(choice: CollectiveChoice) -> str:
    return choice.algorithm if choice.protocol is None else f"{choice.algorithm}/{choice.protocol}"


def judge(choice: CollectiveChoice, policy: CollectivePolicy) -> Judgement:
    """Whether ``choice`` is what ``policy`` pins for its collective."""
    algorithm = (
        policy.algorithm
        if policy.algorithm and _binds(policy.algorithm, choice.collective)
        else None
    )
    protocol = policy.protocol
    requested = f"{algorithm or '*'}/{protocol or '*'}"
    chosen = chosen_name(choice)
    pinned = algorithm is not None or protocol is not None
    if not pinned:
        return Judgement(requested, chosen, pinned)
    if choice.protocol is None:
        return Judgement(
            requested,
            chosen,
            pinned,
            f"NCCL ran it on its {choice.algorithm} path, which does not use NCCL_ALGO or"
            " NCCL_PROTO",
        )
    wrong = [
        f"{kind} {used!r} instead of {wanted!r}"
        for kind, wanted, used in (
            ("algorithm", algorithm, choice.algorithm),
            ("protocol", protocol, choice.protocol),
        )
        if wanted is not None and used != wanted
    ]
    if not wrong:
        return Judgement(requested, chosen, pinned)
    return Judgement(
        requested,
        chosen,
        pinned,
        f"NCCL chose {' and '.join(wrong)}: NCCL replaces a pinned choice it cannot run on"
        " this communicator (for example CollNet without network support, or too few ranks)",
    )


def decisions(
    counts: Mapping[CollectiveChoice, int], policy: CollectivePolicy
) -> list[DecisionRecord]:
    """One decision per distinct collective choice NCCL logged, in the order first seen."""
    found = []
    for choice, count in counts.items():
        verdict = judge(choice, policy)
        channels = (
            f"; channels {choice.channels[0]}..{choice.channels[1]}" if choice.channels else ""
        )
        found.append(
            DecisionRecord(
                op=choice.collective,
                kernel=verdict.chosen,
                mode="pin" if verdict.pinned else "auto",
                reason=(verdict.reason or "NCCL's tuner")
                + f": {count} call(s){channels} (logged by rank 0 of the communicator)",
                shape=f"{choice.nbytes} bytes",
                device=f"cuda:{choice.device}",
                status="fallen_back" if verdict.fell_back else "decided",
            )
        )
    return found
