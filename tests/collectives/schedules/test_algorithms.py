"""Every registered schedule generator, run for all ranks at once by the numpy simulator.

No MPI: exact results on every rank for p = 1..24, the p around powers of two up to 64 and a few
large p, in and out of place, sum and max, even and uneven blocks, plus the strided layouts of the
hierarchical phases and the number of communication steps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from collectives.executors.simulate import C, simulate
from collectives.schedules.algorithms import ALGORITHMS, own_block_copy, schedule_for, supports
from collectives.schedules.rows import COLUMNS, RECV, SEND, Block, ContiguousLayout, Schedule, StridedLayout
from collectives.spec import buffer_counts, even_blocks

SENTINEL = -999_999
GATHERS = sorted(name for name in ALGORITHMS if supports(name, "allgather"))
SCATTERS = sorted(name for name in ALGORITHMS if supports(name, "reduce_scatter"))
LOGARITHMIC = {"rd", "rh", "bruck"}  # few rows per rank: cheap to simulate at large p
PAIRS = ["rh+rd", "rh+bruck", "ring+rd", "rh+ring", "ring", "bruck", "bruck+rd"]
# Every p up to 24, then the ones around powers of two and a few primes: the suite's time goes on the large
# p (a simulated call is p schedules of O(log p) to O(p) rows), the bugs sit at the boundaries.
SMALL = sorted(set(range(1, 25)) | {27, 31, 32, 33, 37, 47, 48, 49, 61, 63, 64})
LARGE = [127, 256, 1024]
# The ring is p - 1 rows per rank (p^2 simulated rows per call): fewer sizes still.
RING_SMALL = set(range(1, 25)) | {31, 32, 33, 48, 63, 64}
RING_LARGE = {127}


# --- running a whole collective -------------------------------------------------------------


def _schedules(collective: str, algorithm: str, nranks: int, count: int, in_place: bool) -> list[Schedule]:
    if nranks <= 256:
        return [schedule_for(collective, algorithm, nranks, r, count, in_place) for r in range(nranks)]
    # schedule_for builds a ContiguousLayout per rank, whose offsets cost O(p^2): build the
    # same schedules with one shared layout instead.
    source = RECV if in_place else SEND
    if collective == "allgather":
        layout = ContiguousLayout(RECV, (count,) * nranks)
        gather = ALGORITHMS[algorithm].allgather
        return [own_block_copy(layout, r, in_place).then(gather(nranks, r, layout)) for r in range(nranks)]
    if collective == "reduce_scatter":
        layout = ContiguousLayout(source, (count,) * nranks)
        return [ALGORITHMS[algorithm].reduce_scatter(nranks, r, layout, Block(RECV, 0, count))
                for r in range(nranks)]
    rs_name, _, ag_name = algorithm.partition("+")
    layout = ContiguousLayout(RECV, even_blocks(count, nranks))
    source_layout = ContiguousLayout(source, layout.counts)
    return [ALGORITHMS[rs_name].reduce_scatter(nranks, r, source_layout, layout.block(r)).then(
        ALGORITHMS[ag_name or rs_name].allgather(nranks, r, layout)) for r in range(nranks)]


def _check(collective: str, algorithm: str, nranks: int, count: int, in_place: bool, op: str = "sum") -> None:
    """Simulate one call on every rank and compare every rank's result exactly."""
    rng = np.random.default_rng(nranks * 7919 + count)
    send_count, recv_count = buffer_counts(collective, nranks, count, in_place)
    length = count * (nranks if collective == "reduce_scatter" else 1)
    if collective == "allgather":  # distinct values: a misplaced element cannot go unnoticed
        data = np.arange(1, nranks * count + 1, dtype=np.int64).reshape(nranks, count)
    else:
        data = rng.integers(-1000, 1000, size=(nranks, length), dtype=np.int64)
    sends, recvs = [], []
    for r in range(nranks):
        recv = np.full(recv_count, SENTINEL, dtype=np.int64)
        own = data[r]
        if in_place:
            start = r * count if collective == "allgather" else 0
            recv[start : start + len(own)] = own
            sends.append(np.empty(0, dtype=np.int64))
        else:
            sends.append(own.copy())
        recvs.append(recv)
    assert all(len(s) == send_count for s in sends)
    originals = [s.copy() for s in sends]
    simulate(_schedules(collective, algorithm, nranks, count, in_place), sends, recvs, op)

    reduced = {"sum": data.sum(axis=0), "max": data.max(axis=0, initial=np.iinfo(np.int64).min)}[op]
    for r in range(nranks):
        if collective == "allgather":
            expected = data.reshape(-1)
        elif collective == "reduce_scatter":
            expected = reduced[r * count : (r + 1) * count]
        else:
            expected = reduced
        got = recvs[r][: len(expected)]
        where = f"{collective} {algorithm} p={nranks} count={count} in_place={in_place} {op} rank {r}"
        np.testing.assert_array_equal(got, expected, err_msg=where)
        np.testing.assert_array_equal(sends[r], originals[r], err_msg=f"{where}: send buffer modified")


