"""The direct exchange (every peer at once, rows.POST) and the simulator's rule for messages in flight."""

from __future__ import annotations

import numpy as np
import pytest

from collectives.call import CallSpec
from collectives.dtypes import DTYPES, OPS
from collectives.executors.simulate import ScheduleMismatch, simulate
from collectives.schedules.algorithms import schedule_for
from collectives.schedules.hier import hier_schedule
from collectives.schedules.rows import COLUMN as C
from collectives.schedules.rows import RECV, SEND, Block, StepList
from collectives.schedules.topology import Grid
from collectives.spec import count_wrong, make_buffers

#: direct alone is the one-shot all-reduce (whole buffer), direct+direct the two-shot one
CASES = [("allgather", "direct"), ("reduce_scatter", "direct"), ("allreduce", "direct"),
         ("allreduce", "direct+direct"), ("allreduce", "rh+direct")]


def _run(collective: str, algorithm: str, nranks: int, count: int, in_place: bool, dtype: str, op: str):
    call = CallSpec(collective, nranks, count, dtype, op, in_place)
    schedules = [schedule_for(collective, algorithm, nranks, r, count, in_place) for r in range(nranks)]
    buffers = [make_buffers(call, r) for r in range(nranks)]
    sends = [np.zeros(0, b[1].dtype) if b[0] is None else b[0] for b in buffers]
    recvs = [b[1] for b in buffers]
    simulate(schedules, sends, recvs, op)
    return sum(count_wrong(call, r, recvs[r]) for r in range(nranks)), recvs, schedules


@pytest.mark.parametrize("collective,algorithm", CASES)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 5, 6, 7, 8, 12])
def test_direct_is_exact_for_every_dtype_and_op(collective: str, algorithm: str, nranks: int) -> None:
    for index, (dtype, op) in enumerate((d, o) for d in DTYPES for o in OPS):
        in_place = index % 2 == 1
        count = 2 if collective != "allreduce" else 2 * nranks + 1  # uneven all-reduce blocks
        wrong, recvs, _ = _run(collective, algorithm, nranks, count, in_place, dtype, op)
        assert wrong == 0, (collective, algorithm, nranks, dtype, op, in_place)
        if collective == "allreduce":  # every rank the same bits
            assert all(recv.tobytes() == recvs[0].tobytes() for recv in recvs), (algorithm, nranks, dtype, op)


@pytest.mark.parametrize("nranks", [2, 3, 4, 8])
def test_direct_is_one_group_of_posted_messages(nranks: int) -> None:
    """p - 1 messages each way, all in flight at once: every message row but the last is posted, and the
    one-shot all-reduce has no other message row (recursive doubling needs log2 p rounds)."""
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for rank in range(nranks):
            steps = schedule_for(collective, "direct", nranks, rank, nranks, False).steps
            messages = steps[(steps[:, C["send_peer"]] >= 0) | (steps[:, C["recv_peer"]] >= 0)]
            assert len(messages) == nranks - 1
            assert messages[:, C["post"]].tolist() == [1] * (nranks - 2) + [0]
            assert sorted(messages[:, C["send_peer"]]) == sorted(set(range(nranks)) - {rank})
            assert steps[-1, C["post"]] == 0


def test_direct_in_the_hierarchy_is_exact_on_lab_shapes() -> None:
    for nranks, per_node in ((4, 2), (6, 2), (6, 3)):
        grid = Grid(nranks, per_node)
        for collective in ("allgather", "reduce_scatter", "allreduce"):
            for intra, inter in (("ring", "direct"), ("direct", "direct"), ("shm", "direct"), ("tree", "direct")):
                if collective != "allreduce" and intra == "tree":
                    continue
                count = 3 if collective != "allreduce" else 2 * nranks + 1
                call = CallSpec(collective, nranks, count, "float64", "sum", False)
                schedules = [hier_schedule(collective, grid, r, count, False, intra, inter) for r in range(nranks)]
                buffers = [make_buffers(call, r) for r in range(nranks)]
                recvs = [b[1] for b in buffers]
                simulate(schedules, [b[0] for b in buffers], recvs, "sum", groups=grid.members)
                assert sum(count_wrong(call, r, recvs[r]) for r in range(nranks)) == 0, (collective, intra, inter)


