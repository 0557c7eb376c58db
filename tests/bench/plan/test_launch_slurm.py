"""srun and sbatch without a cluster: the argv, the batch script, ``--launcher auto``, the suite's slurm block.

The same paths run against a real (local) Slurm in tests/bench/driver/test_slurm.py.
"""

from __future__ import annotations

import copy
import os
import shlex
import stat
from pathlib import Path

import pytest
import yaml
from conftest import describe, run_cli

from bench.driver import slurm
from bench.driver.launchers import Job, Launcher, choose_launcher, mpi_flavour, worker_program
from bench.driver.launchers.srun import PMI_PLUGIN, Srun, pmi_plugin
from bench.errors import BadInput
from bench.plan.cells import expand
from bench.plan.hosts import HostPlan, Placement
from bench.plan.slurm_options import Slurm
from bench.plan.suite import parse_suite

BASE = {
    "name": "tiny",
    "collectives": ["allreduce"],
    "implementations": ["mpi"],
    "ranks": [2, 4],
    "ranks_per_node": 2,
    "sizes": {"min": "8B", "max": "64B"},
    "timeout_s": 100,
}
#: what each rank runs: the worker on a plan
WORKER = tuple(worker_program(["/tmp/plan.json"]))
#: whole nodes of srun's own job, as outside an allocation
SRUN_NODES = HostPlan(source="srun", launcher_nodes=True)


def nodes(count: int, per_node: int) -> Placement:
    return Placement(count, per_node)


def suite_of(**changes):
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return parse_suite(raw, "test.yaml")


def srun(flavour: str = "mpich", srun_args: tuple[str, ...] = (), **where) -> Launcher:
    return Srun(flavour, "/usr/bin/srun", "srun", PMI_PLUGIN.get(flavour), srun_args, **where)


def options_before(argv: list[str], marker: str = "-m") -> list[str]:
    """The launcher's part of the argv (before ``python -m bench.rank.worker``)."""
    return argv[: argv.index(marker) - 1]