def _configs(collective: str, nranks: int) -> list[tuple[int, bool, str]]:
    """(count, in_place, op) covering both placements, both ops and small/uneven counts."""
    if collective == "allgather":
        return [(count, in_place, "sum") for count in (1, 2, 3) for in_place in (False, True)]
    if collective == "reduce_scatter":
        return [(1, False, "sum"), (1, True, "max"), (2, True, "sum"), (3, False, "max"), (3, True, "sum")]
    counts = sorted({1, max(nranks - 1, 1), nranks + 1, 2 * nranks + 3})  # < p, not divisible by p
    configs = [(c, i % 2 == 1, ("sum", "max")[(i // 2) % 2]) for i, c in enumerate(counts)]
    return configs[:1] + [(nranks, False, "max")] + configs[1:]  # the last one uneven, in place


def _cases(nranks_list: list[int], large: bool) -> list[tuple[str, str, int]]:
    cases = []
    for nranks in nranks_list:
        for collective, names in (("allgather", GATHERS), ("reduce_scatter", SCATTERS), ("allreduce", PAIRS)):
            for name in names:
                logarithmic = set(name.split("+")) <= LOGARITHMIC
                if logarithmic or nranks in (RING_LARGE if large else RING_SMALL):
                    cases.append((collective, name, nranks))
    return cases


@pytest.mark.parametrize("collective, algorithm, nranks", _cases(SMALL, large=False))
def test_small_communicators(collective: str, algorithm: str, nranks: int) -> None:
    configs = _configs(collective, nranks)
    if "ring" in algorithm and nranks > 16:
        configs = configs[nranks % 2 :: 2]  # a covering half
    for count, in_place, op in configs:
        _check(collective, algorithm, nranks, count, in_place, op)


@pytest.mark.parametrize("collective, algorithm, nranks", _cases(LARGE, large=True))
def test_large_communicators(collective: str, algorithm: str, nranks: int) -> None:
    configs = _configs(collective, nranks)
    picked = [configs[0], configs[-1]] if nranks < 1024 and "ring" not in algorithm else [configs[-1]]
    for count, in_place, op in picked:
        _check(collective, algorithm, nranks, count, in_place, op)


@pytest.mark.parametrize("collective, algorithm", [("allgather", name) for name in GATHERS] + [
    ("reduce_scatter", name) for name in SCATTERS] + [("allreduce", "rh+rd"), ("allreduce", "rh+bruck"),
                                                       ("allreduce", "bruck")])
def test_zero_count(collective: str, algorithm: str) -> None:
    for nranks in (1, 2, 3, 4, 7):
        for in_place in (False, True):
            _check(collective, algorithm, nranks, 0, in_place)


def test_unsupported_phases() -> None:
    with pytest.raises(ValueError, match="no reduce_scatter"):
        schedule_for("reduce_scatter", "rdfull", 4, 0, 1, False)
    with pytest.raises(ValueError, match="no allgather"):
        schedule_for("allgather", "rdfull", 4, 0, 1, False)
    with pytest.raises(ValueError, match="unknown algorithm"):
        schedule_for("allgather", "nonesuch", 4, 0, 1, False)


def test_recursive_family_names_mirror() -> None:
    """``rd`` in a reduce-scatter is recursive halving, ``rh`` in an all-gather recursive doubling."""
    for rank in range(6):
        rs = schedule_for("reduce_scatter", "rd", 6, rank, 2, False).steps
        assert (rs == schedule_for("reduce_scatter", "rh", 6, rank, 2, False).steps).all()
        ag = schedule_for("allgather", "rh", 6, rank, 2, True).steps
        assert (ag == schedule_for("allgather", "rd", 6, rank, 2, True).steps).all()


# --- strided layouts (the hierarchical phases' shapes) ---------------------------------------


def _strided_layouts(nranks: int) -> list[StridedLayout]:
    """Both shapes hierarchical phases use, with and without gaps and a non-zero base."""
    return [
        StridedLayout(RECV, 0, 2, 2, nchunks=3, chunk_stride=2 * nranks),  # chunks of all blocks packed
        StridedLayout(RECV, 5, 2, 2, nchunks=3, chunk_stride=2 * nranks + 3),  # with gaps
        StridedLayout(RECV, 1, 1, 1, nchunks=2 * nranks + 1, chunk_stride=nranks + 1),  # many chunks
        StridedLayout(RECV, 3, 3, 7, nchunks=1),  # one chunk per block, gaps between blocks
        StridedLayout(RECV, 0, 4, 4, nchunks=1),  # plain contiguous blocks
    ]


def _positions(layout: StridedLayout, index: int) -> np.ndarray:
    block = layout.block(index)
    return (block.off + np.arange(block.nblocks)[:, None] * block.stride + np.arange(block.count)).reshape(-1)


def _extent(layout: StridedLayout, nranks: int) -> int:
    return max(int(_positions(layout, i).max()) for i in range(nranks)) + 4


@pytest.mark.parametrize("algorithm", GATHERS)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 5, 6, 8, 11, 16])
def test_allgather_into_strided_layouts(algorithm: str, nranks: int) -> None:
    for layout in _strided_layouts(nranks):
        size = _extent(layout, nranks)
        expected = np.full(size, SENTINEL, dtype=np.int64)
        for i in range(nranks):
            where = _positions(layout, i)
            assert len(set(where.tolist())) == len(where)
            expected[where] = 1000 * (i + 1) + np.arange(len(where))
        recvs = []
        for r in range(nranks):
            recv = np.full(size, SENTINEL, dtype=np.int64)
            recv[_positions(layout, r)] = expected[_positions(layout, r)]
            recvs.append(recv)
        gather = ALGORITHMS[algorithm].allgather
        simulate([gather(nranks, r, layout, scratch_base=3) for r in range(nranks)],
                 [np.empty(0, np.int64)] * nranks, recvs)
        for r in range(nranks):  # every element in place, the gaps untouched
            where = f"{algorithm} p={nranks} rank {r} {vars(layout)}"
            np.testing.assert_array_equal(recvs[r], expected, err_msg=where)


@pytest.mark.parametrize("algorithm", SCATTERS)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 5, 6, 8, 11, 16])
@pytest.mark.parametrize("in_recv", [False, True])
def test_reduce_scatter_from_strided_source(algorithm: str, nranks: int, in_recv: bool) -> None:
    """A strided source (in SEND, or in RECV overlapping the result) into a contiguous result."""
    rng = np.random.default_rng(nranks)
    for layout in _strided_layouts(nranks):
        source = StridedLayout(RECV if in_recv else SEND, layout.base, layout.chunk, layout.block_stride,
                               layout.nchunks, layout.chunk_stride)
        size = _extent(layout, nranks)
        total = layout.chunk * layout.nchunks
        inputs = [rng.integers(-100, 100, size=size, dtype=np.int64) for _ in range(nranks)]
        for op, combine in (("sum", np.add), ("max", np.maximum)):
            sends = [x.copy() if not in_recv else np.empty(0, np.int64) for x in inputs]
            recvs = [x.copy() if in_recv else np.full(total, SENTINEL, np.int64) for x in inputs]
            result = Block(RECV, 0, total)
            schedules = [ALGORITHMS[algorithm].reduce_scatter(nranks, r, source, result, scratch_base=2)
                         for r in range(nranks)]
            simulate(schedules, sends, recvs, op)
            for r in range(nranks):
                expected = combine.reduce([x[_positions(layout, r)] for x in inputs])
                np.testing.assert_array_equal(recvs[r][:total], expected,
                                              err_msg=f"{algorithm} {op} p={nranks} rank {r} {vars(layout)}")


