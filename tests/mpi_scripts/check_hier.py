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

FLAT = ["ring", "rd", "bruck", "rh+bruck", "ring+rd", "rdfull", "tree"]
PHASES = ["ring", "rd", "bruck", "mpi"]
#: all-reduce only: a whole-buffer rail phase; both levels whole (fused); the leaders alone on the rail
WHOLE_BUFFER_PAIRS = [("ring", "rdfull"), ("mpi", "rdfull"), ("bruck", "rdfull"), ("rdfull", "rdfull"),
                      ("tree", "rdfull")]
DTYPE_OPS = [("float32", "sum"), ("int32", "max")]


def cases(nranks: int):
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        counts = (1, 67) if collective != "allreduce" else (1, 3 * nranks + 2)
        variants = [("pccl-flat", algorithm, None, None) for algorithm in FLAT]
        pairs = list(itertools.product(PHASES, PHASES)) + (WHOLE_BUFFER_PAIRS if collective == "allreduce" else [])
        variants += [("pccl-hier", None, intra, inter) for intra, inter in pairs]
        for (impl, algorithm, intra, inter), in_place, (dtype, op), count in itertools.product(
                variants, (False, True), DTYPE_OPS, counts):
            yield impl, CallSpec(collective, nranks, count, dtype, op, in_place, algorithm, intra, inter)


def main() -> int:
    comm = MPI.COMM_WORLD
    topo = topology(comm, int(sys.argv[1]))
    if len(sys.argv) > 2:
        set_max_message_bytes(int(sys.argv[2]))
    checked, skipped, failures = 0, 0, []
    declined: set[str] = set()
    for impl, call in cases(comm.size):
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
