"""What the MPI library's own collectives do, as schedules the model can walk.

The model treats ``mpi`` as MPICH's classic algorithm selection (Thakur, Rabenseifner
and Gropp 2005; the MPIR_CVAR defaults of MPICH 3-4 and of Cray MPICH, which derives
from it): the thresholds below compare the nccl-tests ``size`` (bytes_total).

- all-gather: recursive doubling below 512 KiB when p is a power of two, else Bruck
  below 80 KiB, else ring;
- reduce-scatter (block, commutative op): recursive halving below 512 KiB, else
  pairwise exchange (p - 1 steps, step i sends block rank+i to rank+i);
- all-reduce: whole-buffer recursive doubling up to 2 KiB, else Rabenseifner
  (recursive-halving reduce-scatter + recursive-doubling all-gather).

Those switch points are MPICH's defaults (SWITCHES); Cray MPICH's differ and are not published, so
``model fit --per-impl`` fits them (bench/model/select.py) and the description carries them under
``libraries.mpi.switch_bytes``; every ``mpi`` call and every MPI-library phase of ``pccl-hier`` then
runs the fitted selection.

MPICH 4's shared-memory fast paths and JSON-tuned selection are not modelled.
"""

from __future__ import annotations

from collectives.schedules.algorithms import ALGORITHMS, schedule_for
from collectives.schedules.rows import RECV, SCRATCH, SEND, Block, ContiguousLayout, Schedule, StepList

ALLGATHER_SHORT_BYTES = 81920
ALLGATHER_LONG_BYTES = 524288
REDUCE_SCATTER_LONG_BYTES = 524288
ALLREDUCE_SHORT_BYTES = 2048
#: the selection's switch points, "<collective>.<algorithm run below it>" -> bytes_total (MPICH's defaults;
#: a description's ``libraries.mpi.switch_bytes`` overrides them where ``model fit --per-impl`` fitted them)
#: ``allgather.rd_ranks``: recursive doubling only below this many ranks (MPICH 4's JSON selection
#: splits by communicator size as well as by size; the classic defaults have no such limit)
SWITCHES = {"allgather.rd": ALLGATHER_LONG_BYTES, "allgather.rd_ranks": 1 << 50,
            "allgather.bruck": ALLGATHER_SHORT_BYTES, "reduce_scatter.rh": REDUCE_SCATTER_LONG_BYTES,
            "allreduce.rdfull": ALLREDUCE_SHORT_BYTES}


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def mpich_algorithm(collective: str, nranks: int, bytes_total: int, switches: dict[str, int] | None = None) -> str:
    """The algorithm MPICH's selection runs for this call: its defaults, or the fitted ``switches``."""
    limit = {**SWITCHES, **(switches or {})}
    if collective == "allgather":
        if bytes_total < limit["allgather.rd"] and nranks < limit["allgather.rd_ranks"] and _power_of_two(nranks):
            return "rd"
        return "bruck" if bytes_total < limit["allgather.bruck"] else "ring"
    if collective == "reduce_scatter":
        return "rh" if bytes_total < limit["reduce_scatter.rh"] else "pairwise"
    if bytes_total <= limit["allreduce.rdfull"] and "rdfull" in ALGORITHMS:
        return "rdfull"
    return "rh+rd"


def pairwise_reduce_scatter(nranks: int, rank: int, count: int, in_place: bool) -> Schedule:
    """MPICH's long-message reduce-scatter: at step i send block rank+i to rank+i, receive
    rank-i's contribution to my block and add it in; partial sums live in scratch."""
    source = ContiguousLayout(RECV if in_place else SEND, (count,) * nranks)
    total, incoming = Block(SCRATCH, 0, count), Block(SCRATCH, count, count)
    steps = StepList()
    steps.step(copy=(source.block(rank), total))
    for i in range(1, nranks):
        to, source_rank = (rank + i) % nranks, (rank - i) % nranks
        steps.step(send=(to, source.block(to)), recv=(source_rank, incoming), reduce=(incoming, total, total))
    steps.step(copy=(total, Block(RECV, 0, count)))
    return steps.build()


def rh_distance_doubling(nranks: int, rank: int, count: int, in_place: bool) -> Schedule:
    """Recursive halving with partner rank XOR 1, 2, 4 ... (the PCCL reproducer's own ``mpi``
    reduce-scatter, ``pairwise_recursive_halving_reduce_scatter`` over ``Sendrecv``): step k
    sends half of the current window (p count / 2^(k+1) elements) and adds the partner's half.
    With consecutive ranks on a node, the large first halves stay inside the node and only the
    last log2(nodes) steps, carrying 1/ranks_per_node of the data or less, cross the network.
    p a power of two (the reproducer asserts it); any other p falls back to MPICH's ``rh``."""
    if nranks & (nranks - 1):
        return schedule_for("reduce_scatter", "rh", nranks, rank, count, in_place)
    source = Block(RECV if in_place else SEND, 0, count * nranks)
    window = count * nranks
    steps = StepList()
    steps.step(copy=(source, Block(SCRATCH, 0, window)))
    mask = 1
    while mask < nranks:
        half = window // 2
        keep, incoming = Block(SCRATCH, 0, half), Block(SCRATCH, count * nranks, half)
        steps.step(send=(rank ^ mask, Block(SCRATCH, half, half)), recv=(rank ^ mask, incoming),
                   reduce=(incoming, keep, keep))
        window, mask = half, mask << 1
    steps.step(copy=(Block(SCRATCH, 0, count), Block(RECV, 0, count)))
    return steps.build()


def mpich_schedule(collective: str, algorithm: str, nranks: int, rank: int, count: int, in_place: bool) -> Schedule:
    """One rank's steps of MPICH's ``algorithm`` (as named by mpich_algorithm)."""
    if algorithm == "pairwise":
        return pairwise_reduce_scatter(nranks, rank, count, in_place)
    if algorithm == "rh-dd":
        return rh_distance_doubling(nranks, rank, count, in_place)
    return schedule_for(collective, algorithm, nranks, rank, count, in_place)
