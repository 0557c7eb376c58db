"""One cell on every rank: fill the buffers, run the collective once, count wrong elements over
all ranks, then time it with the Cython loop. Host and device cells are one path: the job's
context (collectives/context.py) says where the buffers live and how a call is waited for.

A GPU job opens one DeviceContext per device (probed, bound and agreed by every rank); a job
without a usable GPU reports every GPU cell ``unsupported`` with the reason, and the sweep goes on.
"""

from __future__ import annotations

from bench.plan.cells import Cell, TimingPlan
from bench.run import faults
from collectives import spec
from collectives.call import CallSpec
from collectives.context import HOST
from collectives.impls import get

_CONTEXTS: dict[tuple[int, str], object] = {}


def context_for(topo, device: str):
    """The job's context for ``device`` (for GPUs: collective over the topology's communicator on first use)."""
    if device == "host":
        return HOST
    key = (id(topo), device)
    if key not in _CONTEXTS:
        from collectives.gpu_context import open_device

        _CONTEXTS[key] = open_device(topo, device)
    return _CONTEXTS[key]


def close_contexts() -> None:
    """End of a job: what the contexts hold (NCCL/RCCL communicators), before MPI finalizes."""
    while _CONTEXTS:
        _, context = _CONTEXTS.popitem()
        context.close()


def call_of(cell: Cell) -> CallSpec:
    return CallSpec(cell.collective, cell.nranks, cell.count_per_rank, cell.dtype, cell.op,
                    cell.placement == "in_place", cell.algorithm, cell.intra or None, cell.inter or None, cell.nnodes)


def _not_run(row: dict, status: str, error: str) -> dict:
    return {**row, "status": status, "error": error, "iters": 0, "samples_us": [], "stop_reason": status}


def _allocate(context, call: CallSpec, rank: int):
    """The check's inputs in the context's memory; ((send, recv), "") or (None, why not)."""
    try:
        host_send, host_recv = spec.make_buffers(call, rank)
        backend = context.backend
        send = None if host_send is None else backend.from_host(host_send)
        recv = backend.from_host(host_recv)
        backend.synchronize()
    except (MemoryError, ValueError) as error:  # numpy: MemoryError / ValueError for absurd sizes
        return None, f"rank {rank}: cannot allocate the buffers: {type(error).__name__}: {error}"
    except Exception as error:  # CuPy's out of device memory, most often
        return None, f"rank {rank}: cannot allocate device buffers: {type(error).__name__}: {error}"
    return (send, recv), ""


def run_cell(topo, cell: Cell, timing: TimingPlan, check: bool, where: tuple[int, str]) -> dict:
    """Check, then time, one cell; the outcome fields of its row. ``where``: (index in the launch,
    launch id), for fault injection."""
    from cython_ext.timing import time_cell
    from mpi4py import MPI

    comm = topo.comm
    call = call_of(cell)
    implementation = get(cell.impl)
    context = context_for(topo, cell.device)
    row = {**implementation.describe(call, context), "warmup": timing.warmup, "n_wrong": 0, "error": ""}
    if context.on_device:
        row.update(gpu_aware_how=context.gpu_aware.how, gpu_binding=context.binding)
    reason = (f"device {cell.device}: {context.reason}" if context.reason
              else implementation.unsupported_reason(call, context))
    if reason:
        return _not_run(row, "unsupported", reason)
    buffers, error = _allocate(context, call, comm.rank)
    # every rank learns whether every rank has its buffers before anyone communicates
    errors = [text for text in comm.allgather(error) if text]
    if errors:
        return _not_run(row, "failed", errors[0])
    send, recv = buffers
    op = context.timed(comm, implementation.build(topo, call, send, recv, context))
    row.update(implementation.describe(call, context))  # what the op really uses (UCX's transport) is known now
    op()
    faults.before_check(comm.rank, *where, recv)
    if check:
        row["n_wrong"] = comm.allreduce(spec.count_wrong(call, comm.rank, recv, context.backend.xp), op=MPI.SUM)
    if row["n_wrong"]:
        return _not_run(row, "wrong", f"{row['n_wrong']} wrong elements over all ranks")
    samples, info = time_cell(op, comm, timing.mode, timing.warmup, timing.iters, timing.min_iters, timing.budget_s,
                              timing.target_ci, timing.max_warmup, timing.warm_tol)
    return {**row, **info, "status": "ok", "iters": len(samples), "samples_us": (samples * 1e6).tolist()}
