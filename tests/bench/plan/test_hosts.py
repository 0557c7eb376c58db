"""Named hosts without a lab: host lists and hostfiles read, launches placed on them, the launchers'
argv, machines told apart by boot id, and bad host input through the CLI (exit 2, one line)."""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import TINY_SUITE, describe, find_mpiexec, run_cli

from bench.driver.launchers import Job, MachineLoad, mpi_flavour, worker_program
from bench.driver.launchers.mpiexec import Mpiexec
from bench.errors import BadInput
from bench.plan.cells import LaunchPlan, TimingPlan, expand
from bench.plan.hosts import Host, HostPlan, Placement, host_list, parse_host, place, read_hostfile
from bench.plan.suite import parse_suite
from bench.rank import hostfacts
from bench.rank.hostfacts import HostFacts, busiest_machine, placement_problem
from collectives.schedules.topology import Grid, Topology
from collectives.transports.shm import ops as shm

#: what each rank runs: the worker on a plan
WORKER = tuple(worker_program(["/tmp/plan.json"]))


def hosts(*names: str) -> HostPlan:
    return HostPlan(tuple(parse_host(name) for name in names), "--hosts")


# ---------------------------------------------------------------- reading hosts


def test_host_names_and_slots():
    assert parse_host("h1") == Host("h1") and parse_host("node-7.cluster:4") == Host("node-7.cluster", 4)
    assert str(Host("h1", 2)) == "h1:2"
    for bad in ("", "h 1", "h1:0", "h1:x", "-h1", "h1,h2"):
        with pytest.raises(ValueError):
            parse_host(bad)
    with pytest.raises(BadInput, match="--hosts: 1: 'h1' is listed twice"):
        host_list(["h1", "h1:2"], "--hosts")


def test_hostfiles_of_mpich_and_open_mpi(tmp_path: Path):
    path = tmp_path / "hosts"
    path.write_text("# cluster\nh1:2\n\nh2 slots=2 max_slots=4  # Open MPI\nh3\n")
    assert read_hostfile(path, "--hostfile") == [Host("h1", 2), Host("h2", 2), Host("h3")]


@pytest.mark.parametrize(("text", "needle"), [
    ("h1\nh1\n", ":2: 'h1' is listed twice"),
    ("h1 cores=4\n", ":1: 'cores=4': expected slots=N"),
    ("h1:2 slots=2\n", ":1: slots given twice"),
    ("# nothing\n", "names no host"),
    ("h1:0\n", ":1: 'h1:0': slots after ':' are a positive number"),
])
def test_bad_hostfiles_name_the_line(tmp_path: Path, text: str, needle: str):
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(BadInput, match=needle.replace("(", r"\(")):
        read_hostfile(path, "--hostfile")


def test_a_hostfile_that_is_not_a_file_is_refused_not_waited_on(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        read_hostfile(fifo, "--hostfile")
    with pytest.raises(BadInput, match="hostfile not found"):
        read_hostfile(tmp_path / "nothing", "--hostfile")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BadInput, match="not UTF-8"):
        read_hostfile(binary, "--hostfile")


# ---------------------------------------------------------------- placing launches


@pytest.mark.parametrize(("nranks", "per_node", "names", "expected"), [
    (2, None, ("h1", "h2"), Placement(2, 1, ("h1", "h2"))),          # spread: one rank per host
    (4, None, ("h1", "h2"), Placement(2, 2, ("h1", "h2"))),
    (1, None, ("h1", "h2"), Placement(1, 1, ("h1",))),
    (4, 2, ("h1", "h2", "h3", "h4"), Placement(2, 2, ("h1", "h2"))),  # as many hosts as nodes
    (8, 1, ("h1", "h2", "h3", "h4"), Placement(4, 2, ("h1", "h2", "h3", "h4"))),  # virtual nodes inside hosts
    (4, 2, (), Placement(1, 4)),                                        # this host: virtual nodes
])
def test_placements(nranks, per_node, names, expected):
    assert place(nranks, per_node, hosts(*names) if names else HostPlan()) == expected


def test_placements_that_do_not_fit():
    with pytest.raises(ValueError, match="3 ranks do not spread evenly over 2 hosts"):
        place(3, None, hosts("h1", "h2"))
    with pytest.raises(ValueError, match="6 nodes of 1 do not spread evenly over 4 hosts"):
        place(6, 1, hosts("h1", "h2", "h3", "h4"))
    with pytest.raises(ValueError, match="need 2 on each of 2 hosts; h2 has 1 slot"):
        place(4, None, hosts("h1:2", "h2:1"))


def test_srun_own_nodes_take_ranks_per_node_as_real_nodes():
    plan = HostPlan(source="srun", launcher_nodes=True)
    assert place(8, 2, plan) == Placement(4, 2)
    assert place(8, None, plan) == Placement(1, 8, launcher_spreads=True)  # Slurm chooses the nodes


def suite(**changes):
    raw = copy.deepcopy(TINY_SUITE)
    raw.update(changes)
    return parse_suite(raw, "s.yaml")


