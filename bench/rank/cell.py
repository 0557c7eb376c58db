"""One cell on every rank: fill the buffers, run the collective once, count wrong elements over
all ranks, then time it with the Cython loop. Host and device cells are one path: the job's
context (collectives/memory/context.py) says where the buffers live and how a call is waited for.

A GPU job opens one DeviceContext per device (probed, bound and agreed by every rank); a job
without a usable GPU reports every GPU cell ``unsupported`` with the reason, and the sweep goes on.
"""

from __future__ import annotations

import os
from dataclasses import replace

from bench.plan.cells import ARM_FIELDS, Cell, TimingPlan
from bench.rank import buffers, faults
from bench.rank.outcome import CellOutcome
from bench.rank.overlap import overlap_columns
from collectives import memory, spec
from collectives.call import BLOCKING, CallSpec
from collectives.impls import get
from collectives.schedules.resources import resources_of
from collectives.schedules.topology import Topology
from collectives.timing_plan import MAX_TURNS

#: a synthetic clock skew per rank, for tests on machines whose ranks share one clock
FAKE_CLOCK_VARIABLE = "PCCL_BENCH_FAKE_CLOCK"
#: the fields an arm may set, blanked to compare two arms' cells
ARM_BLANK = dict.fromkeys(ARM_FIELDS, "")


def context_for(topo: Topology | None, device: str):
    """The job's context for the memory kind ``device`` (collectives/memory: for GPUs collective over the
    topology's communicator), opened on first use and kept on the topology until close_contexts.
    ``topo`` None (no job: a look at a memory kind) opens one that nothing keeps."""
    if topo is None:
        return memory.get(device).open(topo, device)
    return topo.resources.open(f"context:{device}", lambda: memory.get(device).open(topo, device))


def clock_for(topo: Topology, timing: TimingPlan):
    """The rank's synchronised clock for window mode (or ``clock_sync``): one per job, kept on its
    topology, so the drift is fitted over its cells; None where the cell needs none."""
    if timing.mode != "window" and not timing.clock_sync:
        return None

    def start():
        from cython_ext.clock import SyncedClock, fake_skew

        return SyncedClock(*fake_skew(os.environ.get(FAKE_CLOCK_VARIABLE, ""), topo.comm.rank))

    return topo.resources.open("clock", start)


def close_contexts(topo: Topology | None) -> None:
    """End of a job, before MPI finalizes: what it opened, each once: on its topology (the memory
    contexts' NCCL/RCCL communicators, the clock; the transports' state on the node and rail
    communicators), then on its communicator (shm segment, UCX endpoints). None (the launch made no
    topology): nothing is open."""
    if topo is None:
        return
    topo.close()
    if topo.comm is not None:
        resources_of(topo.comm).close()


def call_of(cell: Cell) -> CallSpec:
    return CallSpec(cell.collective, cell.nranks, cell.count_per_rank, cell.dtype, cell.op,
                    cell.placement == "in_place", cell.algorithm, cell.intra or None, cell.inter or None, cell.nnodes,
                    nonblocking=cell.mode != BLOCKING)


def _not_run(outcome: CellOutcome, status: str, error: str) -> CellOutcome:
    """``outcome`` so far as a cell that was not timed."""
    return replace(outcome, status=status, error=error, samples_us=[], stop_reason=status)


def _allocate(context, call: CallSpec, rank: int, layout: buffers.Layout = buffers.WARM):
    """The check's inputs in the context's memory, at each of ``layout``'s positions: ([(send, recv),
    ...], "") or (None, why not)."""
    try:
        host_send, host_recv = spec.make_buffers(call, rank)
        placed = buffers.positions(context.backend, host_send, host_recv, layout)
        context.backend.synchronize()
    except (MemoryError, ValueError) as error:  # numpy: MemoryError / ValueError for absurd sizes
        return None, f"rank {rank}: cannot allocate the buffers: {type(error).__name__}: {error}"
    except Exception as error:  # CuPy's out of device memory, most often
        return None, f"rank {rank}: cannot allocate device buffers: {type(error).__name__}: {error}"
    return placed, ""


def layout_for(topo, cell: Cell, call: CallSpec) -> tuple[buffers.Layout, str]:
    """The buffer positions of ``cell`` (bench/rank/buffers.py), the same on every rank, and why not ("": fine)
    for cold where no rank can read its last-level cache size. The cache size is read once a job,
    the largest over its ranks (all of them walk as many positions)."""
    llc_bytes = 0
    if cell.buffers == "cold":
        llc_bytes, source = topo.resources.open("llc_bytes", lambda: _largest_cache(topo.comm))
        if not llc_bytes:
            return buffers.WARM, f"buffers cold: {source}: the cold set is sized from the last-level cache"
    return buffers.layout_of(cell.buffers, call, cell.buffers_max_count, llc_bytes), ""


