"""PCCL-style hierarchical collectives, composed from flat schedules.

All-gather: inter-node phase on the rail (each rank's chunk to the same local
rank of every node), then intra-node phase; the phases read and write the final
positions through strided blocks, so no permutation pass is needed.
Reduce-scatter: intra-node phase on strided source blocks (the "local permute"
folded into the messages) into a contiguous partial, then inter-node phase on
the rail into the result. All-reduce: both, plus the last ``count % p`` elements as a whole
buffer (allreduce_tail: a flat recursive doubling, or a transport's all-reduce within the node and
a doubling on the rail). A phase run by the MPI library (``mpi``) needs
contiguous buffers, so it costs the packing copies that PCCL itself does; a transport that takes the
ranks' blocks interleaved (``shm``: Transport.strided) runs its phase where the blocks lie, in place.

Phase names: any registered algorithm, any transport of collectives/transports (``mpi``,
``xccl``: NCCL/RCCL, GPU buffers only; ``rdma``: the rail phase by one-sided puts), whose
phases are library rows the transport runs (collectives/executors/compose.py), or ``rs+ag`` pairs;
``rd`` for a reduce-scatter phase means its mirror ``rh`` (recursive halving) and vice versa.

Whole-buffer phases (an algorithm with an all-reduce schedule of its own, ``rdfull``) cut the
steps across the slow link for small all-reduces: ``inter: rdfull`` runs intra reduce-scatter,
one all-reduce of the node's partial on the rail (log2 nodes steps instead of twice that), intra
all-gather; ``intra: rdfull`` with ``inter: rdfull`` runs the whole buffer through both levels (the
intra phases fused: log2 ranks-per-node + log2 nodes steps, as many as MPI's own small all-reduce);
``intra: tree`` with ``inter: rdfull`` reduces to local rank 0, all-reduces among those leaders
alone and broadcasts back (MPICH's node-aware composition: one rank per node on the link).

Pipelined (``inter: ring*4``: the rail's algorithm, then ``*`` and a number of pieces): every
rank's chunk is cut into that many pieces and the two phases run piece by piece, side by side
(rows.overlapped): the all-gather's rail piece j + 1 is in flight while the node moves piece j,
the reduce-scatter's node piece j + 1 while the rail reduces piece j, so the link is busy while
the node works instead of after. Both phases must be algorithms (their rows are what overlaps).
"""

from __future__ import annotations

from collectives.schedules.algorithms import ALGORITHMS, phase_algorithm, supports
from collectives.schedules.rows import (
    ACT_MPI_ALLGATHER,
    ACT_MPI_ALLREDUCE,
    ACT_MPI_REDUCE_SCATTER,
    COMM_INTER,
    COMM_INTRA,
    COMM_WORLD,
    RECV,
    SCRATCH,
    SEND,
    Block,
    ContiguousLayout,
    Schedule,
    StepList,
    StridedLayout,
    overlapped,
)
from collectives.schedules.templates import schedule_templates
from collectives.schedules.topology import Grid
from collectives.spec import even_blocks, phases
from collectives.transports import TRANSPORTS

#: the algorithm name of library rows: one whole collective on the node or rail communicator,
#: run by the MPI library, or by the transport the phase names (collectives/transports)
MPI_PHASE = "mpi"
#: the collectives composed here (hier_schedule); any other is declined by name
COMPOSED = ("allgather", "reduce_scatter", "allreduce")


#: ``inter: ring*4``: the rail's algorithm and the pieces each chunk is pipelined in
PIPELINE_MARK = "*"
MAX_PIECES = 64


def pipelined(inter: str) -> tuple[str, int]:
    """(the inter phase's own name, the pieces its composition is pipelined in: 1 when it is not)."""
    name, mark, pieces = inter.partition(PIPELINE_MARK)
    if not mark:
        return inter, 1
    if not pieces.isdigit() or not 2 <= int(pieces) <= MAX_PIECES:
        raise ValueError(f"inter phase {inter!r}: pipelined in {pieces!r} pieces; give 2 to {MAX_PIECES} "
                         f"(as in {name or 'ring'}{PIPELINE_MARK}4)")
    return name, int(pieces)