# --- step counts ------------------------------------------------------------------------------


def _message_rows(schedule: Schedule) -> np.ndarray:
    steps = schedule.steps
    return np.flatnonzero((steps[:, C["send_peer"]] >= 0) | (steps[:, C["recv_peer"]] >= 0))


def _steps(schedules: list[Schedule]) -> int:
    """Rows up to the last one any rank communicates in (rows are aligned across ranks)."""
    return max((int(_message_rows(s).max()) + 1 for s in schedules if len(_message_rows(s))), default=0)


@pytest.mark.parametrize("nranks", list(range(1, 65)) + [127, 256, 1000, 1024])
def test_step_counts(nranks: int) -> None:
    floor_log = nranks.bit_length() - 1
    ceil_log = math.ceil(math.log2(nranks)) if nranks > 1 else 0
    power_of_two = nranks & (nranks - 1) == 0
    recursive = floor_log if power_of_two else floor_log + 2
    layout = StridedLayout(RECV, 0, 1, 1)
    result = Block(RECV, 0, 1)
    rd = [ALGORITHMS["rd"].allgather(nranks, r, layout) for r in range(nranks)]
    source = StridedLayout(SEND, 0, 1, 1)
    rh = [ALGORITHMS["rh"].reduce_scatter(nranks, r, source, result) for r in range(nranks)]
    bruck = [ALGORITHMS["bruck"].allgather(nranks, r, layout) for r in range(nranks)]
    bruck_rs = [ALGORITHMS["bruck"].reduce_scatter(nranks, r, source, result) for r in range(nranks)]
    assert _steps(rd) == recursive
    assert _steps(rh) == recursive
    assert _steps(bruck) == ceil_log
    # Every rank has the same number of rows, so phases chained with Schedule.then stay aligned.
    for schedules in (rd, rh, bruck, bruck_rs):
        assert len({len(s) for s in schedules}) == 1
    # Bruck: every rank talks in every step; its local rotation is at most two rows here
    # (after the all-gather's steps, before the reduce-scatter's).
    for schedules in (bruck, bruck_rs):
        assert all(len(_message_rows(s)) == ceil_log for s in schedules)
        assert all(len(s) <= ceil_log + 2 for s in schedules)
    assert all((_message_rows(s) >= len(s) - ceil_log).all() for s in bruck_rs)
    if power_of_two and nranks > 1:  # no idle rows at all
        assert all(len(_message_rows(s)) == floor_log == len(s) for s in rd + rh)
    else:  # extra ranks talk only in the first and last rows
        assert all(len(_message_rows(s)) == 2 for s in rd[1 : 2 * (nranks - 2**floor_log) : 2])


