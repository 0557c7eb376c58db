"""Sweeps through a real Slurm: ``--launcher srun``, ``--launcher sbatch`` with and without ``--wait``,
and the resilience paths (a crashed rank, a hung job) under srun.

They run against the local test cluster of ``scripts/local-slurm.sh up`` (two namespace nodes n1, n2
of the lab "slurm", each its own host on the lab's network; ``make test`` brings it up where it can),
every Slurm command and sweep through ``scripts/local-slurm.sh exec`` (the cluster's login host), and
skip with the reason where no Slurm answers. Another cluster (reached from here, without the prefix)
is used only when PCCL_BENCH_SLURM_TESTS=1 says so.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT, describe, run_cli

LOCAL_CLUSTER = "pccl-local"
SUITE = {
    "name": "slurm",
    "collectives": ["allreduce"],
    "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["ring"]}],
    "ranks": [2],
    "ranks_per_node": 1,  # one rank on each of the two nodes
    "sizes": {"min": "64B", "max": "1KiB", "factor": 16},
    "timing": {"warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0},
    "timeout_s": 60,
    "slurm": {"time": 5},
}
PLANNED = 4  # 2 implementations x 2 sizes


LOCAL_SLURM = ROOT / "scripts" / "local-slurm.sh"


def on_cluster() -> list[str]:
    """What runs a command where the cluster answers: the local cluster's login host, or here."""
    return [] if os.environ.get("PCCL_BENCH_SLURM_TESTS") == "1" else ["bash", str(LOCAL_SLURM), "exec"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([*on_cluster(), *argv], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def cluster_cli(*args: object, **options) -> subprocess.CompletedProcess:
    """``run_cli`` on the cluster's login host."""
    return run_cli(*args, prefix=on_cluster(), **options)


@functools.cache
def slurm_missing() -> str | None:
    """Why the Slurm tests cannot run here, or None."""
    absent = [tool for tool in ("sinfo", "srun", "sbatch", "scontrol") if shutil.which(tool) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} not on PATH); scripts/local-slurm.sh up sets one up"
    try:
        info = _run(["sinfo", "-h", "-o", "%T"])
    except subprocess.TimeoutExpired:
        return "Slurm is not up (sinfo timed out); scripts/local-slurm.sh up starts the local cluster"
    if info.returncode != 0:
        why = (info.stderr.strip().splitlines() or ["no output"])[-1]
        return f"Slurm is not up (sinfo: {why}); scripts/local-slurm.sh up starts the local cluster"
    cluster = re.search(r"ClusterName\s*=\s*(\S+)", _run(["scontrol", "show", "config"]).stdout)
    name = cluster.group(1) if cluster else "?"
    if name != LOCAL_CLUSTER and os.environ.get("PCCL_BENCH_SLURM_TESTS") != "1":
        return (f"sinfo answers for cluster {name!r}, not {LOCAL_CLUSTER!r}; "
                "PCCL_BENCH_SLURM_TESTS=1 runs the tests there")
    return None


pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("one_lab_at_a_time")]


@pytest.fixture(autouse=True)
def _need_slurm():
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)


def write_suite(folder: Path, **changes) -> Path:
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, **changes}, sort_keys=False))
    return path


def read_run(out: Path) -> tuple[pd.DataFrame, dict]:
    return pd.read_parquet(out / "results.parquet"), json.loads((out / "meta.json").read_text())


def job_id_of(stdout: str) -> str:
    found = re.search(r"submitted batch job (\d+)", stdout)
    assert found, stdout
    return found.group(1)


def assert_all_ok(frame: pd.DataFrame, meta: dict) -> None:
    assert len(frame) == PLANNED, frame[["impl", "status", "error"]]
    assert set(frame["status"]) == {"ok"}, frame[["impl", "status", "error"]]
    assert (frame["n_wrong"] == 0).all() and (frame["nranks"] == 2).all()
    assert (frame["run_id"] == meta["run_id"]).all()
    assert meta["launcher"] == "srun" and meta["cells_written"] == PLANNED


