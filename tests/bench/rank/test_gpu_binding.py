"""A rank's GPU, chosen before MPI_Init from the launcher's local rank, without a GPU: the order of
the calls (recorded with stand-ins), each launcher's variable, ROCR_VISIBLE_DEVICES, where the GPU
sits (a fake sysfs), and the refusal of every implementation's cells where ranks share a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
from conftest import ROOT
from mpi4py import MPI  # noqa: F401  (initialised here as in any in-process test, before the worker defers MPI_Init)

from bench.plan.cells import Cell
from bench.rank import mpi_start, worker
from bench.rank.cell import prepare_cell
from collectives.impls import IMPLEMENTATIONS
from collectives.libraries.xccl_communicators import XcclInfo
from collectives.memory import backends as devices
from collectives.memory import binding
from collectives.memory.device_context import ENV_SHARING, devices_digest, open_device, shared_gpu_reason
from collectives.schedules.topology import Grid, Topology
from collectives.timing_plan import TimingPlan


@pytest.fixture(autouse=True)
def no_binding_left():
    binding.forget_early_bindings()
    yield
    binding.forget_early_bindings()


class FakeMpi:
    """What start_mpi asks of mpi4py.MPI, recording the calls."""

    THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3

    def __init__(self, calls: list) -> None:
        self.calls, self.initialized = calls, False

    def Is_initialized(self) -> bool:  # noqa: N802  (MPI's name)
        return self.initialized

    def Init_thread(self, level: int) -> int:  # noqa: N802
        self.calls.append(("MPI_Init_thread", level))
        self.initialized = True
        return level


def test_the_gpu_is_bound_before_mpi_init():
    calls: list = []
    mpi = FakeMpi(calls)
    mpi_start.start_mpi("rocm", {"SLURM_LOCALID": "3"}, mpi, bind=lambda device, env: calls.append(("bind", device)))
    assert calls == [("bind", "rocm"), ("MPI_Init_thread", FakeMpi.THREAD_SINGLE)]
    calls.clear()
    mpi_start.start_mpi("cuda", {"PCCL_BENCH_THREAD_LEVEL": "funneled"}, mpi,
                        bind=lambda device, env: calls.append(("bind", device)))
    assert calls == [("bind", "cuda")]  # MPI already up: only the binding
    host_calls: list = []
    mpi_start.start_mpi("host", {"PCCL_BENCH_THREAD_LEVEL": "funneled"}, FakeMpi(host_calls),
                        bind=lambda device, env: host_calls.append("bind"))
    assert host_calls == [("MPI_Init_thread", FakeMpi.THREAD_FUNNELED)]  # host jobs bind nothing


def test_the_worker_starts_mpi_with_the_plans_device_before_touching_a_communicator(monkeypatch):
    calls: list = []
    plan = types.SimpleNamespace(nranks=2, cells=[types.SimpleNamespace(device="cuda")])

    class World:
        size = 2

    class Mpi:
        @property
        def COMM_WORLD(self):  # noqa: N802
            calls.append("COMM_WORLD")
            return World()

    monkeypatch.setattr(worker.LaunchPlan, "read", staticmethod(lambda path: plan))
    monkeypatch.setattr(worker, "start_mpi", lambda device: calls.append(("start_mpi", device)))
    monkeypatch.setattr(worker, "MPI", Mpi())
    monkeypatch.setattr(worker, "run_plan", lambda plan, comm: calls.append("run_plan"))
    assert worker.main("plan.json") == 0
    assert calls == [("start_mpi", "cuda"), "COMM_WORLD", "run_plan"]


def test_importing_the_worker_does_not_initialise_mpi():
    probe = ("import bench.rank.worker\nfrom mpi4py import MPI\nimport json\n"
             "print(json.dumps([MPI.Is_initialized(), bench.rank.worker.plan_device.__name__]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, "plan_device"]


@pytest.mark.parametrize("variable", binding.LOCAL_RANK_VARIABLES)
def test_local_rank_from_each_launchers_variable(variable):
    assert binding.launcher_local_rank({variable: "5"}) == (5, variable)


def test_local_rank_variables_in_order_and_none():
    env = {"PMI_LOCAL_RANK": "1", "SLURM_LOCALID": "2", "OMPI_COMM_WORLD_LOCAL_RANK": ""}
    assert binding.launcher_local_rank(env) == (2, "SLURM_LOCALID")  # srun's own first
    local, why = binding.launcher_local_rank({"SLURM_LOCALID": "x"})
    assert local is None and "SLURM_LOCALID" in why and "PMI_LOCAL_RANK" in why


def fake_probe(count: int):
    return lambda device: devices.GpuProbe(device, "", count, "ROCm (HIP 6.2)", "13.0")


def test_early_binding_takes_the_local_rank_modulo_the_visible_gpus():
    made = []
    bound = binding.bind_before_init("rocm", {"SLURM_LOCALID": "5"}, fake_probe(4),
                                     lambda device, index: made.append((device, index)) or f"backend {index}")
    assert (bound.local_rank, bound.index, bound.backend, bound.reason) == (5, 1, "backend 1", "")
    assert made == [("rocm", 1)] and bound.source == "SLURM_LOCALID (before MPI_Init)"
    assert binding.early_binding("rocm") is bound
    override = binding.bind_before_init("cuda", {"MPI_LOCALRANKID": "2", devices.ENV_GPU: "0"}, fake_probe(4),
                                        lambda device, index: index)
    assert override.index == 0


def test_early_binding_follows_the_sites_map():
    env = {devices.ENV_GPU_MAP: "3,2,1,0", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    chosen = [binding.bind_before_init("cuda", {**env, "SLURM_LOCALID": str(local)}, fake_probe(4),
                                       lambda device, index: index).index for local in range(4)]
    assert chosen == [3, 2, 1, 0]


def test_planned_choice_needs_no_gpu():
    env = {"SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "4,5,6,7", devices.ENV_GPU_MAP: "3,2,1,0"}
    facts = binding.planned_choice("cuda", env)
    assert (facts["local_rank"], facts["visible_ids"], facts["index"], facts["gpu"], facts["reason"]) == (
        1, ["4", "5", "6", "7"], 2, "6", "")
    rocm = binding.planned_choice("rocm", {"SLURM_LOCALID": "7", "ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    assert (rocm["index"], rocm["gpu"]) == (7, "7")
    assert "sees only 4" in binding.planned_choice("cuda", {**env, devices.ENV_GPU: "4"})["reason"]
    assert binding.planned_choice("cuda", {})["reason"].startswith("none of SLURM_LOCALID")


def test_the_rows_say_the_sites_map_chose_the_gpu():
    _, context = device_context(["0000:01:00.0", "0000:02:00.0"], {devices.ENV_GPU_MAP: "1,0"})
    assert "the site's gpu_map" in context.columns()["gpu_binding"]


def test_without_a_launcher_variable_nothing_is_bound_before_mpi_init():
    bound = binding.bind_before_init("cuda", {}, lambda device: pytest.fail("probed"),
                                     lambda d, i: pytest.fail("bound"))
    assert bound.local_rank is None and bound.backend is None
    assert bound.source.startswith("shared-memory split after MPI_Init (none of SLURM_LOCALID")


def test_early_binding_says_why_there_is_no_gpu():
    bound = binding.bind_before_init("cuda", {"SLURM_LOCALID": "0"},
                                     lambda device: devices.GpuProbe(device, "no cuda device visible"),
                                     lambda d, i: pytest.fail("bound"))
    assert bound.reason == "no cuda device visible" and bound.backend is None


def test_rocr_visible_devices_is_read_for_rocm(monkeypatch):
    env = {"ROCR_VISIBLE_DEVICES": "4", "HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}
    assert binding.visible_devices("rocm", env) == ("ROCR_VISIBLE_DEVICES=4; HIP_VISIBLE_DEVICES=0; "
                                                    "CUDA_VISIBLE_DEVICES=1")
    assert binding.visible_devices("cuda", env) == "CUDA_VISIBLE_DEVICES=1"
    # the probe's "none visible" names what Slurm on Frontier sets
    runtime = types.SimpleNamespace(is_hip=True, runtimeGetVersion=lambda: 60_200_000, getDeviceCount=lambda: 0)
    cupy = types.ModuleType("cupy")
    cupy.__version__, cupy.cuda = "13.0", types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "4")
    assert devices.probe("rocm").reason == "no rocm device visible (visible devices: ROCR_VISIBLE_DEVICES='4')"


def fake_sysfs(root, bus_id: str, node: int, cpulist: str):
    device = root / "bus" / "pci" / "devices" / bus_id
    device.mkdir(parents=True)
    (device / "numa_node").write_text(f"{node}\n")
    numa = root / "devices" / "system" / "node" / f"node{node}"
    numa.mkdir(parents=True)
    (numa / "cpulist").write_text(cpulist + "\n")
    return root


def test_gpu_numa_node_against_the_ranks_cpus(tmp_path):
    sysfs = fake_sysfs(tmp_path, "0000:c1:00.0", 3, "48-63,112-127")
    assert binding.sysfs_bus_id("00000000:C1:00.0") == "0000:c1:00.0"  # nvidia-smi's 8-digit domain
    assert binding.gpu_numa_node("0000:C1:00.0", sysfs) == 3
    assert binding.gpu_numa_node("0000:01:00.0", sysfs) is None and binding.gpu_numa_node(None, sysfs) is None
    assert binding.cpus_near_gpu({49, 50}, 3, sysfs) == "near"
    assert binding.cpus_near_gpu({0, 49}, 3, sysfs) == "partly"
    assert binding.cpus_near_gpu({0, 1}, 3, sysfs) == "far"
    assert binding.cpus_near_gpu({0}, None, sysfs) == "unknown"
    assert binding.parse_cpulist("0-2,7") == {0, 1, 2, 7} and binding.cpulist_text({0, 1, 2, 7, 9, 10}) == "0-2,7,9-10"


class FakeBackend:
    def __init__(self, index: int, bus_id: str) -> None:
        self.index, self.bus_id = index, bus_id

    def identity(self) -> str:
        return self.bus_id


class FakeComm:
    """Rank 0 of ``size`` ranks on one host: the others' facts are rank 0's with their own GPU."""

    rank = 0

    def __init__(self, bus_ids: list[str]) -> None:
        self.bus_ids = bus_ids
        self.size = len(bus_ids)

    def Get_rank(self) -> int:  # noqa: N802
        return self.rank

    def Split_type(self, kind: int, key: int = 0):  # noqa: N802  (MPI's name; the shared-memory split)
        return types.SimpleNamespace(Get_rank=lambda: 0, Free=lambda: None)

    def allgather(self, facts: dict) -> list[dict]:
        return [{**facts, "identity": f"{bus_id}@{facts['host']}", "local_rank": rank,
                 "placement": {**facts["placement"], "pci_bus_id": bus_id}}
                for rank, bus_id in enumerate(self.bus_ids)]


def device_context(bus_ids: list[str], env: dict):
    """The job's DeviceContext as rank 0 opens it, its GPU bound before MPI_Init (stand-ins for CuPy)."""
    binding.bind_before_init("cuda", {"SLURM_LOCALID": "0"}, fake_probe(1), lambda d, i: FakeBackend(i, bus_ids[0]))
    comm = FakeComm(bus_ids)
    topo = Topology(comm, None, None, Grid(len(bus_ids), len(bus_ids)), False, ("h1",))
    context = open_device(topo, "cuda", env={"PCCL_BENCH_GPU_AWARE": "yes", **env},
                          xccl_info=XcclInfo("NCCL", "2.21.5"), communicators=object())
    return topo, context


