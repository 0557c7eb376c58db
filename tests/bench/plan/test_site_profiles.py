"""Site profiles (suites/sites/): the golden table of docs/CLUSTERS-SITES.md against what pccl-bench
generates, flag by flag, for each profile at 2 and 64 nodes; the profile schema; the MPI and
NCCL/RCCL environments kept apart; one batch job per node count.

The table is the expectation: a profile's change that the table does not show (or a row no
profile produces) fails here, naming the site, the node count and the flag.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, describe, run_cli

from bench.driver import slurm
from bench.driver.launchers import BASE_ENV, Job, worker_program
from bench.driver.launchers.mpiexec import Mpiexec
from bench.driver.launchers.srun import Srun
from bench.errors import BadInput
from bench.plan.first_run import first_run_suite
from bench.plan.hosts import HostPlan, Placement
from bench.plan.site import XCCL_SUFFIX, calls_vendor_library, known_sites, load_site
from bench.plan.suite import parse_suite
from bench.sweep.options import SweepOptions, load_for
from bench.sweep.session import Sweep
from bench.sweep.where import Where
from collectives.envsettings import MACHINE_RANKS_VARIABLE
from collectives.version import VERSION_VARIABLE

DOC = ROOT / "docs" / "CLUSTERS-SITES.md"
#: the node counts the golden table covers
GOLDEN_NODES = (2, 64)
#: per site: its device, ranks per node, and the MPI library its srun starts (Cray MPICH: the site's
#: MpiDefault, so no --mpi of pccl-bench's own; Open MPI: pmix, which the profile names)
GOLDEN_SITES = {"frontier": ("rocm", 8, "mpich", None), "perlmutter": ("cuda", 4, "mpich", None),
                "generic-openmpi-ucx": ("cuda", 4, "openmpi", "pmix")}
#: what the golden suite gives of its own (the table's rows for these cite the suite, not the site)
GOLDEN_SLURM = {"account": "PROJ", "time": "30"}
#: Perlmutter's GPU jobs are charged to the project's GPU account (``_g``, the profile's account rule)
GOLDEN_ACCOUNT = {"perlmutter": "PROJ_g"}
GOLDEN_TIMEOUT_S = 600
#: #SBATCH lines that name the run folder and the working directory (not the site's)
RUN_PATHS = ("--output=", "--chdir=")
#: what every launch carries whatever the site (bench/driver/launchers/base.py)
HARNESS_ENV = {*BASE_ENV, VERSION_VARIABLE, MACHINE_RANKS_VARIABLE}


def golden_suite(site: str) -> dict:
    device, per_node, _, _ = GOLDEN_SITES[site]
    return {"name": "golden", "collectives": ["allreduce"], "implementations": ["mpi", "xccl"],
            "ranks": [nodes * per_node for nodes in GOLDEN_NODES], "ranks_per_node": per_node, "device": device,
            "sizes": {"min": "1MiB", "max": "1MiB"}, "timeout_s": GOLDEN_TIMEOUT_S, "site": site,
            "slurm": {**GOLDEN_SLURM, "account": GOLDEN_ACCOUNT.get(site, GOLDEN_SLURM["account"])}}


def golden_sweep(site_name: str) -> Sweep:
    """The golden suite planned for srun's own nodes with the site's launcher, as the batch job runs it."""
    _, _, flavour, pmi = GOLDEN_SITES[site_name]
    suite = parse_suite(golden_suite(site_name), "golden.yaml")
    site = load_site(site_name, "test").for_device(suite.device)  # as Where.of reads it
    launcher = Srun(flavour, "srun", "srun", pmi).with_site(site)
    return Sweep.of(suite, Where(HostPlan(source="srun", launcher_nodes=True), launcher, site=site))


def srun_options(argv: list[str]) -> list[str]:
    """The srun options of a launch's argv: after ``srun``, before the worker, without --export (the
    environment is compared on its own)."""
    start = argv.index("srun") + 1
    end = next(index for index, arg in enumerate(argv) if arg.endswith("python") or "/python" in arg)
    return [arg for arg in argv[start:end] if not arg.startswith("--export=")]


def generated(site_name: str, nodes: int, monkeypatch) -> dict[str, list[str]]:
    """What pccl-bench writes for the golden suite's launches on ``nodes`` nodes: the batch job's
    #SBATCH options, its modules and prologue, the srun options, and the environment of the MPI
    launch and (on top of it) of the NCCL/RCCL launch."""
    monkeypatch.setenv("SLURM_JOB_ID", "1")  # inside the batch job: srun steps of its allocation
    sweep = golden_sweep(site_name)
    group = next(group for group in slurm.batch_groups(sweep.launches, "auto") if group[0].where.nhosts == nodes)
    script = slurm.batch_script("golden", sweep.suite.slurm, group, Path("/run"), sweep.where.site, nodes)
    lines = script.splitlines()
    directives = [shlex.split(line)[1] for line in lines if line.startswith("#SBATCH ")]
    site_lines = lines[lines.index(next(line for line in lines if line.startswith("# site "))) + 1:
                       lines.index("set -eu")]
    # a site with NCCL/RCCL variables splits the launch (MPI cells, then NCCL/RCCL cells); one without, not
    mpi_launch, xccl_launch = group if len(group) == 2 else (group[0], group[0])
    assert len(group) == (2 if sweep.where.site.keeps_xccl_apart else 1)
    assert xccl_launch is mpi_launch or xccl_launch.launch_id == mpi_launch.launch_id + XCCL_SUFFIX
    mpi_argv, mpi_env = sweep.job_command(mpi_launch, "plan.json")
    xccl_argv, xccl_env = sweep.job_command(xccl_launch, "plan.json")
    assert srun_options(mpi_argv) == srun_options(xccl_argv), "the two launches differ in more than the environment"
    site_mpi = {name: value for name, value in mpi_env.items() if name not in HARNESS_ENV}
    extra = {name: value for name, value in xccl_env.items() if name not in mpi_env}
    assert all(xccl_env[name] == value for name, value in mpi_env.items() if name != MACHINE_RANKS_VARIABLE)
    return {
        "sbatch": [option for option in directives if not option.startswith(RUN_PATHS)],
        # each load checked (``module load X || { echo ...; exit 1; }``): the table names the module
        "module": [line.removeprefix("module load ").split(" || ", 1)[0] for line in site_lines
                   if line.startswith("module load ")],
        "prologue": [line for line in site_lines if not line.startswith("module load ")],
        "srun": srun_options(mpi_argv),
        "env mpi": [f"{name}={value}" for name, value in site_mpi.items()],
        "env xccl": [f"{name}={value}" for name, value in extra.items()],
    }


def golden_table() -> dict[tuple[str, int, str], list[str]]:
    """docs/CLUSTERS-SITES.md's golden table: (site, nodes, where) -> the values, in the table's order
    (``all`` rows hold at every golden node count)."""
    text = DOC.read_text()
    section = text.split("<!-- golden-table -->", 2)[1]
    table: dict[tuple[str, int, str], list[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[3].startswith("`"):
            continue
        site, nodes, where, value = cells[0], cells[1], cells[2], cells[3].strip("`")
        for count in GOLDEN_NODES if nodes == "all" else (int(nodes),):
            table.setdefault((site, count, where), []).append(value)
    return table


@pytest.mark.parametrize("nodes", GOLDEN_NODES)
@pytest.mark.parametrize("site", sorted(GOLDEN_SITES))
def test_generated_job_matches_the_golden_table(site, nodes, monkeypatch):
    table = golden_table()
    for where, values in generated(site, nodes, monkeypatch).items():
        expected = table.get((site, nodes, where), [])
        missing = [value for value in values if value not in expected]
        stale = [value for value in expected if value not in values]
        assert not missing and not stale, (f"{site} at {nodes} nodes, {where}: generated but not in "
                                           f"docs/CLUSTERS-SITES.md's golden table {missing}; "
                                           f"in the table but not generated {stale}")
        if where in ("srun", "module", "prologue"):  # order matters there (a later option wins; modules stack)
            assert values == expected, f"{site} at {nodes} nodes, {where}: order {values} != table {expected}"


def test_golden_table_names_every_shipped_site_and_cites_sources():
    table = golden_table()
    assert {site for site, _, _ in table} == set(GOLDEN_SITES) == set(known_sites())
    section = DOC.read_text().split("<!-- golden-table -->", 2)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    unsourced = [row for row in rows if not row.rstrip(" |").rsplit("|", 1)[1].strip()]
    assert not unsourced, f"rows without a source: {unsourced}"


def test_dry_run_shows_each_sites_jobs(tmp_path, monkeypatch):
    """``run sweep --site S --launcher sbatch --dry-run``: two scripts (2 and 64 nodes), each with the
    site's header; nothing written."""
    for site in GOLDEN_SITES:
        suite = tmp_path / f"{site}.yaml"
        suite.write_text(yaml.safe_dump({**golden_suite(site), "site": None}))
        out = tmp_path / f"run-{site}"
        fake = tmp_path / "bin"
        fake.mkdir(exist_ok=True)
        result = run_cli("run", "sweep", suite, "--site", site, "--launcher", "sbatch", "--dry-run", "--out", out,
                         env={"PATH": str(fake)}, timeout=60)
        assert result.returncode == 0, describe(result)
        assert "2 batch jobs, one per node count (node counts 2 to 64 differ by more than 2x)" in result.stdout
        assert "#SBATCH --nodes=2" in result.stdout and "#SBATCH --nodes=64" in result.stdout
        assert "'--dependency=afterany:<job id of sbatch-n2.sh>'" in result.stdout
        assert "--resume" in result.stdout and "--nodes 64" in result.stdout
        assert not out.exists()


