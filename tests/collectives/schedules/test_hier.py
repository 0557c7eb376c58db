"""Hierarchical compositions proved in the simulator for many grids (no MPI)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from collectives.call import CallSpec
from collectives.dtypes import DTYPES, OPS
from collectives.executors.simulate import simulate
from collectives.schedules.hier import composition_problem, hier_schedule, phase_problem
from collectives.schedules.rows import ACT_COPY, ACT_MPI_ALLREDUCE, COLUMNS
from collectives.schedules.topology import Grid, ShapeError
from collectives.spec import count_wrong, make_buffers

GRIDS = [(1, 1), (2, 1), (2, 2), (3, 1), (3, 3), (4, 2), (6, 2), (6, 3), (8, 2), (8, 4), (9, 3), (10, 5), (12, 4)]
PHASES = ["ring", "rd", "bruck", "mpi", "shm", "rdfull", "tree", "direct"]
ACTION = COLUMNS.index("action")


def run(collective: str, grid: Grid, count: int, in_place: bool, intra: str, inter: str, dtype: str, op: str) -> int:
    call = CallSpec(collective, grid.nranks, count, dtype, op, in_place)
    schedules = [hier_schedule(collective, grid, r, count, in_place, intra, inter) for r in range(grid.nranks)]
    buffers = [make_buffers(call, r) for r in range(grid.nranks)]
    sends = [np.zeros(0, b[1].dtype) if b[0] is None else b[0] for b in buffers]
    recvs = [b[1] for b in buffers]
    simulate(schedules, sends, recvs, op, groups=grid.members)
    return sum(count_wrong(call, r, recvs[r]) for r in range(grid.nranks))


@pytest.mark.parametrize("nranks,per_node", GRIDS)
@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce"])
def test_every_phase_pair_is_exact(nranks: int, per_node: int, collective: str) -> None:
    grid = Grid(nranks, per_node)
    counts = (1, 3) if collective != "allreduce" else (1, nranks * 2 + 1)
    for intra, inter in itertools.product(PHASES, PHASES):
        if composition_problem(collective, intra, inter):
            continue  # a phase without this collective's schedule
        for count, in_place, (dtype, op) in itertools.product(
                counts, (False, True), [("float32", "sum"), ("int32", "max")]):
            wrong = run(collective, grid, count, in_place, intra, inter, dtype, op)
            assert wrong == 0, (collective, nranks, per_node, intra, inter, count, in_place, dtype, op)


def test_schedule_phases_need_no_permutation_copy() -> None:
    """With schedule phases the all-gather writes final positions directly: the only local copy is the
    out-of-place own chunk (PCCL permutes the whole buffer afterwards)."""
    grid = Grid(8, 4)
    for rank in range(8):
        steps = hier_schedule("allgather", grid, rank, 16, False, "ring", "rd").steps
        assert int((steps[:, ACTION] == ACT_COPY).sum()) == 1
        steps = hier_schedule("allgather", grid, rank, 16, True, "ring", "rd").steps
        assert int((steps[:, ACTION] == ACT_COPY).sum()) == 0


def test_inter_phase_moves_only_the_rail_share() -> None:
    """Inter-node messages carry one chunk per node (1/ranks_per_node of the data), as PCCL intends."""
    grid = Grid(8, 4)
    comm, send_count, send_nblocks = (COLUMNS.index(c) for c in ("comm", "send_count", "send_nblocks"))
    steps = hier_schedule("allgather", grid, 0, 16, True, "ring", "ring").steps
    inter = steps[steps[:, comm] == 2]
    assert len(inter) == grid.nnodes - 1
    assert set((inter[:, send_count] * inter[:, send_nblocks]).tolist()) == {16}


def test_grid_shapes() -> None:
    grid = Grid(12, 4)
    assert grid.nnodes == 3
    assert grid.members(1, 5) == [4, 5, 6, 7]
    assert grid.members(2, 5) == [1, 5, 9]
    assert grid.members(0, 5) == list(range(12))
    with pytest.raises(ShapeError, match="do not divide"):
        Grid(6, 4)


def test_unknown_phase_is_rejected() -> None:
    assert "unknown phase algorithm" in phase_problem("nonesuch", "allgather")
    assert "no reduce_scatter" in phase_problem("rdfull", "reduce_scatter")
    assert phase_problem("bruck", "reduce_scatter") is None  # Bruck runs both phases
    assert phase_problem("rd", "reduce_scatter") is None  # the recursive family mirrors to rh
    with pytest.raises(ValueError):
        hier_schedule("reduce_scatter", Grid(4, 2), 0, 2, False, "ring", "rdfull")


@pytest.mark.parametrize("nranks,per_node", [(2, 1), (2, 2), (3, 1), (4, 1), (4, 2), (6, 2), (6, 3), (6, 1)])
@pytest.mark.parametrize("intra,inter", [("ring", "rdfull"), ("rdfull", "rdfull"), ("mpi", "rdfull"),
                                         ("tree", "rdfull")])
def test_whole_buffer_phases_are_exact_for_every_dtype_and_op(nranks: int, per_node: int, intra: str,
                                                              inter: str) -> None:
    grid = Grid(nranks, per_node)
    for dtype, op, count, in_place in itertools.product(DTYPES, OPS, (1, nranks, 2 * nranks + 1), (False, True)):
        assert run("allreduce", grid, count, in_place, intra, inter, dtype, op) == 0, (dtype, op, count, in_place)


def test_whole_buffer_inter_phase_crosses_the_rail_log2_times() -> None:
    """inter rdfull: one all-reduce of the partial on the rail (log2 nodes steps), where rs+ag takes twice that."""
    comm = COLUMNS.index("comm")
    for nranks, per_node in ((4, 2), (8, 2), (16, 4)):
        grid = Grid(nranks, per_node)
        steps_of = {inter: hier_schedule("allreduce", grid, 0, 4 * nranks, False, "ring", inter).steps
                    for inter in ("rd", "rdfull")}
        rail = {inter: int((steps[:, comm] == 2).sum()) for inter, steps in steps_of.items()}
        log_nodes = (grid.nnodes - 1).bit_length()
        assert rail == {"rd": 2 * log_nodes, "rdfull": log_nodes}, (nranks, per_node, rail)
        fused = hier_schedule("allreduce", grid, 0, 4 * nranks, False, "rdfull", "rdfull").steps
        assert int((fused[:, comm] == 2).sum()) == log_nodes
        assert len(fused) == log_nodes + (per_node - 1).bit_length()


def test_whole_buffer_intra_needs_a_whole_buffer_inter() -> None:
    assert "needs a whole-buffer inter phase" in composition_problem("allreduce", "rdfull", "ring")
    assert composition_problem("allreduce", "rdfull", "rdfull") is None
    assert "intra phase" in composition_problem("allgather", "rdfull", "ring")
    with pytest.raises(ValueError, match="whole-buffer"):
        hier_schedule("allreduce", Grid(4, 2), 0, 8, False, "rdfull", "mpi")


def test_fewer_elements_than_ranks_is_one_flat_doubling() -> None:
    """An all-reduce of fewer elements than ranks is all tail: no (empty) phases, log2 p steps of rdfull;
    with a transport within the node, its one all-reduce there and log2 nodes steps of rdfull on the rail."""
    from collectives.schedules.algorithms import schedule_for

    comm, action = COLUMNS.index("comm"), COLUMNS.index("action")
    for nranks, per_node in ((4, 2), (8, 2), (6, 3)):
        grid = Grid(nranks, per_node)
        for intra, inter in (("ring", "ring"), ("ring", "rdfull"), ("mpi", "rd"), ("shm", "rdfull")):
            steps = hier_schedule("allreduce", grid, 0, nranks - 1, False, intra, inter).steps
            if intra == "ring":
                flat = schedule_for("allreduce", "rdfull", nranks, 0, nranks - 1, False).steps
                assert len(steps) == len(flat) and (steps[:, comm] == 0).all(), (nranks, per_node, intra, inter)
                continue
            rail = schedule_for("allreduce", "rdfull", grid.nnodes, 0, nranks - 1, False).steps
            assert list(steps[:, comm]) == [1] + [2] * len(rail), (nranks, per_node, intra, inter)
            assert steps[0, action] == ACT_MPI_ALLREDUCE


@pytest.mark.parametrize("nranks,per_node", [(2, 1), (2, 2), (3, 1), (4, 1), (4, 2), (6, 2), (6, 3), (6, 1)])
@pytest.mark.parametrize("inter", ["ring", "rd", "bruck", "rdfull"])
def test_a_tail_within_the_node_by_a_transport_is_exact_for_every_dtype_and_op(nranks: int, per_node: int,
                                                                               inter: str) -> None:
    """The all-reduce tail as one library all-reduce within the node and a rail doubling (intra mpi or shm:
    the same rows), p = 2, 3, 4, 6 and hosts of 2x2, 3x2, 2x3, all tail and a tail after the phases."""
    grid = Grid(nranks, per_node)
    for dtype, op, count, in_place in itertools.product(DTYPES, OPS, (1, nranks - 1 or 1, 2 * nranks + 1),
                                                        (False, True)):
        assert run("allreduce", grid, count, in_place, "mpi", inter, dtype, op) == 0, (dtype, op, count, in_place)


def test_a_rooted_intra_phase_sends_one_rank_per_node_across() -> None:
    """intra tree + inter rdfull: only local rank 0 of each node has rail messages (the others sit it out)."""
    comm, send_peer = COLUMNS.index("comm"), COLUMNS.index("send_peer")
    grid = Grid(12, 4)
    for rank in range(grid.nranks):
        steps = hier_schedule("allreduce", grid, rank, 24, False, "tree", "rdfull").steps
        rail = steps[steps[:, comm] == 2]
        sends = int((rail[:, send_peer] >= 0).sum())
        assert (sends > 0) == (grid.local(rank) == 0), (rank, sends)
    from collectives.schedules.algorithms import schedule_for

    for nranks in (1, 2, 3, 5, 8, 13):  # flat: reduce to 0 and broadcast, any p
        for (dtype, op), in_place in itertools.product((("float32", "sum"), ("int32", "max"), ("float64", "prod")),
                                                       (False, True)):
            call = CallSpec("allreduce", nranks, 5, dtype, op, in_place)
            buffers = [make_buffers(call, r) for r in range(nranks)]
            sends = [np.zeros(0, b[1].dtype) if b[0] is None else b[0] for b in buffers]
            recvs = [b[1] for b in buffers]
            simulate([schedule_for("allreduce", "tree", nranks, r, 5, in_place) for r in range(nranks)], sends,
                     recvs, op)
            assert sum(count_wrong(call, r, recvs[r]) for r in range(nranks)) == 0, (nranks, dtype, op, in_place)


@pytest.mark.parametrize("nranks,per_node", [(2, 2), (3, 3), (4, 2), (6, 2), (6, 3), (8, 4)])
@pytest.mark.parametrize("collective,inter", [
    (collective, inter) for collective in ("allgather", "reduce_scatter", "allreduce")
    for inter in ("ring", "rd", "bruck", "mpi", "rdfull") if not composition_problem(collective, "shm", inter)])
def test_a_strided_transport_runs_its_phase_in_place_exactly(nranks: int, per_node: int, collective: str,
                                                             inter: str) -> None:
    """intra shm (Transport.strided): one library row per phase on the ranks' chunks where they lie
    (interleaved: pieces = nodes, per_node chunks apart), no packing or unpacking copy around it; exact for
    every dtype and op, p = 2, 3, 4, 6, 8 and hosts of 2x2, 3x2, 2x3."""
    grid = Grid(nranks, per_node)
    nblocks, action, comm = COLUMNS.index("action_nblocks"), COLUMNS.index("action"), COLUMNS.index("comm")
    count = 3 if collective != "allreduce" else 3 * nranks
    for rank in range(nranks):
        steps = hier_schedule(collective, grid, rank, count, True, "shm", inter).steps
        intra_library = steps[(steps[:, comm] == 1) & (steps[:, action] >= 3)]
        assert len(intra_library) >= 1 and (intra_library[:, nblocks] == grid.nnodes).all()
        # no more local copies than with a schedule intra phase (ring): none for packing or unpacking
        ring = hier_schedule(collective, grid, rank, count, True, "ring", inter).steps
        packing = hier_schedule(collective, grid, rank, count, True, "mpi", inter).steps
        copies = [int((s[:, action] == ACT_COPY).sum()) for s in (steps, ring, packing)]
        assert copies[0] <= copies[1] and (grid.nnodes == 1 or copies[0] < copies[2]), (rank, copies)
    for dtype, op, n, in_place in itertools.product(DTYPES, OPS, (count, 1 if collective != "allreduce" else nranks),
                                                    (False, True)):
        assert run(collective, grid, n, in_place, "shm", inter, dtype, op) == 0, (dtype, op, n, in_place)


def test_interleaved_library_rows_only_where_a_transport_takes_them() -> None:
    """The MPI library's phases stay contiguous (it packs); an interleaved row for it, or for a transport
    that is not strided, is refused, as is an interleaved all-reduce."""
    from collectives.executors.compose import schedule_op
    from collectives.schedules.rows import ACT_MPI_ALLGATHER, RECV, SCRATCH, Block, StepList
    from collectives.transports import TRANSPORTS

    grid = Grid(4, 2)
    steps = hier_schedule("allgather", grid, 0, 3, True, "mpi", "rd").steps
    assert (steps[steps[:, COLUMNS.index("action")] >= 3][:, COLUMNS.index("action_nblocks")] == 1).all()
    with pytest.raises(ValueError, match="interleaved"):
        StepList().mpi_collective(ACT_MPI_ALLREDUCE, None, Block(RECV, 0, 8), 8, pieces=2, stride=8)
    with pytest.raises(ValueError, match="not scratch"):
        StepList().mpi_collective(ACT_MPI_ALLGATHER, None, Block(SCRATCH, 0, 4), 4, pieces=2, stride=4)
    row = StepList(1).mpi_collective(ACT_MPI_ALLGATHER, None, Block(RECV, 0, 4), 4, pieces=2, stride=4).build()
    assert [name for name, transport in TRANSPORTS.items() if transport.strided] == ["shm"]

    class Context:
        on_device = False

        def executor(self, *args):
            raise AssertionError("the row is not for the executor")

    with pytest.raises(ValueError, match="no interleaved rank blocks"):
        schedule_op(Context(), [None, None], row.steps, (None, np.zeros(16), None), "float32", "sum",
                    cuts={(1, ACT_MPI_ALLGATHER): TRANSPORTS["xccl"]})


# --- pipelined compositions (inter: ring*K) ---------------------------------------------------


PIPELINED = [("ring", "ring*2"), ("ring", "rd*3"), ("bruck", "bruck*4"), ("ring", "bruck*2"), ("bruck", "ring*8")]


@pytest.mark.parametrize("nranks,per_node", [(2, 1), (3, 1), (4, 2), (6, 2), (6, 3), (8, 4)])
@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce"])
def test_pipelined_compositions_are_exact(nranks: int, per_node: int, collective: str) -> None:
    """Every dtype and op (spread over the compositions), in and out of place, chunks that split
    evenly, unevenly and (ring*8) into fewer elements than pieces; the all-reduce with a tail."""
    grid = Grid(nranks, per_node)
    counts = (5, 24) if collective != "allreduce" else (nranks * 8, nranks * 3 + 1)
    for index, (intra, inter) in enumerate(PIPELINED):
        for count, (dtype, op) in itertools.product(counts, [(d, o) for d in DTYPES for o in OPS][index::5]):
            for in_place in (False, True):
                wrong = run(collective, grid, count, in_place, intra, inter, dtype, op)
                assert wrong == 0, (collective, nranks, per_node, intra, inter, count, in_place, dtype, op)


def test_pipelined_phases_overlap_piece_by_piece() -> None:
    """ring*4 on 2 x 2: the rail's message of piece j + 1 is posted in the row before the node's
    message of piece j, whose row completes both; each piece a quarter of the chunk."""
    grid, count = Grid(4, 2), 64
    steps = hier_schedule("allgather", grid, 0, count, True, "ring", "ring*4").steps
    messages = steps[(steps[:, COLUMNS.index("send_peer")] >= 0)]
    post, comm = COLUMNS.index("post"), COLUMNS.index("comm")
    # rail piece 0, then (rail piece j+1 posted, node piece j) x 3, then node piece 3
    assert messages[:, comm].tolist() == [2] + [2, 1] * 3 + [1]
    assert messages[:, post].tolist() == [0] + [1, 0] * 3 + [0]
    assert set(messages[:, COLUMNS.index("send_count")].tolist()) == {count // 4}
    unpipelined = hier_schedule("allgather", grid, 0, count, True, "ring", "ring").steps
    assert len(unpipelined[unpipelined[:, COLUMNS.index("send_peer")] >= 0]) == 2


def test_pipelining_is_refused_where_rows_cannot_overlap() -> None:
    assert composition_problem("allgather", "ring", "ring*4") is None
    assert "2 to 64" in composition_problem("allgather", "ring", "ring*1")
    assert "2 to 64" in composition_problem("allgather", "ring", "ring*x")
    assert "transport" in composition_problem("allgather", "shm", "ring*4")
    assert "transport" in composition_problem("reduce_scatter", "ring", "mpi*4")
    assert "in flight" in composition_problem("allgather", "ring", "direct*2")
    assert "whole buffer" in composition_problem("allreduce", "rdfull", "rdfull*2")
    assert "strided block" in composition_problem("allgather", "rd", "ring*2")
    assert "named on the inter phase" in composition_problem("allgather", "ring*2", "ring")
    assert "unknown phase algorithm 'ringg'" in composition_problem("allgather", "ring", "ringg*2")
