"""Oversubscription judged by physical cores (Open MPI's slots), read from a fake /sys CPU topology:
an SMT node with more ranks than cores but not more than hardware threads gets ``--oversubscribe``
and the oversubscription aids; a node without SMT or without sysfs counts each thread."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.driver.launchers import Job, MachineLoad, worker_program
from bench.driver.launchers.mpiexec import Mpiexec
from bench.plan.hosts import Placement
from bench.rank import hostfacts
from collectives import envsettings
from collectives.envsettings import physical_cores


def fake_topology(root: Path, cores: int, threads_per_core: int) -> Path:
    """A /sys/devices/system/cpu tree numbered as Linux numbers SMT: cpu c + k*cores on core c."""
    total = cores * threads_per_core
    for cpu in range(total):
        siblings = [cpu % cores + k * cores for k in range(threads_per_core)]
        topology = root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        text = ",".join(str(s) for s in siblings) if threads_per_core > 1 else str(cpu)
        (topology / "thread_siblings_list").write_text(text + "\n")
    return root


@pytest.fixture
def smt_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process sees 4 cores x 2 threads: 8 CPUs in its affinity mask and in os.cpu_count()."""
    root = fake_topology(tmp_path / "cpu", cores=4, threads_per_core=2)
    monkeypatch.setattr(envsettings, "SYS_CPU", root)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    return root


def test_smt_siblings_count_once(tmp_path: Path) -> None:
    root = fake_topology(tmp_path, cores=4, threads_per_core=2)
    assert physical_cores(range(8), root) == 4
    assert physical_cores({0, 4}, root) == 1  # both threads of core 0
    assert physical_cores({0, 1}, root) == 2
    assert physical_cores({0, 1, 5}, root) == 2  # 5 is core 1's sibling


def test_range_lists_and_no_smt(tmp_path: Path) -> None:
    root = tmp_path / "cpu"
    for cpu in range(4):  # cores 0-1 and 2-3 written as ranges, as kernels do
        (root / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (root / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text("0-1\n" if cpu < 2 else "2-3\n")
    assert physical_cores(range(4), root) == 2
    assert physical_cores(range(3), fake_topology(tmp_path / "plain", cores=3, threads_per_core=1)) == 3


def test_no_sysfs_counts_threads(tmp_path: Path) -> None:
    assert physical_cores(range(6), tmp_path / "missing") == 6


def test_ranks_between_cores_and_threads_oversubscribe(smt_node: Path) -> None:
    """6 ranks on 4 cores / 8 threads: os.cpu_count() would say no; Open MPI would refuse them."""
    load = MachineLoad.here(6)
    assert load.cores == 4 and load.oversubscribed
    assert not MachineLoad.here(4).oversubscribed
    launcher = Mpiexec.for_flavour("openmpi", "mpiexec")
    job = Job(6, Placement(1, 6), {}, tuple(worker_program(["plan.json"])), oversubscribed=load.oversubscribed)
    argv = launcher.command(job)
    assert "--oversubscribe" in argv
    assert launcher.job_env(load, {})["OMPI_MCA_mpi_yield_when_idle"] == "1"
    mpich = Mpiexec.for_flavour("mpich", "mpiexec").job_env(load, {})
    assert mpich["MPIR_CVAR_CH4_PROGRESS_THROTTLE"] == "1"


def test_hostfacts_report_cores(smt_node: Path) -> None:
    assert hostfacts.local("h1").cores == 4
