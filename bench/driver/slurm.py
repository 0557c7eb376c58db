"""``--launcher sbatch``: the sweep as batch jobs that run it with srun inside: one job, or one
per node count (``batch_groups``), each asking for the nodes of its own launches.

The run folder is made here as for any sweep (suite.yaml, run.json); each batch
script (``<run>/sbatch.sh``, or ``<run>/sbatch-n<nodes>.sh``) runs ``pccl-bench run
sweep --launcher srun --resume <run> [--nodes N]`` in its allocation, so the results
land in the same folder, under the same run id, in the same layout; the jobs run
one after another (``--dependency=afterany``). Submitting a script again finishes
what a time limit cut off. ``<run>/slurm.json`` records the submissions and job ids.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BadInput
from bench.files import atomic_write
from bench.plan.cells import Launch
from bench.plan.site import Site
from bench.plan.slurm_options import Slurm, cpus_per_task, option_name, time_minutes
from bench.text import printable

BATCH_SCRIPT = "sbatch.sh"
#: ``--batch-jobs``: one job per node count, one job for the sweep, or (auto) per node count where
#: the sweep's node counts differ by more than BATCH_SPLIT_RATIO
BATCH_JOBS = ("auto", "per-nodes", "one")
BATCH_SPLIT_RATIO = 2
JOB_RECORD = "slurm.json"
#: allocation facts a run records in meta.json when it runs inside one
ALLOCATION_ENV = {"job_id": "SLURM_JOB_ID", "job_name": "SLURM_JOB_NAME", "cluster": "SLURM_CLUSTER_NAME",
                  "partition": "SLURM_JOB_PARTITION", "nodelist": "SLURM_JOB_NODELIST",
                  "nnodes": "SLURM_JOB_NUM_NODES"}


def allocation_shape(launches: list[Launch]) -> list[str]:
    """The sbatch options of an allocation that holds every launch of the sweep, one after another:
    nodes and tasks per node, or (no ``ranks_per_node``) the most tasks, as many nodes as Slurm
    needs for them; never every rank asked of one node."""
    if any(launch.where.launcher_spreads for launch in launches):
        return [f"--ntasks={max(launch.nranks for launch in launches)}"]
    return [f"--nodes={max(launch.where.nhosts for launch in launches)}",
            f"--ntasks-per-node={max(launch.where.ranks_per_host for launch in launches)}"]


def batch_groups(launches: list[Launch], mode: str) -> list[list[Launch]]:
    """The launches of each batch job, smallest node count first: one job per node count (each asks
    for its own nodes, so no node-hours idle while small launches run in a large allocation), or one
    job for all. ``auto`` splits where the largest node count is more than BATCH_SPLIT_RATIO times the
    smallest; launches whose nodes Slurm chooses (no ranks_per_node) always share one job."""
    if mode not in BATCH_JOBS:
        raise BadInput("--batch-jobs", f"{mode!r}: expected one of {', '.join(BATCH_JOBS)}")
    counts = sorted({launch.where.nhosts for launch in launches})
    spread = any(launch.where.launcher_spreads for launch in launches)
    split = mode == "per-nodes" or (mode == "auto" and counts[-1] > BATCH_SPLIT_RATIO * counts[0])
    if spread or not split or len(counts) == 1:
        return [launches]
    return [[launch for launch in launches if launch.where.nhosts == count] for count in counts]


def batch_jobs_reason(groups: list[list[Launch]], mode: str) -> str:
    """What the dry run and the submission say about the jobs: how many and why."""
    counts = sorted({launch.where.nhosts for launch in groups[0] + groups[-1]})
    if len(groups) > 1:
        why = ("--batch-jobs per-nodes" if mode == "per-nodes" else
               f"node counts {counts[0]} to {counts[-1]} differ by more than {BATCH_SPLIT_RATIO}x")
        return (f"{len(groups)} batch jobs, one per node count ({why}), each after the one before (afterany); "
                "--batch-jobs one submits a single job")
    if mode == "one" and len(counts) > 1:
        return "one batch job for every launch (--batch-jobs one): its allocation is the largest launch's"
    return "one batch job for every launch"


def script_name(group: list[Launch], groups: int) -> str:
    """``sbatch.sh`` for the sweep's one job, ``sbatch-n<nodes>.sh`` for one of several."""
    return BATCH_SCRIPT if groups == 1 else f"sbatch-n{group[0].where.nhosts}.sh"