def _pair(first: StepList, second: StepList) -> list:
    return [first.build(), second.build()]


def _simulate_pair(schedules) -> None:
    simulate(schedules, [np.arange(8.0), np.arange(8.0)], [np.zeros(8), np.zeros(8)])


def test_posted_rows_that_respect_each_other_simulate() -> None:
    a, b = StepList(), StepList()
    a.step(send=(1, Block(SEND, 0, 2)), recv=(1, Block(RECV, 0, 2)), post=True)
    b.step(send=(0, Block(SEND, 0, 2)), recv=(0, Block(RECV, 0, 2)), post=True)
    a.step(send=(1, Block(SEND, 0, 2)), recv=(1, Block(RECV, 2, 2)))  # the same source sent twice: reads only
    b.step(send=(0, Block(SEND, 2, 2)), recv=(0, Block(RECV, 2, 2)))
    _simulate_pair(_pair(a, b))


@pytest.mark.parametrize("hazard", ["recv over recv", "recv over send", "send of a recv", "action writes a send",
                                    "action reads a recv", "ends posted"])
def test_the_simulator_refuses_touching_a_message_in_flight(hazard: str) -> None:
    a, b = StepList(), StepList()
    first_recv = Block(RECV, 0, 2)
    a.step(send=(1, Block(SEND, 0, 2)), recv=(1, first_recv), post=True)
    b.step(send=(0, Block(SEND, 0, 2)), recv=(0, Block(RECV, 0, 2)), post=True)
    second_send, second_recv, action = Block(SEND, 4, 2), Block(RECV, 4, 2), {}
    if hazard == "recv over recv":
        second_recv = Block(RECV, 1, 2)
    elif hazard == "recv over send":
        second_recv = Block(SEND, 0, 2)
    elif hazard == "send of a recv":
        second_send = Block(RECV, 0, 2)
    elif hazard == "action writes a send":
        action = {"copy": (Block(RECV, 6, 2), Block(SEND, 1, 2))}
    elif hazard == "action reads a recv":
        action = {"copy": (Block(RECV, 1, 2), Block(RECV, 6, 2))}
    last = hazard == "ends posted"
    a.step(send=(1, second_send), recv=(1, second_recv), post=bool(action) or last, **action)
    b.step(send=(0, Block(SEND, 4, 2)), recv=(0, Block(RECV, 4, 2)), post=bool(action) or last)
    if action:  # the group's closing row
        a.step()
        b.step()
    with pytest.raises(ScheduleMismatch, match="in flight"):
        _simulate_pair(_pair(a, b))


def test_an_action_after_the_closing_row_may_use_what_arrived() -> None:
    a, b = StepList(), StepList()
    a.step(send=(1, Block(SEND, 0, 2)), recv=(1, Block(RECV, 0, 2)), post=True)
    b.step(send=(0, Block(SEND, 0, 2)), recv=(0, Block(RECV, 0, 2)), post=True)
    a.step(send=(1, Block(SEND, 2, 2)), recv=(1, Block(RECV, 2, 2)), copy=(Block(RECV, 0, 4), Block(RECV, 4, 4)))
    b.step(send=(0, Block(SEND, 2, 2)), recv=(0, Block(RECV, 2, 2)))
    schedules = _pair(a, b)
    recvs = [np.zeros(8), np.zeros(8)]
    simulate(schedules, [np.arange(8.0), np.arange(8.0) + 10], recvs)
    assert recvs[0].tolist() == [10, 11, 12, 13, 10, 11, 12, 13]
