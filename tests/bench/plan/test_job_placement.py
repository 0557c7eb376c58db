"""Placement taken from the job the sweep runs in (PBS, LSF, Open MPI's default hostfile), without a
real launch: the hosts and slots read, the memory check, the oversubscription rule and the process
check counting each host's share of the ranks, bad job files as one line naming the variable and
line, and srun letting Slurm choose the nodes where no ranks_per_node is given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hostile import run_in_process

from bench.driver import memory_check as memory
from bench.driver.launchers import Launcher, mpi_flavour
from bench.driver.launchers.mpiexec import Mpiexec
from bench.driver.launchers.srun import Srun
from bench.errors import BadInput
from bench.plan.cells import LaunchPlan, TimingPlan
from bench.plan.hosts import Host
from bench.plan.suite import parse_suite
from bench.rank import hostfacts
from bench.rank.hostfacts import HostFacts, placement_problem
from bench.sweep.session import Sweep
from bench.sweep.where import Where, host_plan
from collectives.schedules.topology import Grid, Topology

SUITE = {
    "name": "job",
    "collectives": ["allreduce"],
    "implementations": ["mpi"],
    "ranks": [256],
    "sizes": {"min": "1MiB", "max": "4MiB"},  # 8 MiB of buffers a rank: 512 MiB for 64 ranks, 2 GiB for 256
    "timing": {"warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0},
}
GIB = 1 << 30
JOB_VARIABLES = ("HYDRA_HOST_FILE", "OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile",
                 "PBS_NODEFILE", "LSB_DJOB_HOSTFILE", "LSB_MCPU_HOSTS")
MPICH = Mpiexec.for_flavour("mpich", "mpiexec")
OPEN_MPI = Mpiexec.for_flavour("openmpi", "mpirun")
THROTTLE = "MPIR_CVAR_CH4_PROGRESS_THROTTLE"


@pytest.fixture
def outside_any_job(monkeypatch):
    for name in [*JOB_VARIABLES, *(name for name in os.environ if name.startswith("SLURM_"))]:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def this_host(monkeypatch) -> HostFacts:
    """This host as 64 cores and 1 GiB free: 256 ranks of 8 MiB do not fit here, 64 do."""
    here = HostFacts("login", "login", hostfacts.boot_id() or "this-boot", 64, GIB, "MemAvailable")
    monkeypatch.setattr(hostfacts, "local", lambda name="": here)
    return here


def pbs_job(tmp_path: Path, monkeypatch, hosts: int = 4, slots: int = 64) -> Path:
    """A PBS_NODEFILE as PBS writes it: a line per slot, each host's lines together."""
    path = tmp_path / "nodefile"
    path.write_text("".join(f"n{host}\n" * slots for host in range(1, hosts + 1)))
    monkeypatch.setenv("PBS_NODEFILE", str(path))
    return path


def node(name: str, cores: int = 64, memory_bytes: int | None = GIB, boot: str = "") -> HostFacts:
    return HostFacts(name, name, boot or f"boot-{name}", cores, memory_bytes, "MemAvailable")


def where_of(launcher: Launcher = MPICH, facts: dict | None = None, **changes) -> tuple[Where, list]:
    suite = parse_suite({**SUITE, **changes}, "suite.yaml")
    where = Where.of(suite, launcher)
    where.facts = facts or {}
    return where, where.launches(suite)


# ---------------------------------------------------------------- the job's hosts


def test_pbs_nodefile_is_the_hosts_and_their_slots(tmp_path: Path, outside_any_job):
    path = pbs_job(tmp_path, outside_any_job)
    for launcher in (MPICH, OPEN_MPI):
        plan = host_plan(parse_suite(SUITE, "suite.yaml"), launcher)
        assert plan.hosts == tuple(Host(f"n{i}", 64) for i in range(1, 5)) and plan.source == f"PBS_NODEFILE={path}"
    where, launches = where_of()
    assert [launch.launch_id for launch in launches] == ["n256-rpn64-h4x64-host"]
    argv, _ = Sweep.of(parse_suite(SUITE, "s"), where).job_command(launches[0], "plan.json")
    assert argv[argv.index("-hosts") + 1] == "n1:64,n2:64,n3:64,n4:64"  # the launcher told exactly
    with pytest.raises(BadInput, match="512 ranks need 128 on each of 4 hosts; n1 has 64 slots"):
        where_of(ranks=[512])
    # the suite's own hosts come first; srun never reads PBS's file
    assert host_plan(parse_suite({**SUITE, "hosts": ["a", "b"]}, "s"), MPICH).source == "hosts"
    assert host_plan(parse_suite(SUITE, "s"), Srun("mpich")).launcher_nodes


