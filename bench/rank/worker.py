"""The MPI worker: ``python -m bench.rank.worker PLAN.json`` on every rank.

Importing it does not initialise MPI: ``main`` reads the plan, binds the rank's GPU for a GPU
launch, then initialises MPI (bench/rank/mpi_start.py).

For each cell of the plan, bench/rank/cell.py checks then times it (host and device cells
alike). Rank 0 appends one JSON row per finished cell to the launch's part file, flushed
and synced, so an interrupted sweep keeps every finished cell.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from bench.rank.mpi_start import defer_mpi_init, plan_file_device, start_mpi

# Before mpi4py.MPI is first imported: the import loads the library without MPI_Init, so a GPU rank
# binds its device first (start_mpi). The thread level is recorded in every row.
defer_mpi_init()
if __name__ == "__main__" and len(sys.argv) == 2:
    # Run as the worker: the GPU, then MPI_Init, before the imports below fill the process. Started
    # after them, MPICH's UCX address (with bytes the process's memory left in it) broke Slurm's pmi2
    # requests in 3 of 4 runs of tests/bench/driver/test_slurm.py (0 of 2 started here: docs/CLUSTERS-SLURM.md).
    start_mpi(plan_file_device(sys.argv[1]))

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from bench.plan.cells import LaunchPlan  # noqa: E402
from bench.rank import hostfacts  # noqa: E402
from bench.rank.cell import close_contexts, run_cell, run_turns, turn_group  # noqa: E402
from bench.rank.outcome import LaunchFacts, MeasuredPlacement, part_row, site_env_digest  # noqa: E402
from bench.rank.parts import append_rows, sync_file  # noqa: E402
from bench.rank.probe import Probe  # noqa: E402
from collectives.libraries.mpi_library import extension_mpi_mismatch  # noqa: E402
from collectives.schedules.topology import ShapeError, Topology, topology  # noqa: E402

THREAD_LEVELS = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
                 MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}


def _disable_numpy_hugepages() -> None:
    # C benchmarks use plain malloc; numpy's huge-page advice shifts large-buffer timings.
    try:
        np._core.multiarray._set_madvise_hugepage(False)
    except AttributeError:
        pass


def launch_facts(comm: MPI.Comm, requested_ranks_per_node: int | None,
                 plan: LaunchPlan | None = None) -> tuple[Topology | None, LaunchFacts]:
    """The topology and what it decides for the rows (the measured placement), or None and why the
    launch cannot run (also where the ranks are not where ``plan`` put them)."""
    thread_level = THREAD_LEVELS.get(MPI.Query_thread(), "unknown")
    site = site_env_digest(plan.site_env if plan is not None else [], os.environ)
    # Before any compiled MPI call: with two MPI libraries in the process the first one aborts.
    mismatch = extension_mpi_mismatch()
    if mismatch:
        return None, LaunchFacts(thread_level, error=f"build: {mismatch}", site_env_digest=site)
    try:
        topo = topology(comm, requested_ranks_per_node)
    except ShapeError as error:
        return None, LaunchFacts(thread_level, error=f"placement: {error}", site_env_digest=site)
    misplaced = hostfacts.placement_problem(plan, topo) if plan is not None else None
    if misplaced:
        return None, LaunchFacts(thread_level, error=f"placement: {misplaced}", site_env_digest=site)
    return topo, LaunchFacts(thread_level, MeasuredPlacement.of(topo), site_env_digest=site)


def record_placement(comm: MPI.Comm, part: Path) -> None:
    """``parts/<launch>.placement.json``: each host of the job, its machine and its ranks; and
    ``parts/<launch>.ranks.json``: each rank's host and the variables its launcher set (gathered to
    rank 0 only: O(p) there, nothing on the others)."""
    here = (MPI.Get_processor_name(), hostfacts.boot_id(), hostfacts.rank_env())
    placed = comm.gather(here, root=0)
    if comm.rank != 0:
        return
    hosts: dict[str, dict] = {}
    for rank, (name, boot_id, _) in enumerate(placed):
        entry = hosts.setdefault(name, {"hostname": name, "boot_id": boot_id, "first_rank": rank, "ranks": 0})
        entry["ranks"] += 1
    part.with_suffix(".placement.json").write_text(json.dumps(list(hosts.values())))
    ranks = [{"rank": rank, "host": name, "env": env} for rank, (name, _, env) in enumerate(placed)]
    part.with_suffix(".ranks.json").write_text(json.dumps(ranks))


def record_gpus(topo: Topology | None, part: Path, rank: int) -> bool:
    """``parts/<launch>.gpus.json`` once a GPU context is open: every rank's GPU (index, PCI bus id,
    NUMA node, its CPUs against it: DeviceContext.placements). True once written (rank 0) or
    there to write (the others)."""
    if topo is None:
        return False
    # asked after every cell until a GPU context has placements: one pass over the names
    resources = topo.resources
    for name in resources.names():
        if name.startswith("context:") and (placements := getattr(resources.get(name), "placements", None)):
            break
    else:
        return False
    if rank == 0:
        part.with_suffix(".gpus.json").write_text(json.dumps(placements))
    return True


def run_plan(plan: LaunchPlan, comm: MPI.Comm) -> None:
    """Check then time every cell of one launch; rank 0 appends the rows to the launch's part file."""
    _disable_numpy_hugepages()
    part = Path(plan.part)
    record_placement(comm, part)
    topo, facts = launch_facts(comm, plan.requested_ranks_per_node, plan)
    # the machine-speed reference, measured after every cell (bench/rank/probe.py)
    probe = Probe(topo) if topo is not None and plan.timing.probe else None
    gpus_recorded = False
    index = 0
    while index < len(plan.cells):
        cell = plan.cells[index]
        # the arms of one cell, next to each other: timed in turns, iteration by iteration
        group = turn_group(plan.cells, index) if topo is not None and plan.timing.turns == "iteration" else 1
        cells = plan.cells[index:index + group]
        if comm.rank == 0:
            for one in cells:
                print(json.dumps({"event": "start", "cell_key": one.key}), flush=True)
        started = time.time()
        # A shape that does not fit fails every cell of the launch with the reason.
        if topo is None:
            outcomes = [facts.failure()]
        elif group > 1:
            outcomes = run_turns(topo, tuple(cells), plan.timing, plan.check, (index, plan.launch_id))
        else:
            outcomes = [run_cell(topo, cell, plan.timing, plan.check, (index, plan.launch_id))]
        if probe is not None:
            measured = probe.measure()
            for outcome in outcomes:
                outcome.probe = measured
        if comm.rank == 0:
            append_rows(part, [part_row(one, outcome, started, plan.launch_id, facts, plan.row_extra)
                               for one, outcome in zip(cells, outcomes, strict=True)], sync=None)
        gpus_recorded = gpus_recorded or record_gpus(topo, part, comm.rank)
        index += len(cells)
    if comm.rank == 0:
        sync_file(part)
    close_contexts(topo)  # NCCL/RCCL communicators of GPU cells, shm and UCX state, before MPI finalizes


def plan_device(plan: LaunchPlan) -> str:
    """The memory kind of the launch's cells (a suite has one; host where the plan has none)."""
    return plan.cells[0].device if plan.cells else "host"


def main(plan_path: str, mpi_started: bool = False) -> int:
    """One launch's worker; ``mpi_started``: the GPU bound and MPI initialised already (run as a program)."""
    plan = LaunchPlan.read(plan_path)
    if not mpi_started:
        start_mpi(plan_device(plan))  # the GPU first, then MPI_Init_thread
    comm = MPI.COMM_WORLD
    if comm.size != plan.nranks:
        raise SystemExit(f"worker: launched on {comm.size} ranks, plan wants {plan.nranks}")
    run_plan(plan, comm)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m bench.rank.worker PLAN.json")
    try:
        sys.exit(main(sys.argv[1], mpi_started=True))
    except SystemExit:
        raise
    except BaseException:
        # A rank that fails mid-collective would leave the others waiting: end the whole job.
        import traceback  # only a failing rank needs it: not every rank's start-up

        traceback.print_exc()
        sys.stderr.flush()
        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.COMM_WORLD.Abort(1)
        sys.exit(1)  # before MPI_Init (a plan it cannot read): no job to end yet