@pytest.fixture
def outside_allocation(monkeypatch):
    for name in [name for name in os.environ if name.startswith("SLURM_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def fake_slurm_bin(tmp_path, monkeypatch) -> Path:
    """A PATH with do-nothing srun and sbatch."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("srun", "sbatch"):
        tool = folder / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return folder


# ---------------------------------------------------------------- srun argv


def test_srun_shape_pmi_timeout_and_worker(outside_allocation):
    argv = srun().command(Job(8, nodes(2, 4), {"A": "1"}, WORKER, timeout_s=100))
    options = options_before(argv)
    assert options[0] == "/usr/bin/srun"
    assert {"--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--mpi=pmi2", "--kill-on-bad-exit=1",
            "--time=3"} <= set(options)
    assert argv[-3:] == ["-m", "bench.rank.worker", "/tmp/plan.json"]


@pytest.mark.parametrize(("flavour", "plugin"), [("mpich", "--mpi=pmi2"), ("openmpi", "--mpi=pmix"), ("other", None)])
def test_srun_pmi_plugin_follows_the_mpi(outside_allocation, flavour, plugin):
    options = options_before(srun(flavour).command(Job(2, nodes(1, 2), {}, WORKER, timeout_s=10)))
    mpi = [arg for arg in options if arg.startswith("--mpi=")]
    assert mpi == ([plugin] if plugin else [])


def test_pmi_plugin_of_the_loaded_mpi():
    flavour = mpi_flavour()
    assert pmi_plugin(flavour) in (PMI_PLUGIN.get(flavour), None)
    assert pmi_plugin("other") is None


def test_suite_srun_args_come_last_and_may_choose_the_pmi(outside_allocation):
    launcher = srun(srun_args=("--mpi=pmix_v4", "--cpu-bind=cores"))
    options = options_before(launcher.command(Job(2, nodes(2, 1), {}, WORKER, timeout_s=10)))
    assert options[-2:] == ["--mpi=pmix_v4", "--cpu-bind=cores"]
    assert [arg for arg in options if arg.startswith("--mpi=")] == ["--mpi=pmix_v4"]


def test_srun_exports_the_job_environment(outside_allocation):
    env = {"MALLOC_TRIM_THRESHOLD_": "67108864", "UCX_TLS": "rc,sm,self", "X": "a b"}
    argv = srun().command(Job(2, nodes(1, 2), env, WORKER, timeout_s=10))
    assert "--export=ALL,MALLOC_TRIM_THRESHOLD_=67108864,X=a b" in argv
    # srun cannot escape a comma: such a value rides in srun's own environment, named in the argv
    assert argv[0].endswith("env") and argv[1] == "UCX_TLS=rc,sm,self" and argv[2] == "/usr/bin/srun"


def test_partition_and_account_only_for_a_job_of_its_own(outside_allocation, monkeypatch):
    launcher = srun(partition="debug", account="proj1")
    job = Job(2, nodes(1, 2), {}, WORKER, timeout_s=10)
    assert {"--partition=debug", "--account=proj1"} <= set(launcher.command(job))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    argv = launcher.command(job)
    assert not any(arg.startswith(("--partition", "--account")) for arg in argv)


def test_srun_names_the_nodes_of_a_named_placement(outside_allocation):
    options = options_before(srun().command(Job(4, Placement(2, 2, ("n1", "n2")), {}, WORKER, timeout_s=10)))
    assert {"--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--nodelist=n1,n2"} <= set(options)


# ---------------------------------------------------------------- --launcher auto


def test_auto_is_srun_inside_an_allocation(fake_slurm_bin, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    launcher = choose_launcher("auto", Slurm(srun_args=["--cpu-bind=cores"], partition="debug"))
    assert (launcher.kind, launcher.requested) == ("srun", "auto")
    assert launcher.program == str(fake_slurm_bin / "srun")
    assert (launcher.srun_args, launcher.partition) == (("--cpu-bind=cores",), "debug")


def test_auto_is_mpiexec_outside_an_allocation(fake_slurm_bin, outside_allocation):
    launcher = choose_launcher("auto")
    assert (launcher.kind, launcher.requested) == ("mpiexec", "auto")


def test_srun_must_be_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BadInput, match="srun: not found on PATH"):
        choose_launcher("srun")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert choose_launcher("auto").kind == "mpiexec"  # an allocation without srun: mpiexec


# ---------------------------------------------------------------- the batch script


def test_batch_allocation_holds_every_launch():
    assert slurm.allocation_shape(expand(suite_of(), SRUN_NODES)) == ["--nodes=2", "--ntasks-per-node=2"]
    # no ranks_per_node: the most tasks, Slurm choosing the nodes (not 6 tasks asked of one node)
    assert slurm.allocation_shape(expand(suite_of(ranks=[2, 6], ranks_per_node=None), SRUN_NODES)) == ["--ntasks=6"]
    assert slurm.allocation_shape(expand(suite_of(ranks=[1, 4], ranks_per_node=1), SRUN_NODES)) == [
        "--nodes=4", "--ntasks-per-node=1"]


def test_batch_script(tmp_path):
    suite = suite_of(slurm={"time": 30, "partition": "debug", "account": "proj1",
                            "sbatch_args": ["--exclusive", "--comment=two words"]})
    folder = tmp_path / "run dir"
    text = slurm.batch_script("tiny-1", suite.slurm, expand(suite, SRUN_NODES), folder)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    directives = [shlex.split(line)[1] for line in lines if line.startswith("#SBATCH ")]
    assert directives[:5] == ["--job-name=pccl-bench", "--nodes=2", "--ntasks-per-node=2", "--export=ALL",
                              f"--output={folder.resolve()}/logs/sbatch-%j.log"]
    assert {"--time=30", "--partition=debug", "--account=proj1"} <= set(directives)
    assert directives[-2:] == ["--exclusive", "--comment=two words"]  # the suite's extras last
    command = shlex.split(lines[-1].removeprefix("exec "))
    assert command[1:] == ["-m", "bench", "run", "sweep", "--launcher", "srun", "--resume", str(folder.resolve())]


def test_sbatch_dry_run_prints_the_script_and_writes_nothing(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({**BASE, "slurm": {"time": "1:00:00"}}))
    out = tmp_path / "run"
    result = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--wait", "--dry-run", "--out", out,
                     "--partition", "debug", env={"PATH": str(tmp_path)}, timeout=60)
    assert result.returncode == 0, describe(result)
    assert "#SBATCH --nodes=2" in result.stdout and "#SBATCH --time=1:00:00" in result.stdout
    assert "#SBATCH --partition=debug" in result.stdout
    assert f"sbatch --parsable --wait {out}/sbatch.sh" in result.stdout
    assert "--allow-unsupported" not in result.stdout
    assert not out.exists()
    # the job's own sweep exits as the submitting one would: a GPU suite without GPUs is not FAILED in sacct
    allowed = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--dry-run", "--out", out, "--allow-unsupported",
                      env={"PATH": str(tmp_path)}, timeout=60)
    assert allowed.returncode == 0, describe(allowed)
    exec_line = next(line for line in allowed.stdout.splitlines() if line.startswith("exec "))
    assert exec_line.endswith(f"--resume {out.resolve()} --allow-unsupported"), exec_line


def test_a_job_time_that_reads_like_hours_is_said_and_a_bad_partition_named(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(BASE))
    out = tmp_path / "run"
    short = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--dry-run", "--out", out, "--time", "2:00",
                    env={"PATH": str(tmp_path)}, timeout=60)
    assert short.returncode == 0, describe(short)
    assert short.stdout.startswith("# note: Slurm reads --time 2:00 as 2 minutes 0 seconds"), short.stdout
    assert "#SBATCH --time=2:00\n" in short.stdout
    hours = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--dry-run", "--out", out, "--time", "2:00:00",
                    env={"PATH": str(tmp_path)}, timeout=60)
    assert hours.returncode == 0 and "note:" not in hours.stdout, describe(hours)
    spaced = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--dry-run", "--out", out, "--partition", "a b",
                     env={"PATH": str(tmp_path)}, timeout=60)
    assert spaced.returncode == 2 and spaced.stderr.strip() == (
        "pccl-bench: error: --partition: 'a b' is not a Slurm partition or account name: letters, digits and "
        ". _ , - (no spaces), starting with a letter or digit"), describe(spaced)


def test_srun_dry_run_prints_one_srun_line_per_launch(tmp_path, fake_slurm_bin):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({**BASE, "slurm": {"srun_args": ["--cpu-bind=cores"]}}))
    result = run_cli("run", "sweep", suite, "--launcher", "srun", "--dry-run", timeout=60,
                     env={"PATH": os.environ["PATH"]})
    assert result.returncode == 0, describe(result)
    lines = [line for line in result.stdout.splitlines() if str(fake_slurm_bin / "srun") in line]
    assert len(lines) == 2, describe(result)
    for line, (nodes, ntasks) in zip(lines, [(1, 2), (2, 4)], strict=True):
        assert f"--nodes={nodes} --ntasks={ntasks} --ntasks-per-node=2" in line
        assert "--cpu-bind=cores" in line and "--mpi=" in line


# ---------------------------------------------------------------- the suite's slurm block


def test_slurm_block_defaults_and_minutes():
    assert suite_of().slurm == Slurm()
    assert suite_of(slurm={"time": 90}).slurm.time == "90"
    assert suite_of(slurm={"time": "2-00:00:00"}).slurm.time == "2-00:00:00"
