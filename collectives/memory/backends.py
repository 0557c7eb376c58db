"""The device layer: where a rank's buffers live, which GPU it uses, and why a GPU cannot be used.

Backends: CuPy on CUDA or ROCm (``cupy.cuda.runtime.is_hip`` tells which build it
is), and ``HostEmulation``, numpy arrays standing in for device memory so the
device executor's logic runs in tests on machines without a GPU (never reported
as a GPU: the harness only opens CuPy backends for ``cuda``/``rocm`` cells).

Every rank binds to one GPU: its local rank (the launcher's variable before MPI_Init, binding.py;
else a shared-memory split of the communicator) modulo the GPUs it sees, or the index in ``$PCCL_BENCH_GPU``;
a site profile's ``gpu_map`` (``$PCCL_BENCH_GPU_MAP``) maps the local rank to the index it takes.
All GPU work of a rank goes to one stream of its own; ``synchronize`` waits for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from collectives.addresses import host_address

GPU_DEVICES = ("cuda", "rocm")
#: GPU binding override: "local" (local rank modulo the visible GPUs) or a device index
ENV_GPU = "PCCL_BENCH_GPU"
#: a site's GPU per local rank, an index into the visible GPUs ("3,2,1,0": local rank 0 takes the
#: fourth); Slurm sets CUDA_VISIBLE_DEVICES per step, so an exported reordering never reaches the rank
ENV_GPU_MAP = "PCCL_BENCH_GPU_MAP"
INSTALL_HINT = "install the [gpu] extra, pip install -e '.[gpu]' (ROCm: a ROCm build of CuPy)"


@dataclass(frozen=True)
class GpuProbe:
    """What this process can see of the GPU stack; ``reason`` is empty when ``device`` is usable."""

    device: str
    reason: str = ""
    count: int = 0
    runtime: str = ""  # "CUDA 12.9" | "ROCm (HIP 6.2)"
    cupy_version: str = ""
    how: str = "import cupy"


def _runtime_text(cupy) -> str:
    version = cupy.cuda.runtime.runtimeGetVersion()
    if cupy.cuda.runtime.is_hip:
        return f"ROCm (HIP {version // 10_000_000}.{version // 100_000 % 100})"
    return f"CUDA {version // 1000}.{version % 1000 // 10}"


def _failure_text(cupy, error: Exception) -> str:
    """Why the device query failed; "no driver" where there is none (CUDA says "insufficient" then too)."""
    try:
        if not cupy.cuda.runtime.is_hip and cupy.cuda.runtime.driverGetVersion() == 0:
            return "no CUDA driver (cudaDriverGetVersion() = 0)"
    except Exception:
        pass
    return str(error)


def probe(device: str) -> GpuProbe:
    """Can this process put ``device`` ("cuda" | "rocm") buffers on a GPU? Never raises."""
    if device not in GPU_DEVICES:
        return GpuProbe(device, f"{device!r} is not a GPU device (expected one of {GPU_DEVICES})")
    try:
        import cupy
    except ImportError as error:
        return GpuProbe(device, f"CuPy is not installed ({error}); {INSTALL_HINT}")
    except Exception as error:  # a broken CUDA/ROCm install raises all sorts at import
        return GpuProbe(device, f"CuPy failed to import: {type(error).__name__}: {error}")
    built_for = "rocm" if cupy.cuda.runtime.is_hip else "cuda"
    how = "cupy.cuda.runtime.is_hip, cupy.cuda.runtime.getDeviceCount()"
    if built_for != device:
        return GpuProbe(device, f"this CuPy ({cupy.__version__}) is a {built_for} build; the suite asks for {device}",
                        cupy_version=cupy.__version__, how=how)
    runtime = ""
    try:
        runtime = _runtime_text(cupy)
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, driver too old, no device
        # cudaGetDeviceCount/hipGetDeviceCount answer "none visible" (CUDA_VISIBLE_DEVICES="") with
        # cudaErrorNoDevice/hipErrorNoDevice, which CuPy raises, rather than with a count of 0
        if "ErrorNoDevice" not in str(error):
            return GpuProbe(device, f"no usable {device} device: {_failure_text(cupy, error)}",
                            cupy_version=cupy.__version__, how=how)
        count = 0
    if count < 1:
        # ROCm filters by ROCR_VISIBLE_DEVICES (Slurm on Frontier sets it) before HIP_VISIBLE_DEVICES
        names = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES") if device == "rocm" else ("CUDA_VISIBLE_DEVICES",)
        set_names = [name for name in names if os.environ.get(name)]
        visible = "; ".join(f"{name}={os.environ[name]!r}" for name in set_names)
        if device == "cuda" and visible:
            visible = repr(os.environ["CUDA_VISIBLE_DEVICES"])  # the one variable: its value alone
        return GpuProbe(device, f"no {device} device visible" + (f" (visible devices: {visible})" if visible else ""),
                        runtime=runtime, cupy_version=cupy.__version__, how=how)
    return GpuProbe(device, "", count, runtime, cupy.__version__, how)


def parse_gpu_map(text: str | None) -> list[int]:
    """``$PCCL_BENCH_GPU_MAP`` as indices ([] where unset or empty)."""
    words = [word.strip() for word in (text or "").split(",") if word.strip()]
    if not all(word.isdigit() for word in words):
        raise ValueError(f"{ENV_GPU_MAP}={text!r}: expected device indices separated by commas")
    return [int(word) for word in words]


def choose_device(local_rank: int, count: int, override: str | None = None, gpu_map: str | None = None) -> int:
    """The GPU index of a rank: local rank modulo ``count``, the site's map entry for the local rank
    (``gpu_map``, the value of ``$PCCL_BENCH_GPU_MAP``), or the override (an index, which wins)."""
    if count < 1:
        raise ValueError("no GPU to bind to")
    text = (override or "local").strip()
    if text == "local":
        mapped = parse_gpu_map(gpu_map)
        if not mapped:
            return local_rank % count
        index = mapped[local_rank % len(mapped)]
        if index >= count:
            raise ValueError(f"{ENV_GPU_MAP}={gpu_map}: local rank {local_rank} takes device {index}, "
                             f"but this rank sees only {count} device(s)")
        return index
    if not text.isdigit():
        raise ValueError(f"{ENV_GPU}={override!r}: expected 'local' or a device index")
    index = int(text)
    if index >= count:
        raise ValueError(f"{ENV_GPU}={index}: this rank sees only {count} device(s)")
    return index


def device_choice(local_rank: int, count: int, env) -> int:
    """``choose_device`` with the override and the site's map read from ``env``."""
    return choose_device(local_rank, count, env.get(ENV_GPU), env.get(ENV_GPU_MAP))