def schedule_algorithm(spec: str, phase: str) -> str:
    """The algorithm whose rows ``spec`` generates for ``phase``: library phases all give MPI_PHASE rows."""
    name = phase_algorithm(spec, phase)
    return MPI_PHASE if name in TRANSPORTS else name


def in_place_library(spec: str, phase: str) -> bool:
    """Whether ``spec`` names a transport that runs ``phase`` on the ranks' blocks where they lie
    (interleaved, ``Transport.strided``: shm), so the hierarchy packs nothing around it."""
    name = phase_algorithm(spec, phase)
    return name in TRANSPORTS and TRANSPORTS[name].strided


def whole_buffer(spec: str) -> bool:
    """Whether ``spec`` names an algorithm that all-reduces a whole buffer in one phase."""
    return "+" not in spec and supports(spec, "allreduce")


def rooted(spec: str) -> bool:
    """Whether ``spec`` names a whole-buffer algorithm that reduces to local rank 0 and broadcasts back
    (as an intra phase, only rank 0 of each node then takes part in the inter phase)."""
    return whole_buffer(spec) and supports(spec, "reduce") and supports(spec, "bcast")


def spec_problem(collective: str, spec: str, role: str = "intra") -> str | None:
    """Why ``spec`` cannot be the ``role`` phase of ``collective`` (None: it can). Only the inter
    phase names pieces (``ring*4``: pipelined)."""
    if PIPELINE_MARK in spec:
        if role != "inter":
            return f"{spec!r}: the pieces of a pipelined composition are named on the inter phase (inter: ring*4)"
        try:
            spec = pipelined(spec)[0]
        except ValueError as error:
            return str(error)
    if collective == "allreduce" and whole_buffer(spec):
        return None
    for phase in phases_needed(collective):
        problem = phase_problem(spec, phase)
        if problem:
            return problem
    return None


def composition_problem(collective: str, intra: str, inter: str) -> str | None:
    """Why (intra, inter) cannot compose ``collective`` (None: they can), naming the role at fault."""
    if collective not in COMPOSED:
        return f"no hierarchical {collective}: pccl-hier composes {', '.join(COMPOSED)}"
    try:
        inter, pieces = pipelined(inter)
    except ValueError as error:
        return str(error)
    if pieces > 1:
        for role, spec in (("intra", intra), ("inter", inter)):
            names = [phase_algorithm(spec, phase) for phase in phases_needed(collective)]
            if (collective == "allreduce" and whole_buffer(spec)) or any(
                    name in TRANSPORTS or getattr(ALGORITHMS.get(name), "posts", False) for name in names):
                return (f"{role} phase {spec!r}: a pipelined composition overlaps the rows of two algorithms' "
                        "phases, not a transport's, a whole buffer's or one of messages already in flight")
            if role == "intra" and any(getattr(ALGORITHMS.get(name), "sends_spans", False) for name in names):
                return (f"intra phase {spec!r}: pipelined, every local rank's block is cut in pieces, and "
                        f"{spec}'s messages of several blocks are then no one strided block (ring, bruck are)")
    for role, spec in (("intra", intra), ("inter", inter)):
        problem = spec_problem(collective, spec, role)
        if problem:
            return f"{role} phase: {problem}"
    if collective == "allreduce" and whole_buffer(intra) and not whole_buffer(inter):
        # every rail would all-reduce the same whole buffer: q times the bytes over the link
        return f"intra phase {intra!r} (whole buffer) needs a whole-buffer inter phase too, not {inter!r}"
    return None


def phase_problem(spec: str, phase: str) -> str | None:
    name = phase_algorithm(spec, phase)
    if name in TRANSPORTS:
        return None
    if name not in ALGORITHMS:
        return f"unknown phase algorithm {name!r} (known: {', '.join(sorted([*ALGORITHMS, *TRANSPORTS]))})"
    if not supports(name, phase):
        return f"algorithm {name!r} has no {phase} schedule"
    return None


def phases_needed(collective: str) -> tuple[str, ...]:
    return phases(collective)


def _merge(parts: list[Schedule]) -> Schedule:
    if not parts:
        return StepList().build()
    result = parts[0]
    for part in parts[1:]:
        result = result.then(part)
    return result