def allocation_hosts() -> list[str]:
    """The node names of the allocation this process runs in (``scontrol show hostnames``)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or ""
    if not nodelist:
        return []
    try:
        result = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                                timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return result.stdout.split() if result.returncode == 0 else []


def allocation_time_limit() -> str | None:
    """The time limit of the allocation this process runs in, as Slurm prints it (``2:00:00``), or None
    (outside one, UNLIMITED, or squeue not answering): no srun step of the sweep asks for more."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        result = subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%l"], capture_output=True,
                                text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    limit = result.stdout.strip() if result.returncode == 0 else ""
    try:
        return limit if limit and time_minutes(limit) is not None else None
    except ValueError:  # NOT_SET, or a format this does not read
        return None


def _directive(option: str) -> str:
    """One ``#SBATCH`` line. The line is a shell comment, where quoting does not hold: a line break
    in a value would end the comment and start a command, so a value with any control character is
    refused (sbatch could not read it either)."""
    if not all(char.isprintable() for char in option):
        raise BadInput("sbatch", f"#SBATCH {printable(option)}: a batch directive cannot hold a line break or "
                                 "other control character (the folder, the working directory or the suite's slurm "
                                 "block)")
    return f"#SBATCH {shlex.quote(option)}"


def check_site_fields(slurm: Slurm, site: Site | None) -> None:
    """The Slurm fields the site profile requires (an account on Frontier and Perlmutter), before
    anything is written: sbatch would refuse the job later, after the queue."""
    for name in site.batch.requires if site else []:
        if getattr(slurm, name) is None:
            raise BadInput(f"--{name}", f"site {site.name} needs a Slurm {name}: give --{name} or the suite's "
                                        f"slurm.{name}")


def check_job(label: str, slurm: Slurm, site: Site | None, groups: list[list[Launch]], gpu: bool) -> None:
    """Every job against the site's facts, before anything is written or submitted (one line, exit 2):
    the Slurm fields the site needs, a GPU job's account (NERSC's ``_g``), each launch's CPUs per task x
    tasks per node within a node's usable CPUs, and each job's ``--time`` within the site's limit for
    its node count (and QOS)."""
    check_site_fields(slurm, site)
    if site is None:
        return
    suffix = site.facts.gpu_account_suffix
    if gpu and suffix and slurm.account and not slurm.account.endswith(suffix):
        raise BadInput("--account", f"{slurm.account!r}: site {site.name}'s GPU jobs are charged to a GPU account, "
                                    f"whose name ends in {suffix} (e.g. {slurm.account}{suffix}); "
                                    f"{slurm.account} is a CPU account (a site whose rule differs: a copy of the "
                                    "profile without facts.gpu_account_suffix, --site FILE)")
    for group in groups:
        for launch in group:
            check_fit(label, slurm, site, launch)
        check_time(slurm, site, group)


def check_steps(label: str, slurm: Slurm, site: Site | None, launches: list[Launch], in_allocation: bool) -> None:
    """``--launcher srun``: each step against the site's node (CPUs per task x tasks per node), and,
    where srun makes a job of its own (outside an allocation), its ``--time`` against the site's limit
    for its node count; before the first step (one line, exit 2). Inside an allocation the Slurm fields
    and the time were the allocation's to give."""
    if site is None:
        return
    for launch in launches:
        check_fit(label, slurm, site, launch)
        if not in_allocation:
            check_time(slurm, site, [launch])


def check_fit(label: str, slurm: Slurm, site: Site, launch: Launch) -> None:
    """CPUs per task x tasks per node within the usable CPUs of the site's node, else srun cannot
    create the step (``Requested node configuration is not available``)."""
    node = site.facts.node
    if node is None or launch.where.launcher_spreads:
        return
    per_node = launch.where.ranks_per_host
    options = [*site.launcher_options("srun", launch.where.nhosts, launch.nranks, per_node, tuple(slurm.srun_args)),
               *slurm.srun_args]
    found = cpus_per_task(options)
    cpus, option = found if found else (1, "one CPU per task")
    if cpus * per_node <= node.usable_cpus:
        return
    given = ("slurm.srun_args" if any(option_name(arg) == option_name(option) for arg in slurm.srun_args)
             else f"site {site.name} srun")
    fits = node.cpus_per_task(per_node)
    fix = (f"slurm.srun_args: [--cpus-per-task={fits}]" if per_node <= node.usable_cpus
           else f"ranks_per_node {node.usable_cpus} or fewer")
    raise BadInput(f"{label}: ranks_per_node", f"{per_node} ranks per node x {option} ({given}) = {cpus * per_node} "
                                                f"CPUs; a {site.name} node has {node.describe()}: the step cannot be "
                                                f"created; give {fix}")


def job_qos(slurm: Slurm, site: Site) -> str | None:
    """The job's ``--qos``: the suite's sbatch_args, else the site's batch options."""
    for option in [*slurm.sbatch_args, *site.batch.options]:  # the suite's replaces the site's
        if option_name(option) in ("--qos", "-q"):
            return option.split("=", 1)[1] if "=" in option else option[2:]
    return None


