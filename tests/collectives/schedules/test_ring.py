"""The ring schedules, checked bit for bit by the schedule simulator (no MPI).

Algorithms are tested only through ``collectives.schedules.algorithms.schedule_for`` and
``collectives.executors.simulate.simulate``: the schedule's array layout is private.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collectives.call import CallSpec
from collectives.dtypes import DTYPES, OPS, numpy_dtype
from collectives.executors.simulate import ScheduleMismatch, simulate
from collectives.schedules import algorithms
from collectives.schedules.algorithms import schedule_for
from collectives.spec import count_wrong, make_buffers

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")
#: every p up to 24, the ones around powers of two and a few primes up to 64, two large ones
ALL_P = sorted(set(range(1, 25)) | {27, 31, 32, 33, 37, 47, 48, 49, 61, 63, 64, 127, 256})


def run_simulated(
    collective: str,
    nranks: int,
    count: int,
    *,
    algorithm: str = "ring",
    dtype: str = "float32",
    op: str = "sum",
    in_place: bool = False,
    schedules=None,
):
    """Simulate one call on every rank: (call, send buffers before, send buffers after, recv buffers)."""
    call = CallSpec(collective, nranks, count, dtype, op, in_place, algorithm)
    if schedules is None:
        schedules = [schedule_for(collective, algorithm, nranks, rank, count, in_place) for rank in range(nranks)]
    sends, recvs = [], []
    for rank in range(nranks):
        send, recv = make_buffers(call, rank)
        # in place there is no send buffer: an empty one makes any read of it show up as a wrong result
        sends.append(np.empty(0, numpy_dtype(dtype)) if send is None else send)
        recvs.append(recv)
    before = [s.copy() for s in sends]
    results = simulate(schedules, sends, recvs, op)
    return call, before, sends, results


def assert_exact(collective: str, nranks: int, count: int, **options) -> None:
    call, before, after, results = run_simulated(collective, nranks, count, **options)
    wrong = {rank: count_wrong(call, rank, results[rank]) for rank in range(nranks)}
    bad = {rank: n for rank, n in wrong.items() if n}
    assert not bad, f"{call}: wrong elements per rank {bad}"
    for rank in range(nranks):
        assert np.array_equal(before[rank], after[rank]), f"{call}: rank {rank} wrote into its send buffer"


@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("nranks", ALL_P)
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_ring_every_p(collective, nranks, in_place):
    if collective == "allreduce":
        count = 2 * nranks + 1  # never divisible by p > 1: uneven blocks
    else:
        count = 2 if nranks <= 64 else 1
    assert_exact(collective, nranks, count, in_place=in_place)


COLLECTIVE_OPS = [("allgather", "sum")] + [(c, op) for c in COLLECTIVES[1:] for op in OPS]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(("collective", "op"), COLLECTIVE_OPS)
def test_ring_every_op_and_dtype(collective, op, dtype):
    for nranks in (1, 2, 3, 4, 5, 7, 8, 13):
        for count in (0, 1, 2, 5, 16):
            for in_place in (False, True):
                assert_exact(collective, nranks, count, dtype=dtype, op=op, in_place=in_place)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("nranks", [2, 3, 4, 5, 6, 7, 8, 12, 13, 16])
def test_allreduce_counts_not_divisible_by_p(nranks, op):
    for count in (0, 1, 2, 3, 5, 7, 10, 33, 100, 257):
        for in_place in (False, True):
            assert_exact("allreduce", nranks, count, op=op, in_place=in_place)


def test_allreduce_fewer_elements_than_ranks():
    for nranks, counts in ((4, range(4)), (9, range(9)), (64, (1, 2, 31, 63))):
        for count in counts:
            assert_exact("allreduce", nranks, count, in_place=count % 2 == 1)


def test_allreduce_explicit_rs_plus_ag_pair():
    for nranks in (1, 2, 5, 8):
        for in_place in (False, True):
            assert_exact("allreduce", nranks, 11, algorithm="ring+ring", in_place=in_place)


def test_large_count_one_call():
    assert_exact("reduce_scatter", 3, 4099, op="max")
    assert_exact("allreduce", 4, 10_001, dtype="int64", op="sum", in_place=True)
    assert_exact("allgather", 5, 3001, dtype="float16")


def test_schedules_are_read_only():
    """Schedules are cached and shared by every call: nobody may modify one in place."""
    schedule = schedule_for("allreduce", "ring", 4, 1, 8, False)
    assert not schedule.steps.flags.writeable
    with pytest.raises(ValueError):
        schedule.steps[...] = 0


def test_registry_and_unsupported_algorithms():
    assert "ring" in algorithms.ALGORITHMS
    for collective in COLLECTIVES:
        assert algorithms.unsupported_reason(collective, "ring") is None
    assert algorithms.unsupported_reason("allreduce", "ring+ring") is None
    reason = algorithms.unsupported_reason("allgather", "bruck9")
    assert reason and "bruck9" in reason
    reason = algorithms.unsupported_reason("allreduce", "ring+bruck9")
    assert reason and "bruck9" in reason
    with pytest.raises(ValueError, match="bruck9"):
        schedule_for("allgather", "bruck9", 4, 0, 1, False)


# ---------------------------------------------------------------- the simulator itself


def ring(collective, nranks, count, in_place=False):
    return [schedule_for(collective, "ring", nranks, rank, count, in_place) for rank in range(nranks)]


def truncated(schedule, drop: int = 1):
    return dataclasses.replace(schedule, steps=schedule.steps[: len(schedule.steps) - drop])


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_simulator_rejects_a_rank_missing_its_last_step(collective):
    schedules = ring(collective, 4, 3)
    schedules[2] = truncated(schedules[2])
    with pytest.raises(ScheduleMismatch):
        run_simulated(collective, 4, 3, schedules=schedules)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_simulator_rejects_swapped_ranks(collective):
    schedules = ring(collective, 4, 3)
    schedules[1], schedules[2] = schedules[2], schedules[1]
    with pytest.raises(ScheduleMismatch):
        run_simulated(collective, 4, 3, schedules=schedules)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_simulator_rejects_message_length_mismatch(collective):
    schedules = ring(collective, 3, 4)
    schedules[0] = schedule_for(collective, "ring", 3, 0, 5, False)
    # a message of the wrong length, or a local action past the end of a buffer
    with pytest.raises((ScheduleMismatch, ValueError, IndexError)):
        run_simulated(collective, 3, 4, schedules=schedules)


def test_simulator_rejects_schedules_for_another_p():
    schedules = ring("allgather", 4, 2)
    schedules[3] = schedule_for("allgather", "ring", 3, 2, 2, False)  # rank 2 of 3 talks to 0 and 1
    with pytest.raises(ScheduleMismatch):
        run_simulated("allgather", 4, 2, schedules=schedules)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_a_schedule_that_does_nothing_is_caught_by_the_check(collective):
    """No message mismatch, but no result either: the collectives.spec check must see every element wrong."""
    schedules = [truncated(s, len(s.steps)) for s in ring(collective, 4, 3)]
    call, _, _, results = run_simulated(collective, 4, 3, schedules=schedules)
    for rank in range(4):
        assert count_wrong(call, rank, results[rank]) > 0
