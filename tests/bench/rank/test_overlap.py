"""OSU's overlap of a non-blocking cell (bench/rank/overlap.py) and who may be posted at all: the formula
as OSU's print_stats_nbc defines it, the row's columns, the implementations that cannot progress while
their caller computes (each refuses with why), and the device path's overlapped call with stand-ins."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bench.rank.overlap import overlap_columns, overlap_pct
from collectives.call import CallSpec
from collectives.impls import get
from collectives.memory.context import HOST
from collectives.memory.device_compute import DeviceOverlapCall


def test_osu_overlap_formula():
    # the collective hidden entirely: overall is the compute alone
    assert overlap_pct(100.0, 1000.0, 1000.0) == 100.0
    # nothing moved during the compute: overall = compute + pure
    assert overlap_pct(100.0, 1100.0, 1000.0) == 0.0
    assert overlap_pct(100.0, 1025.0, 1000.0) == pytest.approx(75.0)
    # slower than compute plus the collective alone: OSU's max(0, ...) floor
    assert overlap_pct(100.0, 1300.0, 1000.0) == 0.0
    assert np.isnan(overlap_pct(0.0, 10.0, 5.0))


def test_columns_are_medians_and_exclude_the_tests_from_the_compute():
    overall = np.array([1.2e-3, 1.1e-3, 9.0e-3])  # one descheduled call: the median ignores it
    compute = np.array([1.0e-3, 1.0e-3, 1.0e-3])
    tests = np.array([5e-5, 5e-5, 6e-5])
    columns = overlap_columns(400.0, overall, compute, tests, 8)
    assert columns["overall_us"] == pytest.approx(1200.0) and columns["compute_us"] == pytest.approx(1000.0)
    assert columns["test_us"] == pytest.approx(50.0) and columns["nb_test_calls"] == 8
    assert columns["pure_us"] == 400.0 and columns["overlap_pct"] == pytest.approx(50.0)


NONBLOCKING = CallSpec("allreduce", 2, 1024, nonblocking=True)


@pytest.mark.parametrize(("impl", "needle"), [
    ("pccl-flat", "executor"), ("pccl-hier", "phases"), ("shm", "own CPUs"), ("rdma", "ucp_worker_progress"),
])
def test_implementations_that_cannot_progress_say_why(impl, needle):
    reason = get(impl).nonblocking_reason(NONBLOCKING, HOST)
    assert reason.startswith(f"non-blocking {impl}: ") and needle in reason and "progress" in reason
    blocking = CallSpec("allreduce", 2, 1024)
    assert get(impl).nonblocking_reason(blocking, HOST) is None


def test_mpi_is_posted_on_host_buffers_and_gpu_aware_device_buffers_only():
    assert get("mpi").nonblocking_reason(NONBLOCKING, HOST) is None
    staged = SimpleNamespace(on_device=True, gpu_aware=SimpleNamespace(aware=False))
    assert "staged" in get("mpi").nonblocking_reason(NONBLOCKING, staged)
    aware = SimpleNamespace(on_device=True, gpu_aware=SimpleNamespace(aware=True))
    assert get("mpi").nonblocking_reason(NONBLOCKING, aware) is None
    # NCCL/RCCL only enqueue on the stream: they progress; on the host their own reason refuses them
    assert get("xccl").nonblocking_reason(NONBLOCKING, aware) is None
    assert "GPU" in get("xccl").unsupported_reason(NONBLOCKING, HOST)


class Recorder:
    """A stand-in device collective and GPU compute: what the overlapped call did, in order."""

    def __init__(self, testable: bool = True) -> None:
        self.calls: list[str] = []
        self.test = (lambda: self.calls.append("test")) if testable else None

    def post(self) -> None:
        self.calls.append("post")

    def wait(self) -> None:
        self.calls.append("wait")

    def launch(self, seconds: float) -> None:
        self.calls.append(f"launch {seconds:g}")

    def synchronize(self) -> None:
        self.calls.append("compute done")


def test_device_overlapped_call_posts_computes_tests_then_waits():
    recorder = Recorder()
    call = DeviceOverlapCall(recorder, recorder, 0.0, 3)
    call.compute_s = 2e-3  # set once the pure time is known (bench/rank/cell.py)
    call()
    call()
    assert recorder.calls[:7] == ["post", "launch 0.002", "test", "test", "test", "compute done", "wait"]
    compute, tests = call.times()
    assert len(compute) == len(tests) == 2 and (compute >= 0).all() and (tests >= 0).all()
    assert len(call.times(1)[0]) == 1


def test_a_stream_collective_has_nothing_to_test():
    recorder = Recorder(testable=False)  # NCCL/RCCL: the stream's synchronisation is the wait
    DeviceOverlapCall(recorder, recorder, 1e-3, 4)()
    assert recorder.calls == ["post", "launch 0.001", "compute done", "wait"]
    with pytest.raises(ValueError):
        DeviceOverlapCall(recorder, recorder, -1.0, 0)