def test_one_message_per_step() -> None:
    """A recursive step sends one block each way, even for p not a power of two."""
    for nranks in (3, 5, 6, 7, 12, 13):
        layout = ContiguousLayout(RECV, even_blocks(5 * nranks + 2, nranks))
        for r in range(nranks):
            steps = ALGORITHMS["rd"].allgather(nranks, r, layout).steps
            sent = steps[steps[:, C["send_peer"]] >= 0]
            assert (sent[:, C["send_nblocks"]] == 1).all()


def test_scratch_stays_above_base() -> None:
    """Scratch from scratch_base on: nothing below it is touched (another phase may own it)."""
    nranks, base = 6, 50
    layout = ContiguousLayout(RECV, even_blocks(20, nranks))
    source = ContiguousLayout(SEND, layout.counts)
    for r in range(nranks):
        for schedule in (ALGORITHMS["bruck"].allgather(nranks, r, layout, base),
                         ALGORITHMS["bruck"].reduce_scatter(nranks, r, source, layout.block(r), base),
                         ALGORITHMS["rh"].reduce_scatter(nranks, r, source, layout.block(r), base)):
            steps = schedule.steps
            for prefix in ("send", "recv", "src", "src2", "dst"):
                used = steps[:, C[f"{prefix}_buf"]] == 2
                if prefix in ("send", "recv"):
                    used &= steps[:, C[f"{prefix}_peer"]] >= 0
                else:
                    used &= steps[:, C["action"]] > 0
                assert (steps[used, C[f"{prefix}_off"]] >= base).all()
            assert schedule.scratch <= base + 2 * sum(layout.counts)