def allgather_phases(grid: Grid, rank: int, chunk: int, own: Block | None, intra: str, inter: str,
                     scratch_base: int) -> list[Schedule]:
    """Hierarchical all-gather into RECV (natural order, ``chunk`` per rank).

    ``own``: where this rank's chunk comes from (None: already in place in RECV)."""
    nnodes, per_node = grid.nnodes, grid.ranks_per_node
    node, local = grid.node(rank), grid.local(rank)
    final_own = Block(RECV, rank * chunk, chunk)
    inter_name, intra_name = schedule_algorithm(inter, "allgather"), schedule_algorithm(intra, "allgather")
    parts: list[Schedule] = []
    contiguous_rail = inter_name == MPI_PHASE or (intra_name == MPI_PHASE and not in_place_library(intra, "allgather"))
    gathered = Block(SCRATCH, scratch_base, nnodes * chunk)  # the rail's chunks, contiguous
    after = scratch_base + nnodes * chunk
    head = StepList()
    if contiguous_rail:
        head.step(copy=(own or final_own, Block(SCRATCH, scratch_base + node * chunk, chunk)))
    elif own is not None:
        head.step(copy=(own, final_own))
    parts.append(head.build())
    if inter_name == MPI_PHASE:
        parts.append(StepList(COMM_INTER).mpi_collective(ACT_MPI_ALLGATHER, None, gathered, chunk).build())
    elif contiguous_rail:
        layout = ContiguousLayout(SCRATCH, (chunk,) * nnodes, scratch_base)
        parts.append(ALGORITHMS[inter_name].allgather(nnodes, node, layout, after).on(COMM_INTER))
    else:
        layout = StridedLayout(RECV, local * chunk, chunk, per_node * chunk)
        parts.append(ALGORITHMS[inter_name].allgather(nnodes, node, layout, scratch_base).on(COMM_INTER))
    return parts + intra_allgather(grid, rank, chunk, intra, gathered if contiguous_rail else None, after)


def piece_spans(chunk: int, pieces: int) -> list[tuple[int, int]]:
    """(offset, length) of each piece of a chunk: at most one piece an element (none empty)."""
    lengths = even_blocks(chunk, max(1, min(pieces, chunk)))
    offsets = [sum(lengths[:index]) for index in range(len(lengths))]
    return list(zip(offsets, lengths, strict=True))


def _pipeline(first: list[Schedule], second: list[Schedule]) -> Schedule:
    """first[0], then first[j + 1] beside second[j] for every j, then second[-1]: the two phases of
    every piece in order, the next piece's first phase in flight while this piece's second runs."""
    ahead = [overlapped(first[index + 1], second[index]) for index in range(len(first) - 1)]
    return _merge([first[0], *ahead, second[-1]])


def pipelined_allgather(grid: Grid, rank: int, chunk: int, own: Block | None, intra: str, inter: str, pieces: int,
                        scratch_base: int) -> list[Schedule]:
    """The all-gather of allgather_phases (both phases algorithms, in place in RECV) piece by piece:
    the rail's piece j + 1 in flight while the node all-gathers piece j."""
    nnodes, per_node = grid.nnodes, grid.ranks_per_node
    node, local = grid.node(rank), grid.local(rank)
    inter, intra = schedule_algorithm(inter, "allgather"), schedule_algorithm(intra, "allgather")
    head = StepList()
    if own is not None:
        head.step(copy=(own, Block(RECV, rank * chunk, chunk)))
    spans = piece_spans(chunk, pieces)
    rail = [ALGORITHMS[inter].allgather(nnodes, node,
                                        StridedLayout(RECV, local * chunk + off, length, per_node * chunk),
                                        scratch_base).on(COMM_INTER) for off, length in spans]
    after = max(scratch_base, _scratch_end(rail))  # the two phases' scratch apart: they run at once
    within = [ALGORITHMS[intra].allgather(per_node, local, StridedLayout(RECV, off, length, chunk, nchunks=nnodes,
                                                                         chunk_stride=per_node * chunk),
                                          after).on(COMM_INTRA) for off, length in spans]
    return [head.build(), _pipeline(rail, within)]