# ---------------------------------------------------------------- one batch job per node count


def launches_on(nodes: list[int], per_node: int = 4):
    suite = parse_suite({"name": "n", "collectives": ["allreduce"], "implementations": ["mpi"],
                         "ranks": [count * per_node for count in nodes], "ranks_per_node": per_node,
                         "sizes": {"min": "8B", "max": "8B"}}, "n.yaml")
    return Sweep.of(suite, Where(HostPlan(source="srun", launcher_nodes=True), Srun("mpich"))).launches


def test_batch_jobs_per_node_count_when_counts_differ_by_more_than_twice():
    groups = slurm.batch_groups(launches_on([1, 2, 8]), "auto")
    assert [[launch.where.nhosts for launch in group] for group in groups] == [[1], [2], [8]]
    # each job asks for its own nodes only
    assert [slurm.allocation_shape(group)[0] for group in groups] == ["--nodes=1", "--nodes=2", "--nodes=8"]
    assert len(slurm.batch_groups(launches_on([2, 4]), "auto")) == 1  # within 2x: one job
    assert len(slurm.batch_groups(launches_on([2, 4]), "per-nodes")) == 2
    assert len(slurm.batch_groups(launches_on([1, 64]), "one")) == 1
    with pytest.raises(BadInput, match="--batch-jobs"):
        slurm.batch_groups(launches_on([1]), "some")


