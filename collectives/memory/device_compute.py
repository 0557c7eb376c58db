"""The dummy compute of a non-blocking device cell: a GPU kernel that spins for a set time, on a
stream of its own, between the collective's post and its wait (OSU's GPU target,
util/osu_util_mpi.c ``do_compute_gpu``; there a kernel sized to the pure time, here one thread
spinning on the GPU's clock for as many cycles as the pure time, calibrated once per job).

Imported only when a GPU job overlaps a cell (tests/bench/rank/test_worker_imports.py).
"""

from __future__ import annotations

import time

import numpy as np

SPIN_SOURCE = r"""
extern "C" __global__ void pccl_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""
#: the calibration's kernel length in GPU clock cycles (a few milliseconds on any GPU)
CALIBRATION_CYCLES = 1 << 22


class GpuSpin:
    """One thread spinning on the GPU clock (``clock64``, CUDA and HIP alike) on its own stream,
    for a length given in seconds: cycles per second measured once, with events, on a warm kernel."""

    def __init__(self, xp) -> None:
        self.xp = xp
        self.kernel = xp.RawKernel(SPIN_SOURCE, "pccl_spin")
        self.stream = xp.cuda.Stream(non_blocking=True)
        self.cycles_per_s = self._calibrate()

    def _spin_s(self, cycles: int) -> float:
        start, end = self.xp.cuda.Event(), self.xp.cuda.Event()
        start.record(self.stream)
        self.kernel((1,), (1,), (np.int64(cycles),), stream=self.stream)
        end.record(self.stream)
        end.synchronize()
        return self.xp.cuda.get_elapsed_time(start, end) * 1e-3

    def _calibrate(self) -> float:
        self._spin_s(1024)  # the first launch loads the module
        return CALIBRATION_CYCLES / max(self._spin_s(CALIBRATION_CYCLES), 1e-9)

    def launch(self, seconds: float) -> None:
        """Start ``seconds`` of spinning on the kernel's stream; returns at once."""
        self.kernel((1,), (1,), (np.int64(max(int(seconds * self.cycles_per_s), 0)),), stream=self.stream)

    def synchronize(self) -> None:
        self.stream.synchronize()


class DeviceOverlapCall:
    """OSU's overlapped call on device buffers: post the collective (``op``, a device_ops.DeviceNonblocking),
    start ``compute_s`` of GPU compute (``spin``: GpuSpin or anything with launch/synchronize), make
    ``test_calls`` test calls while it runs, wait for the compute, then for the collective. Each
    call's compute time (the tests excluded) and test time are kept (``times``)."""

    def __init__(self, op, spin, compute_s: float, test_calls: int) -> None:
        if compute_s < 0 or test_calls < 0:
            raise ValueError(f"overlap: compute_s {compute_s} and test_calls {test_calls} must be >= 0")
        self.op, self.spin, self.compute_s, self.test_calls = op, spin, compute_s, test_calls
        self.compute_times: list[float] = []
        self.test_times: list[float] = []

    def __call__(self) -> None:
        self.op.post()
        began = time.perf_counter()
        self.spin.launch(self.compute_s)
        tested = 0.0
        for _ in range(self.test_calls if self.op.test is not None else 0):
            t0 = time.perf_counter()
            self.op.test()
            tested += time.perf_counter() - t0
        self.spin.synchronize()
        self.compute_times.append(time.perf_counter() - began - tested)
        self.test_times.append(tested)
        self.op.wait()

    def times(self, last: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """(compute seconds, test seconds) of the last ``last`` calls (-1: every call)."""
        n = len(self.compute_times) if last < 0 else min(last, len(self.compute_times))
        first = len(self.compute_times) - n
        return (np.asarray(self.compute_times[first:], dtype=np.float64),
                np.asarray(self.test_times[first:], dtype=np.float64))


def overlapped_op(comm, call: DeviceOverlapCall):
    """``call`` as a CollOp of the timing loop, with its ``compute_s`` settable and its ``times``."""
    from cython_ext.core import PyCallOp

    class DeviceOverlap(PyCallOp):
        @property
        def compute_s(self) -> float:
            return call.compute_s

        @compute_s.setter
        def compute_s(self, seconds: float) -> None:
            call.compute_s = seconds

        def times(self, last: int = -1) -> tuple[np.ndarray, np.ndarray]:
            return call.times(last)

    return DeviceOverlap(comm, call, None, keepalive=call)