def pipelined_reduce_scatter(grid: Grid, rank: int, chunk: int, source_buf: int, result: Block, intra: str,
                             inter: str, pieces: int, scratch_base: int) -> list[Schedule]:
    """The reduce-scatter of reduce_scatter_phases (both phases algorithms) piece by piece: the node's
    piece j + 1 in flight while the rail reduces piece j. The partial (this node's sums for my local
    rank, by node) is at ``scratch_base``, piece j of node n's chunk at n * chunk + its offset."""
    nnodes, per_node = grid.nnodes, grid.ranks_per_node
    node, local = grid.node(rank), grid.local(rank)
    inter, intra = schedule_algorithm(inter, "reduce_scatter"), schedule_algorithm(intra, "reduce_scatter")
    spans = piece_spans(chunk, pieces)
    after = scratch_base + nnodes * chunk
    within = [ALGORITHMS[intra].reduce_scatter(
        per_node, local, StridedLayout(source_buf, off, length, chunk, nchunks=nnodes, chunk_stride=per_node * chunk),
        Block(SCRATCH, scratch_base + off, length, nnodes, chunk), after).on(COMM_INTRA) for off, length in spans]
    after = max(after, _scratch_end(within))
    rail = [ALGORITHMS[inter].reduce_scatter(nnodes, node, StridedLayout(SCRATCH, scratch_base + off, length, chunk),
                                             Block(result.buf, result.off + off, length), after).on(COMM_INTER)
            for off, length in spans]
    return [_pipeline(within, rail)]


def intra_allgather(grid: Grid, rank: int, chunk: int, intra: str, gathered: Block | None,
                    scratch_base: int) -> list[Schedule]:
    """The intra-node all-gather that ends a hierarchical all-gather. The rail's chunks (one per node)
    are in ``gathered`` (contiguous, by node), or None: already at their final strided places in RECV."""
    nnodes, per_node, local = grid.nnodes, grid.ranks_per_node, grid.local(rank)
    intra_name = schedule_algorithm(intra, "allgather")
    # Where each node's chunk of this rail lands in the final buffer.
    rail_final = Block(RECV, local * chunk, chunk, nnodes, per_node * chunk)
    if in_place_library(intra, "allgather"):  # every local rank's chunks read and written where they lie
        final = Block(RECV, 0, nnodes * chunk)
        steps = StepList(COMM_INTRA).mpi_collective(ACT_MPI_ALLGATHER, gathered, final, nnodes * chunk,
                                                    pieces=nnodes, stride=per_node * chunk)
        return [steps.build()]
    if intra_name == MPI_PHASE:
        if gathered is None:
            raise ValueError("a library intra phase starts from the rail's chunks contiguous in scratch")
        everything = Block(SCRATCH, scratch_base, per_node * nnodes * chunk)
        steps = StepList(COMM_INTRA).mpi_collective(ACT_MPI_ALLGATHER, gathered, everything, nnodes * chunk)
        unpermute = StepList()
        for peer in range(per_node):
            source = Block(SCRATCH, scratch_base + peer * nnodes * chunk, nnodes * chunk)
            unpermute.step(copy=(source, Block(RECV, peer * chunk, chunk, nnodes, per_node * chunk)))
        return [steps.build(), unpermute.build()]
    parts = [] if gathered is None else [StepList().step(copy=(gathered, rail_final)).build()]
    layout = StridedLayout(RECV, 0, chunk, chunk, nchunks=nnodes, chunk_stride=per_node * chunk)
    parts.append(ALGORITHMS[intra_name].allgather(per_node, local, layout, scratch_base).on(COMM_INTRA))
    return parts


def reduce_scatter_phases(grid: Grid, rank: int, chunk: int, source_buf: int, result: Block, intra: str,
                          inter: str, scratch_base: int) -> list[Schedule]:
    """Hierarchical reduce-scatter of a natural-order source (``chunk`` per rank) into ``result``."""
    nnodes, node = grid.nnodes, grid.node(rank)
    inter_name = schedule_algorithm(inter, "reduce_scatter")
    parts, partial = intra_reduce_scatter(grid, rank, chunk, source_buf, intra, scratch_base)
    after = scratch_base + nnodes * chunk
    if inter_name == MPI_PHASE:
        parts.append(StepList(COMM_INTER).mpi_collective(ACT_MPI_REDUCE_SCATTER, partial, result, chunk).build())
    else:
        layout = ContiguousLayout(SCRATCH, (chunk,) * nnodes, scratch_base)
        parts.append(ALGORITHMS[inter_name].reduce_scatter(nnodes, node, layout, result, after).on(COMM_INTER))
    return parts


