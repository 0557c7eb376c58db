"""Run under mpiexec: the one-sided (UCX) collectives, bit for bit, and the setup-once property.

    mpiexec -n N python tests/mpi_scripts/check_rdma.py EXPECTED_TRANSPORT [MODE]

Every collective, in and out of place, a few dtypes/ops and counts (zero-sized segments
included), through the ``rdma`` implementation exactly as the worker runs it (build, one
call, count wrong elements), then more calls with UCX's registration and rkey-unpack
counters unchanged. EXPECTED_TRANSPORT (``ucx:cma``, ``ucx:tcp``; ``-`` for any) must be
what the implementation describes after building. Rank 0 prints a JSON summary last;
exit 1 if anything was wrong.

MODE: ``full`` (default); ``quick`` (fewer dtypes and repeated calls, for slow transports);
``hier`` (virtual nodes of 2: pccl-hier schedules with the inter-node phase one-sided, through
collectives.executors.compose.schedule_op with the rdma transport, the way ``inter: rdma`` runs
them); ``cuda`` (CuPy buffers on the GPU of the local rank, where a GPU, CuPy and a CUDA-capable
UCX are present: the device check; prints the verdict and stops where one is missing); faults: ``peer-exits``
(rank 1 leaves in the middle of setup) and ``peer-stalls`` (rank 1 never makes the call, so
rank 0's wait must time out).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

import mpi4py

mpi4py.rc.thread_level = "single"

from checked_call import checked_call  # noqa: E402  (beside this script)
from mpi4py import MPI  # noqa: E402

from collectives.call import CallSpec  # noqa: E402
from collectives.impls import get  # noqa: E402
from collectives.schedules.topology import topology  # noqa: E402
from collectives.spec import count_wrong, make_buffers  # noqa: E402
from collectives.transports.rdma import ops as rdma  # noqa: E402

DTYPE_OPS = [("float32", "sum"), ("int32", "max"), ("float64", "prod")]
EXTRA_CALLS = {"full": 20, "quick": 3}


def cases(nranks: int, mode: str):
    dtype_ops = DTYPE_OPS if mode == "full" else DTYPE_OPS[:1]
    for collective, in_place, (dtype, op) in itertools.product(
            ("allgather", "reduce_scatter", "allreduce"), (False, True), dtype_ops):
        counts = (1, 1000) if collective != "allreduce" else (1, nranks - 1, 3 * nranks + 2, 4096)
        for count in counts:
            yield CallSpec(collective, nranks, count, dtype, op, in_place)


def check_all(comm, topo, expected: str, mode: str) -> dict:
    from cython_ext import ucx

    implementation = get("rdma")
    failures, checked, transports = [], 0, set()
    extra_calls = EXTRA_CALLS[mode]
    for call in cases(comm.size, mode):
        reason = implementation.unsupported_reason(call)
        if reason:
            failures.append(f"{call}: unsupported: {reason}")
            continue
        op, (sendbuf, recvbuf), wrong = checked_call(implementation, topo, call, comm)
        before = ucx.counters()
        for _ in range(extra_calls):
            op()
        if not call.in_place:  # out of place the result must survive repeated calls
            wrong += comm.allreduce(count_wrong(call, comm.rank, recvbuf), op=MPI.SUM)
        grew = {key: ucx.counters()[key] - value for key, value in before.items() if ucx.counters()[key] != value}
        checked += 1
        transports.add(implementation.describe(call, op=op).transport)
        if wrong:
            failures.append(f"{call}: {wrong} wrong")
        if grew:
            failures.append(f"{call}: setup repeated inside calls: {grew}")
        if op.calls != 1 + extra_calls or op.facts["registrations"] < 2:
            failures.append(f"{call}: calls {op.calls}, facts {op.facts}")
    if expected and transports != {expected}:
        failures.append(f"transport {sorted(transports)}, expected {expected}")
    if mode == "full":
        checked += check_device_path(comm, failures)
    return {"checked": checked, "transports": sorted(transports), "failures": failures[:20],
            "counters": ucx.counters(), "ucx": rdma.ucx_library()[0]}


def check_device_path(comm, failures: list) -> int:
    """The device-buffer code path (local copies and reductions through DeviceKernels, with the
    GIL) on emulated device memory: numpy arrays behind collectives.memory.backends.HostEmulation."""
    from collectives.memory.backends import HostEmulation

    backend, checked = HostEmulation(), 0
    for call in cases(comm.size, "quick"):
        sendbuf, recvbuf = make_buffers(call, comm.rank)
        op = rdma.build(comm, call.collective, sendbuf, recvbuf, call.count, call.dtype, call.op, backend=backend)
        op()
        wrong = comm.allreduce(count_wrong(call, comm.rank, recvbuf), op=MPI.SUM)
        checked += 1
        if wrong:
            failures.append(f"device path {call}: {wrong} wrong")
    return checked


def check_hier(comm, mode: str) -> dict:
    """pccl-hier schedules whose inter-node (rail) phase is the library phase, run one-sided."""
    import numpy as np

    from collectives import transports
    from collectives.dtypes import numpy_dtype
    from collectives.executors.compose import LIBRARY_ACTIONS, schedule_op
    from collectives.memory.context import HOST
    from collectives.schedules.hier import hier_schedule
    from collectives.schedules.rows import COMM_INTER
    from cython_ext import rdma as ops
    from cython_ext import ucx

    topo = topology(comm, 2)
    failures, checked, moved = [], 0, set()
    for call in cases(comm.size, "quick"):
        schedule = hier_schedule(call.collective, topo.grid, comm.rank, call.count, call.in_place, "ring", "mpi")
        sendbuf, recvbuf = make_buffers(call, comm.rank)
        scratch = np.empty(schedule.scratch, dtype=numpy_dtype(call.dtype))
        cuts = {(COMM_INTER, action): transports.get("rdma") for action in LIBRARY_ACTIONS}
        op = schedule_op(HOST, topo.comms, schedule.steps, (sendbuf, recvbuf, scratch), call.dtype, call.op, cuts)
        one_sided = sum(isinstance(part, ops.OneSidedOp) for part in op.parts)
        moved.update(part.moved_by for part in op.parts if isinstance(part, ops.OneSidedOp))
        op()
        wrong = comm.allreduce(count_wrong(call, comm.rank, recvbuf), op=MPI.SUM)
        before = ucx.counters()
        for _ in range(EXTRA_CALLS["quick"]):
            op()
        if not call.in_place:
            wrong += comm.allreduce(count_wrong(call, comm.rank, recvbuf), op=MPI.SUM)
        checked += 1
        # an all-reduce of fewer elements than ranks is all tail: no rail phase to run one-sided
        expected = 1 if call.collective != "allreduce" else (2 if call.count >= comm.size else 0)
        if wrong or one_sided != expected or ucx.counters() != before:
            failures.append(f"{call}: {wrong} wrong, {one_sided} one-sided phases")
    return {"checked": checked, "transports": sorted(moved), "failures": failures[:20]}


def check_cuda(comm) -> dict:
    """CuPy buffers through the same ops (GPU memory mapped, puts from and to it, reductions by CuPy)."""
    import time

    from collectives.memory.backends import CupyBackend, local_rank, probe
    from cython_ext import ucx

    found = probe("cuda")
    if found.reason:
        return {"checked": 0, "failures": [], "verdict": f"no GPU: {found.reason}"}
    backend = CupyBackend("cuda", local_rank(comm) % found.count)
    xp = backend.xp
    reason = comm.allgather(rdma.device_reason("cuda", backend))
    memory_types = rdma.worker().memory_types()
    if any(reason):
        return {"checked": 0, "failures": [], "verdict": f"unsupported: {reason[0]}", "memory_types": memory_types,
                "ucx": rdma.ucx_library()}
    failures, checked, facts, timings = [], 0, set(), {}
    for call in [*cases(comm.size, "quick"), CallSpec("allreduce", comm.size, 16 << 20),
                 CallSpec("allgather", comm.size, 4 << 20), CallSpec("reduce_scatter", comm.size, 4 << 20)]:
        host_send, host_recv = make_buffers(call, comm.rank)
        sendbuf = None if host_send is None else xp.asarray(host_send)
        recvbuf = xp.asarray(host_recv)
        backend.synchronize()
        op = rdma.build(comm, call.collective, sendbuf, recvbuf, call.count, call.dtype, call.op, backend=backend)
        op()
        backend.synchronize()
        wrong = comm.allreduce(count_wrong(call, comm.rank, recvbuf, xp), op=MPI.SUM)
        before = ucx.counters()
        comm.Barrier()
        started = time.perf_counter()
        for _ in range(EXTRA_CALLS["full"]):
            op()
        backend.synchronize()
        elapsed = (time.perf_counter() - started) / EXTRA_CALLS["full"]
        if not call.in_place:
            wrong += comm.allreduce(count_wrong(call, comm.rank, recvbuf, xp), op=MPI.SUM)
        checked += 1
        facts.add((op.facts["transport"], op.facts["memory_type"], op.facts["ordering"]))
        timings[f"{call.collective} {call.count * 4} B/rank"] = round(comm.allreduce(elapsed, op=MPI.MAX) * 1e6, 1)
        if wrong or ucx.counters() != before:
            failures.append(f"{call}: {wrong} wrong, counters {before} -> {ucx.counters()}")
    return {"checked": checked, "failures": failures[:20], "verdict": "ran", "facts": sorted(facts),
            "memory_types": memory_types, "ucx": rdma.ucx_library(), "us_per_call": timings}


def fault(comm, topo, kind: str) -> int:
    call = CallSpec("allreduce", comm.size, 64)
    sendbuf, recvbuf = make_buffers(call, comm.rank)
    if kind == "peer-exits":
        rdma.endpoints(comm)
        if comm.rank == 1:
            os._exit(3)  # gone before the buffers are exchanged: the others must not hang
        get("rdma").build(topo, call, sendbuf, recvbuf)
        return 0
    op = get("rdma").build(topo, call, sendbuf, recvbuf)
    if comm.rank == 1:
        time.sleep(float(os.environ["PCCL_RDMA_TIMEOUT_S"]) * 3)  # never makes the call
        return 0
    started = time.monotonic()
    try:
        op()
    except rdma_errors() as error:
        print(json.dumps({"rank": comm.rank, "error": str(error), "waited_s": time.monotonic() - started}),
              flush=True)
        os._exit(4)
    return 0


def rdma_errors():
    from cython_ext.ucx import UcxError

    return UcxError


def main() -> int:
    comm = MPI.COMM_WORLD
    topo = topology(comm)
    expected = sys.argv[1].strip("-")
    mode = sys.argv[2] if len(sys.argv) > 2 else "full"
    if mode == "hier":
        summary = check_hier(comm, mode)
    elif mode == "cuda":
        summary = check_cuda(comm)
    elif mode not in EXTRA_CALLS:
        return fault(comm, topo, mode)
    else:
        summary = check_all(comm, topo, expected, mode)
    if comm.rank == 0:
        print(json.dumps({"nranks": comm.size, **summary}))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