def processes_mentioning(text: str) -> list[int]:
    """Processes of this host whose command line holds ``text`` (the local cluster runs its tasks here)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and text in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def wait_until_gone(job_id: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _run(["squeue", "-h", "-j", job_id]).stdout.strip():
            return
        time.sleep(0.5)
    _run(["scancel", job_id])
    pytest.fail(f"batch job {job_id} still queued or running after {timeout_s} s")


# ---------------------------------------------------------------- srun


@pytest.fixture(scope="module")
def srun_run(tmp_path_factory):
    if slurm_missing():
        pytest.skip(slurm_missing())
    base = tmp_path_factory.mktemp("srun")
    out = base / "run"
    result = cluster_cli("run", "sweep", write_suite(base), "--launcher", "srun", "--out", out, timeout=120)
    return result, out


def test_srun_sweep(srun_run):
    result, out = srun_run
    assert result.returncode == 0, describe(result)
    assert "launcher srun" in result.stdout and f"{PLANNED} ok" in result.stdout
    frame, meta = read_run(out)
    assert_all_ok(frame, meta)
    assert meta["launcher_requested"] == "srun"
    assert (frame["nnodes"] == 2).all() and (frame["ranks_per_node"] == 1).all()


def test_srun_ranks_run_on_two_hosts_of_their_own(srun_run):
    _, out = srun_run
    frame, meta = read_run(out)
    # two real hosts: each rank on a node with its own hostname, address and shared memory
    assert set(frame["hosts"]) == {"n1,n2"} and not frame["virtual_nodes"].any()
    (launch,) = meta["launches"].values()
    assert [host["hostname"] for host in launch["placement"]] == ["n1", "n2"]


def test_srun_spreads_the_ranks_over_the_allocation_without_ranks_per_node(tmp_path):
    suite = {key: value for key, value in SUITE.items() if key != "ranks_per_node"}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    out = tmp_path / "run"
    inside = [*on_cluster(), "salloc", "--nodes=2", "--ntasks-per-node=1", "--time=5"]
    result = run_cli("run", "sweep", path, "--out", out, prefix=inside, timeout=120)
    assert result.returncode == 0, describe(result)
    frame, meta = read_run(out)
    assert_all_ok(frame, meta)
    assert (frame["nnodes"] == 2).all() and (frame["ranks_per_node"] == 1).all(), frame[["nnodes", "hosts"]]
    assert meta["hosts"]["source"].startswith("Slurm allocation")
    assert [host["name"] for host in meta["hosts"]["hosts"]] == ["n1", "n2"]
    (launch_id, launch), = meta["launches"].items()
    assert launch_id == "n2-rpn1-h2x1-host" and "--nodelist=n1,n2" in launch["argv"]


def test_a_sweep_inside_a_job_srun_started(tmp_path):
    """``srun ... pccl-bench run sweep S --launcher none``: every rank is a process srun started (pmi2
    for MPICH), the CLI's imports before MPI_Init; the sweep runs in the job, across both nodes."""
    out = tmp_path / "run"
    from bench.driver.launchers import mpi_flavour
    from bench.driver.launchers.srun import pmi_plugin

    pmi = [f"--mpi={plugin}"] if (plugin := pmi_plugin(mpi_flavour())) else []
    inside = [*on_cluster(), "srun", *pmi, "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--time=5"]
    result = run_cli("run", "sweep", write_suite(tmp_path), "--launcher", "none", "--out", out, prefix=inside,
                     timeout=120)
    assert result.returncode == 0, describe(result)
    frame, meta = read_run(out)
    assert len(frame) == PLANNED and set(frame["status"]) == {"ok"}, frame[["impl", "status", "error"]]
    assert set(frame["hosts"]) == {"n1,n2"} and meta["launcher"] == "none"


def test_srun_launch_command_is_recorded(srun_run):
    _, out = srun_run
    _, meta = read_run(out)
    (launch,) = meta["launches"].values()
    argv = launch["argv"]
    assert Path(argv[0]).name == "srun"
    assert {"--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"} <= set(argv)
    assert any(arg.startswith("--export=ALL,MALLOC_MMAP_THRESHOLD_=") for arg in argv)
    if meta["mpi_flavour"] == "mpich":
        assert "--mpi=pmi2" in argv


def test_srun_crashed_rank_fails_the_rest_of_its_launch(tmp_path):
    suite = write_suite(tmp_path, sizes={"min": "8B", "max": "512B", "factor": 4})
    result = cluster_cli("run", "sweep", suite, "--launcher", "srun", "--out", tmp_path / "run",
                     env={"PCCL_BENCH_FAULT": "crash:rank=1:cell=2"}, timeout=120)
    assert result.returncode == 3, describe(result)
    frame, _ = read_run(tmp_path / "run")
    assert list(frame["status"]) == ["ok"] * 2 + ["failed"] * 6, frame[["status", "error"]]
    assert frame.loc[2, "error"].startswith("MPI job exited with")


