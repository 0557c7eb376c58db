"""The device layer without a GPU: probing (with stand-in CuPy modules), GPU binding, NCCL/RCCL facts."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from collectives.libraries import xccl_communicators as xccl
from collectives.memory import backends as devices
from collectives.memory import gpu_aware
from collectives.memory.device_context import DeviceContext
from collectives.schedules.topology import Grid, Topology


def fake_cupy(monkeypatch, *, hip: bool = False, count: int = 1, count_error: Exception | None = None,
              nccl: types.ModuleType | None = None) -> types.ModuleType:
    """A stand-in ``cupy`` module: just what the probe reads."""

    def device_count() -> int:
        if count_error is not None:
            raise count_error
        return count

    runtime = types.SimpleNamespace(is_hip=hip, runtimeGetVersion=lambda: 60_200_000 if hip else 12090,
                                    getDeviceCount=device_count)
    cuda = types.ModuleType("cupy.cuda")
    cuda.runtime = runtime
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "99.0"
    cupy.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    if nccl is not None:
        cuda.nccl = nccl
        monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    return cupy


def test_probe_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    found = devices.probe("cuda")
    assert found.reason.startswith("CuPy is not installed")
    assert "[gpu] extra" in found.reason
    assert found.count == 0


def test_probe_driver_missing(monkeypatch):
    fake_cupy(monkeypatch, count_error=RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient"))
    found = devices.probe("cuda")
    assert found.reason == "no usable cuda device: cudaErrorInsufficientDriver: CUDA driver version is insufficient"
    assert found.cupy_version == "99.0"
    sys.modules["cupy"].cuda.runtime.driverGetVersion = lambda: 0  # no driver at all, as CuPy says it
    assert devices.probe("cuda").reason == "no usable cuda device: no CUDA driver (cudaDriverGetVersion() = 0)"


def test_probe_no_device_visible(monkeypatch):
    fake_cupy(monkeypatch, count=0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.probe("cuda").reason == "no cuda device visible"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert devices.probe("cuda").reason == "no cuda device visible (visible devices: '7')"


def test_probe_no_device_error_means_none_visible(monkeypatch):
    """CUDA/HIP report no visible device as cudaErrorNoDevice (CuPy raises it), not as a count of 0."""
    fake_cupy(monkeypatch, count_error=RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    found = devices.probe("cuda")
    assert (found.reason, found.runtime) == ("no cuda device visible (visible devices: '7')", "CUDA 12.9")


def test_probe_build_must_match_the_device(monkeypatch):
    fake_cupy(monkeypatch, hip=False)
    assert devices.probe("rocm").reason == "this CuPy (99.0) is a cuda build; the suite asks for rocm"
    fake_cupy(monkeypatch, hip=True, count=8)
    assert "is a rocm build" in devices.probe("cuda").reason
    found = devices.probe("rocm")
    assert (found.reason, found.count, found.runtime) == ("", 8, "ROCm (HIP 6.2)")


def test_probe_usable(monkeypatch):
    fake_cupy(monkeypatch, count=4)
    found = devices.probe("cuda")
    assert (found.reason, found.count, found.runtime) == ("", 4, "CUDA 12.9")


def test_probe_host_is_not_a_gpu():
    assert "not a GPU device" in devices.probe("host").reason


@pytest.mark.parametrize(("local", "count", "override", "index"), [
    (0, 4, None, 0), (5, 4, None, 1), (3, 8, "local", 3), (7, 1, None, 0), (2, 4, "3", 3), (0, 4, " 0 ", 0),
])
def test_choose_device(local, count, override, index):
    assert devices.choose_device(local, count, override) == index


@pytest.mark.parametrize(("count", "override", "message"), [
    (4, "4", "sees only 4 device"), (4, "gpu1", "expected 'local' or a device index"), (4, "-1", "expected"),
    (0, None, "no GPU"),
])
def test_choose_device_refuses(count, override, message):
    with pytest.raises(ValueError, match=message):
        devices.choose_device(0, count, override)


@pytest.mark.parametrize(("local", "count", "override", "gpu_map", "index"), [
    (0, 4, None, "3,2,1,0", 3), (3, 4, "local", "3,2,1,0", 0), (5, 4, None, "3,2,1,0", 2),
    (1, 4, "0", "3,2,1,0", 0),  # an index (the suite's gpu_bind) wins over the site's map
    (1, 4, None, "", 1),
])
def test_choose_device_with_the_sites_map(local, count, override, gpu_map, index):
    assert devices.choose_device(local, count, override, gpu_map) == index


def test_the_sites_map_refuses_what_the_rank_cannot_see():
    with pytest.raises(ValueError, match=r"local rank 0 takes device 3, but this rank sees only 2"):
        devices.choose_device(0, 2, None, "3,2,1,0")
    with pytest.raises(ValueError, match="expected device indices"):
        devices.choose_device(0, 4, None, "3;2")


def test_device_choice_reads_the_environment():
    env = {devices.ENV_GPU_MAP: "3,2,1,0"}
    assert [devices.device_choice(local, 4, env) for local in range(4)] == [3, 2, 1, 0]


def test_binding_text():
    assert "local rank" in devices.binding_text(None)
    assert "[3,2,1,0][k]" in devices.binding_text(None, "3,2,1,0")
    assert devices.binding_text("2") == f"device 2 on every rank ({devices.ENV_GPU})"


def test_host_emulation_strided_views_alias_the_buffer():
    backend = devices.HostEmulation()
    base = np.arange(20, dtype=np.float32)
    view = backend.strided(base, 1, 3, 4, 5)
    assert view.shape == (4, 3)
    assert view.tolist() == [[1, 2, 3], [6, 7, 8], [11, 12, 13], [16, 17, 18]]
    view[...] = 0
    assert base[[1, 2, 3, 6, 18]].tolist() == [0, 0, 0, 0, 0] and base[4] == 4
    host = backend.pinned(3, np.float32)
    backend.download(host, base[4:7])
    assert host.tolist() == [4, 5, 0]
    assert backend.ptr(base[2:]) == backend.ptr(base) + 8 and devices.host_address(None) == 0


@pytest.mark.parametrize(("code", "text"), [(23203, "2.32.3"), (21805, "2.18.5"), (2804, "2.8.4"), (2708, "2.7.8")])
def test_nccl_version_codes(code, text):
    assert xccl.version_text(code) == text


def test_shared_gpu_reason():
    identities = ["0000:01:00.0@a", "0000:01:00.0@a", "0000:02:00.0@a", "0000:01:00.0@b"]
    assert xccl.shared_gpu_reason(identities, [0, 2, 3], "NCCL") == ""
    reason = xccl.shared_gpu_reason(identities, [2, 0, 1], "RCCL")
    assert reason == "RCCL needs one GPU per rank: ranks 1 and 2 of the communicator share GPU 0000:01:00.0"
    assert xccl.shared_gpu_reason([None, None], [0, 1], "NCCL") == ""  # unknown identity: NCCL decides


def test_xccl_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    info = xccl.info("cuda")
    assert info.library == "NCCL" and "cannot import cupy.cuda.nccl" in info.reason
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = False
    fake_cupy(monkeypatch, nccl=nccl)
    info = xccl.info("rocm")
    assert info.library == "RCCL" and "cupy.cuda.nccl.available is False" in info.reason


def test_xccl_hint_names_the_nccl_wheel_of_this_cuda(monkeypatch):
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = False
    cupy = fake_cupy(monkeypatch, nccl=nccl)
    assert "pip install nvidia-nccl-cu12, part of the [gpu] extra" in xccl.info("cuda").reason
    cupy.cuda.runtime.runtimeGetVersion = lambda: 13000  # cupy-cuda13x
    reason = xccl.info("cuda").reason
    assert "pip install nvidia-nccl-cu13" in reason and "cu12" not in reason


def test_xccl_available(monkeypatch):
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = True
    nccl.get_version = lambda: 22203
    fake_cupy(monkeypatch, nccl=nccl)
    assert xccl.info("cuda") == xccl.XcclInfo("NCCL", "2.22.3", "")


def test_an_xccl_phase_has_the_rows_of_an_mpi_phase():
    """The simulator and the host executor see the same collective; only the device executor tells them apart."""
    from collectives.schedules.hier import hier_schedule, phase_problem
    from collectives.schedules.topology import Grid

    grid = Grid(8, 4)
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for rank in (0, 5):
            for intra, inter in (("xccl", "rd"), ("ring", "xccl"), ("xccl", "xccl"), ("xccl+ring", "rd+xccl")):
                mpi_intra, mpi_inter = (spec.replace("xccl", "mpi") for spec in (intra, inter))
                ours = hier_schedule(collective, grid, rank, 12, False, intra, inter)
                theirs = hier_schedule(collective, grid, rank, 12, False, mpi_intra, mpi_inter)
                assert np.array_equal(ours.steps, theirs.steps) and ours.scratch == theirs.scratch
    assert phase_problem("xccl", "allgather") is None
    assert "xccl" in phase_problem("nccl", "allgather")  # listed among the known phases


def test_cupy_backend_copies_name_destination_first():
    """memcpyAsync(dst, src, size, kind, stream): device -> pinned and back, on the rank's stream."""
    calls = []
    runtime = types.SimpleNamespace(memcpyDeviceToHost=2, memcpyHostToDevice=1,
                                    memcpyAsync=lambda *args: calls.append(args))
    backend = object.__new__(devices.CupyBackend)  # no GPU: only the copy plumbing
    backend._runtime, backend.stream = runtime, types.SimpleNamespace(ptr=77)
    device = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0x1000), nbytes=64)
    host = np.empty(16, np.float32)
    backend.download(host, device)
    backend.upload(device, host)
    assert calls == [(host.ctypes.data, 0x1000, 64, 2, 77), (0x1000, host.ctypes.data, 64, 1, 77)]
    backend.download(host[:0], types.SimpleNamespace(data=None, nbytes=0))  # nothing to move, no call
    assert len(calls) == 2


