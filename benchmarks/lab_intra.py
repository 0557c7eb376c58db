"""The hierarchy's intra phase across the lab: suites/lab-intra.yaml (2 namespace hosts x 2 ranks;
pccl-hier ring/ring, ring/shm and rdma/shm beside the MPI library, timed in turns) at each link
setting, in rounds (benchmarks/lab_turns.py with that suite).

    python benchmarks/lab_intra.py [--rounds 3] [--links "bridge,50 us + 1 Gbit/s"] [--json FILE]   # as root

Per link, collective and size: the turn-by-turn ratios hier-ring / hier-shm (> 1: the in-place shm
phase is faster), hier-rdma / hier-shm (> 1: UCX puts between hosts slower than MPI's ring) and mpi /
hier-shm, and with a rate each arm's median over the bytes-over-rate bound of its schedule.
"""

from __future__ import annotations

from in_lab import ROOT  # beside this script
from lab_turns import main

if __name__ == "__main__":
    main(ROOT / "suites" / "lab-intra.yaml", "hier-ring/hier-shm,hier-rdma/hier-shm,mpi/hier-shm",
         doc=__doc__)
