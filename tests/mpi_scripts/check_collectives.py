"""Run under mpiexec: every implementation of every collective, checked bit for bit.

    mpiexec -n N python tests/mpi_scripts/check_collectives.py

Checks each host implementation in collectives.impls.IMPLEMENTATIONS through the
harness path (collectives.spec buffers, Implementation.build, count_wrong) and the
library API (collectives.allgather / reduce_scatter / allreduce on numpy
buffers, sendbuf=None in place). Rank 0 prints one JSON summary line last;
the exit code is 1 if anything was wrong, on every rank.
"""

from __future__ import annotations

import json
import sys
import traceback

import mpi4py

mpi4py.rc.thread_level = "single"

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import collectives  # noqa: E402
from collectives.call import CallSpec  # noqa: E402
from collectives.impls import IMPLEMENTATIONS, get  # noqa: E402
from collectives.spec import count_wrong, make_buffers  # noqa: E402

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")
DTYPE_OPS = (("float32", "sum"), ("int32", "max"), ("float16", "sum"))
COUNTS = (0, 1, 7, 1000)
#: implementations that run on host buffers (xccl is GPU-only: tests/**/test_gpu_*.py)
HOST_IMPLEMENTATIONS = sorted(name for name, cls in IMPLEMENTATIONS.items() if cls.host_buffers)


def check_harness_path(comm, failures: list[str], summary: dict) -> None:
    for name in HOST_IMPLEMENTATIONS:
        implementation = get(name)
        for collective in COLLECTIVES:
            for in_place in (False, True):
                for dtype, op in DTYPE_OPS:
                    for count in COUNTS:
                        call = CallSpec(collective, comm.size, count, dtype, op, in_place)
                        label = (
                            f"{name} {collective} {'in_place' if in_place else 'out_of_place'} "
                            f"{dtype} {op} count={count}"
                        )
                        reason = implementation.unsupported_reason(call)
                        if reason:
                            summary["unsupported"].append(f"{label}: {reason}")
                            continue
                        send, recv = make_buffers(call, comm.rank)
                        run = implementation.build(comm, call, send, recv)
                        run()
                        wrong = count_wrong(call, comm.rank, recv)
                        # timing loops call the same op again and again: a repeat must give the same
                        # result wherever the input survives the call
                        repeat_wrong = 0
                        if not in_place or collective == "allgather":
                            run()
                            repeat_wrong = count_wrong(call, comm.rank, recv)
                        totals = comm.allreduce(np.array([wrong, repeat_wrong]), op=MPI.SUM)
                        if totals[0]:
                            failures.append(f"{label}: {totals[0]} wrong elements over all ranks")
                        elif totals[1]:
                            failures.append(f"{label}: second call on the same buffers: {totals[1]} wrong")
                        summary["checked"] += 1