# --- whole-buffer all-reduce ------------------------------------------------------------------


@pytest.mark.parametrize("nranks", [*range(1, 34), 64, 100])
def test_rdfull_allreduce_is_exact(nranks: int) -> None:
    from collectives.call import CallSpec
    from collectives.spec import count_wrong, make_buffers

    for in_place, count, op in [(False, 1, "sum"), (True, 5, "max"), (False, 3, "prod"), (True, 2, "sum")]:
        call = CallSpec("allreduce", nranks, count, "float32", op, in_place)
        schedules = [schedule_for("allreduce", "rdfull", nranks, r, count, in_place) for r in range(nranks)]
        buffers = [make_buffers(call, r) for r in range(nranks)]
        sends = [np.zeros(0, np.float32) if s is None else s for s, _ in buffers]
        recvs = [r for _, r in buffers]
        simulate(schedules, sends, recvs, op)
        assert sum(count_wrong(call, r, recvs[r]) for r in range(nranks)) == 0, (nranks, in_place, count, op)
        power_of_two = nranks & (nranks - 1) == 0
        expected_steps = (nranks.bit_length() - 1) + (0 if power_of_two else 2)
        send_peer, recv_peer = COLUMNS.index("send_peer"), COLUMNS.index("recv_peer")
        communicating = [row for row in schedules[0].steps if row[send_peer] >= 0 or row[recv_peer] >= 0]
        assert len(communicating) <= expected_steps


# --- Bruck reduce-scatter: every dtype and op -------------------------------------------------


@pytest.mark.parametrize("collective", ["reduce_scatter", "allreduce"])
@pytest.mark.parametrize("nranks", [*range(1, 18), 24, 31, 32, 33, 48, 64, 100])
def test_bruck_every_dtype_and_op(collective: str, nranks: int) -> None:
    """Bruck reduce-scatter and the all-reduce it composes (bruck RS + bruck AG), checked bit for
    bit with the benchmark's own exactly predictable inputs, for every dtype and op."""
    from collectives.call import CallSpec
    from collectives.dtypes import DTYPES, OPS
    from collectives.spec import count_wrong, make_buffers

    count = 2 if collective == "reduce_scatter" else 2 * nranks + 1  # uneven all-reduce blocks
    for index, (dtype, op) in enumerate((d, o) for d in DTYPES for o in OPS):
        in_place = index % 2 == 1
        call = CallSpec(collective, nranks, count, dtype, op, in_place)
        schedules = [schedule_for(collective, "bruck", nranks, r, count, in_place) for r in range(nranks)]
        buffers = [make_buffers(call, r) for r in range(nranks)]
        sends = [np.zeros(0, b[1].dtype) if b[0] is None else b[0] for b in buffers]
        recvs = [b[1] for b in buffers]
        simulate(schedules, sends, recvs, op)
        wrong = sum(count_wrong(call, r, recvs[r]) for r in range(nranks))
        assert wrong == 0, (collective, nranks, dtype, op, in_place)