def intra_reduce_scatter(grid: Grid, rank: int, chunk: int, source_buf: int, intra: str,
                         scratch_base: int) -> tuple[list[Schedule], Block]:
    """The intra-node reduce-scatter that starts a hierarchical reduce-scatter: (its parts, the partial
    it leaves at ``scratch_base``: this node's sums of every node's chunk for my local rank, by node)."""
    nnodes, per_node, local = grid.nnodes, grid.ranks_per_node, grid.local(rank)
    intra_name = schedule_algorithm(intra, "reduce_scatter")
    partial = Block(SCRATCH, scratch_base, nnodes * chunk)
    after = scratch_base + nnodes * chunk
    if in_place_library(intra, "reduce_scatter"):  # each local rank's chunks read where they lie in the input
        steps = StepList(COMM_INTRA).mpi_collective(ACT_MPI_REDUCE_SCATTER, Block(source_buf, 0, nnodes * chunk),
                                                    partial, nnodes * chunk, pieces=nnodes, stride=per_node * chunk)
        return [steps.build()], partial
    if intra_name == MPI_PHASE:
        permute = StepList()
        for peer in range(per_node):
            permute.step(copy=(Block(source_buf, peer * chunk, chunk, nnodes, per_node * chunk),
                               Block(SCRATCH, after + peer * nnodes * chunk, nnodes * chunk)))
        packed = Block(SCRATCH, after, per_node * nnodes * chunk)
        steps = StepList(COMM_INTRA).mpi_collective(ACT_MPI_REDUCE_SCATTER, packed, partial, nnodes * chunk)
        return [permute.build(), steps.build()], partial
    layout = StridedLayout(source_buf, 0, chunk, chunk, nchunks=nnodes, chunk_stride=per_node * chunk)
    return [ALGORITHMS[intra_name].reduce_scatter(per_node, local, layout, partial, after).on(COMM_INTRA)], partial


def allreduce_phases(grid: Grid, rank: int, count: int, source_buf: int, intra: str, inter: str,
                     pieces: int = 1) -> list[Schedule]:
    """Hierarchical all-reduce of ``count`` elements from ``source_buf`` into RECV (``pieces`` > 1: its
    reduce-scatter and all-gather pipelined)."""
    node, local = grid.node(rank), grid.local(rank)
    whole = Block(RECV, 0, count)
    if whole_buffer(intra) and rooted(intra):  # the node's sum at local rank 0; only it crosses
        first = ALGORITHMS[intra].reduce(grid.ranks_per_node, local, Block(source_buf, 0, count), whole)
        rail = ALGORITHMS[inter].allreduce(grid.nnodes, node, whole, whole, first.scratch)
        if local != 0:  # the other rails sit the leaders' steps out (rows stay aligned)
            idle = StepList()
            for _ in range(len(rail)):
                idle.step()
            rail = idle.build()
        last = ALGORITHMS[intra].bcast(grid.ranks_per_node, local, whole)
        return [first.on(COMM_INTRA), rail.on(COMM_INTER), last.on(COMM_INTRA)]
    if whole_buffer(intra):  # fused: the whole buffer through both levels (composition_problem: inter too)
        first = ALGORITHMS[intra].allreduce(grid.ranks_per_node, local, Block(source_buf, 0, count), whole)
        second = ALGORITHMS[inter].allreduce(grid.nnodes, node, whole, whole, first.scratch)
        return [first.on(COMM_INTRA), second.on(COMM_INTER)]
    chunk = count // grid.nranks
    if chunk == 0:  # fewer elements than ranks: all tail (empty phases would still exchange empty messages)
        parts: list[Schedule] = []
    elif whole_buffer(inter):  # one all-reduce of the node's partial on the rail, between the intra phases
        parts, partial = intra_reduce_scatter(grid, rank, chunk, source_buf, intra, 0)
        after = partial.off + partial.total
        rail = ALGORITHMS[inter].allreduce(grid.nnodes, node, partial, partial, after).on(COMM_INTER)
        parts.append(rail)
        parts += intra_allgather(grid, rank, chunk, intra, partial, max(after, rail.scratch))
    elif pieces > 1:
        parts = pipelined_reduce_scatter(grid, rank, chunk, source_buf, Block(RECV, rank * chunk, chunk), intra,
                                         inter, pieces, 0)
        parts += pipelined_allgather(grid, rank, chunk, None, intra, inter, pieces, 0)
    else:
        parts = reduce_scatter_phases(grid, rank, chunk, source_buf, Block(RECV, rank * chunk, chunk), intra,
                                      inter, 0)
        parts += allgather_phases(grid, rank, chunk, None, intra, inter, 0)
    tail = count - chunk * grid.nranks
    if tail:
        parts += allreduce_tail(grid, rank, Block(source_buf, chunk * grid.nranks, tail), intra, _scratch_end(parts))
    return parts


