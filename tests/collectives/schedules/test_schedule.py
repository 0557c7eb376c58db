"""Schedules as data: rows written at once (schedule.rows) equal the rows StepList writes one by
one, a shape's template scaled to a count equals the schedule built for that count, and the
cache of templates is bounded by bytes. No MPI, no simulation (tests/collectives/schedules/test_algorithms.py runs
the schedules)."""

from __future__ import annotations

import numpy as np
import pytest

from collectives.schedules import algorithms, templates
from collectives.schedules.algorithms import ALGORITHMS, schedule_for, supports
from collectives.schedules.algorithms.ring import Ring
from collectives.schedules.hier import composition_problem, hier_schedule
from collectives.schedules.rows import RECV, SCRATCH, SEND, Block, ContiguousLayout, StepList, StridedLayout
from collectives.schedules.topology import Grid
from collectives.spec import even_blocks

LAYOUTS = [
    lambda p: ContiguousLayout(RECV, (3,) * p, 2),
    lambda p: ContiguousLayout(SEND, even_blocks(4 * p + 3, p)),
    lambda p: StridedLayout(RECV, 1, 2, 2),
    lambda p: StridedLayout(RECV, 0, 2, 6),
    lambda p: StridedLayout(SCRATCH, 3, 2, 2, 3, 2 * p),
    lambda p: StridedLayout(RECV, 0, 1, 5, 4, 1),
]


def _ring_allgather_by_rows(nranks, rank, layout):
    """The ring as one StepList row a step: the reference the column-built ring must equal."""
    steps = StepList()
    right, left = (rank + 1) % nranks, (rank - 1) % nranks
    for k in range(nranks - 1):
        steps.step(send=(right, layout.block((rank - k) % nranks)), recv=(left, layout.block((rank - k - 1) % nranks)))
    return steps.build()


def _ring_reduce_scatter_by_rows(nranks, rank, source, result, scratch_base):
    steps = StepList()
    slot = max(source.block(i).total for i in range(nranks))
    previous = None
    for k in range(nranks - 1):
        local = source.block((rank - k - 2) % nranks)
        landing = Block(SCRATCH, scratch_base + (k % 2) * slot, local.total)
        steps.step(send=((rank + 1) % nranks, source.block((rank - k - 1) % nranks) if previous is None else previous),
                   recv=((rank - 1) % nranks, landing),
                   reduce=(landing, local, result if k == nranks - 2 else landing))
        previous = landing
    return steps.build()


def _same(one, other) -> bool:
    return np.array_equal(one.steps, other.steps) and one.scratch == other.scratch


@pytest.mark.parametrize("make_layout", LAYOUTS)
@pytest.mark.parametrize("nranks", [2, 3, 4, 7, 8])
def test_the_column_built_ring_is_the_row_built_ring(make_layout, nranks):
    layout = make_layout(nranks)
    for rank in range(nranks):
        assert _same(Ring.allgather(nranks, rank, layout), _ring_allgather_by_rows(nranks, rank, layout))
        one = layout.block(rank)  # the result holds this rank's block
        results = [Block(RECV, 0, one.total), Block(SCRATCH, 50, one.count, one.nblocks, one.stride)]
        for result in results:
            assert _same(Ring.reduce_scatter(nranks, rank, layout, result, 5),
                         _ring_reduce_scatter_by_rows(nranks, rank, layout, result, 5))


def test_a_reduce_of_mismatched_pieces_is_refused_as_stepList_refuses_it():
    layout = StridedLayout(RECV, 0, 2, 8, 3, 3)
    with pytest.raises(ValueError, match="does not match"):
        Ring.reduce_scatter(4, 0, layout, Block(RECV, 0, 3, 2, 4), 0)
    with pytest.raises(ValueError):
        _ring_reduce_scatter_by_rows(4, 0, layout, Block(RECV, 0, 3, 2, 4), 0)


FLAT = [(collective, name) for collective in ("allgather", "reduce_scatter", "allreduce")
        for name in [*ALGORITHMS, "rh+rd", "ring+bruck", "bruck+ring"]
        if not algorithms.unsupported_reason(collective, name)]


