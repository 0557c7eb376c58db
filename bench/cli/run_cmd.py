"""``pccl-bench run sweep|point``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from bench.driver.slurm import BATCH_JOBS
from bench.errors import EXIT_CODES_HELP, BadInput
from bench.plan import first_run as first_run_kit
from bench.plan.site import load_site
from bench.plan.suite_files import resolve_suite_path
from bench.sweep import SweepOptions, run_sweep
from collectives.memory import KINDS
from collectives.spec import COLLECTIVES

app = typer.Typer(help="Run benchmarks under MPI.", no_args_is_help=True)
#: what ``run sweep`` measures when no suite is named
DEFAULT_SUITE = "smoke"  # by name: found from any working directory, as `run sweep smoke` is


def _console() -> Console:
    """Full-width tables in logs and CI output, not the 80 columns Rich assumes off a terminal."""
    console = Console()
    return console if console.is_terminal else Console(width=130)

Out = Annotated[Path | None, typer.Option("--out", "-o", help="Run folder (default: results/<run_id>).")]
Launcher = Annotated[str, typer.Option("--launcher", help=(
    "auto (srun inside a Slurm allocation, else mpiexec) | mpiexec | srun (one job step per launch) | "
    "sbatch (submit the sweep as batch jobs: --batch-jobs) | none (run in this process, or on every rank of the "
    "mpiexec/srun job it was started in)."))]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the exact launch commands (or batch scripts) and exit.")]
Wait = Annotated[bool, typer.Option("--wait", help=(
    "--launcher sbatch: wait for the (last) job, then print the summary."))]
Partition = Annotated[str | None, typer.Option("--partition", help="Slurm partition (suite: slurm.partition).")]
Account = Annotated[str | None, typer.Option("--account", help="Slurm account (suite: slurm.account).")]
Time = Annotated[str | None, typer.Option("--time", help="Batch job time limit, e.g. 30 or 1:00:00 (slurm.time).")]
Site = Annotated[str | None, typer.Option("--site", help=(
    "Site profile, a name from suites/sites/ (frontier, perlmutter, generic-openmpi-ucx) or a YAML file: the "
    "batch header, srun/mpiexec binding flags, the MPI and NCCL/RCCL environments (suite: site; docs/CLUSTERS.md)."))]
BatchJobs = Annotated[str, typer.Option("--batch-jobs", help=(
    "--launcher sbatch: per-nodes (one job per node count, each asking only for its nodes, run one after "
    "another) | one (a single job of the largest launch's nodes) | auto (per-nodes where the node counts "
    "differ by more than 2x)."))]
Nodes = Annotated[str | None, typer.Option("--nodes", help=(
    "Run only the launches on these node counts, e.g. 2 or 2,64 (what each per-node-count batch job runs)."))]
Hosts = Annotated[str | None, typer.Option("--hosts", help=(
    "Hosts to run on, h1,h2 or h1:4,h2:4 (slots); a launch takes as many as it has nodes, the same number "
    "of ranks on each (suite: hosts)."))]
Hostfile = Annotated[Path | None, typer.Option("--hostfile", help=(
    "A hostfile (MPICH host:slots or Open MPI host slots=N) instead of --hosts (suite: hostfile)."))]


def _node_counts(nodes: str | None) -> tuple[int, ...]:
    """--nodes 2,64 as (2, 64)."""
    if nodes is None:
        return ()
    counts = [part.strip() for part in nodes.split(",")]
    if not all(part.isdigit() and int(part) > 0 for part in counts):
        raise BadInput("--nodes", f"{nodes!r}: node counts, e.g. 2 or 2,64")
    return tuple(int(part) for part in counts)


AllowUnsupported = Annotated[bool, typer.Option("--allow-unsupported", help=(
    "A GPU suite none of whose cells reached a GPU (every one unsupported) exits 0, not 1."))]


AllowXcclSockets = Annotated[bool, typer.Option("--allow-xccl-sockets", help=(
    "Measure NCCL/RCCL across nodes even where the pre-flight finds it on TCP sockets (its network plugin "
    "missing): refused (exit 2) without this; meta.json records it."))]
AllowOtherMpi = Annotated[bool, typer.Option("--allow-other-mpi", help=(
    "Measure with an MPI library other than the one the site profile names (mpi_library): refused (exit 2) "
    "without this; meta.json records it."))]


AllowNumaMismatch = Annotated[bool, typer.Option("--allow-numa-mismatch", help=(
    "Measure even where the pre-flight finds a rank's CPUs on another NUMA node than its GPU though the site "
    "profile binds them: refused (exit 2) without this; meta.json records it."))]


def _allowed(xccl_sockets: bool, other_mpi: bool, numa_mismatch: bool = False) -> tuple[str, ...]:
    given = (("xccl-sockets", xccl_sockets), ("other-mpi", other_mpi), ("numa-mismatch", numa_mismatch))
    return tuple(name for name, flag in given if flag)


def _slurm_flags(partition: str | None, account: str | None, time: str | None) -> dict[str, str]:
    flags = {"partition": partition, "account": account, "time": time}
    return {name: value for name, value in flags.items() if value is not None}


@app.command("sweep", epilog=EXIT_CODES_HELP)
def sweep(
    suite: Annotated[str | None, typer.Argument(
        help="Suite file, or a name from suites/ (default: smoke; with --resume, the run's own).",
        show_default=False)] = None,
    out: Out = None,
    launcher: Launcher = "auto",
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Finish an interrupted run folder; finished cells are kept.")] = None,
    dry_run: DryRun = False,
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a suite field, e.g. --set timing.iters=5 --set ranks=[2].")] = None,
    wait: Wait = False,
    partition: Partition = None,
    account: Account = None,
    time: Time = None,
    hosts: Hosts = None,
    hostfile: Hostfile = None,
    site: Site = None,
    batch_jobs: BatchJobs = "auto",
    nodes: Nodes = None,
    allow_unsupported: AllowUnsupported = False,
    allow_xccl_sockets: AllowXcclSockets = False,
    allow_other_mpi: AllowOtherMpi = False,
    allow_numa_mismatch: AllowNumaMismatch = False,
) -> None:
    """Run every cell of a suite: one MPI job per rank count, a tidy table at the end.

    Writes results.parquet, results.csv, samples.parquet and meta.json to the run folder.
    With --launcher sbatch the sweep runs as batch jobs (srun inside), one per node count or one
    for all (--batch-jobs), into the same folder; --dry-run shows every script.
    """
    if batch_jobs not in BATCH_JOBS:
        raise BadInput("--batch-jobs", f"{batch_jobs!r}: expected one of {', '.join(BATCH_JOBS)}")
    options = SweepOptions(resolve_suite_path(suite or DEFAULT_SUITE), out, launcher, resume, dry_run,
                           overrides or [], wait=wait, slurm_flags=_slurm_flags(partition, account, time),
                           hosts=hosts, hostfile=hostfile,
                           allowed=_allowed(allow_xccl_sockets, allow_other_mpi, allow_numa_mismatch),
                           suite_named=suite is not None, site=site,
                           batch_jobs=batch_jobs, nodes=_node_counts(nodes),
                           allow_unsupported=allow_unsupported)
    raise typer.Exit(run_sweep(options, _console()))


@app.command("point", epilog=EXIT_CODES_HELP)
def point(
    collective: Annotated[str, typer.Option("--collective", "-C", help=" | ".join(COLLECTIVES))] = "allgather",
    impl: Annotated[list[str] | None, typer.Option("--impl", "-i", help="Implementation(s); repeatable.")] = None,
    algorithm: Annotated[str | None, typer.Option("--algorithm", "-a", help="Schedule for pccl-* impls.")] = None,
    nranks: Annotated[int, typer.Option("--nranks", "-np", help="MPI ranks.")] = 2,
    ranks_per_node: Annotated[int | None, typer.Option("--ranks-per-node", help="Virtual node size.")] = None,
    minbytes: Annotated[str, typer.Option("--minbytes", "-b", help="Smallest size (nccl-tests -b).")] = "8",
    maxbytes: Annotated[str, typer.Option("--maxbytes", "-e", help="Largest size (nccl-tests -e).")] = "1M",
    factor: Annotated[int, typer.Option("--stepfactor", "-f", help="Size multiplier.")] = 2,
    iters: Annotated[int, typer.Option("--iters", "-n", help="Timed iterations.")] = 20,
    warmup: Annotated[int, typer.Option("--warmup_iters", "-w", help="Warm-up iterations.")] = 5,
    check: Annotated[int, typer.Option("--check", "-c", help="1: check results before timing; 0: do not.")] = 1,
    dtype: Annotated[str, typer.Option("--datatype", "-d")] = "float32",
    op: Annotated[str, typer.Option("--op", "-O")] = "sum",
    in_place: Annotated[bool, typer.Option("--in-place", help="Also time in-place calls.")] = False,
    device: Annotated[str, typer.Option("--device", help=f"Buffers: {' | '.join(KINDS)}.")] = "host",
    gpu_aware: Annotated[str, typer.Option("--gpu-aware", help="GPU buffers to MPI: auto | yes | no (staged).")]
    = "auto",
    out: Out = None,
    launcher: Launcher = "auto",
    dry_run: DryRun = False,
    wait: Wait = False,
    partition: Partition = None,
    account: Account = None,
    time: Time = None,
    hosts: Hosts = None,
    hostfile: Hostfile = None,
    allow_unsupported: AllowUnsupported = False,
    allow_xccl_sockets: AllowXcclSockets = False,
) -> None:
    """One ad-hoc sweep with nccl-tests-style flags (sizes are totals, as nccl-tests' -b/-e)."""
    # named by the flag and by the suite field it sets (what `run sweep --set` would name)
    for flag, field, value, least in (("--nranks", "ranks", nranks, 1),
                                      ("--ranks-per-node", "ranks_per_node", ranks_per_node, 1),
                                      ("--stepfactor", "sizes.factor", factor, 2),
                                      ("--iters", "timing.iters", iters, 1),
                                      ("--warmup_iters", "timing.warmup", warmup, 0)):
        if value is not None and value < least:
            raise BadInput(flag, f"{field}: got {value}, at least {least}")
    if check not in (0, 1):
        raise BadInput("--check", f"{check}: 1 checks the results before timing, 0 does not")
    raw = {
        "name": "point", "collectives": [collective], "implementations": impl or ["mpi", "pccl-flat"],
        "ranks": [nranks], "sizes": {"min": minbytes, "max": maxbytes, "factor": factor},
        "dtype": dtype, "op": op, "placement": ["out_of_place", "in_place"] if in_place else ["out_of_place"],
        "timing": {"warmup": warmup, "iters": iters, "min_iters": min(iters, 5), "budget_s": 0},
        "check": bool(check), "device": device, "gpu_aware": gpu_aware,
    }
    if ranks_per_node is not None:
        raw["ranks_per_node"] = ranks_per_node
    if algorithm:
        raw["implementations"] = [name if name == "mpi" else {"impl": name, "algorithms": [algorithm]}
                                  for name in raw["implementations"]]
    options = SweepOptions(Path("<point>"), out, launcher, None, dry_run, [], suite_document=raw, wait=wait,
                           slurm_flags=_slurm_flags(partition, account, time), hosts=hosts, hostfile=hostfile,
                           allow_unsupported=allow_unsupported, allowed=_allowed(allow_xccl_sockets, False))
    raise typer.Exit(run_sweep(options, _console()))


@app.command("first-run", epilog=EXIT_CODES_HELP)
def first_run(
    site: Annotated[str, typer.Option("--site", help="Site profile: a name from suites/sites/ or a file.")],
    nodes: Annotated[int, typer.Option("--nodes", help="1 first, then 2.")] = 1,
    device: Annotated[str | None, typer.Option("--device", help=(
        f"Buffers: {' | '.join(KINDS)} (default: the site's GPUs, host where it names none)."))] = None,
    ranks_per_node: Annotated[int | None, typer.Option("--ranks-per-node", help=(
        "Ranks per node (default: one per GPU; 2 for host)."))] = None,
    out: Out = None,
    launcher: Annotated[str, typer.Option("--launcher", help="sbatch (the kit's job) or srun/mpiexec.")] = "sbatch",
    dry_run: DryRun = False,
    wait: Wait = False,
    partition: Partition = None,
    account: Account = None,
    time: Time = first_run_kit.TIME_MINUTES,
) -> None:
    """The first job on a new cluster: every implementation at a few sizes, checked bit-exact, with the
    pre-flight's per-rank table and the site's network counters, packed into <run>.tar.gz."""
    profile = load_site(site, "--site")
    kind = device or (profile.facts.node.device if profile.facts.node and profile.facts.node.device else
                      "host")
    if kind not in KINDS:
        raise BadInput("--device", f"{kind!r}: expected one of {', '.join(KINDS)}")
    raw = first_run_kit.first_run_suite(profile.for_device(kind), site, nodes, kind, ranks_per_node)
    options = SweepOptions(Path(f"<first-run {site}>"), out, launcher, None, dry_run, [], suite_document=raw,
                           suite_where="run first-run", wait=wait,
                           slurm_flags=_slurm_flags(partition, account, time), first_run=True)
    raise typer.Exit(run_sweep(options, _console()))
