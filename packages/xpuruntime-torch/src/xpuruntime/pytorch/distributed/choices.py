"""What NCCL ran each collective with, judged against the policy and written as decisions.

A pinned algorithm binds only the collectives that implement it (``tree`` pins AllReduce;
a Broadcast keeps running ``ring``, the only algorithm NCCL has for it); a pinned protocol
binds every collective. Each collective NCCL reports is one of: pinned and honoured (mode
``pin``, status ``decided``), a pin not applicable to this collective (mode
``not_applicable``: NCCL's tuner chose, and the reason says which pin did not apply),
pinned and not honoured (status ``fallen_back``, through the policy's fallback mode), or
free (mode ``auto``: nothing pinned).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from xpuruntime.policies import CollectivePolicy
from xpuruntime.pytorch.distributed.nccl_log import CollectiveChoice
from xpuruntime.pytorch.distributed.nccl_settings import ALGORITHM_COLLECTIVES
from xpuruntime.runtime.record import DecisionRecord

__all__ = ["Judgement", "Outcome", "decisions", "judge"]


Outcome = Literal["honoured", "not_applicable", "not_honoured", "free"]


@dataclass(frozen=True)
class Judgement:
    """``requested`` is ``algorithm/protocol`` with ``*`` for what the policy leaves to NCCL;
    ``reason`` is empty unless NCCL did not run what was pinned; ``unbound`` names a pinned
    algorithm this collective does not implement (empty when none)."""

    requested: str
    chosen: str
    pinned: bool
    reason: str = ""
    unbound: str = ""

    @property
    def fell_back(self) -> bool:
        return bool(self.reason)

    @property
    def outcome(self) -> Outcome:
        """Honoured, not applicable to this collective, not honoured, or nothing pinned."""
        if self.fell_back:
            return "not_honoured"
        if self.pinned:
            return "honoured"
        return "not_applicable" if self.unbound else "free"


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
    unbound = policy.algorithm if policy.algorithm and algorithm is None else ""
    requested = f"{algorithm or '*'}/{protocol or '*'}"
    chosen = chosen_name(choice)
    pinned = algorithm is not None or protocol is not None
    if not pinned:
        return Judgement(requested, chosen, pinned, unbound=unbound)
    if choice.protocol is None:
        return Judgement(
            requested,
            chosen,
            pinned,
            f"NCCL ran it on its {choice.algorithm} path, which does not use NCCL_ALGO or"
            " NCCL_PROTO",
            unbound,
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
        return Judgement(requested, chosen, pinned, unbound=unbound)
    return Judgement(
        requested,
        chosen,
        pinned,
        f"NCCL chose {' and '.join(wrong)}: NCCL replaces a pinned choice it cannot run on"
        " this communicator (for example CollNet without network support, or too few ranks)",
        unbound,
    )


_MODES: dict[Outcome, str] = {
    "honoured": "pin",
    "not_honoured": "pin",
    "not_applicable": "not_applicable",
    "free": "auto",
}


def _reason(verdict: Judgement, collective: str) -> str:
    """Why NCCL ran what it ran, as the decision says it."""
    if verdict.fell_back:
        return verdict.reason
    unbound = (
        f"the pinned algorithm {verdict.unbound!r} does not apply to {collective} (NCCL does"
        " not implement it there)"
        if verdict.unbound
        else ""
    )
    if verdict.outcome == "not_applicable":
        return f"{unbound}: NCCL's tuner"
    if verdict.pinned:
        honoured = f"pinned {verdict.requested} honoured"
        return f"{honoured}; {unbound}" if unbound else honoured
    return "NCCL's tuner"


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
                mode=_MODES[verdict.outcome],
                reason=_reason(verdict, choice.collective)
                + f": {count} call(s){channels} (logged by rank 0 of the communicator)",
                shape=f"{choice.nbytes} bytes",
                device=f"cuda:{choice.device}",
                status="fallen_back" if verdict.fell_back else "decided",
            )
        )
    return found