def check_time(slurm: Slurm, site: Site, group: list[Launch]) -> None:
    """A job's ``--time`` beyond the site's limit for its node count: refused here, not after the queue."""
    if not slurm.time or not site.facts.time_limits:
        return
    nodes = max(launch.where.nhosts for launch in group)
    qos = job_qos(slurm, site)
    limit = site.facts.time_limit(nodes, qos)
    asked = time_minutes(slurm.time)
    allowed = time_minutes(limit.max_time) if limit else None
    if limit is None:
        raise BadInput("--time", f"site {site.name} lists no time limit for a {nodes}-node job"
                                 f"{f' in qos {qos}' if qos else ''} (facts.time_limits)")
    if allowed is not None and (asked is None or asked > allowed):
        span = f"{limit.min_nodes}-{limit.max_nodes}" if limit.max_nodes else f"{limit.min_nodes}+"
        raise BadInput("--time", f"{slurm.time} for a {nodes}-node job is beyond site {site.name}'s limit of "
                                 f"{limit.max_time} for {span} nodes{f' in qos {limit.qos}' if limit.qos else ''}: "
                                 f"give --time {limit.max_time} or less (a reservation's own limit: a copy of the "
                                 "profile with its facts.time_limits, --site FILE)")


def batch_options(slurm: Slurm, launches: list[Launch], folder: Path, site: Site | None = None) -> list[str]:
    """The sbatch options of a batch job of ``launches``: its shape, the run's own, the user's
    time/partition/account, the site profile's (the GPU request, a constraint), the suite's extras."""
    names = list(dict.fromkeys(name for launch in launches for name in launch.where.names))
    options = ["--job-name=pccl-bench", *allocation_shape(launches), "--export=ALL",
               *([f"--nodelist={','.join(names)}"] if names else []),
               f"--output={folder.resolve()}/logs/sbatch-%j.log", f"--chdir={Path.cwd()}"]
    options += [f"--time={slurm.time}"] if slurm.time else []
    options += [f"--partition={slurm.partition}"] if slurm.partition else []
    options += [f"--account={slurm.account}"] if slurm.account else []
    options += site.batch_options(launches, tuple(slurm.sbatch_args)) if site else []
    return options + list(slurm.sbatch_args)


def inner_command(folder: Path, nodes: int | None = None, allow_unsupported: bool = False) -> list[str]:
    """What the batch job runs: this sweep, resumed in its own folder, one srun step per launch
    (``nodes``: only the launches on that many nodes, the job of one node count). The job's exit
    status is the sweep's, so ``allow_unsupported`` goes in too: without it a GPU suite that reached
    no GPU ends the job FAILED in sacct while the submitting command said 0."""
    return [sys.executable, "-m", "bench", "run", "sweep", "--launcher", "srun", "--resume", str(folder.resolve()),
            *(["--nodes", str(nodes)] if nodes is not None else []),
            *(["--allow-unsupported"] if allow_unsupported else [])]


def site_lines(site: Site | None, launches: list[Launch]) -> list[str]:
    """The batch job's first commands: the site's modules, then its prologue (bench/plan/site.py)."""
    if site is None:
        return []
    return [f"# site {site.name}: modules and prologue (suites/sites/, docs/CLUSTERS.md)", *site.job_lines(launches)]


def module_lines(lines: list[str]) -> list[str]:
    """The site's lines with each ``module load`` checked: Lmod's ``module`` returns non-zero on a
    failed load but a job goes on without ``-e``; and ``set -u`` would break Lmod's own functions, so
    the job stops with ``-eo pipefail`` here and takes ``-u`` only after the modules."""
    checked = []
    for line in lines:
        if line.startswith("module load "):
            module = line.removeprefix("module load ")
            line = f"{line} || {{ echo {shlex.quote(f'pccl-bench: module load {module} failed')} >&2; exit 1; }}"
        checked.append(line)
    return checked


def batch_script(run_id: str, slurm: Slurm, launches: list[Launch], folder: Path, site: Site | None = None,
                 nodes: int | None = None, allow_unsupported: bool = False, archive: bool = False) -> str:
    """The script of one batch job of the sweep (``nodes``: the job of that node count only;
    ``archive``: the first-run kit's, which packs the run folder into ``<run>.tar.gz`` at its end)."""
    which = f"the launches on {nodes} node{'' if nodes == 1 else 's'}" if nodes is not None else "the sweep"
    lines = [
        "#!/bin/bash",
        # a comment line: the run id (a resumed run's run.json holds anything) shown on one line
        f"# pccl-bench run {printable(run_id)}: {which} in one allocation, one srun job step per launch.",
        "# Submit again (sbatch this file) to finish cells that a time limit cut off: the sweep resumes.",
        *(_directive(option) for option in batch_options(slurm, launches, folder, site)),
        # stop at the first failure, a module load's included; -u only after the modules and the
        # prologue: Lmod's shell functions and a site's profile scripts read unset variables
        "set -eo pipefail",
        *module_lines(site_lines(site, launches)),
        "set -eu",
        *(archive_lines(folder, inner_command(folder, nodes, allow_unsupported)) if archive else
          [f"exec {shlex.join(inner_command(folder, nodes, allow_unsupported))}"]),
    ]
    return "\n".join(lines) + "\n"