def check_library_api(comm, failures: list[str], summary: dict) -> None:
    p, r = comm.size, comm.rank

    def expect(label: str, got: np.ndarray, want: np.ndarray) -> None:
        ok = got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        if comm.allreduce(0 if ok else 1, op=MPI.SUM):
            failures.append(f"api {label}: rank {r} got {got[:8]} want {want[:8]}" if not ok else f"api {label}")
        summary["api_checked"] += 1

    for name in HOST_IMPLEMENTATIONS:
        options = [{"impl": name}]
        if IMPLEMENTATIONS[name].algorithms is None:
            options.append({"impl": name, "algorithm": "ring"})
        for option in options:
            for dtype in (np.float32, np.float64, np.int32, np.int64):
                k = 5
                tag = f"{option} {np.dtype(dtype).name}"
                own = (np.arange(k) + 100 * r).astype(dtype)
                gathered = np.concatenate([np.arange(k) + 100 * q for q in range(p)]).astype(dtype)

                recv = np.full(k * p, -1, dtype)
                out = collectives.allgather(comm, own, recv, **option)
                expect(f"allgather {tag}", out, gathered)
                if out is not recv:
                    failures.append(f"api allgather {tag}: did not return recvbuf")

                recv = np.full(k * p, -1, dtype)
                recv[r * k : (r + 1) * k] = own
                expect(f"allgather in place {tag}", collectives.allgather(comm, None, recv, **option), gathered)

                full = (np.arange(k * p) * (r + 1)).astype(dtype)
                total = (np.arange(k * p) * (p * (p + 1) // 2)).astype(dtype)
                recv = np.full(k, -1, dtype)
                expect(
                    f"reduce_scatter {tag}",
                    collectives.reduce_scatter(comm, full, recv, **option),
                    total[r * k : (r + 1) * k],
                )

                recv = full.copy()
                collectives.reduce_scatter(comm, None, recv, **option)
                expect(f"reduce_scatter in place {tag}", recv[:k], total[r * k : (r + 1) * k])

                mine = (np.arange(k) * (r + 1) - 3 * r).astype(dtype)
                largest = np.max([np.arange(k) * (q + 1) - 3 * q for q in range(p)], axis=0).astype(dtype)
                recv = np.full(k, -1, dtype)
                expect(
                    f"allreduce max {tag}",
                    collectives.allreduce(comm, mine, recv, op="max", **option),
                    largest,
                )

                recv = mine.copy()
                expect(
                    f"allreduce in place max {tag}",
                    collectives.allreduce(comm, None, recv, op="max", **option),
                    largest,
                )

                summed = (np.arange(k) * (p * (p + 1) // 2)).astype(dtype)
                recv = np.zeros(k, dtype)
                expect(
                    f"allreduce sum {tag}",
                    collectives.allreduce(comm, (np.arange(k) * (r + 1)).astype(dtype), recv, **option),
                    summed,
                )


def check_api_errors(comm, failures: list[str], summary: dict) -> None:
    """Misuse is refused before any communication, the same way on every rank."""
    p = comm.size
    f32 = np.float32
    cases = [
        (
            "allgather: receive buffer of the wrong size",
            ValueError,
            lambda: collectives.allgather(comm, np.zeros(3, f32), np.zeros(3 * p + 1, f32)),
        ),
        (
            "allgather: send buffer of the wrong size",
            ValueError,
            lambda: collectives.allgather(comm, np.zeros(4, f32), np.zeros(3 * p, f32)),
        ),
        (
            "reduce_scatter: send of the wrong size",
            ValueError,
            lambda: collectives.reduce_scatter(comm, np.zeros(3 * p + 1, f32), np.zeros(3, f32)),
        ),
        (
            "allreduce: sizes differ",
            ValueError,
            lambda: collectives.allreduce(comm, np.zeros(4, f32), np.zeros(5, f32)),
        ),
        (
            "dtypes differ",
            TypeError,
            lambda: collectives.allreduce(comm, np.zeros(4, np.float64), np.zeros(4, f32)),
        ),
        (
            "unsupported dtype",
            TypeError,
            lambda: collectives.allreduce(comm, np.zeros(4, np.uint8), np.zeros(4, np.uint8)),
        ),
        (
            "non-contiguous send",
            ValueError,
            lambda: collectives.allreduce(comm, np.zeros(8, f32)[::2], np.zeros(4, f32)),
        ),
        (
            "unknown op",
            ValueError,
            lambda: collectives.allreduce(comm, np.zeros(4, f32), np.zeros(4, f32), op="avg"),
        ),
        (
            "unknown implementation",
            ValueError,
            lambda: collectives.allreduce(comm, np.zeros(4, f32), np.zeros(4, f32), impl="nccl2"),
        ),
        (
            "unknown algorithm",
            ValueError,
            lambda: collectives.allreduce(
                comm, np.zeros(4, f32), np.zeros(4, f32), impl="pccl-flat", algorithm="bruck9"
            ),
        ),
        (
            "mpi with a schedule",
            ValueError,
            lambda: collectives.allreduce(comm, np.zeros(4, f32), np.zeros(4, f32), impl="mpi", algorithm="ring"),
        ),
    ]
    for label, error, call in cases:
        try:
            call()
        except error:
            pass
        except Exception as other:  # noqa: BLE001 - reported, not raised
            failures.append(f"api error {label}: raised {type(other).__name__}: {other}, not {error.__name__}")
        else:
            failures.append(f"api error {label}: accepted")
        summary["api_errors_checked"] += 1


def main() -> int:
    comm = MPI.COMM_WORLD
    failures: list[str] = []
    summary = {
        "nranks": comm.size,
        "checked": 0,
        "api_checked": 0,
        "api_errors_checked": 0,
        "unsupported": [],
    }
    check_harness_path(comm, failures, summary)
    check_library_api(comm, failures, summary)
    check_api_errors(comm, failures, summary)
    everything = comm.gather(failures, root=0)
    if comm.rank == 0:
        summary["failures"] = sorted({f for rank_failures in everything for f in rank_failures})
        for failure in summary["failures"]:
            print(f"FAIL {failure}", flush=True)
        print(json.dumps(summary), flush=True)
    failed = comm.allreduce(len(failures), op=MPI.SUM)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(2)
    sys.exit(code)
