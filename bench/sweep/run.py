"""``run sweep``: suite -> launches -> MPI jobs -> rows -> table, with resume and interrupts.

``--launcher sbatch`` submits the same sweep as one batch job instead (bench/sweep/batch.py);
``--launcher none`` runs it inside the processes it was started in (bench/sweep/inside.py).
"""

from __future__ import annotations

import json
import shlex
import signal
import tempfile
import time
from pathlib import Path

import pandas as pd
from rich.console import Console

from bench.errors import EXIT_CELLS_FAILED, EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, BadInput
from bench.plan.cells import Cell, Launch, LaunchPlan, TimingPlan
from bench.plan.sizes import format_size
from bench.plan.suite import Suite
from bench.present import console as screen
from bench.results.labels import impl_label
from bench.results.speedup import median_intervals
from bench.results.table import SCHEMA_VERSION, build_tables, write_run
from bench.run import memory, slurm
from bench.run.installs import Install, probe_install
from bench.run.launch import BASE_ENV, LAUNCHERS, PACKAGE_HOME, Launcher, choose_launcher, run_job
from bench.run.outcome import CellOutcome, part_row
from bench.run.parts import append_rows, finished_keys, read_parts, rows_of_cells
from bench.run.provenance import provenance, recorded_env
from bench.sweep.options import (
    Run,
    SweepOptions,
    check_folder_flags,
    load_for,
    lock_folder,
    open_run,
    start_folder,
    where_of,
)
from bench.sweep.where import Where
from collectives.transports.mpi.library import extension_mpi_mismatch

#: statuses that a resumed sweep keeps; the rest are measured again
FINISHED = ("ok", "wrong", "unsupported", "skipped")


def check_fits(suite: Suite, raw: dict, where: Where, launches: list[Launch], place: str) -> None:
    """Refuse sizes whose buffers exceed a machine's memory before anything is written (the
    machines of named hosts as probed; srun's own nodes cannot be seen from here)."""
    sizes = raw.get("sizes") if isinstance(raw, dict) else None
    raw_max = sizes.get("max") if isinstance(sizes, dict) else suite.sizes.max
    memory.check_memory(launches, where.memory_room, raw_max, place)


def missing_rows(cells: list[Cell], seen: set[str], status: str, error: str) -> list[dict]:
    return [part_row(cell, CellOutcome.not_run(status, error), time.time()) for cell in cells if cell.key not in seen]


def launch_plan(launch: Launch, todo: list[Cell], suite: Suite, where: Where, run: Run,
                argv: list[str], env: dict[str, str]) -> LaunchPlan:
    part = run.folder / "parts" / f"{launch.launch_id}.jsonl"
    return LaunchPlan(run_id=run.run_id, launch_id=launch.launch_id, nranks=launch.nranks,
                      ranks_per_node=launch.ranks_per_node, requested_ranks_per_node=launch.requested_ranks_per_node,
                      part=str(part.resolve()), timing=TimingPlan(**suite.timing.model_dump()), check=suite.check,
                      cells=todo, row_extra={"oversubscribed": where.load(launch).oversubscribed}, argv=argv,
                      env=env, hosts=list(launch.where.names),
                      # 0 where Slurm chooses the nodes: no planned placement for the worker to hold it to
                      ranks_per_host=0 if launch.where.launcher_spreads else launch.where.ranks_per_host)