def archive_lines(folder: Path, command: list[str]) -> list[str]:
    """The first-run kit's end: the sweep, then its run folder (meta.json with the pre-flight's per-rank
    table, the tables, the logs with the network counters) in one ``<run>.tar.gz``, whatever the
    sweep's end; the job's status is the sweep's."""
    run = folder.resolve()
    archive = f"{run}.tar.gz"
    return ["status=0", f"{shlex.join(command)} || status=$?",
            f"tar -czf {shlex.quote(archive)} -C {shlex.quote(str(run.parent))} {shlex.quote(run.name)}",
            f"echo {shlex.quote(f'pccl-bench first run: {archive} (attach it to the issue or the site ticket)')}",
            'exit "$status"']


def time_note(time: str | None) -> str:
    """A line for a job time in Slurm's minutes:seconds form, which reads like hours:minutes ("" else)."""
    found = re.fullmatch(r"(\d+):(\d\d)", time or "")
    if not found:
        return ""
    minutes, seconds = found.groups()
    return (f"note: Slurm reads --time {time} as {int(minutes)} minutes {int(seconds)} seconds (minutes:seconds); "
            f"{int(minutes)} hours is {int(minutes)}:{seconds}:00")


def sbatch_argv(sbatch: str, script: Path, wait: bool, after: str | None = None) -> list[str]:
    """``after``: the job this one waits for, whatever its end (the jobs of one run share its folder,
    which one sweep at a time may hold)."""
    return [sbatch, "--parsable", *([f"--dependency=afterany:{after}"] if after else []), *(["--wait"] if wait else []),
            str(script.resolve())]


def write_record(folder: Path, record: dict) -> None:
    """``slurm.json``, replaced whole (temp file + rename)."""
    atomic_write(folder / JOB_RECORD, lambda path: path.write_text(json.dumps(record, indent=2) + "\n"))


def job_facts(folder: Path) -> dict:
    """For meta.json: the allocation this process runs in, and the batch submission of the run."""
    facts = {name: os.environ[var] for name, var in ALLOCATION_ENV.items() if var in os.environ}
    record = folder / JOB_RECORD
    if record.exists():
        try:
            facts["batch"] = json.loads(record.read_text())
        except json.JSONDecodeError:
            pass
    return facts


@dataclass
class Submission:
    job_id: str | None = None
    returncode: int | None = None
    interrupted: bool = False
    stderr: list[str] = field(default_factory=list)


def _job_id(line: str) -> str | None:
    """``sbatch --parsable`` prints ``JOBID`` or ``JOBID;CLUSTER``."""
    head = line.strip().split(";")[0]
    return head if head.isdigit() else None


def submit(argv: list[str], on_job_id: Callable[[str], None]) -> Submission:
    """Run sbatch (with or without --wait); hand over the job id as soon as it is printed.

    An interrupt stops the waiting, not the job: it runs on and finishes the run folder.
    """
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    outcome = Submission()
    reader = threading.Thread(target=lambda: outcome.stderr.extend(process.stderr), daemon=True)
    reader.start()
    try:
        for line in process.stdout:
            job_id = _job_id(line)
            if job_id and outcome.job_id is None:
                outcome.job_id = job_id
                on_job_id(job_id)
        outcome.returncode = process.wait()
    except KeyboardInterrupt:
        outcome.interrupted = True
        _stop_waiting(process)
    reader.join(timeout=5)
    return outcome


def _stop_waiting(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def refusal(outcome: Submission) -> BadInput:
    """sbatch refused the job (a bad partition, account, time or option): its own words, one line."""
    lines = [line.strip() for line in outcome.stderr if line.strip() and not line.startswith("Try ")]
    reason = lines[-1].removeprefix("sbatch: error: ") if lines else f"exited with {outcome.returncode}"
    return BadInput("sbatch", reason)


def submission_record(argv: list[str], script: Path, job_id: str | None = None) -> dict:
    return {"argv": argv, "script": str(script.resolve()), "job_id": job_id, "submitted": time.time()}