def _largest_cache(comm) -> tuple[int, str]:
    """(bytes, where from) of the largest last-level cache of the job's ranks (0: none could say)."""
    from mpi4py import MPI

    size, source = buffers.last_level_cache()
    return comm.allreduce(size, op=MPI.MAX), source


def first_error(comm, error: str) -> str:
    """The error of the lowest rank that has one ("" when none has): one all-reduce of one integer
    (O(log p) messages of 8 bytes), and the text broadcast only when there is an error."""
    import numpy as np
    from mpi4py import MPI

    mine = np.array([comm.rank if error else comm.size], dtype=np.int64)
    lowest = np.empty_like(mine)
    comm.Allreduce(mine, lowest, op=MPI.MIN)
    return "" if lowest[0] == comm.size else comm.bcast(error, root=int(lowest[0]))


def total(comm, count: int) -> int:
    """The sum of one integer over the ranks, as a fixed-size buffer (no pickling)."""
    import numpy as np
    from mpi4py import MPI

    mine, summed = np.array([count], dtype=np.int64), np.empty(1, dtype=np.int64)
    comm.Allreduce(mine, summed, op=MPI.SUM)
    return int(summed[0])


def prepare_cell(topo, cell: Cell, timing: TimingPlan, check: bool,
                 where: tuple[int, str]) -> tuple[CellOutcome, object]:
    """Build, call once and check one cell: (its outcome so far, the op to time), or (the finished outcome
    of a cell that cannot be timed, None). ``where``: (index in the launch, launch id), for fault injection."""
    outcome, op, _ = _prepare(topo, cell, timing, check, where)
    return outcome, op


def _prepare(topo, cell: Cell, timing: TimingPlan, check: bool, where: tuple[int, str]):
    """prepare_cell's (outcome, op), and for a non-blocking cell the op that overlaps it with compute
    (the context's ``overlapped``; its compute is set once the pure time is known), else None."""

    comm = topo.comm
    call = call_of(cell)
    implementation = get(cell.impl)
    context = context_for(topo, cell.device)
    outcome = CellOutcome(status="", warmup=timing.warmup,
                          described={**implementation.describe(call, context).columns(), **context.columns()})
    reason = (f"device {cell.device}: {context.reason}" if context.reason
              else implementation.nonblocking_reason(call, context) or implementation.unsupported_reason(call, context))
    if reason:
        return _not_run(outcome, "unsupported", reason), None, None
    if call.nonblocking and cell.buffers != "warm":
        return _not_run(outcome, "unsupported", f"buffers {cell.buffers}: non-blocking cells are measured on warm "
                                                "buffers only (the overlapped call is built on one position)"), \
            None, None
    layout, reason = layout_for(topo, cell, call)
    if reason:
        return _not_run(outcome, "unsupported", reason), None, None
    placed, error = _allocate(context, call, comm.rank, layout)
    # every rank learns whether every rank has its buffers before anyone communicates
    if failed := first_error(comm, error):
        return _not_run(outcome, "failed", failed), None, None
    # one op per position, each built on its own buffers (a transport exchanges addresses per build)
    built = [implementation.build(topo, call, send, recv, context) for send, recv in placed]
    # what the op chose (shm's path, UCX's lanes)
    outcome.described.update(implementation.describe(call, context, built[0]).columns())
    outcome.described.update(layout.columns(call))
    ops = [context.timed(comm, op) for op in built]
    for op in ops:
        op()
    if context.on_device and context.xccl_transport in str(outcome.described.get("transport", "")):
        # NCCL/RCCL made its communicator in the first call: the network and version it chose
        outcome.described.update(context.xccl_columns())
    faults.before_check(comm.rank, *where, placed[-1][1])  # the last position: each one is checked
    if check:  # every position's result
        outcome.n_wrong = total(comm, sum(spec.count_wrong(call, comm.rank, recv, context.backend.xp)
                                          for _, recv in placed))
    if outcome.n_wrong:
        return _not_run(outcome, "wrong", f"{outcome.n_wrong} wrong elements over all ranks"
                        + (f" and {len(placed)} buffer positions" if len(placed) > 1 else "")), None, None
    overlapped = context.overlapped(comm, built[0], 0.0, timing.nb_test_calls) if call.nonblocking else None
    if len(ops) == 1:
        return outcome, ops[0], overlapped
    from cython_ext.core import Rotating

    return outcome, Rotating(comm, ops), overlapped