def test_launch_ids_and_cells_name_the_real_placement():
    launches = expand(suite(ranks=[2, 4], ranks_per_node=[1, 2]), hosts("h1", "h2"))
    found = {launch.launch_id: (launch.cells[0].nnodes, launch.cells[0].ranks_per_node,
                                launch.cells[0].virtual_nodes) for launch in launches}
    assert found == {"n2-rpn1-h2x1-host": (2, 1, False), "n2-rpn2-h1x2-host": (1, 2, False),
                     "n4-rpn1-h2x2-host": (4, 1, True), "n4-rpn2-h2x2-host": (2, 2, False)}
    # without hosts, as before: virtual nodes on this host
    assert [launch.launch_id for launch in expand(suite(ranks=[4], ranks_per_node=2))] == ["n4-rpn2-host"]
    with pytest.raises(BadInput, match="--hosts: ranks 3: 3 ranks do not spread evenly"):
        expand(suite(ranks=[3]), hosts("h1", "h2"))


def test_suite_hosts_and_hostfile(tmp_path: Path):
    path = tmp_path / "hosts"
    path.write_text("a:1\nb:1\n")
    assert [launch.launch_id for launch in expand(suite(hostfile=str(path)))] == ["n2-rpn1-h2x1-host"]
    assert [launch.launch_id for launch in expand(suite(hosts=["a", "b"]))] == ["n2-rpn1-h2x1-host"]
    with pytest.raises(BadInput, match="give hosts or hostfile, not both"):
        suite(hosts=["a"], hostfile=str(path))
    with pytest.raises(BadInput, match=r"hosts\.1: .*'b c' is not a host name"):
        suite(hosts=["a", "b c"])


# ---------------------------------------------------------------- the launchers


def test_mpiexec_is_told_every_host_and_its_ranks():
    placement = Placement(2, 2, ("h1", "h2"))
    mpich = Mpiexec.for_flavour("mpich", "mpiexec").command(Job(4, placement, {"A": "1"}, WORKER))
    assert mpich[:3] == ["mpiexec", "-hosts", "h1:2,h2:2"] and mpich[-6:-4] == ["-n", "4"]
    openmpi = Mpiexec.for_flavour("openmpi", "mpirun").command(Job(4, placement, {}, WORKER, oversubscribed=True))
    assert openmpi[openmpi.index("--host") + 1] == "h1:2,h2:2" and "--oversubscribe" in openmpi
    alone = Mpiexec.for_flavour("mpich", "mpiexec").command(Job(2, Placement(1, 2), {}, WORKER))
    assert "-hosts" not in alone


def test_oversubscription_settings_follow_the_machine():
    launcher = Mpiexec.for_flavour("mpich")
    busy = launcher.job_env(MachineLoad(4, 2), {})
    assert busy["MPIR_CVAR_CH4_PROGRESS_THROTTLE"] == "1" and busy["PCCL_BENCH_MACHINE_RANKS"] == "4"
    quiet = launcher.job_env(MachineLoad(2, 2), {"X": 1})
    assert "MPIR_CVAR_CH4_PROGRESS_THROTTLE" not in quiet and quiet["X"] == "1"
    cores = os.cpu_count() or 1
    assert shm._oversubscribed(1, {"PCCL_BENCH_MACHINE_RANKS": str(cores + 1)})
    assert not shm._oversubscribed(1, {"PCCL_BENCH_MACHINE_RANKS": str(cores)})


def facts(name: str, boot_id: str, cores: int = 2, memory: int = 100) -> HostFacts:
    return HostFacts(name, name, boot_id, cores, memory << 20, "MemAvailable")


def test_hosts_of_one_machine_share_its_cores_and_memory():
    placement = Placement(2, 2, ("h1", "h2"))
    same = {"h1": facts("h1", "boot-a"), "h2": facts("h2", "boot-a", memory=80)}
    room = busiest_machine(placement, same)
    assert (room.ranks, room.cores, room.memory) == (4, 2, (80 << 20, "MemAvailable on h2"))
    assert room.name == "the machine of h1,h2"
    apart = {"h1": facts("h1", "boot-a"), "h2": facts("h2", "boot-b", cores=1)}
    room = busiest_machine(placement, apart)
    assert (room.name, room.ranks, room.cores) == ("h2", 2, 1)  # two ranks on one core is the busiest
    assert hostfacts.machines(list(same.values())).keys() == {"boot-a"}


def test_the_worker_refuses_ranks_that_are_not_where_the_plan_put_them():
    plan = LaunchPlan("r", "n4-rpn4-host", 4, 4, None, "/tmp/p", TimingPlan(), True, [], ranks_per_host=4)
    spread = Topology(None, None, None, Grid(4, 2), False, ("h1", "h2"), 2)
    problem = placement_problem(plan, spread)
    assert problem and "all 4 ranks on one host" in problem and "2 hosts x 2 (h1,h2)" in problem
    assert "--hosts" in problem
    assert placement_problem(plan, Topology(None, None, None, Grid(4, 4), False, ("h1",), 4)) is None


# ---------------------------------------------------------------- through the CLI


def write(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**TINY_SUITE, **changes}))
    return path