def test_srun_hung_job_is_killed_at_its_timeout(tmp_path):
    # The launch's timeout covers srun, pmi2, two Pythons and the first cell before the hang: 4 s was
    # too short on a loaded 2-core runner, 10 s a speed limit a load burst could still cross (the ok
    # row of the first cell lost); 20 s, and the sweep's end measured from that timeout, not a fixed time
    timeout_s = 20
    suite = write_suite(tmp_path, timeout_s=timeout_s)
    started = time.monotonic()
    result = cluster_cli("run", "sweep", suite, "--launcher", "srun", "--out", tmp_path / "run",
                     env={"PCCL_BENCH_FAULT": "hang:rank=0:cell=1"}, timeout=180)
    assert result.returncode == 3, describe(result)
    frame, _ = read_run(tmp_path / "run")
    assert list(frame["status"]) == ["ok"] + ["timeout"] * 3, frame[["status", "error"]]
    assert frame.loc[1, "error"].startswith(f"MPI job killed after {timeout_s} s"), frame.loc[1, "error"]
    # ended by the launch's timeout, not by the Slurm time limit (5 minutes) or this test's (180 s)
    assert time.monotonic() - started < timeout_s + 60
    # srun returns once the step is cancelled; slurmstepd ends its tasks within KillWait (5 s): a
    # hang guard, generous for a loaded runner
    deadline = time.monotonic() + 30
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_mentioning(str(tmp_path)), "ranks outlived the killed job step"


# ---------------------------------------------------------------- sbatch


def test_sbatch_wait_sweep(tmp_path):
    out = tmp_path / "run"
    result = cluster_cli("run", "sweep", write_suite(tmp_path), "--launcher", "sbatch", "--wait", "--out", out,
                     timeout=150)
    assert result.returncode == 0, describe(result)
    job_id = job_id_of(result.stdout)
    assert f"{PLANNED} ok" in result.stdout  # the summary of the merged results
    frame, meta = read_run(out)
    assert_all_ok(frame, meta)
    assert meta["slurm"]["job_id"] == job_id and meta["slurm"]["batch"]["job_id"] == job_id
    assert meta["slurm"]["nnodes"] == "2"
    assert json.loads((out / "slurm.json").read_text())["job_id"] == job_id
    assert json.loads((out / "run.json").read_text())["run_id"] == meta["run_id"]
    assert (out / "sbatch.sh").is_file() and (out / "logs" / f"sbatch-{job_id}.log").is_file()
    assert (out / "results.csv").is_file() and (out / "samples.parquet").is_file()


def test_sbatch_returns_the_job_id_and_the_job_fills_the_folder(tmp_path):
    out = tmp_path / "run"
    result = cluster_cli("run", "sweep", write_suite(tmp_path), "--launcher", "sbatch", "--out", out, timeout=60)
    assert result.returncode == 0, describe(result)
    job_id = job_id_of(result.stdout)
    assert json.loads((out / "slurm.json").read_text())["job_id"] == job_id
    wait_until_gone(job_id)
    frame, meta = read_run(out)
    assert_all_ok(frame, meta)
    assert meta["slurm"]["job_id"] == job_id


def test_sbatch_refusal_is_bad_input(tmp_path):
    out = tmp_path / "run"
    result = cluster_cli("run", "sweep", write_suite(tmp_path), "--launcher", "sbatch", "--partition", "nosuch",
                     "--out", out, timeout=60)
    assert result.returncode == 2, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pccl-bench: error: sbatch:"), describe(result)
    assert "partition" in lines[0].lower()
    assert not out.exists(), "a refused submission left its run folder behind"