def job_command(launch: Launch, suite: Suite, where: Where, plan_path: str) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of one launch's MPI job (another install's worker for an arm that
    names one)."""
    load = where.load(launch)
    launcher, install = where.job(launch)
    env = launcher.job_env(load, {**suite.env, **launch.env})
    program = None
    if install is not None:
        env.update(install.job_env())
        program = [install.python, "-m", "bench.run.worker", plan_path]
    argv = launcher.command(launch.nranks, env, [plan_path], launch.where, suite.timeout_s, load.oversubscribed,
                            program)
    return argv, env


def check_installs(suite: Suite, where: Where, launches: list[Launch], label: str,
                   known: dict[str, dict] | None = None) -> None:
    """Every other install an arm names, asked once what it is and whether it reads this install's
    plans (its first launch's, written to a scratch folder): BadInput before anything is written.
    ``known``: installs an earlier round of the same ab asked (their records), taken as they are."""
    for index, arm in enumerate(suite.arms):
        if arm.install is None or arm.install in where.installs:
            continue
        if arm.install in (known or {}):
            where.add_install(Install(**known[arm.install]), f"{label}: arms.{index}.install")
            continue
        launch = next(launch for launch in launches if launch.install == arm.install)
        with tempfile.TemporaryDirectory(prefix="pccl-plan-check-") as scratch:
            plan_path = Path(scratch) / "plan.json"
            launch_plan(launch, launch.cells, suite, where, Run(suite, {}, Path(scratch), "plan-check"), [],
                        {}).write(plan_path)
            install = probe_install(arm.install, f"{label}: arms.{index}.install", SCHEMA_VERSION, plan_path)
        where.add_install(install, f"{label}: arms.{index}.install")


def _run_launch(launch: Launch, todo: list[Cell], run: Run, where: Where, on_row, on_start) -> None:
    suite = run.suite
    plan_path = run.folder / "plans" / f"{launch.launch_id}.json"
    argv, env = job_command(launch, suite, where, str(plan_path.resolve()))
    _, install = where.job(launch)
    plan = launch_plan(launch, todo, suite, where, run, argv, env)
    plan.write(plan_path)
    part = Path(plan.part)
    seen: set[str] = set()

    def record(row: dict) -> None:
        seen.add(row["cell_key"])
        on_row(row)

    outcome = run_job(argv, env, part, run.folder / "logs" / f"{launch.launch_id}.log", suite.timeout_s,
                      record, on_start, install.home if install else PACKAGE_HOME)
    if len(seen) < len(todo):
        tail = " | ".join(line for line in outcome.output_tail[-6:] if line.strip())[-600:]
        if outcome.timed_out:
            status, error = "timeout", f"MPI job killed after {suite.timeout_s:g} s. {tail}"
        else:
            status, error = "failed", f"MPI job exited with {outcome.returncode} before this cell. {tail}"
        rows = [{**row, "launch_id": launch.launch_id} for row in missing_rows(todo, seen, status, error)]
        append_rows(part, rows)
        for row in rows:
            on_row(row)


def dry_run_commands(options: SweepOptions, out: Console) -> int:
    check_folder_flags(options)
    # a resumed run's own suite (with its checks), not the suite argument's
    suite = open_run(options).suite if options.resume is not None else load_for(options)[0]
    where = Where.of(suite, choose_launcher(options.launcher, suite.slurm))
    check_installs(suite, where, where.launches(suite), where_of(options))
    if where.plan.hosts:
        out.print(f"# hosts ({where.plan.source}): {', '.join(map(str, where.plan.hosts))}; not probed in a dry run, "
                  "so each is taken for a machine of its own", highlight=False, soft_wrap=True)
    for launch in where.launches(suite):
        argv, _ = job_command(launch, suite, where, f"<run>/plans/{launch.launch_id}.json")
        out.print(f"# {launch.launch_id}: {len(launch.cells)} cells, timeout {suite.timeout_s:g} s", highlight=False)
        # quoted as a shell reads it: the line can be pasted, and a value cannot start a command
        out.print(shlex.join(argv), highlight=False, soft_wrap=True, markup=False)
    return EXIT_OK


def finish(run: Run, launcher: Launcher | None, where: Where, started: float) -> pd.DataFrame:
    """The run's tables and meta.json from its part files (the cells the suite plans, on these hosts)."""
    suite, folder = run.suite, run.folder
    planned = [cell for launch in where.launches(suite) for cell in launch.cells]
    # a folder begun with schema 1 keeps its rows under their keys of then (bench.run.parts.cell_rows)
    rows = rows_of_cells(read_parts(folder), planned)
    meta = {
        "schema_version": SCHEMA_VERSION, "run_id": run.run_id, "suite": suite.name,
        "suite_definition": suite.model_dump(), "launcher": launcher.kind if launcher else None,
        "launcher_requested": launcher.requested if launcher else None, "slurm": slurm.job_facts(folder),
        "mpi_flavour": launcher.flavour if launcher else None, "started": started, "finished": time.time(),
        "cells_planned": len(planned), "cells_written": len(rows), "hosts": where.record(),
        "installs": {given: install.record() for given, install in where.installs.items()},
        "launches": launch_records(folder), **provenance(),
    }
    identity = {"run_id": run.run_id, "suite": suite.name, "tool_version": meta["tool_version"],
                "git_sha": meta["git_sha"], "schema_version": SCHEMA_VERSION}
    results, samples = build_tables(rows, identity)
    write_run(folder, results, samples, meta)
    return results


def launch_records(folder: Path) -> dict:
    """The exact command and environment of every MPI job of the run, and where its ranks ran."""
    records = {}
    for path in sorted((folder / "plans").glob("*.json")):
        plan = LaunchPlan.read(path)
        record = {"argv": plan.argv, "env": plan.env, "nranks": plan.nranks, "hosts": plan.hosts,
                  "ranks_per_host": plan.ranks_per_host}
        placed = folder / "parts" / f"{plan.launch_id}.placement.json"
        if placed.exists():
            try:
                record["placement"] = json.loads(placed.read_text())
            except ValueError:
                pass
        records[plan.launch_id] = record
    return records


def exit_code(results, interrupted: bool) -> int:
    if interrupted:
        return EXIT_INTERRUPTED
    statuses = set(results["status"]) if len(results) else set()
    if "wrong" in statuses:
        return EXIT_CHECK_FAILED
    if statuses & {"failed", "timeout"}:
        return EXIT_CELLS_FAILED
    return EXIT_OK


def _check_launcher_flags(options: SweepOptions) -> None:
    if options.launcher not in LAUNCHERS:
        raise BadInput("--launcher", f"{options.launcher!r} is not a launcher; expected one of {LAUNCHERS}")
    if options.wait and options.launcher != "sbatch":
        raise BadInput("--wait", f"waits for a batch job: it goes with --launcher sbatch, not {options.launcher}")


def run_sweep(options: SweepOptions, out: Console) -> int:
    _check_launcher_flags(options)
    if options.launcher == "sbatch":
        from bench.sweep.batch import submit_sweep

        return submit_sweep(options, out)
    if not options.dry_run:
        # Before anything is written: extensions built for another MPI fail every cell.
        mismatch = extension_mpi_mismatch()
        if mismatch:
            raise BadInput("", mismatch)
    if options.launcher == "none" and not options.dry_run:
        from bench.sweep.inside import run_inside

        return run_inside(options, out)
    if options.dry_run:
        return dry_run_commands(options, out)
    run = open_run(options)
    launcher = choose_launcher(options.launcher, run.suite.slurm)
    where = Where.of(run.suite, launcher)
    launches = where.launches(run.suite)  # a rank count the hosts cannot hold: bad input, before the probe
    where.probe(run.suite)
    check_installs(run.suite, where, launches, where_of(options), options.known_installs)
    check_fits(run.suite, run.raw, where, launches, where_of(options))
    memory.check_processes(launches, where.process_room, where_of(options))
    lock = lock_folder(options, run.folder, out)
    try:
        return _sweep(options, run, where, out)
    finally:
        lock.release()


def _sweep(options: SweepOptions, run: Run, where: Where, out: Console) -> int:
    """The sweep proper, in a locked run folder."""
    start_folder(run.folder, run.raw, run.run_id, "--out" if options.out else "results")
    started = time.time()
    launches = where.launches(run.suite)
    done = finished_keys(read_parts(run.folder), [cell for launch in launches for cell in launch.cells], FINISHED)
    total = sum(len(launch.cells) for launch in launches)
    interrupted = False
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    launcher = where.launcher
    hosts = f"; hosts {','.join(h.name for h in where.plan.hosts)} ({where.plan.source})" if where.plan.hosts else ""
    env = recorded_env({**BASE_ENV, **run.suite.env})
    out.print(f"run [bold]{run.run_id}[/bold] -> {run.folder}  ({total} cells, {len(done)} already done; "
              f"launcher {launcher.kind}, {launcher.flavour}{hosts}; env {env})",
              highlight=False, soft_wrap=True)
    try:
        with screen.progress_bar(out) as bar:
            task = bar.add_task("sweep", total=total, completed=len(done), current="")
            for launch in launches:
                todo = [cell for cell in launch.cells if cell.key not in done]
                if not todo:
                    continue
                bar.update(task, description=launch.launch_id)
                names = {cell.key: f"{cell.collective} {impl_label(cell)} {format_size(cell.bytes_total)}"
                         for cell in todo}
                _run_launch(launch, todo, run, where, on_row=lambda row: bar.advance(task),
                            on_start=lambda key, names=names: bar.update(task, current=names.get(key, "")))
    except KeyboardInterrupt:
        interrupted = True
        out.print("[yellow]interrupted: writing the table of the finished cells[/yellow]")
    finally:
        signal.signal(signal.SIGTERM, previous)
    results = finish(run, launcher, where, started)
    if options.summary:
        print_summary(results, run.folder, out)
    else:
        out.print(f"{screen.status_line(results)} -> {run.folder}", highlight=False)
    return exit_code(results, interrupted)


def print_summary(results: pd.DataFrame, folder: Path, out: Console) -> None:
    samples_path = folder / "samples.parquet"
    samples = pd.read_parquet(samples_path) if samples_path.exists() else None
    intervals = median_intervals(samples)  # the bootstrap once for both kinds of table
    tables = screen.summary_tables(results, intervals=intervals) + screen.verdict_tables(results, intervals=intervals)
    for table in tables:
        out.print(table)
    for reason in screen.reasons(results):
        out.print(reason, highlight=False, markup=False)
    out.print(f"{screen.status_line(results)} -> {folder}/results.parquet", highlight=False)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