def one_line(result, *needles: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, describe(result)
    for needle in needles:
        assert needle in lines[0], describe(result)


def test_bad_host_flags_are_one_line(tmp_path: Path):
    suite_path = write(tmp_path)
    one_line(run_cli("run", "sweep", suite_path, "--hosts", "h1,bad name", "--out", tmp_path / "a"),
             "--hosts: 1:", "'bad name' is not a host name")
    one_line(run_cli("run", "sweep", suite_path, "--hosts", "h1", "--hostfile", suite_path, "--out", tmp_path / "b"),
             "--hosts", "not both")
    one_line(run_cli("run", "sweep", suite_path, "--hosts", ",", "--out", tmp_path / "c"), "names no host")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_line(run_cli("run", "sweep", suite_path, "--hostfile", fifo, "--out", tmp_path / "d", timeout=30),
             str(fifo), "not a regular file")
    one_line(run_cli("run", "sweep", write(tmp_path, ranks=[3]), "--hosts", "h1,h2", "--out", tmp_path / "e"),
             "ranks 3", "do not spread evenly over 2 hosts")
    assert not any((tmp_path / name).exists() for name in "abcde")


def test_dry_run_shows_the_hosts_and_hydras_hostfile_is_read(tmp_path: Path):
    suite_path = write(tmp_path, ranks=[2, 4])
    shown = run_cli("run", "sweep", suite_path, "--hosts", "h1,h2", "--dry-run")
    assert shown.returncode == 0, describe(shown)
    assert "# n2-rpn1-h2x1-host" in shown.stdout and "-hosts h1:1,h2:1" in shown.stdout
    assert "# n4-rpn2-h2x2-host" in shown.stdout and "-hosts h1:2,h2:2" in shown.stdout
    hostfile = tmp_path / "hydra-hosts"
    hostfile.write_text("a:4\nb:4\n")
    hydra = run_cli("run", "sweep", suite_path, "--dry-run", env={"HYDRA_HOST_FILE": str(hostfile)})
    if mpi_flavour() != "mpich":
        pytest.skip("HYDRA_HOST_FILE is MPICH's")
    assert "HYDRA_HOST_FILE" in hydra.stdout and "-hosts a:1,b:1" in hydra.stdout, describe(hydra)


def test_hosts_that_do_not_answer_are_bad_input(tmp_path: Path):
    """The probe before the first launch: a launcher that cannot reach a host (here an ssh
    stand-in that fails as ssh would) is one line naming the hosts, and nothing is written."""
    fake = tmp_path / "fake-ssh"
    fake.write_text("#!/bin/sh\necho \"ssh: Could not resolve hostname $1\" >&2\nexit 255\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {"HYDRA_LAUNCHER": "ssh", "HYDRA_LAUNCHER_EXEC": str(fake)}
    result = run_cli("run", "sweep", write(tmp_path), "--hosts", "nosuch1,nosuch2", "--out", tmp_path / "run",
                     env=env, timeout=90)
    if mpi_flavour() != "mpich":
        pytest.skip("the ssh stand-in is hydra's (MPICH)")
    one_line(result, "hosts: nosuch1,nosuch2", "could not run there")
    assert not (tmp_path / "run").exists()


@pytest.mark.mpi
def test_launcher_none_ends_a_hung_launch_at_the_suites_timeout(tmp_path: Path):
    """Under an outer mpiexec with no time limit, a rank that hangs at the launch's second cell: the
    suite's timeout_s ends the job (exit 3), the first cell's row kept, the others written as timeout
    rows, the table written."""
    suite_path = write(tmp_path, ranks=[2], collectives=["allgather"], timeout_s=8)
    outer = [find_mpiexec(), "-n", "2"]
    result = run_cli("run", "sweep", suite_path, "--launcher", "none", "--out", tmp_path / "run", prefix=outer,
                     env={"PCCL_BENCH_FAULT": "hang:rank=1:cell=1"}, timeout=90)
    assert result.returncode == 3, describe(result)
    assert "timeout_s of 8 s" in result.stdout, describe(result)
    frame = pd.read_parquet(tmp_path / "run" / "results.parquet")  # 2 implementations x 4 sizes
    assert len(frame) == 8 and (frame["status"] == "ok").sum() == 1, frame[["status", "error"]]
    assert (frame.loc[frame["status"] != "ok", "status"] == "timeout").all(), frame[["status", "error"]]
    assert frame.loc[frame["status"] == "timeout", "error"].str.contains("--launcher none").all()


def test_launcher_none_alone_is_a_job_of_one_rank(tmp_path: Path):
    suite_path = write(tmp_path, ranks=[1])
    result = run_cli("run", "sweep", suite_path, "--launcher", "none", "--out", tmp_path / "run")
    assert result.returncode == 0, describe(result)
    frame = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(frame["status"]) == {"ok"} and (frame["nranks"] == 1).all()
    refused = run_cli("run", "sweep", write(tmp_path, ranks=[2]), "--launcher", "none", "--out", tmp_path / "other")
    one_line(refused, "--launcher none: this job has 1 rank;", "[2]", "--set ranks=[1]")
    assert not (tmp_path / "other").exists()