def allreduce_tail(grid: Grid, rank: int, source: Block, intra: str, scratch_base: int) -> list[Schedule]:
    """The last count % p elements, fewer than p (an 8-byte all-reduce of 4 ranks is all tail), as a
    whole buffer. A transport within the node (``shm``, ``mpi``) all-reduces it there in one call,
    then the rail doubles it (log2 nodes steps): one crossing per rank, as MPICH's node-aware
    all-reduce. Otherwise a recursive doubling over the whole communicator (log2 p steps), where a
    ring would take 2 (p - 1) steps, each waiting on a crossing between nodes."""
    result = Block(RECV, source.off, source.total)
    if intra in TRANSPORTS and grid.ranks_per_node > 1:
        in_place = source.buf == RECV  # the library's in-place call: its input is already in the result
        within = StepList(COMM_INTRA).mpi_collective(ACT_MPI_ALLREDUCE, None if in_place else source, result,
                                                     source.total).build()
        across = ALGORITHMS["rdfull"].allreduce(grid.nnodes, grid.node(rank), result, result, scratch_base)
        return [within, across.on(COMM_INTER)]
    return [ALGORITHMS["rdfull"].allreduce(grid.nranks, rank, source, result, scratch_base).on(COMM_WORLD)]


def tail_phases(collective: str, intra: str) -> tuple[str, ...]:
    """The library phases the all-reduce tail adds to the intra role (allreduce_tail)."""
    return ("allreduce",) if collective == "allreduce" and intra in TRANSPORTS else ()


def _scratch_end(parts: list[Schedule]) -> int:
    return max((part.scratch for part in parts), default=0)


def _pieces_of(key: tuple) -> int:
    """A hier_schedule call's pieces (its template's blocks hold that many elements)."""
    try:
        return pipelined(key[-1])[1]
    except ValueError:
        return 1  # the build refuses it


@schedule_templates(granule=_pieces_of)
def hier_schedule(collective: str, grid: Grid, rank: int, count: int, in_place: bool,
                  intra: str, inter: str) -> Schedule:
    """One rank's whole hierarchical call as a single schedule over (world, node, rail)."""
    problem = composition_problem(collective, intra, inter)
    if problem:
        raise ValueError(problem)
    inter, pieces = pipelined(inter)
    source = RECV if in_place else SEND
    if collective == "allgather":
        own = None if in_place else Block(SEND, 0, count)
        if pieces > 1:
            return _merge(pipelined_allgather(grid, rank, count, own, intra, inter, pieces, 0))
        return _merge(allgather_phases(grid, rank, count, own, intra, inter, 0))
    if collective == "reduce_scatter":
        result = Block(RECV, 0, count)
        if pieces > 1:
            return _merge(pipelined_reduce_scatter(grid, rank, count, source, result, intra, inter, pieces, 0))
        return _merge(reduce_scatter_phases(grid, rank, count, source, result, intra, inter, 0))
    return _merge(allreduce_phases(grid, rank, count, source, intra, inter, pieces))