def test_sbatch_one_job_per_node_count(tmp_path):
    """Launches on 1 and 2 nodes as two jobs (the second after the first), each of its own nodes; the
    last job's table holds every cell of both."""
    out = tmp_path / "run"
    suite = write_suite(tmp_path, ranks=[1, 2])
    result = cluster_cli("run", "sweep", suite, "--launcher", "sbatch", "--batch-jobs", "per-nodes", "--wait",
                         "--out", out, timeout=240)
    assert result.returncode == 0, describe(result)
    first, last = re.findall(r"submitted batch job (\d+)", result.stdout)
    record = json.loads((out / "slurm.json").read_text())
    assert [job["job_id"] for job in record["jobs"]] == [first, last]
    assert f"--dependency=afterany:{first}" in record["jobs"][1]["argv"]
    assert "#SBATCH --nodes=1" in (out / "sbatch-n1.sh").read_text()
    assert "#SBATCH --nodes=2" in (out / "sbatch-n2.sh").read_text()
    frame = pd.read_parquet(out / "results.parquet")
    assert sorted(set(frame["nranks"])) == [1, 2] and set(frame["status"]) == {"ok"}, frame[["nranks", "status"]]
    # each job counts its own cells (its progress bar too), not the run's
    for job_id, nranks in ((first, 1), (last, 2)):
        log = (out / "logs" / f"sbatch-{job_id}.log").read_text()
        mine = int((frame["nranks"] == nranks).sum())
        assert f"({mine} cells of the run's {len(frame)}, 0 already done;" in log, log


def test_sbatch_with_a_site_profile(tmp_path):
    """A site profile through a real Slurm: its prologue in the job, its srun options in every step,
    MPI's variables in every launch and NCCL's only in the launch of the NCCL cells (split off)."""
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"name": "local", "batch": {"prologue": ["export SITE_PROLOGUE=ran"]},
                                    "srun": ["--cpu-bind=none"],
                                    "env": {"mpi": {"SITE_MPI": "{nodes}-nodes"}, "xccl": {"NCCL_DEBUG": "WARN"}}}))
    out = tmp_path / "run"
    suite = write_suite(tmp_path, ranks=[1, 2], implementations=["mpi", "xccl"])
    result = cluster_cli("run", "sweep", suite, "--site", site, "--launcher", "sbatch", "--batch-jobs", "per-nodes",
                         "--wait", "--out", out, timeout=240)
    assert result.returncode == 0, describe(result)
    frame, meta = read_run(out)
    assert set(frame.loc[frame["impl"] == "mpi", "status"]) == {"ok"}, frame[["impl", "status", "error"]]
    assert meta["site"]["name"] == "local"
    launches = meta["launches"]
    assert sorted(launches) == ["n1-rpn1-host", "n1-rpn1-host-xccl", "n2-rpn1-host", "n2-rpn1-host-xccl"]
    for launch_id, launch in launches.items():
        assert "--cpu-bind=none" in launch["argv"], launch["argv"]
        assert launch["env"]["SITE_MPI"] == f"{launch['nranks']}-nodes"
        assert ("NCCL_DEBUG" in launch["env"]) == launch_id.endswith("-xccl")
    for script in ("sbatch-n1.sh", "sbatch-n2.sh"):
        assert "export SITE_PROLOGUE=ran" in (out / script).read_text()


def test_the_first_run_kit_on_a_real_slurm(tmp_path):
    """``run first-run --site FILE --nodes 2 --wait`` (the CPU path: no GPU here): one batch job, every
    implementation checked bit-exact, the site's network-counter variables in every launch, and the
    run folder packed into <run>.tar.gz by the job itself."""
    import tarfile

    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"name": "local", "srun": ["--cpu-bind=none"],
                                    "facts": {"node": {"cores": 1}, "network_counters": {"PCCL_COUNTERS": "2"}}}))
    out = tmp_path / "kit"
    result = cluster_cli("run", "first-run", "--site", site, "--nodes", "2", "--ranks-per-node", "1", "--wait",
                         "--time", "5", "--out", out, timeout=150)
    assert result.returncode == 0, describe(result)
    frame, meta = read_run(out)
    assert set(frame["status"]) == {"ok"} and (frame["n_wrong"] == 0).all(), frame[["impl", "status", "error"]]
    assert set(frame["impl"]) == {"mpi", "pccl-flat"} and (frame["nranks"] == 2).all()
    assert all(launch["env"]["PCCL_COUNTERS"] == "2" for launch in meta["launches"].values())
    # the CPU path's per-rank table: one rank on each node, its local rank from Slurm, its CPUs
    ranks = meta["preflight"]["ranks"]
    assert len({one["host"] for one in ranks}) == 2 and all(one["local_rank_from"] == "SLURM_LOCALID" for one in ranks)
    assert all(one["cpus"] for one in ranks), ranks
    with tarfile.open(f"{out}.tar.gz") as archive:
        names = set(archive.getnames())
    assert {"kit/meta.json", "kit/results.parquet", "kit/sbatch.sh"} <= names, names
    assert any(name.startswith("kit/logs/sbatch-") for name in names), names