def test_accumulating_reductions_hand_the_destination_itself():
    """CuPy copies an input that may share memory with ``out`` unless it is ``out`` itself, on every call."""
    from collectives.executors.device import DeviceScheduleOp
    from collectives.schedules.rows import ACT_REDUCE, COLUMNS

    seen = []

    def add(a, b, out):
        seen.append((a is out, b is out))
        return np.add(a, b, out=out)

    op = object.__new__(DeviceScheduleOp)  # only the local-action plumbing
    op.buffers = [np.arange(8.0), np.arange(8.0, 16.0), np.ones(8)]
    op.backend, op.xp, op.op = devices.HostEmulation(), types.SimpleNamespace(add=add), "sum"
    row = np.zeros(len(COLUMNS), dtype=np.int64)
    column = {name: index for index, name in enumerate(COLUMNS)}
    for name, value in {"action": ACT_REDUCE, "action_nblocks": 2, "action_count": 2, "src_buf": 2, "src_off": 0,
                        "src_stride": 4, "src2_buf": 1, "src2_off": 1, "src2_stride": 4, "dst_buf": 1,
                        "dst_off": 1, "dst_stride": 4}.items():
        row[column[name]] = value
    for step in op._local(row, ACT_REDUCE):
        step()
    assert seen == [(False, True)]
    assert op.buffers[1].tolist() == [8, 10, 11, 11, 12, 14, 15, 15]
    row[column["src2_stride"]] = 3  # other elements of the same buffer: a view of its own
    op._local(row, ACT_REDUCE)[0]()
    assert seen[-1] == (False, False)