def test_batch_jobs_reason_says_which(tmp_path):
    launches = launches_on([1, 64])
    assert "one per node count" in slurm.batch_jobs_reason(slurm.batch_groups(launches, "auto"), "auto")
    assert "largest launch" in slurm.batch_jobs_reason(slurm.batch_groups(launches, "one"), "one")
    assert slurm.sbatch_argv("sbatch", tmp_path / "s.sh", True, "17")[1:3] == ["--parsable",
                                                                                "--dependency=afterany:17"]


def test_nodes_flag_runs_only_those_launches(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "n", "collectives": ["allreduce"], "implementations": ["mpi"],
                                     "ranks": [1, 2], "ranks_per_node": 1, "sizes": {"min": "8B", "max": "8B"},
                                     "hosts": ["a", "b"]}))
    result = run_cli("run", "sweep", suite, "--launcher", "mpiexec", "--dry-run", "--nodes", "2", timeout=60)
    assert result.returncode == 0, describe(result)
    assert "# n2-rpn1" in result.stdout and "# n1-rpn1" not in result.stdout
    wrong = run_cli("run", "sweep", suite, "--launcher", "mpiexec", "--dry-run", "--nodes", "3", timeout=60)
    assert wrong.returncode == 2 and "--nodes: no launch of the suite runs on 3 nodes" in wrong.stderr
    assert wrong.stdout == "", wrong.stdout  # refused before anything is printed
    # a GPU suite: the pre-flight is shaped as the largest launch of the nodes asked for, not of the run
    suite.write_text(yaml.safe_dump({**yaml.safe_load(suite.read_text()), "device": "cuda",
                                     "implementations": ["xccl"]}))
    one = run_cli("run", "sweep", suite, "--launcher", "mpiexec", "--dry-run", "--nodes", "1", timeout=60)
    assert one.returncode == 0, describe(one)
    assert "#   probe 1: shaped as n1-rpn1-h1x1-cuda " in one.stdout, one.stdout


# ---------------------------------------------------------------- the environments kept apart


def test_mpi_cells_never_get_the_vendor_librarys_environment(monkeypatch):
    sweep = golden_sweep("frontier")
    for launch in sweep.launches:
        _, env = sweep.job_command(launch, "plan.json")
        vendor = any(calls_vendor_library(cell) for cell in launch.cells)
        assert all(calls_vendor_library(cell) == vendor for cell in launch.cells), launch.launch_id
        assert ("NCCL_CROSS_NIC" in env) == vendor, launch.launch_id
        assert env["MPICH_OFI_NIC_POLICY"] == "GPU"


def test_hierarchical_cells_with_an_xccl_phase_call_the_vendor_library():
    suite = parse_suite({"name": "h", "collectives": ["allreduce"], "device": "cuda", "ranks": [4],
                         "ranks_per_node": 2, "sizes": {"min": "8B", "max": "8B"},
                         "implementations": ["mpi", {"impl": "pccl-hier", "intra": ["xccl", "ring"]}]}, "h.yaml")
    cells = Sweep.of(suite, Where(HostPlan(), Mpiexec.for_flavour("mpich"))).planned()
    assert {(cell.impl, cell.intra): calls_vendor_library(cell) for cell in cells} == {
        ("mpi", ""): False, ("pccl-hier", "xccl"): True, ("pccl-hier", "ring"): False}


