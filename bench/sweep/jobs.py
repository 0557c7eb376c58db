"""Launchers whose ``sweep_driver`` is ``jobs`` (mpiexec, srun): one MPI job per launch, started and
followed here, its rows taken as rank 0 appends them; a job that ends early gives its cells left a
``failed`` or ``timeout`` row; an interrupt still writes the table of what finished."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable

from rich.console import Console

from bench.driver import preflight
from bench.driver.job import run_job
from bench.driver.launchers import BASE_ENV, PACKAGE_HOME
from bench.driver.provenance import recorded_env
from bench.errors import BadInput
from bench.files import atomic_write
from bench.plan.cells import Cell, Launch
from bench.plan.sizes import format_size
from bench.present import console as screen
from bench.results.labels import impl_label
from bench.sweep.options import SweepOptions, lock_folder
from bench.sweep.session import Sweep, Tables, print_summary, said_exit_code
from collectives.libraries.mpi_library import extension_mpi_mismatch


def run(options: SweepOptions, out: Console) -> int:
    return run_with_tables(options, out)[0]


def run_with_tables(options: SweepOptions, out: Console) -> tuple[int, Tables]:
    """The sweep, checked, measured and written: its exit code and its tables in memory."""
    # Before anything is written: extensions built for another MPI fail every cell.
    mismatch = extension_mpi_mismatch()
    if mismatch:
        raise BadInput("", mismatch)
    sweep = Sweep.open(options)
    sweep.check(options.known_installs)
    running = chosen(sweep, options.nodes)
    # the MPI this Python loads against the site profile's, then (a GPU suite) one tiny launch per
    # launch environment (GTL, binding, network), each shaped as its largest launch this job runs; a
    # refusal or a fatal verdict is bad input, nothing written
    preflight.check_mpi(sweep, out)
    try:
        sweep.preflight = preflight.record_of(preflight.run(sweep, out, running))
    except preflight.Refused as refused:
        if options.resume is not None:  # the batch job's own sweep: its folder is the kit's archive
            text = json.dumps(refused.record, indent=1)
            atomic_write(sweep.folder / preflight.REFUSED_FILE, lambda path: path.write_text(text))
        raise
    lock = lock_folder(options, sweep.folder, out)
    try:
        return measure(sweep, out, options.summary, running, options.allow_unsupported)
    finally:
        lock.release()


def chosen(sweep: Sweep, nodes: tuple[int, ...]) -> list[Launch]:
    """The launches this process runs: all, or (--nodes) those on the node counts named; BadInput
    where a count names no launch."""
    if not nodes:
        return sweep.launches
    counts = sorted({launch.where.nhosts for launch in sweep.launches})
    missing = [count for count in nodes if count not in counts]
    if missing:
        raise BadInput("--nodes", f"no launch of the suite runs on {missing[0]} nodes; its launches run on "
                                  f"{', '.join(map(str, counts))}")
    return [launch for launch in sweep.launches if launch.where.nhosts in nodes]


def dry_run(options: SweepOptions, out: Console) -> int:
    """The exact argv of every launch, nothing started or written."""
    sweep = Sweep.open(options)
    sweep.check_installs(options.known_installs)
    running = chosen(sweep, options.nodes)  # before anything is printed: a --nodes naming no launch is bad input
    plan = sweep.where.plan
    if plan.hosts:
        out.print(f"# hosts ({plan.source}): {', '.join(map(str, plan.hosts))}; not probed in a dry run, so each is "
                  "taken for a machine of its own", highlight=False, soft_wrap=True)
    for line in preflight.dry_run_lines(sweep, running):
        out.print(line, highlight=False, soft_wrap=True, markup=False)
    for launch in running:
        argv, _ = sweep.job_command(launch, f"<run>/plans/{launch.launch_id}.json")
        out.print(f"# {launch.launch_id}: {len(launch.cells)} cells, timeout {sweep.suite.timeout_s:g} s",
                  highlight=False)
        out.print(sweep.launcher.dry_run_text(argv), highlight=False, soft_wrap=True, markup=False)
    return 0


def measure(sweep: Sweep, out: Console, summary: bool = True,
            launches: list[Launch] | None = None, allow_unsupported: bool = True) -> tuple[int, Tables]:
    """The sweep proper, in its locked folder: (exit code, its Tables). ``launches``: those to run
    (default: all); the tables hold every row of the run so far. ``allow_unsupported`` False: a GPU
    suite none of whose cells reached a GPU exits 1 with one line."""
    sweep.start()
    done = sweep.done()
    running = sweep.launches if launches is None else launches
    # --nodes (a batch job of one node count): this job's cells, not the run's, in the header and the bar
    planned = [cell.key for launch in running for cell in launch.cells]
    finished = sum(key in done for key in planned)
    of_run = f" of the run's {sweep.cells}" if len(planned) != sweep.cells else ""
    launcher = sweep.launcher
    plan = sweep.where.plan
    hosts = f"; hosts {','.join(h.name for h in plan.hosts)} ({plan.source})" if plan.hosts else ""
    env = recorded_env({**BASE_ENV, **sweep.suite.env})
    # a site's variables differ per launch (MPI's, NCCL/RCCL's): meta.json's launches hold each one's
    site = f"; site {sweep.where.site.name}" if sweep.where.site else ""
    out.print(f"run [bold]{sweep.run_id}[/bold] -> {sweep.folder}  ({len(planned)} cells{of_run}, {finished} "
              f"already done; launcher {launcher.kind}, {launcher.flavour}{hosts}{site}; env {env})", highlight=False,
              soft_wrap=True)
    interrupted = False
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with screen.progress_bar(out) as bar:
            task = bar.add_task("sweep", total=len(planned), completed=finished, current="")
            for launch in running:
                todo = sweep.todo(launch, done)
                if not todo:
                    continue
                bar.update(task, description=launch.launch_id)
                names = {cell.key: f"{cell.collective} {impl_label(cell)} {format_size(cell.bytes_total)}"
                         for cell in todo}
                run_launch(sweep, launch, todo, on_row=lambda row: bar.advance(task),
                           on_start=lambda key, names=names: bar.update(task, current=names.get(key, "")))
    except KeyboardInterrupt:
        interrupted = True
        out.print("[yellow]interrupted: writing the table of the finished cells[/yellow]")
    finally:
        signal.signal(signal.SIGTERM, previous)
    tables = sweep.finish()
    if summary:
        print_summary(tables, sweep.folder, out)
    else:
        out.print(f"{screen.status_line(tables.results)} -> {sweep.folder}", highlight=False)
    return said_exit_code(tables.results, interrupted, allow_unsupported, out), tables


def run_launch(sweep: Sweep, launch: Launch, todo: list[Cell], on_row: Callable[[dict], None],
               on_start: Callable[[str], None]) -> None:
    """One launch's MPI job on the cells ``todo``, to its end; its rows taken as they arrive."""
    plan_path = sweep.folder / "plans" / f"{launch.launch_id}.json"
    argv, env = sweep.job_command(launch, str(plan_path.resolve()))
    _, install = sweep.where.job(launch)
    sweep.write_plan(sweep.launch_plan(launch, todo, argv, env))
    arrived: set[str] = set()

    def take(row: dict) -> None:
        arrived.add(row["cell_key"])
        sweep.take(row)
        on_row(row)

    timeout_s = sweep.suite.timeout_s
    outcome = run_job(argv, env, sweep.part(launch), sweep.folder / "logs" / f"{launch.launch_id}.log", timeout_s,
                      take, on_start, install.home if install else PACKAGE_HOME)
    if len(arrived) < len(todo):
        tail = " | ".join(line for line in outcome.output_tail[-6:] if line.strip())[-600:]
        if outcome.timed_out:
            status, error = "timeout", f"MPI job killed after {timeout_s:g} s. {tail}"
        else:
            status, error = "failed", f"MPI job exited with {outcome.returncode} before this cell. {tail}"
        for row in sweep.close_launch(launch, todo, arrived, status, error):
            on_row(row)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
