"""How much the harness itself costs: the same collective timed four ways, side by side.

    python benchmarks/harness_overhead.py [--nranks 2] [--iters 2000] [--max-bytes 4M]

Runs itself under mpiexec. Per size (all-gather total bytes, float32), median
per-iteration time over ranks-max, of:
  cython-native  the Cython timing loop around MPI_Allgather (what `mpi` cells use)
  python-native  a Python loop around mpi4py's comm.Allgather
  cython-ring    the Cython loop around the ring schedule executor (`pccl-flat` cells)
  python-ring    a Python loop running the same ring schedule with mpi4py Sendrecv
Every loop is barrier + Wtime + call + Wtime, so the only difference is who drives it.
"""

from __future__ import annotations

import argparse
import sys

from under_mpiexec import is_child, rerun_under_mpiexec  # beside this script


def python_ring(comm, steps, buffers, itemsize):
    """The schedule executor's job, in Python (contiguous blocks only: the flat ring)."""
    from collectives.schedules.rows import COLUMNS

    c = {name: i for i, name in enumerate(COLUMNS)}
    rows = [tuple(int(x) for x in row) for row in steps]

    def run() -> None:
        for row in rows:
            send = buffers[row[c["send_buf"]]][row[c["send_off"]]: row[c["send_off"]] + row[c["send_count"]]]
            recv = buffers[row[c["recv_buf"]]][row[c["recv_off"]]: row[c["recv_off"]] + row[c["recv_count"]]]
            if row[c["action"]] == 1:
                dst_off, src_off, n = row[c["dst_off"]], row[c["src_off"]], row[c["action_count"]]
                buffers[row[c["dst_buf"]]][dst_off: dst_off + n] = buffers[row[c["src_buf"]]][src_off: src_off + n]
            if row[c["send_peer"]] >= 0:
                comm.Sendrecv(send, row[c["send_peer"]], 7, recv, row[c["recv_peer"]], 7)

    return run


def child(args: argparse.Namespace) -> None:
    import mpi4py

    mpi4py.rc.thread_level = "single"
    import numpy as np
    from cython_ext.timing import time_op
    from mpi4py import MPI

    from collectives.call import CallSpec
    from collectives.impls import get
    from collectives.schedules import algorithms
    from collectives.schedules.topology import topology

    comm = MPI.COMM_WORLD
    topo = topology(comm)
    p = comm.size

    def python_loop(call, warmup: int, iters: int) -> np.ndarray:
        times = np.empty(iters)
        for _ in range(warmup):
            comm.Barrier()
            call()
        for i in range(iters):
            comm.Barrier()
            t0 = MPI.Wtime()
            call()
            times[i] = MPI.Wtime() - t0
        comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
        return times

    total = 8
    rows = []
    while total <= args.max_bytes:
        count = max(total // (4 * p), 1)
        iters = max(20, min(args.iters, int(args.iters * 4096 / max(total, 4096))))
        send = np.ones(count, np.float32)
        recv = np.zeros(count * p, np.float32)
        spec = CallSpec("allgather", p, count)
        native = get("mpi").build(topo, spec, send, recv)
        ring = get("pccl-flat").build(topo, spec, send, recv)
        schedule = algorithms.schedule_for("allgather", "ring", p, comm.rank, count, False)
        pyring = python_ring(comm, schedule.steps, {0: send, 1: recv, 2: np.empty(0, np.float32)}, 4)
        medians = {
            "cython-native": np.median(time_op(native, comm, "sync", 10, iters, iters, 0.0)),
            "python-native": np.median(python_loop(lambda s=send, r=recv: comm.Allgather(s, r), 10, iters)),
            "cython-ring": np.median(time_op(ring, comm, "sync", 10, iters, iters, 0.0)),
            "python-ring": np.median(python_loop(pyring, 10, iters)),
        }
        rows.append((count * p * 4, {k: v * 1e6 for k, v in medians.items()}))
        total *= 2
    if comm.rank == 0:
        print(f"all-gather, float32, {p} ranks, MPI: {MPI.Get_library_version().splitlines()[0]}")
        print("| size (B) | cython-native us | python-native us | python/cython | cython-ring us | python-ring us |"
              " python/cython | ring/native (cython) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for size, m in rows:
            print(f"| {size} | {m['cython-native']:.2f} | {m['python-native']:.2f} | "
                  f"{m['python-native'] / m['cython-native']:.2f} | {m['cython-ring']:.2f} | "
                  f"{m['python-ring']:.2f} | {m['python-ring'] / m['cython-ring']:.2f} | "
                  f"{m['cython-ring'] / m['cython-native']:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nranks", type=int, default=2)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--max-bytes", type=int, default=4 << 20)
    args = parser.parse_args()
    if is_child():
        child(args)
        return 0
    return rerun_under_mpiexec(__file__, args.nranks)


if __name__ == "__main__":
    sys.exit(main())
