"""Run under mpiexec: the shared-memory collectives, bit for bit, every dtype and op, every path.

    mpiexec -n N python tests/mpi_scripts/check_shm.py [MODE]

MODE ``full`` (default): every collective x dtype x op x placement, counts that cross the
LL / copy / cma cut-overs and the chunk boundaries (the job runs with small cut-overs and
chunks, set by the test through PCCL_SHM_*), once through the ``shm`` implementation as the
worker builds it (path by size) and once per forced path; out of place each op is called
three times and checked after the last (the results survive repeated calls and interleaved
ops on one segment); then the ranks' blocks interleaved (``pieces``, ``stride``: how pccl-hier's
intra phase reads and writes them in place), every path, the elements between the pieces untouched.
``hier [PER_NODE]``: pccl-hier with ``intra: shm`` on virtual nodes of PER_NODE (2), every inter phase.
Faults: ``peer-stalls`` (rank 1 never calls: rank 0's wait must time out with the reason),
``peer-exits`` (rank 1 dies in the middle of the call). Rank 0 prints a JSON summary last;
exit 1 if anything was wrong.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

import mpi4py
import numpy as np

mpi4py.rc.thread_level = "single"

from mpi4py import MPI  # noqa: E402

from collectives.call import CallSpec  # noqa: E402
from collectives.dtypes import DTYPES, OPS  # noqa: E402
from collectives.impls import get  # noqa: E402
from collectives.schedules.rows import rank_block_index  # noqa: E402
from collectives.schedules.topology import topology  # noqa: E402
from collectives.spec import count_wrong, expected_output, make_buffers  # noqa: E402
from collectives.transports.shm import ops as shm  # noqa: E402

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")


def counts(collective: str, nranks: int) -> tuple[int, ...]:
    """Per-rank counts across the test's cut-overs (LL <= 256 B, one-shot <= 1 KiB, cma >= 8 KiB
    total, 1 KiB chunks)."""
    if collective == "allreduce":
        return (1, nranks - 1, 3 * nranks + 1, 50, 700, 5000)
    return (1, 3, 150, 2100 // nranks)


def run_case(comm, call: CallSpec, path: str | None, topo, failures: list, paths: set) -> None:
    sendbuf, recvbuf = make_buffers(call, comm.rank)
    if path is None:
        op = get("shm").build(topo, call, sendbuf, recvbuf)
    else:
        op = shm.build(comm, call.collective, sendbuf, recvbuf, call.count, call.dtype, call.op, path=path)
    paths.add(op.moved_by.removeprefix("shm:"))
    for _ in range(1 if call.in_place else 3):
        op()
    wrong = count_wrong(call, comm.rank, recvbuf)
    if wrong:
        failures.append(f"rank {comm.rank} {call} by {op.moved_by}: {wrong} wrong")


def gathered(comm, failures: list) -> list:
    """Every rank's failures, on every rank."""
    return [text for part in comm.allgather(failures) for text in part]


def check_interleaved(comm, call: CallSpec, pieces: int, path: str, failures: list) -> None:
    """One op on the ranks' blocks interleaved (rank q's k-th piece at q * piece + k * stride, a gap of 3
    elements after the last rank's piece): the packed call's inputs moved to their places, its expected
    result read back from them, every other element still the sentinel."""
    piece = call.count // pieces
    stride = comm.size * piece + 3
    index = rank_block_index(0, call.count, comm.size, pieces, stride)
    packed_send, packed_recv = make_buffers(call, comm.rank)
    sentinel = np.array([7], dtype=packed_recv.dtype)
    if call.collective == "allgather":
        recv = np.full(index[-1] + 4, sentinel[0], dtype=packed_recv.dtype)
        own = index[comm.rank * call.count : (comm.rank + 1) * call.count]
        if call.in_place:
            recv[own] = packed_recv[comm.rank * call.count : (comm.rank + 1) * call.count]
        send = packed_send
    else:  # reduce-scatter: the input interleaved, the result back to back
        send = np.full(index[-1] + 4, sentinel[0], dtype=packed_send.dtype)
        send[index] = packed_send
        recv = np.zeros_like(packed_recv)
    op = shm.build(comm, call.collective, send, recv, call.count, call.dtype, call.op, path=path, pieces=pieces,
                   stride=stride)
    for _ in range(1 if call.in_place else 3):
        op()
    expected = expected_output(call, comm.rank)
    as_bits = f"u{expected.dtype.itemsize}"
    if call.collective == "allgather":
        wrong = int(np.count_nonzero(recv[index].view(as_bits) != expected.view(as_bits)))
        rest = np.ones(len(recv), dtype=bool)
        rest[index] = False
        wrong += int(np.count_nonzero(recv[rest].view(as_bits) != sentinel.view(as_bits)[0]))
    else:
        wrong = count_wrong(call, comm.rank, recv)
    if wrong:
        failures.append(f"rank {comm.rank} {call} interleaved in {pieces} pieces by {op.moved_by}: {wrong} wrong")