def write_site(tmp_path: Path, **changes) -> Path:
    raw = {"name": "mine", "gpus_per_node": 4, "srun": ["--gpus-per-node={gpus_per_node}"],
           "mpiexec": ["--bind-to", "core"],
           "env": {"mpi": {"A": "{nodes}-nodes"}, "xccl": {"NCCL_X": "{ranks}"}},
           "at_scale": [{"min_nodes": 4, "xccl": {"NCCL_X": "big"}}, {"min_nodes": 2, "mpi": {"B": 1}}]}
    raw.update(changes)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_gpu_map_reaches_gpu_launches_only(tmp_path):
    site = load_site(str(write_site(tmp_path, gpu_map=[3, 2, 1, 0])), "test")
    envs = {}
    for device in ("cuda", "host"):
        suite = parse_suite({"name": "s", "collectives": ["allreduce"], "implementations": ["mpi"], "device": device,
                             "ranks": [4], "ranks_per_node": 4, "sizes": {"min": "8B", "max": "8B"}}, "s.yaml")
        launch = Sweep.of(suite, Where(HostPlan(source="srun", launcher_nodes=True), Srun("mpich"),
                                       site=site)).launches[0]
        envs[device] = site.launch_env(launch)
    assert envs["cuda"]["PCCL_BENCH_GPU_MAP"] == "3,2,1,0"
    assert "PCCL_BENCH_GPU_MAP" not in envs["host"]


def test_values_follow_the_node_count(tmp_path):
    site = load_site(str(write_site(tmp_path)), "test")
    suite = parse_suite({"name": "s", "collectives": ["allreduce"], "implementations": ["xccl"], "device": "cuda",
                         "ranks": [4, 8, 16], "ranks_per_node": 4, "sizes": {"min": "8B", "max": "8B"}}, "s.yaml")
    launches = Sweep.of(suite, Where(HostPlan(source="srun", launcher_nodes=True), Srun("mpich"), site=site)).launches
    envs = [site.launch_env(launch) for launch in launches]
    assert envs == [{"A": "1-nodes", "NCCL_X": "4"}, {"A": "2-nodes", "NCCL_X": "8", "B": "1"},
                    {"A": "4-nodes", "NCCL_X": "big", "B": "1"}]


def test_launcher_options_come_from_the_site_and_the_suite_wins_by_name(tmp_path):
    site = load_site(str(write_site(tmp_path)), "test")
    srun = Srun("mpich", "srun", "srun", None, ("--gpus-per-node=2",)).with_site(site)
    argv = srun.command(Job(8, Placement(2, 4), {}, tuple(worker_program(["p.json"])), timeout_s=10))
    assert argv.count("--gpus-per-node=2") == 1 and "--gpus-per-node=4" not in argv
    mpiexec = Mpiexec.for_flavour("openmpi", "mpiexec").with_site(site)
    argv = mpiexec.command(Job(8, Placement(1, 8), {}, tuple(worker_program(["p.json"])), timeout_s=10))
    assert argv[argv.index("-n") - 2: argv.index("-n")] == ["--bind-to", "core"]


# ---------------------------------------------------------------- a bad profile: one line, exit 2


@pytest.mark.parametrize(("changes", "message"), [
    ({"srun": ["--ntasks=4"]}, "srun.0: '--ntasks=4': the launcher sets --ntasks from ranks"),
    ({"batch": {"options": ["--account=x"]}}, "batch.options.0: '--account=x': the launcher sets --account"),
    # srun's own job takes them from the suite or the flags; a site's later copy would silently win
    ({"srun": ["--partition=p"]}, "srun.0: '--partition=p': the launcher sets --partition from slurm.partition"),
    ({"srun": ["-Afoo"]}, "srun.0: '-Afoo': the launcher sets -A from slurm.account"),
    ({"gpu": {"srun": ["--account=foo"]}}, "gpu.srun.0: '--account=foo': the launcher sets --account"),
    ({"env": {"mpi": {"A": "{node}"}}}, "{node} is not a placeholder"),
    ({"gpus_per_node": None}, "{gpus_per_node} is used but gpus_per_node is not given"),
    ({"env": {"mpi": {"A": [1]}}}, "env.mpi.A"),
    ({"colour": "red"}, "colour: unknown field"),
    ({"mpiexec": ["--bind-to core"]}, "one mpiexec argument per list item"),
    ({"batch": {"prologue": ["a\nb"]}}, "control character"),
    ({"gpu_map": [3, 2, 1, 1]}, "gpu_map: [3, 2, 1, 1] is not an order of the 4 GPUs of gpus_per_node"),
    ({"gpu_map": [1, 0]}, "is not an order of the 4 GPUs"),
])
def test_bad_profile_is_one_line(tmp_path, changes, message):
    path = write_site(tmp_path, **changes)
    with pytest.raises(BadInput) as caught:
        load_site(str(path), "test")
    text = str(caught.value)
    assert message in text and "\n" not in text and str(path) in text


