"""The fused Hopper backward's barrier protocol, model-checked without a GPU.

``_hopper_bwd_kernels._fused_consumer`` / ``_fused_step`` (split-column variants) and the
producer ``_dkdv_producer`` synchronise through mbarriers: the query and output-gradient ring
(``q_ready``, ``do_ready``, ``empty``) and the two dS buffers (``ds_ready``, ``ds_free``, two
arrivals each). Each consumer's dQ GEMMs read both consumers' K rows, so a consumer may stage
dK in its own K rows only after the other's last dQ GEMMs are done: it waits on the last
step's ``ds_free`` first. This file writes each warp's sequence of barrier operations as the
kernel issues them (a model: it follows those functions by hand and must change with them),
explores every interleaving with the PTX ``mbarrier.try_wait.parity`` rule (a wait for parity
P returns once the barrier's current phase has another parity), and checks the two
properties the wait is for: no write of a shared tile while the other consumer's GEMMs read
it, and no deadlock. Each property is also shown to fail where it should: without the wait,
and with the other parity.
"""

from __future__ import annotations

from typing import Literal

import pytest

Op = tuple  # ("wait", barrier, parity) | ("arrive", barrier) | ("read", buf) | ...
Final = Literal["wait", "none", "flipped"]


def _consumer(n_total: int, stages: int, dq_tma: bool, overlap: bool, final: Final) -> list[Op]:
    """One consumer warpgroup's operations over ``n_total`` steps, in the kernel's order."""
    ops: list[Op] = []
    if overlap and n_total > 0:  # _first_s
        ops.append(("wait", ("q", 0), 0))
    for it in range(n_total):
        slot, phase = it % stages, (it // stages) & 1
        buf, use = it % 2, (it // 2) & 1
        if not overlap:
            ops.append(("wait", ("q", slot), phase))
        ops.append(("wait", ("do", slot), phase))
        ops.append(("wait", ("ds_free", buf), use ^ 1))
        ops.append(("write_ds", buf))
        ops.append(("arrive", ("ds_ready", buf)))
        ops.append(("wait", ("ds_ready", buf), use))
        ops.append(("read", buf))  # the dQ GEMMs: dS[buf], both K tiles
        if dq_tma:
            if overlap:  # _next_s: the next step's slot, or this one's on the last step
                nxt = min(it + 1, n_total - 1)
                ops.append(("wait", ("q", nxt % stages), (nxt // stages) & 1))
            ops.append(("arrive", ("empty", slot)))
            ops.append(("read_done", buf))
            ops.append(("arrive", ("ds_free", buf)))
        else:
            ops.append(("read_done", buf))
            ops.append(("arrive", ("ds_free", buf)))
            ops.append(("arrive", ("empty", slot)))
    if n_total > 0 and final != "none":
        last = n_total - 1
        parity = (last // 2) & 1
        ops.append(("wait", ("ds_free", last % 2), parity ^ (final == "flipped")))
    ops.append(("write_k",))
    return ops


def _producer(n_total: int, stages: int) -> list[Op]:
    ops: list[Op] = []
    for it in range(n_total):
        slot, phase = it % stages, (it // stages) & 1
        ops += [("wait", ("empty", slot), phase ^ 1), ("arrive", ("q", slot))]
        ops.append(("arrive", ("do", slot)))
    return ops


def explore(
    n_total: int, stages: int, dq_tma: bool, overlap: bool, final: Final
) -> tuple[set[str], bool]:
    """(the hazards any interleaving reaches, whether one deadlocks)."""
    programs = [_consumer(n_total, stages, dq_tma, overlap, final) for _ in range(2)]
    programs.append(_producer(n_total, stages))
    counts = {("q", i): 1 for i in range(stages)} | {("do", i): 1 for i in range(stages)}
    counts |= {("empty", i): 2 for i in range(stages)}
    counts |= {(name, i): 2 for name in ("ds_ready", "ds_free") for i in range(2)}
    names = sorted(counts)
    start = ((0, 0, 0), tuple((0, counts[n]) for n in names), (None, None))
    hazards: set[str] = set()
    deadlock = False
    seen = set()
    stack = [start]
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        pcs, barriers, reading = state
        moved = False
        for who, program in enumerate(programs):
            if pcs[who] == len(program):
                continue
            op = program[pcs[who]]
            new_barriers, new_reading = barriers, reading
            if op[0] == "wait":
                phase, _ = barriers[names.index(op[1])]
                if phase & 1 == op[2]:
                    continue  # this phase has not completed yet
            elif op[0] == "arrive":
                i = names.index(op[1])
                phase, pending = barriers[i]
                phase, pending = (
                    (phase + 1, counts[op[1]]) if pending == 1 else (phase, pending - 1)
                )
                new_barriers = (*barriers[:i], (phase, pending), *barriers[i + 1 :])
            elif op[0] in ("read", "read_done"):
                value = op[1] if op[0] == "read" else None
                new_reading = tuple(value if w == who else reading[w] for w in (0, 1))
            elif op[0] == "write_ds" and reading[1 - who] == op[1]:
                hazards.add("dS rewritten while the other consumer reads it")
            elif op[0] == "write_k" and reading[1 - who] is not None:
                hazards.add("K rows overwritten while the other consumer's dQ GEMMs read them")
            moved = True
            next_pcs = tuple(pc + (w == who) for w, pc in enumerate(pcs))
            stack.append((next_pcs, new_barriers, new_reading))
        if not moved and any(pc < len(p) for pc, p in zip(pcs, programs, strict=True)):
            deadlock = True
    return hazards, deadlock


PATHS = [
    pytest.param(True, True, id="tma-overlap"),
    pytest.param(True, False, id="tma"),
    pytest.param(False, False, id="vector-reductions"),
]


@pytest.mark.parametrize(("dq_tma", "overlap"), PATHS)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_the_kernels_protocol_has_no_hazard_and_no_deadlock(
    dq_tma: bool, overlap: bool, stages: int
) -> None:
    for n_total in range(8):
        assert explore(n_total, stages, dq_tma, overlap, "wait") == (set(), False), n_total


@pytest.mark.parametrize(("dq_tma", "overlap"), PATHS)
def test_without_the_final_wait_dk_overwrites_k_rows_still_read(
    dq_tma: bool, overlap: bool
) -> None:
    for n_total in range(1, 6):
        hazards, deadlock = explore(n_total, 2, dq_tma, overlap, "none")
        assert hazards == {"K rows overwritten while the other consumer's dQ GEMMs read them"}
        assert not deadlock


@pytest.mark.parametrize(("dq_tma", "overlap"), PATHS)
def test_the_other_parity_deadlocks_or_returns_early(dq_tma: bool, overlap: bool) -> None:
    for n_total in range(1, 6):
        hazards, deadlock = explore(n_total, 2, dq_tma, overlap, "flipped")
        assert hazards or deadlock, n_total