def check_all(comm) -> dict:
    topo = topology(comm)
    failures, paths, checked = [], set(), 0
    for collective, dtype, op, in_place, path in itertools.product(
            COLLECTIVES, DTYPES, OPS, (False, True), (None, *shm.PATHS)):
        for count in counts(collective, comm.size):
            run_case(comm, CallSpec(collective, comm.size, count, dtype, op, in_place), path, topo, failures, paths)
            checked += 1
    interleaved = 0
    for collective, (dtype, op), in_place, path, pieces in itertools.product(
            ("allgather", "reduce_scatter"), (("float32", "sum"), ("int64", "max"), ("float16", "prod")),
            (False, True), ("ll", "copy", "cma"), (2, 3)):
        if in_place and collective == "reduce_scatter":
            continue  # the hierarchy's reduce-scatter phase reads the input and writes scratch
        for count in (pieces, 7 * pieces, 1200 // comm.size // pieces * pieces):
            check_interleaved(comm, CallSpec(collective, comm.size, count, dtype, op, in_place), pieces, path,
                              failures)
            interleaved += 1
    everything = gathered(comm, failures)
    return {"checked": checked, "interleaved": interleaved, "paths": sorted(paths), "failures": everything[:20],
            "n_failures": len(everything), "cma": shm.cma_reason(comm) or "on", "steps": shm.segment(comm).step}


def check_hier(comm, per_node: int) -> dict:
    topo = topology(comm, per_node)
    implementation = get("pccl-hier")
    failures, checked, transports = [], 0, set()
    for collective, (dtype, op), in_place, inter in itertools.product(
            COLLECTIVES, (("float32", "sum"), ("int64", "max"), ("float16", "prod")), (False, True),
            ("rd", "ring", "mpi", "rdfull")):
        if (inter == "rdfull" and collective != "allreduce") or (inter == "mpi" and dtype == "float16"):
            continue  # rdfull is an all-reduce; the MPI standard has no float16
        for count in counts(collective, comm.size):
            call = CallSpec(collective, comm.size, count, dtype, op, in_place, intra="shm", inter=inter,
                            nnodes=topo.grid.nnodes)
            reason = implementation.unsupported_reason(call)
            if reason:
                failures.append(f"{call}: unsupported: {reason}")
                continue
            sendbuf, recvbuf = make_buffers(call, comm.rank)
            built = implementation.build(topo, call, sendbuf, recvbuf)
            for _ in range(1 if in_place else 2):  # the segment's steps and the scratch carry over
                built()
            wrong = count_wrong(call, comm.rank, recvbuf)
            checked += 1
            transports.add(implementation.describe(call, op=built).transport)
            if wrong:
                failures.append(f"rank {comm.rank} {call}: {wrong} wrong")
    everything = gathered(comm, failures)
    return {"checked": checked, "failures": everything[:20], "n_failures": len(everything),
            "nodes": topo.grid.nnodes, "transports": sorted(transports)}


def fault(comm, kind: str) -> int:
    call = CallSpec("allreduce", comm.size, 1 << 16)  # 256 KiB: the copy or cma path, several steps
    sendbuf, recvbuf = make_buffers(call, comm.rank)
    op = get("shm").build(topology(comm), call, sendbuf, recvbuf)
    op()
    comm.Barrier()
    if comm.rank == 1:
        if kind == "peer-exits":
            os._exit(3)  # gone: no MPI_Abort, no goodbye, as a crashed rank
        time.sleep(float(os.environ[shm.ENV_TIMEOUT]) * 3)  # peer-stalls: never makes the call
        return 0
    started = time.monotonic()
    try:
        op()
    except Exception as error:  # ShmTimeout
        print(json.dumps({"rank": comm.rank, "error": f"{type(error).__name__}: {error}",
                          "waited_s": time.monotonic() - started}), flush=True)
        os._exit(4)
    return 0


def main() -> int:
    comm = MPI.COMM_WORLD
    mode = sys.argv[1] if len(sys.argv) > 1 else "full"
    if mode in ("peer-stalls", "peer-exits"):
        return fault(comm, mode)
    started = time.monotonic()
    summary = check_hier(comm, int(sys.argv[2]) if len(sys.argv) > 2 else 2) if mode == "hier" else check_all(comm)
    if comm.rank == 0:
        print(json.dumps({"nranks": comm.size, "seconds": round(time.monotonic() - started, 1), **summary}))
    return 1 if comm.bcast(summary["failures"]) else 0


if __name__ == "__main__":
    sys.exit(main())