def test_the_probe_asks_each_job_host_once(tmp_path: Path, outside_any_job):
    pbs_job(tmp_path, outside_any_job)
    asked = {}

    def probe(argv, env, names, cwd):
        asked["argv"], asked["names"] = argv, names
        return [node(name) for name in names]

    outside_any_job.setattr(hostfacts, "probe", probe)
    where, _ = where_of()
    where.probe(parse_suite(SUITE, "suite.yaml"))
    assert asked["names"] == ["n1", "n2", "n3", "n4"] and "n1:1,n2:1,n3:1,n4:1" in asked["argv"]
    assert set(where.facts) == {"n1", "n2", "n3", "n4"}


def test_lsf_host_file_and_host_counts(tmp_path: Path, outside_any_job):
    path = tmp_path / "djob"
    path.write_text("h1\nh1\nh2\nh2\n")
    outside_any_job.setenv("LSB_MCPU_HOSTS", "ignored 9")  # the file is read where LSF wrote one
    outside_any_job.setenv("LSB_DJOB_HOSTFILE", str(path))
    plan = host_plan(parse_suite(SUITE, "s"), MPICH)
    assert plan.hosts == (Host("h1", 2), Host("h2", 2)) and plan.source == f"LSB_DJOB_HOSTFILE={path}"
    outside_any_job.delenv("LSB_DJOB_HOSTFILE")
    outside_any_job.setenv("LSB_MCPU_HOSTS", "h1 4 h2 4")
    plan = host_plan(parse_suite(SUITE, "s"), OPEN_MPI)
    assert plan.hosts == (Host("h1", 4), Host("h2", 4)) and plan.source == "LSB_MCPU_HOSTS (2 hosts)"


def test_open_mpis_default_hostfile_only_for_open_mpi(tmp_path: Path, outside_any_job):
    path = tmp_path / "ompi-hosts"
    path.write_text("a slots=2\nb slots=2\n")
    pbs_job(tmp_path, outside_any_job, hosts=1, slots=2)
    for name in ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile"):
        outside_any_job.setenv(name, str(path))
        plan = host_plan(parse_suite(SUITE, "s"), OPEN_MPI)
        assert plan.hosts == (Host("a", 2), Host("b", 2)) and plan.source == f"{name}={path}"
        assert host_plan(parse_suite(SUITE, "s"), MPICH).source.startswith("PBS_NODEFILE=")  # not MPICH's
        outside_any_job.delenv(name)
    outside_any_job.setenv("HYDRA_HOST_FILE", str(path))
    assert host_plan(parse_suite(SUITE, "s"), OPEN_MPI).source.startswith("PBS_NODEFILE=")  # hydra's, not Open MPI's
    assert host_plan(parse_suite(SUITE, "s"), MPICH).source == f"HYDRA_HOST_FILE={path}"


@pytest.mark.parametrize(("variable", "text", "needle"), [
    ("PBS_NODEFILE", "n1\nn1 extra\n", ":2: 'n1 extra' is not a host name"),
    ("PBS_NODEFILE", "n1\n-bad\n", ":2: '-bad' is not a host name"),
    ("PBS_NODEFILE", "\n\n", "names no host"),
    ("LSB_DJOB_HOSTFILE", "h1\nh 2\n", ":2: 'h 2' is not a host name"),
    ("OMPI_MCA_orte_default_hostfile", "a slots=2\na\n", ":2: 'a' is listed twice"),
])
def test_bad_job_files_name_the_variable_and_line(tmp_path: Path, outside_any_job, variable, text, needle):
    path = tmp_path / "job-hosts"
    path.write_text(text)
    outside_any_job.setenv(variable, str(path))
    with pytest.raises(BadInput) as raised:
        host_plan(parse_suite(SUITE, "s"), OPEN_MPI)
    assert str(raised.value).startswith(f"{variable}: {path}") and needle in str(raised.value)