def test_unknown_site_names_the_known_ones(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "n", "collectives": ["allreduce"], "implementations": ["mpi"],
                                     "ranks": [1], "sizes": {"min": "8B", "max": "8B"}}))
    result = run_cli("run", "sweep", suite, "--site", "nowhere", "--dry-run", "--launcher", "mpiexec", timeout=60)
    assert result.returncode == 2, describe(result)
    # the flag named it, so the flag is blamed (not the suite file, which names no site)
    assert "--site: 'nowhere': no site profile of that name (known: frontier" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    missing = run_cli("run", "sweep", suite, "--site", tmp_path / "none.yaml", "--dry-run", timeout=60)
    assert missing.returncode == 2 and "--site: " in missing.stderr and "no site profile at that path" in missing.stderr
    # a suite's own site: its file is named
    named = tmp_path / "named.yaml"
    named.write_text(yaml.safe_dump({**yaml.safe_load(suite.read_text()), "site": "nowhere"}))
    result = run_cli("run", "sweep", named, "--dry-run", "--launcher", "mpiexec", timeout=60)
    assert result.returncode == 2 and f"site profile (named by {named}: site) not found" in result.stderr, describe(
        result)


def test_a_host_suite_asks_no_gpus_of_a_site_that_asks_them_of_gpu_suites(tmp_path):
    """generic-openmpi-ucx puts its GPU request under ``gpu``: a CPU suite's job asks for none (a CPU
    partition refuses it), a GPU suite's job and launches ask as before."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    for tool in ("srun", "sbatch"):
        (bin_folder / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_folder / tool).chmod(0o755)
    env = {"PATH": f"{bin_folder}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1"}
    suite = tmp_path / "s.yaml"
    for device, asked in (("host", False), ("cuda", True)):
        suite.write_text(yaml.safe_dump({"name": "n", "collectives": ["allreduce"], "implementations": ["mpi"],
                                         "ranks": [2], "ranks_per_node": 2, "sizes": {"min": "8B", "max": "8B"},
                                         "device": device, "site": "generic-openmpi-ucx"}))
        batch = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--dry-run", "--out", tmp_path / "run",
                        env=env, timeout=60)
        assert batch.returncode == 0, describe(batch)
        assert ("#SBATCH --gpus-per-node=2" in batch.stdout) is asked, batch.stdout
        steps = run_cli("run", "sweep", suite, "--launcher", "srun", "--dry-run", env=env, timeout=60)
        assert steps.returncode == 0, describe(steps)
        (line,) = [line for line in steps.stdout.splitlines() if "/srun " in line]
        assert ("--gpus-per-node=2" in line) is asked and "--mpi=pmix" in line and "--cpu-bind=cores" in line, line


def test_site_requires_an_account_before_anything_is_written(tmp_path):
    suite = tmp_path / "s.yaml"
    raw = copy.deepcopy(golden_suite("perlmutter"))
    raw["slurm"].pop("account")
    suite.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    result = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--dry-run", "--out", out,
                     env={"PATH": str(tmp_path)}, timeout=60)
    assert result.returncode == 2, describe(result)
    assert re.search(r"--account: site perlmutter needs a Slurm account", result.stderr)
    assert not out.exists()


def test_a_site_path_is_kept_absolute_in_the_saved_suite(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "n", "collectives": ["allreduce"], "implementations": ["mpi"],
                                     "ranks": [1], "sizes": {"min": "8B", "max": "8B"}}))
    path = write_site(tmp_path)
    parsed, raw = load_for(SweepOptions(suite, site=str(path)))
    assert raw["site"] == str(path.resolve()) and parsed.site == str(path.resolve())
    _, raw = load_for(SweepOptions(suite, site="frontier"))
    assert raw["site"] == "frontier"


def test_per_node_count_jobs_are_submitted_in_a_chain(tmp_path):
    """A fake sbatch that answers job ids: the second job waits for the first (afterany), slurm.json
    holds both, and each script runs only its node count."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    calls = tmp_path / "calls"
    sbatch = bin_folder / "sbatch"
    sbatch.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nwc -l < {calls} | tr -d " " | sed "s/^/10/"\n')
    sbatch.chmod(0o755)
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "n", "collectives": ["allreduce"], "implementations": ["mpi"],
                                     "ranks": [1, 8], "ranks_per_node": 1, "sizes": {"min": "8B", "max": "8B"}}))
    out = tmp_path / "run"
    result = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--out", out, timeout=60,
                     env={"PATH": f"{bin_folder}:/usr/bin:/bin"})
    assert result.returncode == 0, describe(result)
    assert "submitted batch job 101" in result.stdout and "submitted batch job 102" in result.stdout
    first, second = calls.read_text().splitlines()
    assert "--dependency" not in first and first.endswith("sbatch-n1.sh")
    assert "--dependency=afterany:101" in second and second.endswith("sbatch-n8.sh")
    record = yaml.safe_load((out / "slurm.json").read_text())
    assert [job["job_id"] for job in record["jobs"]] == ["101", "102"] and record["job_id"] == "102"
    assert (out / "sbatch-n1.sh").read_text().rstrip().endswith("--nodes 1")
    assert "#SBATCH --nodes=8" in (out / "sbatch-n8.sh").read_text()