def cells_of_every_implementation() -> list[Cell]:
    algorithms = {"pccl-flat": "ring", "pccl-hier": "", "mpi": "native"}
    cells = []
    for impl in IMPLEMENTATIONS:
        intra, inter = ("ring", "rd") if impl == "pccl-hier" else ("", "")
        cells.append(Cell("allreduce", impl, algorithms.get(impl, ""), intra, inter, "cuda", 4, 1, 4, False,
                          "float32", "sum", "out_of_place", 4, 16, 64, "sync"))
    return cells


def test_ranks_sharing_a_gpu_refuse_every_implementations_cells():
    """Fewer visible GPUs than ranks on a node: not only NCCL's cells, every GPU cell is refused."""
    topo, context = device_context(["0000:01:00.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"], {})
    assert context.reason.startswith("ranks 0 and 1 share GPU 0000:01:00.0 on ")
    assert "gpu_sharing: yes" in context.reason and context.backend is None
    topo.resources.open("context:cuda", lambda: context)
    timing = TimingPlan(warmup=1, iters=2, min_iters=1, budget_s=0)
    for cell in cells_of_every_implementation():
        outcome, op = prepare_cell(topo, cell, timing, True, (0, "test"))
        assert op is None and outcome.status == "unsupported", (cell.impl, outcome)
        assert outcome.error == f"device cuda: {context.reason}", cell.impl
    assert len(cells_of_every_implementation()) == len(IMPLEMENTATIONS) >= 6


