"""The worker's path for ``cuda``/``rocm`` cells: device buffers, device ops, the check on the GPU.

One DeviceContext per job and device (collectives/gpu_context.py: probed, bound and
agreed by every rank). A job without a usable GPU reports every GPU cell
``unsupported`` with the reason, and the sweep goes on.
"""

from __future__ import annotations

from bench import collspec, faults
from bench.gpu_timing import time_device_op
from collectives.call import CallSpec
from collectives.gpu_context import DeviceContext, open_device

_CONTEXTS: dict[tuple[int, str], DeviceContext] = {}


def device_context(topo, device: str) -> DeviceContext:
    """The job's context for ``device`` (collective over the topology's communicator on first use)."""
    key = (id(topo), device)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = open_device(topo, device)
    return _CONTEXTS[key]


def close_contexts() -> None:
    """End of a job: the NCCL/RCCL communicators of every context, before MPI finalizes."""
    while _CONTEXTS:
        _, context = _CONTEXTS.popitem()
        if context.communicators is not None:
            context.communicators.close()


def _not_run(row: dict, status: str, error: str) -> dict:
    return {**row, "status": status, "error": error, "iters": 0, "samples_us": []}


def _allocate(context: DeviceContext, call: CallSpec, rank: int):
    """Host-filled inputs copied to the device; (send, recv) or the error text."""
    host_send, host_recv = collspec.make_buffers(call, rank)
    try:
        backend = context.backend
        send = None if host_send is None else backend.from_host(host_send)
        recv = backend.from_host(host_recv)
        backend.synchronize()
    except Exception as error:  # out of device memory, most often
        return None, f"rank {rank}: cannot allocate device buffers: {type(error).__name__}: {error}"
    return (send, recv), ""


def run_device_cell(topo, call: CallSpec, implementation, cell: dict, timing: dict, check: bool,
                    where: tuple[int, str]) -> dict:
    """Check, then time, one GPU cell (the device twin of bench.worker.run_cell)."""
    from mpi4py import MPI

    comm = topo.comm
    context = device_context(topo, cell["device"])
    row = {**implementation.describe_device(call, context), "warmup": timing["warmup"], "n_wrong": 0, "error": "",
           # kept in the part files (the table has no columns for them yet)
           "gpu_aware_how": context.gpu_aware.how, "gpu_binding": context.binding}
    reason = (f"device {cell['device']}: {context.reason}" if context.reason
              else implementation.device_unsupported_reason(call, context))
    if reason:
        return _not_run(row, "unsupported", reason)
    buffers, error = _allocate(context, call, comm.rank)
    # every rank learns whether every rank has its buffers before anyone communicates
    errors = [text for text in comm.allgather(error) if text]
    if errors:
        return _not_run(row, "failed", errors[0])
    send, recv = buffers
    backend = context.backend
    op = implementation.build_device(topo, call, send, recv, context)
    op()
    backend.synchronize()
    faults.before_check(comm.rank, *where, recv)
    if check:
        row["n_wrong"] = comm.allreduce(collspec.count_wrong(call, comm.rank, recv, backend.xp), op=MPI.SUM)
    if row["n_wrong"]:
        return _not_run(row, "wrong", f"{row['n_wrong']} wrong elements over all ranks")
    samples = time_device_op(op, backend.synchronize, comm, timing["mode"], timing["warmup"], timing["iters"],
                             timing["min_iters"], timing["budget_s"])
    return {**row, "status": "ok", "iters": len(samples), "samples_us": (samples * 1e6).tolist()}