def _timed(outcome: CellOutcome, samples, info: dict, turns: str | None) -> CellOutcome:
    # the loop's stop_reason is the outcome's own field; the rest of what it reports, its timing columns
    timing = dict(info)
    stop_reason = timing.pop("stop_reason", None)
    if not len(samples):  # window mode: every iteration missed its window
        timed = replace(outcome, timing=timing, stop_reason=stop_reason, turns=turns)
        return _not_run(timed, "failed", f"timing: every one of the cell's calls missed its window "
                                         f"({info.get('window_missed', 0)} missed)")
    # finished in place, not copied: this runs between timed cells, and the outcome prepare_cell made
    # is the caller's to finish (run_cell, run_turns)
    outcome.timing, outcome.stop_reason, outcome.turns, outcome.status = timing, stop_reason, turns, "ok"
    outcome.samples_us = (samples * 1e6).tolist()
    return outcome


def _time(topo, outcomes: list[CellOutcome], ops: list, timing: TimingPlan,
          turns: str | None) -> list[CellOutcome]:
    """Time ``ops`` (one, or several in turns) in the one timing loop and finish their outcomes."""
    from cython_ext.timing import measure

    timed = measure(tuple(ops), topo.comm, timing, clock_for(topo, timing))
    return [_timed(outcome, samples, info, turns) for outcome, (samples, info) in zip(outcomes, timed, strict=True)]


def _overlap(topo, outcome: CellOutcome, overlapped, timing: TimingPlan) -> CellOutcome:
    """OSU's overlap of a non-blocking cell whose pure time (post + wait) was timed: the compute set to
    the median pure time (the same on every rank: the samples are the max over ranks), then post,
    compute, wait timed in the same loop; each call's compute and MPI_Test time the max over ranks."""
    import numpy as np
    from cython_ext.timing import measure
    from mpi4py import MPI

    if outcome.status != "ok":
        return outcome
    pure_us = float(np.median(outcome.samples_us))
    overlapped.compute_s = pure_us * 1e-6
    (samples, info), = measure((overlapped,), topo.comm, timing, clock_for(topo, timing))
    if not len(samples):
        return _not_run(outcome, "failed", "timing: every overlapped call missed its window")
    compute_s, test_s = overlapped.times(len(samples) + info.get("window_missed", 0))
    for times in (compute_s, test_s):
        topo.comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    outcome.overlap = overlap_columns(pure_us, samples, compute_s, test_s, timing.nb_test_calls)
    return outcome


def run_cell(topo, cell: Cell, timing: TimingPlan, check: bool, where: tuple[int, str]) -> CellOutcome:
    """Check, then time, one cell (a non-blocking one: its pure time, then its overlap with compute).
    ``where``: (index in the launch, launch id), for fault injection."""
    outcome, op, overlapped = _prepare(topo, cell, timing, check, where)
    if op is None:
        return outcome
    outcome = _time(topo, [outcome], [op], timing, None)[0]
    return outcome if overlapped is None else _overlap(topo, outcome, overlapped, timing)


def turn_partners(first: Cell, second: Cell) -> bool:
    """Two arms of the same cell, next to each other in a launch (bench.plan.cells.with_arms)."""
    return bool(first.arm and second.arm and first.arm != second.arm
                and replace(first, arm="", repeat=0, **ARM_BLANK) == replace(second, arm="", repeat=0, **ARM_BLANK))


def turn_group(cells: list[Cell], index: int) -> int:
    """How many cells from ``index`` on are arms of one cell, next to each other (1: a cell alone;
    at most MAX_TURNS, what the timing loop times in turns)."""
    size = 1
    while (size < MAX_TURNS and index + size < len(cells)
           and all(turn_partners(cells[index + k], cells[index + size]) for k in range(size))):
        size += 1
    return size


def run_turns(topo, cells: tuple[Cell, ...], timing: TimingPlan, check: bool,
              where: tuple[int, str]) -> list[CellOutcome]:
    """The arms of one cell timed in turns, iteration by iteration (``timing.turns: iteration``); a
    side that cannot be timed is reported alone and the others are timed in turns without it (one
    left: as a cell of its own)."""
    prepared = [_prepare(topo, cell, timing, check, where) for cell in cells]
    runnable = [k for k, (_, op, _) in enumerate(prepared) if op is not None]
    outcomes = [outcome for outcome, _, _ in prepared]
    if runnable:
        turns = "iteration" if len(runnable) > 1 else None
        timed = _time(topo, [outcomes[k] for k in runnable], [prepared[k][1] for k in runnable], timing, turns)
        for k, outcome in zip(runnable, timed, strict=True):
            overlapped = prepared[k][2]
            outcomes[k] = outcome if overlapped is None else _overlap(topo, outcome, overlapped, timing)
    return outcomes