def binding_text(override: str | None, gpu_map: str | None = None) -> str:
    if (override or "local").strip() == "local":
        if parse_gpu_map(gpu_map):
            return f"local rank k takes visible GPU [{gpu_map}][k] (the site's gpu_map, {ENV_GPU_MAP})"
        return "local rank modulo the visible GPUs"
    return f"device {override} on every rank ({ENV_GPU})"


def local_rank(comm) -> int:
    """This rank's index among the ranks of its (real) node. Collective over ``comm``."""
    from mpi4py import MPI

    shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return shared.Get_rank()
    finally:
        shared.Free()


class HostBackend:
    """Host memory (numpy): the buffers of ``device: host`` cells. Nothing to wait for, nothing to copy."""

    kind = "host"
    xp = np
    index = -1

    def synchronize(self) -> None:
        pass

    def ptr(self, array) -> int:
        return host_address(array)

    def empty(self, count: int, dtype) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        """A buffer of this backend holding ``array`` (on the host: the array itself)."""
        return array

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def pinned(self, count: int, dtype) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def download(self, dst: np.ndarray, src) -> None:
        """Device -> host, contiguous, asynchronous on the rank's stream."""
        dst[...] = src

    def upload(self, dst, src: np.ndarray) -> None:
        """Host -> device, contiguous, asynchronous on the rank's stream."""
        dst[...] = src

    def identity(self) -> str | None:
        return None

    def strided(self, array, off: int, count: int, nblocks: int, stride: int):
        """``nblocks`` pieces of ``count`` elements ``stride`` apart from ``off``, as a 2-D view."""
        item = array.itemsize
        return np.lib.stride_tricks.as_strided(array[off:], shape=(nblocks, count), strides=(stride * item, item))


class HostEmulation(HostBackend):
    """numpy arrays in place of device memory: runs the device code paths without a GPU (tests)."""

    kind = "host-emulation"
    index = 0

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array.copy()

    def to_host(self, array) -> np.ndarray:
        return np.array(array)


class CupyBackend(HostBackend):
    """CuPy device memory on one GPU, all work on one non-blocking stream of this rank."""

    def __init__(self, device: str, index: int) -> None:
        import cupy
        import cupyx

        self.kind, self.index = device, index
        self.xp, self._cupy, self._cupyx = cupy, cupy, cupyx
        self._runtime = cupy.cuda.runtime
        cupy.cuda.Device(index).use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream.use()

    def synchronize(self) -> None:
        self.stream.synchronize()

    def ptr(self, array) -> int:
        return int(array.data.ptr)

    def empty(self, count: int, dtype):
        return self._cupy.empty(count, dtype=dtype)

    def from_host(self, array: np.ndarray):
        return self._cupy.asarray(array)

    def to_host(self, array) -> np.ndarray:
        return self._cupy.asnumpy(array)

    def pinned(self, count: int, dtype) -> np.ndarray:
        return self._cupyx.empty_pinned(count, dtype=dtype)

    def download(self, dst: np.ndarray, src) -> None:
        if src.nbytes:
            self._runtime.memcpyAsync(dst.ctypes.data, src.data.ptr, src.nbytes, self._runtime.memcpyDeviceToHost,
                                      self.stream.ptr)

    def upload(self, dst, src: np.ndarray) -> None:
        if dst.nbytes:
            self._runtime.memcpyAsync(dst.data.ptr, src.ctypes.data, dst.nbytes, self._runtime.memcpyHostToDevice,
                                      self.stream.ptr)

    def identity(self) -> str | None:
        """The PCI bus id of the bound GPU (ranks that share one are found by it), or None."""
        try:
            return str(self._cupy.cuda.Device(self.index).pci_bus_id)
        except Exception:
            return None

    def strided(self, array, off: int, count: int, nblocks: int, stride: int):
        item = array.itemsize
        return self._cupy.lib.stride_tricks.as_strided(array[off:], shape=(nblocks, count),
                                                       strides=(stride * item, item))


Backend = HostBackend | HostEmulation | CupyBackend