def test_communicators_and_contexts_are_closed_before_mpi_finalizes():
    """ncclCommDestroy at the end of the job, once per communicator; a context without NCCL is skipped."""
    from bench.rank import cell

    destroyed = []

    class Communicator:
        def __init__(self, name: str) -> None:
            self.name = name

        def destroy(self) -> None:
            destroyed.append(self.name)

    communicators = xccl.Communicators(types.SimpleNamespace(), 0, capture=False)
    communicators._cache.update({1: Communicator("world"), 2: Communicator("intra")})
    with_nccl = DeviceContext("cuda", "", gpu_aware.GpuAwareness(False, ""), xccl.XcclInfo("NCCL"),
                              communicators=communicators)
    without = DeviceContext("cuda", "no GPU", gpu_aware.GpuAwareness(False, ""), xccl.XcclInfo("NCCL"))
    job = Topology(None, None, None, Grid(2, 1), False, ("h1",))
    other = Topology(None, None, None, Grid(2, 2), False, ("h1",))  # another job: its contexts are its own
    job.resources.open("context:cuda", lambda: with_nccl)
    other.resources.open("context:cuda", lambda: without)
    cell.close_contexts(job)
    assert sorted(destroyed) == ["intra", "world"] and not job.resources.names() and not communicators._cache
    assert other.resources.get("context:cuda") is without
    cell.close_contexts(other)  # a context without NCCL: nothing to destroy
    cell.close_contexts(job)  # nothing left: nothing destroyed twice
    assert len(destroyed) == 2