def test_bad_job_variables_are_bad_input(tmp_path: Path, outside_any_job):
    outside_any_job.setenv("PBS_NODEFILE", str(tmp_path / "gone"))
    with pytest.raises(BadInput, match="^PBS_NODEFILE: .*gone: hostfile not found"):
        host_plan(parse_suite(SUITE, "s"), MPICH)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outside_any_job.setenv("PBS_NODEFILE", str(fifo))
    with pytest.raises(BadInput, match="^PBS_NODEFILE: .*fifo: not a regular file"):  # never waited on
        host_plan(parse_suite(SUITE, "s"), MPICH)
    outside_any_job.delenv("PBS_NODEFILE")
    for value, needle in (("h1 4 h2", "3 words: expected pairs"), ("h1 x", "host 1: 'h1:x'"),
                          ("h1 2 h1 2", "host 2: 'h1' is listed twice")):
        outside_any_job.setenv("LSB_MCPU_HOSTS", value)
        with pytest.raises(BadInput, match=f"^LSB_MCPU_HOSTS: {needle}"):
            host_plan(parse_suite(SUITE, "s"), MPICH)


# ---------------------------------------------------------------- each host's share of the ranks


def test_memory_check_counts_each_hosts_ranks(tmp_path: Path, outside_any_job, this_host):
    pbs_job(tmp_path, outside_any_job)
    suite = parse_suite(SUITE, "suite.yaml")
    where, launches = where_of(facts={f"n{i}": node(f"n{i}") for i in range(1, 5)})
    assert where.memory_room(launches[0]) == (64, (GIB, "MemAvailable on n1"), "n1")
    Sweep.of(suite, where, label="suite.yaml").check_fits()  # 512 MiB a host
    with pytest.raises(BadInput, match="x 256 ranks on this host = 2.0 GiB"):  # as all on this host
        memory.check_memory(launches, lambda launch: (256, (GIB, "MemAvailable"), "this host"), "4MiB", "s")
    # one host short of memory is still refused, by name
    where.facts["n3"] = node("n3", memory_bytes=GIB // 4)
    with pytest.raises(BadInput, match=r"x 64 ranks on n3 = 512\.0 MiB; n3 has 256\.0 MiB available"):
        Sweep.of(suite, where, label="suite.yaml").check_fits()
    # not probed (a dry run): this host's figures stand in for each host, holding its share
    unprobed, _ = where_of()
    assert unprobed.memory_room(launches[0]) == (64, (GIB, "MemAvailable here, standing in for n1 (not probed)"),
                                                 "n1")
    Sweep.of(suite, unprobed, label="suite.yaml").check_fits()


def test_oversubscription_follows_each_hosts_cores(tmp_path: Path, outside_any_job, this_host):
    pbs_job(tmp_path, outside_any_job)
    suite = parse_suite(SUITE, "suite.yaml")
    where, launches = where_of(facts={f"n{i}": node(f"n{i}") for i in range(1, 5)})
    argv, env = Sweep.of(suite, where).job_command(launches[0], "plan.json")
    assert not where.load(launches[0]).oversubscribed and env["PCCL_BENCH_MACHINE_RANKS"] == "64"
    assert THROTTLE not in env and THROTTLE not in argv
    open_mpi, _ = where_of(OPEN_MPI, dict(where.facts))
    assert "--oversubscribe" not in Sweep.of(suite, open_mpi).job_command(launches[0], "plan.json")[0]
    sweep = Sweep.of(suite, where, tmp_path / "run", "job-1")
    assert not sweep.launch_plan(launches[0], launches[0].cells, argv, env).row_extra["oversubscribed"]
    where.facts["n2"] = node("n2", cores=32)  # one host over: the settings and the flag for the launch
    argv, env = Sweep.of(suite, where).job_command(launches[0], "plan.json")
    assert env[THROTTLE] == "1" and THROTTLE in argv
    assert sweep.launch_plan(launches[0], launches[0].cells, argv, env).row_extra["oversubscribed"]


def test_process_check_counts_each_hosts_ranks(tmp_path: Path, outside_any_job, this_host):
    pbs_job(tmp_path, outside_any_job)
    outside_any_job.setattr(memory, "process_room", lambda: (100, "ulimit -u 150, 50 of them running"))
    unprobed, launches = where_of()
    one_core = {f"n{i}": node(f"n{i}", cores=1) for i in range(1, 5)}
    assert unprobed.process_room(launches[0]) == (64, 64, "n1", True)  # this host's limits stand in
    memory.check_processes(launches, unprobed.process_room, "suite.yaml")  # 64 of 100; 256 would not be
    probed, _ = where_of(facts=one_core)
    memory.check_processes(launches, probed.process_room, "suite.yaml")  # 64 ranks a core: the rule's edge
    probed.facts["n1"] = node("n1", cores=1, boot=this_host.boot_id)  # n1 is this machine: its limits count
    outside_any_job.setattr(memory, "process_room", lambda: (50, "ulimit -u 100, 50 of them running"))
    with pytest.raises(BadInput, match="needs 64 processes on n1, which can start 50 more"):
        memory.check_processes(launches, probed.process_room, "suite.yaml")
    with pytest.raises(BadInput, match="puts 128 ranks on the machine of n3,n4, which has 1 cores"):
        shared = {**one_core, "n3": node("n3", cores=1, boot="one"), "n4": node("n4", cores=1, boot="one")}
        memory.check_processes(launches, where_of(facts=shared)[0].process_room, "suite.yaml")


# ---------------------------------------------------------------- srun's own job


def srun_launcher() -> Launcher:
    return Srun("mpich", "/usr/bin/srun", "srun", "pmi2")


def test_srun_without_ranks_per_node_lets_slurm_choose_the_nodes(tmp_path: Path, outside_any_job, this_host):
    suite = parse_suite({**SUITE, "ranks": [8]}, "suite.yaml")
    where, launches = where_of(srun_launcher(), ranks=[8])
    argv, env = Sweep.of(suite, where).job_command(launches[0], "plan.json")
    assert "--ntasks=8" in argv and not any(arg.startswith(("--nodes", "--ntasks-per-node")) for arg in argv)
    assert not where.load(launches[0]).oversubscribed and "PCCL_BENCH_MACHINE_RANKS" not in env
    plan = Sweep.of(suite, where, tmp_path, "r").launch_plan(launches[0], launches[0].cells, argv, env)
    assert plan.ranks_per_host == 0 and plan.row_extra == {"oversubscribed": False}
    spread = Topology(None, None, None, Grid(8, 4), False, ("c1", "c2"), 4)  # where Slurm put them
    assert placement_problem(plan, spread) is None
    assert where.memory_room(launches[0])[1] is None and where.process_room(launches[0]) is None


def test_srun_with_ranks_per_node_asks_for_those_nodes(tmp_path: Path, outside_any_job):
    outside_any_job.setattr(hostfacts, "local", lambda name="": node("login", cores=1))  # a small login node
    suite = parse_suite({**SUITE, "ranks": [8], "ranks_per_node": 2}, "suite.yaml")
    where, launches = where_of(srun_launcher(), ranks=[8], ranks_per_node=2)
    argv, env = Sweep.of(suite, where).job_command(launches[0], "plan.json")
    assert {"--nodes=4", "--ntasks=8", "--ntasks-per-node=2"} <= set(argv)
    # this host's cores are not the nodes': Slurm gives every task a CPU of its own
    assert not where.load(launches[0]).oversubscribed and env["PCCL_BENCH_MACHINE_RANKS"] == "2"
    plan = Sweep.of(suite, where, tmp_path, "r").launch_plan(launches[0], launches[0].cells, argv, env)
    assert plan.ranks_per_host == 2
    assert placement_problem(LaunchPlan("r", "l", 8, 2, 2, "/p", TimingPlan(), True, [], ranks_per_host=2),
                             Topology(None, None, None, Grid(8, 4), False, ("c1", "c2"), 4))


def test_dry_run_under_pbs_shows_the_job_hosts(tmp_path: Path, outside_any_job):
    if mpi_flavour() not in ("mpich", "openmpi"):
        pytest.skip("mpiexec's host flags are MPICH's and Open MPI's")
    path = pbs_job(tmp_path, outside_any_job, hosts=2, slots=2)
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "ranks": [4], "sizes": {"min": "8B", "max": "8B"}}))
    code, out, err = run_in_process("run", "sweep", suite, "--dry-run", "--launcher", "mpiexec")
    assert code == 0, err
    assert f"# hosts (PBS_NODEFILE={path}): n1:2, n2:2" in out and "# n4-rpn2-h2x2-host" in out
    assert "n1:2,n2:2" in out

