"""Run under mpiexec: every flat algorithm and every pccl-hier phase pair, bit for bit.

    mpiexec -n N python tests/mpi_scripts/check_hier.py RANKS_PER_NODE [MAX_MESSAGE_BYTES]

Virtual nodes of RANKS_PER_NODE ranks; a MAX_MESSAGE_BYTES argument shrinks the
executor's message piece size so the >1 GiB path runs on small buffers. Rank 0
prints a JSON summary last; exit code 1 on every rank if anything was wrong.
"""

from __future__ import annotations

import itertools
import json
import sys

import mpi4py

mpi4py.rc.thread_level = "single"

from checked_call import checked_call  # noqa: E402  (beside this script)
from cython_ext.executor import set_max_message_bytes  # noqa: E402
from mpi4py import MPI  # noqa: E402

from collectives.call import CallSpec  # noqa: E402
from collectives.impls import get  # noqa: E402
from collectives.schedules.topology import topology  # noqa: E402

#: direct: posted rows (every peer at once; all-reduce the one-shot whole buffer), direct+direct two-shot
FLAT = ["ring", "rd", "bruck", "rh+bruck", "ring+rd", "rdfull", "tree", "direct", "direct+direct", "rh+direct"]
PHASES = ["ring", "rd", "bruck", "mpi"]
#: all-reduce only: a whole-buffer rail phase; both levels whole (fused); the leaders alone on the rail
WHOLE_BUFFER_PAIRS = [("ring", "rdfull"), ("mpi", "rdfull"), ("bruck", "rdfull"), ("rdfull", "rdfull"),
                      ("tree", "rdfull"), ("ring", "direct"), ("tree", "direct")]
#: every collective: direct on the rail, within the node, both (all-reduce: whole buffer, fused)
DIRECT_PAIRS = [("ring", "direct"), ("direct", "direct"), ("mpi", "direct")]
#: pipelined: the rail's piece j + 1 posted while the node moves piece j (collectives/schedules/hier.py)
PIPELINED_PAIRS = [("ring", "ring*2"), ("bruck", "rd*3")]
DTYPE_OPS = [("float32", "sum"), ("int32", "max")]


def cases(nranks: int, pipelined: bool = True):
    """Every case at ``nranks``; ``pipelined`` False leaves the pipelined pairs out (their pieces make
    strided messages, which the shrunk piece size of the >1 GiB test cannot split)."""
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        counts = (1, 67) if collective != "allreduce" else (1, 3 * nranks + 2)
        variants = [("pccl-flat", algorithm, None, None) for algorithm in FLAT]
        pairs = list(itertools.product(PHASES, PHASES)) + DIRECT_PAIRS + (PIPELINED_PAIRS if pipelined else [])
        pairs += [pair for pair in WHOLE_BUFFER_PAIRS if collective == "allreduce" and pair not in pairs]
        variants += [("pccl-hier", None, intra, inter) for intra, inter in pairs]
        for (impl, algorithm, intra, inter), in_place, (dtype, op), count in itertools.product(
                variants, (False, True), DTYPE_OPS, counts):
            yield impl, CallSpec(collective, nranks, count, dtype, op, in_place, algorithm, intra, inter)


def posted_refusals(comm) -> list[str]:
    """The executor refuses a schedule that would leave posted messages in flight: one that ends posted,
    one that reaches an MPI-library row with messages in flight."""
    import numpy as np
    from cython_ext.executor import ScheduleOp

    from collectives.dtypes import dtype_code, op_code
    from collectives.schedules.rows import ACT_MPI_ALLREDUCE, RECV, SEND, Block, StepList

    peer, buffer = (comm.rank + 1) % comm.size, np.zeros(4)
    endings = {"ends posted": lambda steps: steps,
               "library row in flight":
                   lambda steps: steps.mpi_collective(ACT_MPI_ALLREDUCE, None, Block(RECV, 0, 1), 1)}
    missed = []
    for name, ending in endings.items():
        steps = StepList().step(send=(peer, Block(SEND, 0, 1)), recv=(peer, Block(RECV, 0, 1)), post=True)
        try:
            ScheduleOp([comm], ending(steps).build().steps, buffer.ctypes.data, buffer.ctypes.data,
                       buffer.ctypes.data, 8, dtype_code("float64"), op_code("sum"))
            missed.append(f"the executor took a schedule that {name}")
        except ValueError as error:
            if "posted" not in str(error):
                missed.append(f"a schedule that {name} refused for another reason: {error}")
    return missed


def main() -> int:
    comm = MPI.COMM_WORLD
    topo = topology(comm, int(sys.argv[1]))
    if len(sys.argv) > 2:
        set_max_message_bytes(int(sys.argv[2]))
    checked, skipped, failures = 0, 0, posted_refusals(comm)
    declined: set[str] = set()
    for impl, call in cases(comm.size, pipelined=len(sys.argv) <= 2):
        implementation = get(impl)
        if implementation.unsupported_reason(call):
            skipped += 1  # rdfull and tree are all-reduce only: the same answer on every rank
            declined.add(f"{impl} {call.collective} {call.algorithm or f'{call.inter}/{call.intra}'}")
            continue
        _, _, wrong = checked_call(implementation, topo, call, comm)
        checked += 1
        if wrong:
            failures.append(f"{impl} {call}: {wrong} wrong")
    if comm.rank == 0:
        print(json.dumps({"nranks": comm.size, "ranks_per_node": topo.grid.ranks_per_node, "checked": checked,
                          "skipped": skipped, "declined": sorted(declined), "failures": failures[:20]}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
