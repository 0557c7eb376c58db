"""Per-cell bookkeeping and topology in fixed-size exchanges (run under mpiexec -n N): the lowest
rank's error reaches every rank, counts sum, the hosts are known on every rank."""

from __future__ import annotations

import sys

from mpi4py import MPI

from bench.rank.cell import first_error, total
from collectives.schedules.topology import topology

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
assert first_error(comm, "") == ""
failing = {1, size - 1} if size > 1 else {0}
seen = first_error(comm, f"rank {rank} failed" if rank in failing else "")
assert seen == f"rank {min(failing)} failed", seen
assert total(comm, rank + 1) == size * (size + 1) // 2
topo = topology(comm)
assert topo.hosts == (MPI.Get_processor_name(),) and topo.ranks_per_host == size, (topo.hosts, topo.ranks_per_host)
virtual = topology(comm, 1)
assert virtual.grid.nnodes == size and virtual.virtual_nodes == (size > 1) and virtual.hosts == topo.hosts
if rank == 0:
    print("bookkeeping ok", size, file=sys.stderr)