def test_a_job_of_one_node_count_plans_on_nodes_of_sruns_choosing(tmp_path):
    """Inside the 2-node job of a 2-and-8-node sweep (--nodes 2): planned on the allocation's two
    named hosts, the 8-node launch would be packed onto them as virtual nodes and run there; with
    --nodes every job plans its cells alike (no host names, srun's nodes), so each runs only its own
    launches and the last job's table finds the rows of all."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    for tool, text in (("srun", "exit 0"), ("scontrol", "echo n1; echo n2")):
        (bin_folder / tool).write_text(f"#!/bin/sh\n{text}\n")
        (bin_folder / tool).chmod(0o755)
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "n", "collectives": ["allreduce"], "implementations": ["mpi"],
                                     "ranks": [2, 8], "ranks_per_node": 1, "sizes": {"min": "8B", "max": "8B"}}))
    env = {"PATH": f"{bin_folder}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"}
    for nodes in (2, 8):
        some = run_cli("run", "sweep", suite, "--launcher", "srun", "--dry-run", "--nodes", nodes, env=env,
                       timeout=60)
        assert some.returncode == 0, describe(some)
        (line,) = [line for line in some.stdout.splitlines() if "/srun " in line]
        assert f"--nodes={nodes} --ntasks={nodes} --ntasks-per-node=1" in line and "--nodelist" not in line


def test_the_vendor_librarys_prologue_only_in_jobs_that_call_it(tmp_path):
    site = load_site("frontier", "test")
    raw = {**golden_suite("frontier"), "implementations": ["mpi"]}
    sweep = Sweep.of(parse_suite(raw, "mpi.yaml"), Where(HostPlan(source="srun", launcher_nodes=True),
                                                          Srun("mpich").with_site(site), site=site))
    script = slurm.batch_script("r", sweep.suite.slurm, sweep.launches, tmp_path, site)
    assert "CRAY_LD_LIBRARY_PATH" in script and "AWS_OFI_RCCL_LIB" not in script
    assert "AWS_OFI_RCCL_LIB" in slurm.batch_script("r", sweep.suite.slurm, golden_sweep("frontier").launches,
                                                    tmp_path, site)


def test_the_frontier_job_shown_in_the_docs_is_the_generated_one(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    sweep = golden_sweep("frontier")
    group = next(group for group in slurm.batch_groups(sweep.launches, "auto") if group[0].where.nhosts == 2)
    script = slurm.batch_script("golden", sweep.suite.slurm, group, Path("/run"), sweep.where.site, 2)
    shown = script.replace("/run", "<run>").replace(f"--chdir={Path.cwd()}", "--chdir=<cwd>")
    shown = shown.replace(sys.executable, "<venv>/bin/python")
    section = DOC.read_text().split("## Frontier", 1)[1]
    blocks = re.findall(r"```bash\n(#!/bin/bash\n.*?)```", section, re.S)
    assert blocks and blocks[0] == shown, "docs/CLUSTERS-SITES.md's Frontier job differs from the generated one"


def test_a_refused_second_job_names_the_queued_first(tmp_path):
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    calls = tmp_path / "calls"
    sbatch = bin_folder / "sbatch"
    # the first submission answers a job id, the second is refused as Slurm refuses a bad QOS
    sbatch.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nif [ "$(wc -l < {calls})" -gt 1 ]; then\n'
                      '  echo "sbatch: error: Invalid qos specification" >&2; exit 1\nfi\necho 101\n')
    sbatch.chmod(0o755)
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "n", "collectives": ["allreduce"], "implementations": ["mpi"],
                                     "ranks": [1, 8], "ranks_per_node": 1, "sizes": {"min": "8B", "max": "8B"}}))
    result = run_cli("run", "sweep", suite, "--launcher", "sbatch", "--out", tmp_path / "run", timeout=60,
                     env={"PATH": f"{bin_folder}:/usr/bin:/bin"})
    assert result.returncode == 2, describe(result)
    (line,) = result.stderr.strip().splitlines()
    assert "Invalid qos specification (sbatch-n8.sh; the jobs before it, 101, are queued: scancel 101" in line
    assert (tmp_path / "run" / "slurm.json").exists()  # the queued job's folder stays


# ---------------------------------------------------------------- the job against the site's facts


def site_job(site_name: str, device: str, per_node: int, nodes: int = 2, **slurm_fields) -> tuple[Sweep, str]:
    """The batch script of a suite of ``device`` on ``site_name`` (``slurm_fields`` replace the golden
    ones); BadInput where the job does not fit the site."""
    raw = {**golden_suite(site_name), "device": device, "implementations": ["mpi"], "ranks_per_node": per_node,
           "ranks": [nodes * per_node]}
    raw["slurm"] = {**raw["slurm"], **slurm_fields}
    suite = parse_suite(raw, "fit.yaml")
    site = load_site(site_name, "test").for_device(suite.device)
    sweep = Sweep.of(suite, Where(HostPlan(source="srun", launcher_nodes=True),
                                  Srun("mpich", "srun", "srun", None, tuple(suite.slurm.srun_args),
                                       job_time=suite.slurm.time).with_site(site), site=site), label="fit.yaml")
    groups = slurm.batch_groups(sweep.launches, "auto")
    slurm.check_job(sweep.label, sweep.suite.slurm, site, groups, suite.device != "host")
    return sweep, slurm.batch_script("fit", sweep.suite.slurm, sweep.launches, Path("/run"), site)


@pytest.mark.parametrize("per_node", [8, 16])
@pytest.mark.parametrize(("site_name", "cpus", "usable"), [("frontier", {8: 7, 16: 3}, 56),
                                                           ("perlmutter", {8: 32, 16: 16}, 256)])
def test_a_cpu_suite_fits_the_node_and_gets_no_gpu_settings(monkeypatch, site_name, cpus, usable, per_node):
    """A host suite at 8 and 16 ranks per node: CPUs per task x tasks within the node's usable CPUs
    (Frontier 56 cores under -S 8; a Perlmutter CPU node's 256 threads), no GPU request, no GPU variable."""
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    sweep, script = site_job(site_name, "host", per_node)
    (launch,) = sweep.launches
    argv, env = sweep.job_command(launch, "plan.json")
    options = srun_options(argv)
    assert f"--cpus-per-task={cpus[per_node]}" in options and cpus[per_node] * per_node <= usable, options
    assert not [option for option in options if "gpu" in option or "mask_cpu" in option], options
    assert not [name for name in env if name.startswith(("MPICH_GPU", "CUDA_", "HSA_")) or
                name == "MPICH_OFI_NIC_POLICY"], env
    assert "gpus-per-node" not in script and "--constraint=gpu" not in script
    assert ("#SBATCH --constraint=cpu" in script) is (site_name == "perlmutter"), script


@pytest.mark.parametrize(("site_name", "device", "per_node", "srun_args", "message"), [
    # the two: the reproducer's -c 7 at 16 ranks on Frontier, -c 32 at 8 ranks on a Perlmutter GPU node
    ("frontier", "host", 16, ["--cpus-per-task=7"], "fit.yaml: ranks_per_node: 16 ranks per node x --cpus-per-task=7 "
     "(slurm.srun_args) = 112 CPUs; a frontier node has 56 CPUs (Slurm counts cores: 56 usable of 64 cores): the "
     "step cannot be created; give slurm.srun_args: [--cpus-per-task=3]"),
    ("perlmutter", "cuda", 8, [], "fit.yaml: ranks_per_node: 8 ranks per node x --cpus-per-task=32 (site perlmutter "
     "srun) = 256 CPUs; a perlmutter node has 128 CPUs (64 cores x 2 hardware threads): the step cannot be created; "
     "give slurm.srun_args: [--cpus-per-task=16]"),
    ("frontier", "rocm", 16, [], "16 ranks per node x --cpus-per-task=7 (site frontier srun) = 112 CPUs"),
])
def test_a_job_that_does_not_fit_the_node_is_one_line(site_name, device, per_node, srun_args, message):
    with pytest.raises(BadInput) as caught:
        site_job(site_name, device, per_node, srun_args=srun_args)
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


@pytest.mark.parametrize(("site_name", "nodes", "time", "sbatch_args", "limit"), [
    ("frontier", 2, "2:00:01", [], "beyond site frontier's limit of 2:00:00 for 1-91 nodes"),
    ("frontier", 100, "6:30:00", [], "beyond site frontier's limit of 6:00:00 for 92-183 nodes"),
    ("frontier", 200, "1-00:00:00", [], "beyond site frontier's limit of 12:00:00 for 184+ nodes"),
    ("perlmutter", 2, "31", ["--qos=debug"], "beyond site perlmutter's limit of 30 for 1-8 nodes in qos debug"),
    ("perlmutter", 2, "49:00:00", [], "beyond site perlmutter's limit of 48:00:00 for 1+ nodes in qos regular"),
])
def test_a_time_beyond_the_sites_policy_for_the_node_count_is_refused(site_name, nodes, time, sbatch_args, limit):
    device = GOLDEN_SITES[site_name][0]
    with pytest.raises(BadInput) as caught:
        site_job(site_name, device, GOLDEN_SITES[site_name][1], nodes, time=time, sbatch_args=sbatch_args)
    text = str(caught.value)
    assert text.startswith(f"--time: {time} for a {nodes}-node job is {limit}") and "\n" not in text, text


def test_a_time_within_the_policy_passes_and_no_step_outlasts_its_job(monkeypatch):
    """Frontier at 100 nodes may run 6 h; a ``timeout_s: 10800`` launch in a 2 h job asks srun for
    120 minutes, not 181."""
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    site_job("frontier", "rocm", 8, 100, time="6:00:00")
    sweep, _ = site_job("frontier", "rocm", 8, 2, time="2:00:00")
    sweep = Sweep.of(sweep.suite.model_copy(update={"timeout_s": 10800}), sweep.where)
    argv, _ = sweep.job_command(sweep.launches[0], "plan.json")
    assert "--time=120" in srun_options(argv), srun_options(argv)


def test_a_cpu_account_for_a_perlmutter_gpu_job_is_one_line():
    with pytest.raises(BadInput) as caught:
        site_job("perlmutter", "cuda", 4, account="m1234")
    assert str(caught.value).startswith("--account: 'm1234': site perlmutter's GPU jobs are charged to a GPU "
                                        "account, whose name ends in _g (e.g. m1234_g)"), str(caught.value)
    site_job("perlmutter", "host", 8, account="m1234")  # a CPU job's account is its own


def test_a_failed_module_load_stops_the_job(tmp_path):
    """The generated script under bash with a stand-in ``module`` that fails on one module (as Lmod's
    returns non-zero): the job stops there, says which, and never reaches the sweep."""
    _, script = site_job("frontier", "rocm", 8)
    marker = tmp_path / "reached"
    script = script.replace(script.splitlines()[-1], f"touch {marker}")
    stand_in = ('module() { echo "module $*" >> "$MODULE_LOG"; [ "$2" != rocm ]; }\n'
                "export -f module\n")
    (tmp_path / "job.sh").write_text(script)
    env = {"PATH": "/usr/bin:/bin", "MODULE_LOG": str(tmp_path / "log"), "AWS_OFI_RCCL_LIB": "/x"}
    result = subprocess.run(["bash", "-c", stand_in + f"bash {tmp_path / 'job.sh'}"], env=env, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 1 and "pccl-bench: module load rocm failed" in result.stderr, result
    assert (tmp_path / "log").read_text().splitlines() == ["module load craype-accel-amd-gfx90a", "module load rocm"]
    assert not marker.exists()
    ok = subprocess.run(["bash", "-c", stand_in.replace('"$2" != rocm', "1 = 1") + f"bash {tmp_path / 'job.sh'}"],
                        env=env, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and marker.exists(), ok


# ---------------------------------------------------------------- the first-run kit


@pytest.mark.parametrize(("site_name", "flags", "per_node", "counters"), [
    ("frontier", [], 8, True), ("perlmutter", ["--account", "PROJ_g"], 4, True),
    ("generic-openmpi-ucx", ["--device", "cuda", "--ranks-per-node", "4"], 4, False)])
def test_the_first_run_kit_is_one_job_that_packs_its_run_folder(tmp_path, site_name, flags, per_node, counters):
    """``run first-run --site S --nodes 1|2 --dry-run``: one 10-minute job of one, then two nodes, one
    rank per GPU, every implementation checked bit-exact at a few sizes, the site's network counters on,
    the run folder packed into <run>.tar.gz whatever the sweep's end; nothing written."""
    out = tmp_path / "kit"
    for nodes in (1, 2):
        result = run_cli("run", "first-run", "--site", site_name, "--nodes", nodes, "--account", "PROJ", *flags,
                         "--dry-run", "--out", out, env={"PATH": str(tmp_path)}, timeout=60)
        assert result.returncode == 0, describe(result)
        text = result.stdout
        assert f"#SBATCH --nodes={nodes}" in text and f"#SBATCH --ntasks-per-node={per_node}" in text, text
        assert "#SBATCH --time=10" in text and "set -eo pipefail" in text
        assert f"tar -czf {out}.tar.gz -C {tmp_path} kit" in text and 'exit "$status"' in text, text
        assert f"--resume {out} || status=$?" in text and "exec " not in text
        assert not out.exists()
    # the suite it runs: the implementations, the sizes, the check, the counters (in every launch's env)

    kind = "cuda" if site_name != "frontier" else "rocm"
    raw = first_run_suite(load_site(site_name, "test").for_device(kind), site_name, 2, kind, per_node)
    assert raw["implementations"] == ["mpi", "pccl-flat", "xccl"] and raw["check"] is True
    assert raw["ranks"] == [2 * per_node]
    assert (raw["env"] == {"MPICH_OFI_CXI_COUNTER_REPORT": "2"}) is counters, raw["env"]
    with pytest.raises(BadInput, match="--nodes: 3: the first run is one node, then two"):
        first_run_suite(load_site(site_name, "test"), site_name, 3, kind, per_node)