@pytest.mark.parametrize("collective,algorithm", FLAT)
def test_a_template_scaled_to_a_count_is_the_schedule_built_for_it(collective, algorithm):
    for nranks in (1, 2, 3, 4, 6, 8):
        for count in (1, 2, 3, 12, 25, 48):
            for rank in range(nranks):
                for in_place in (False, True):
                    call = (collective, algorithm, nranks, rank, count, in_place)
                    assert _same(schedule_for(*call), schedule_for.build(*call)), call


def test_hierarchical_templates_scale_like_built_schedules():
    specs = ("ring", "rd", "bruck", "rdfull", "tree", "mpi", "direct")
    checked = 0
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for intra in specs:
            for inter in (*specs, "ring*3", "rd*2", "bruck*4"):  # pipelined: blocks of 3, 2, 4 pieces
                if composition_problem(collective, intra, inter):
                    continue
                for grid in (Grid(4, 2), Grid(6, 3), Grid(8, 2)):
                    for count in (1, 5, 24, 48):
                        for rank in range(grid.nranks):
                            call = (collective, grid, rank, count, False, intra, inter)
                            try:
                                built = hier_schedule.build(*call)
                            except ValueError:
                                continue
                            assert _same(hier_schedule(*call), built), call
                            checked += 1
    assert checked > 1000


def test_templates_are_per_shape_not_per_count():
    schedule_for.cache_clear()
    for count in (8 << k for k in range(12)):
        schedule_for("allreduce", "ring", 8, 3, count, False)
    first = schedule_for.cached_bytes()
    assert first == schedule_for("allreduce", "ring", 8, 3, 64, False).steps.nbytes
    schedule_for("allreduce", "ring", 8, 3, 8 * 100 + 1, False)  # not a multiple of p: built as it is
    assert schedule_for.cached_bytes() == 2 * first


def test_the_template_cache_is_bounded_by_bytes(monkeypatch):
    monkeypatch.setattr(templates, "MAX_CACHED_SCHEDULE_BYTES", 1 << 20)
    schedule_for.cache_clear()
    for nranks in (512, 600, 700, 800):  # a ring all-gather's rows: 200 B a rank
        schedule_for("allgather", "ring", nranks, 0, 4, False)
        assert schedule_for.cached_bytes() <= 1 << 20
    assert schedule_for.cached_bytes() >= 700 * 200
    schedule_for.cache_clear()
    assert schedule_for.cached_bytes() == 0


def test_template_count_rules():
    assert templates.template_count("allgather", 4, 10) == (1, 10)
    assert templates.template_count("reduce_scatter", 3, 1) == (1, 1)
    assert templates.template_count("allreduce", 4, 12) == (4, 3)
    assert templates.template_count("allreduce", 4, 13) is None
    assert templates.template_count("allreduce", 4, 2) is None
    assert templates.template_count("allgather", 4, 0) is None
    assert templates.template_count("allgather", 4, 12, granule=4) == (4, 3)  # blocks in 4 pieces
    assert templates.template_count("allgather", 4, 10, granule=4) is None  # uneven pieces: built as it is
    assert templates.template_count("allreduce", 4, 32, granule=4) == (16, 2)
    assert templates.template_count("allreduce", 4, 12, granule=4) is None


@pytest.mark.parametrize("nranks", [2048])
def test_a_large_ring_is_built_without_a_python_loop_per_row(nranks):
    """Not a timing: the row count and a few rows of a 2048-rank ring all-reduce (the column
    build), checked against the row-built reference on the same layout."""
    built = schedule_for.build("allreduce", "ring", nranks, 5, 3 * nranks, False)
    assert len(built) == 2 * (nranks - 1)
    layout = ContiguousLayout(RECV, even_blocks(3 * nranks, nranks))
    reference = _ring_allgather_by_rows(nranks, 5, layout).steps
    assert np.array_equal(built.steps[nranks - 1:], reference)
    assert supports("ring", "allgather")