def test_sharing_allowed_by_the_suite_runs_but_nccl_still_refuses():
    bus_ids = ["0000:01:00.0", "0000:01:00.0"]
    _, context = device_context(bus_ids, {ENV_SHARING: "yes"})
    assert context.reason == "" and context.backend is not None
    assert "NCCL needs one GPU per rank" in context.xccl_reason()


def test_own_gpus_run_and_the_rows_carry_the_binding():
    _, context = device_context(["0000:01:00.0", "0000:02:00.0"], {})
    assert context.reason == ""
    columns = context.columns()
    assert columns["gpu_local_rank_from"] == "SLURM_LOCALID (before MPI_Init)"
    assert columns["gpu_devices_digest"] == devices_digest(context.placements)
    assert [(one["rank"], one["pci_bus_id"]) for one in context.placements] == [(0, "0000:01:00.0"),
                                                                                (1, "0000:02:00.0")]
    assert context.xccl_columns() == {}  # no communicator made yet: NCCL has said nothing


def test_shared_gpu_reason_ignores_unknown_gpus():
    facts = [{"identity": None, "host": "a"}, {"identity": None, "host": "a"}]  # no GPU, or emulation
    assert shared_gpu_reason(facts) == ""
    facts = [{"identity": "x@a", "host": "a"}, {"identity": "x@b", "host": "b"}]  # one GPU on each host
    assert shared_gpu_reason(facts) == ""


def test_env_says_where_the_local_rank_would_come_from():
    from bench.driver.gpu_env import local_rank_row

    name, text, how = local_rank_row("rocm", {"SLURM_LOCALID": "2", "ROCR_VISIBLE_DEVICES": "0,1"})
    assert name == "GPU local rank" and text == ("SLURM_LOCALID=2: the GPU is bound before MPI_Init; "
                                                 "ROCR_VISIBLE_DEVICES=0,1")
    assert "SLURM_LOCALID" in how
    assert local_rank_row("cuda", {})[1].startswith("none set here (outside a job)")
