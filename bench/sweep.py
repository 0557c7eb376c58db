"""``run sweep``: suite -> launches -> MPI jobs -> rows -> table, with resume and interrupts.

``--launcher sbatch`` submits the same sweep as one batch job instead (``submit_sweep``).
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import shlex
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml
from pydantic import ValidationError
from rich.console import Console

from bench.errors import EXIT_CELLS_FAILED, EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, BadInput
from bench.plan.cells import Cell, Launch, LaunchPlan, TimingPlan, expand
from bench.plan.sizes import format_size
from bench.plan.suite import Slurm, Suite, apply_overrides, parse_suite, read_yaml
from bench.present import console as screen
from bench.results.labels import impl_label
from bench.results.table import SCHEMA_VERSION, build_tables, write_run
from bench.run import memory, slurm
from bench.run.launch import LAUNCHERS, Launcher, choose_launcher, find_slurm_tool, run_job
from bench.run.parts import append_rows, read_parts
from bench.run.provenance import provenance, recorded_env
from bench.run.runlock import RunLock

#: statuses that a resumed sweep keeps; the rest are measured again
FINISHED = ("ok", "wrong", "unsupported", "skipped")


@dataclass
class SweepOptions:
    suite_path: Path
    out: Path | None = None
    launcher: str = "auto"
    resume: Path | None = None
    dry_run: bool = False
    overrides: list[str] = field(default_factory=list)
    #: an in-memory suite (``run point``) instead of a file
    suite_raw: dict | None = None
    suite_where: str = "run point"
    #: ``--launcher sbatch``: wait for the batch job and print its summary
    wait: bool = False
    #: --partition/--account/--time: the suite's ``slurm`` block, overridden
    slurm_flags: dict[str, str] = field(default_factory=dict)


def _new_run_id(suite_name: str) -> str:
    return f"{suite_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _prepare_folder(folder: Path, where: str) -> None:
    try:
        (folder / "parts").mkdir(parents=True, exist_ok=True)
        (folder / "plans").mkdir(exist_ok=True)
        (folder / "logs").mkdir(exist_ok=True)
        probe = folder / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise BadInput(where, f"cannot write results to {folder}: {error.strerror or error}") from None


def _with_slurm_flags(raw: object, flags: dict[str, str]) -> object:
    """The suite with --partition/--account/--time written into its ``slurm`` block."""
    if not flags or not isinstance(raw, dict):
        return raw
    for name, value in flags.items():
        try:
            Slurm.model_validate({name: value})
        except ValidationError as error:
            message = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise BadInput(f"--{name}", f"{value!r}: {message}" if repr(value) not in message else message) from None
    block = raw.get("slurm") if isinstance(raw.get("slurm"), dict) else {}
    return {**raw, "slurm": {**block, **flags}}


def load_for(options: SweepOptions) -> tuple[Suite, dict]:
    """The suite of a new run: the file (or ``run point``'s mapping) with --set and Slurm flags applied."""
    if options.suite_raw is not None:
        raw, where = copy.deepcopy(options.suite_raw), options.suite_where
    else:
        where = str(options.suite_path)
        raw = read_yaml(options.suite_path)
        if isinstance(raw, dict):
            raw = apply_overrides(raw, list(options.overrides), where)
    raw = _with_slurm_flags(raw, options.slurm_flags)
    suite = parse_suite(raw, where)
    if suite.select and not expand(suite):
        raise BadInput(where, f"select: {raw.get('select')!r} matches no cell of the suite")
    return suite, raw


def _open_run(options: SweepOptions) -> tuple[Suite, dict, Path, str]:
    """The suite, its raw form, the run folder and the run id (new or resumed)."""
    if options.resume is not None and options.overrides:
        raise BadInput("--set", "a resumed run keeps the suite it started with; --set cannot change it")
    if options.resume is not None:
        folder = options.resume
        saved = folder / "suite.yaml"
        if not saved.exists():
            raise BadInput("--resume", f"{folder} is not a pccl-bench run folder (no suite.yaml)")
        # Where and how long Slurm runs it may change; what is measured may not.
        raw = _with_slurm_flags(read_yaml(saved, "saved suite"), options.slurm_flags)
        suite = parse_suite(raw, str(saved))
        return suite, raw, folder, _saved_run_id(folder)
    suite, raw = load_for(options)
    run_id = _new_run_id(suite.name)
    folder = options.out if options.out is not None else Path("results") / run_id
    _refuse_used_out(options, folder)
    return suite, raw, folder, run_id


def _saved_run_id(folder: Path) -> str:
    path = folder / "run.json"
    if not path.exists():
        return folder.name
    try:
        return str(json.loads(path.read_text())["run_id"])
    except (OSError, ValueError, KeyError, TypeError):
        raise BadInput("--resume", f"{path}: not the run record a sweep writes ({{\"run_id\": ...}})") from None


def _refuse_used_out(options: SweepOptions, folder: Path) -> None:
    """A new run never goes into a folder that holds another (checked again once it is locked)."""
    if options.out is None or options.resume is not None:
        return
    if (folder / "results.parquet").exists():
        raise BadInput("--out", f"{folder} already holds a run; pass --resume {folder} or another --out")
    if (folder / slurm.JOB_RECORD).exists():
        raise BadInput("--out", f"{folder} belongs to a batch job ({slurm.JOB_RECORD}); pass --resume {folder} "
                       "or another --out")


def _folder_flag(options: SweepOptions) -> str:
    return "--resume" if options.resume is not None else "--out" if options.out is not None else "results"


def _lock_folder(options: SweepOptions, folder: Path, out: Console) -> RunLock:
    """Hold the run folder for this sweep; a second sweep on it is refused (exit 2)."""
    lock = RunLock(folder)
    lock.acquire(_folder_flag(options))
    try:
        _refuse_used_out(options, folder)  # another sweep may have finished here while this one started
    except BadInput:
        lock.abandon()
        raise
    if lock.unsupported:
        out.print(f"[yellow]warning: {folder} cannot be locked ({lock.unsupported}): nothing stops a second "
                  "sweep on it[/yellow]", highlight=False, soft_wrap=True)
    return lock


def _check_fits(suite: Suite, raw: dict, launcher: Launcher, where: str) -> None:
    """Refuse sizes whose buffers exceed this host's memory before anything is written.

    Under srun the ranks run on compute nodes, whose memory this host cannot see."""
    if launcher.kind == "srun":
        return
    sizes = raw.get("sizes") if isinstance(raw, dict) else None
    raw_max = sizes.get("max") if isinstance(sizes, dict) else suite.sizes.max
    memory.check_memory(expand(suite), launcher.ranks_per_host, raw_max, where)


def _missing_rows(cells: list[Cell], seen: set[str], status: str, error: str) -> list[dict]:
    return [{**cell.to_dict(), "status": status, "error": error, "n_wrong": 0, "iters": 0, "samples_us": [],
             "timestamp": time.time()} for cell in cells if cell.key not in seen]


def _run_launch(launch: Launch, todo: list[Cell], suite: Suite, launcher: Launcher, folder: Path,
                run_id: str, on_row, on_start) -> None:
    per_host = launcher.ranks_per_host(launch.nranks, launch.ranks_per_node)
    env = launcher.job_env(per_host, {**suite.env, **launch.env})
    plan_path = folder / "plans" / f"{launch.launch_id}.json"
    part = folder / "parts" / f"{launch.launch_id}.jsonl"
    argv = launcher.command(launch.nranks, env, [str(plan_path.resolve())], launch.ranks_per_node, suite.timeout_s)
    LaunchPlan(run_id=run_id, launch_id=launch.launch_id, nranks=launch.nranks, ranks_per_node=launch.ranks_per_node,
               requested_ranks_per_node=launch.requested_ranks_per_node, part=str(part.resolve()),
               timing=TimingPlan(**suite.timing.model_dump()), check=suite.check, cells=todo,
               row_extra={"oversubscribed": per_host > (os.cpu_count() or 1)}, argv=argv, env=env).write(plan_path)
    seen: set[str] = set()

    def record(row: dict) -> None:
        seen.add(row["cell_key"])
        on_row(row)

    outcome = run_job(argv, env, part, folder / "logs" / f"{launch.launch_id}.log", suite.timeout_s,
                      record, on_start)
    if len(seen) < len(todo):
        tail = " | ".join(line for line in outcome.output_tail[-6:] if line.strip())[-600:]
        if outcome.timed_out:
            status, error = "timeout", f"MPI job killed after {suite.timeout_s:g} s. {tail}"
        else:
            status, error = "failed", f"MPI job exited with {outcome.returncode} before this cell. {tail}"
        rows = [{**row, "launch_id": launch.launch_id} for row in _missing_rows(todo, seen, status, error)]
        append_rows(part, rows)
        for row in rows:
            on_row(row)


def dry_run_commands(options: SweepOptions, out: Console) -> int:
    suite, _ = load_for(options)
    launcher = choose_launcher(options.launcher, suite.slurm)
    for launch in expand(suite):
        env = launcher.job_env(launcher.ranks_per_host(launch.nranks, launch.ranks_per_node),
                              {**suite.env, **launch.env})
        argv = launcher.command(launch.nranks, env, [f"<run>/plans/{launch.launch_id}.json"], launch.ranks_per_node,
                                suite.timeout_s)
        out.print(f"# {launch.launch_id}: {len(launch.cells)} cells, timeout {suite.timeout_s:g} s", highlight=False)
        out.print(" ".join(argv), highlight=False, soft_wrap=True)
    return EXIT_OK


def finish(folder: Path, suite: Suite, run_id: str, launcher: Launcher | None, started: float) -> object:
    wanted = {cell.key for launch in expand(suite) for cell in launch.cells}
    rows = [row for row in read_parts(folder) if row["cell_key"] in wanted]
    meta = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": suite.name,
        "suite_definition": suite.model_dump(), "launcher": launcher.kind if launcher else None,
        "launcher_requested": launcher.requested if launcher else None, "slurm": slurm.job_facts(folder),
        "mpi_flavour": launcher.flavour if launcher else None, "started": started, "finished": time.time(),
        "cells_planned": len(wanted), "cells_written": len(rows), "launches": _launch_records(folder),
        **provenance(),
    }
    identity = {"run_id": run_id, "suite": suite.name, "tool_version": meta["tool_version"],
                "git_sha": meta["git_sha"], "schema_version": SCHEMA_VERSION}
    results, samples = build_tables(rows, identity)
    write_run(folder, results, samples, meta)
    return results


def _launch_records(folder: Path) -> dict:
    """The exact command and environment of every MPI job of the run."""
    records = {}
    for path in sorted((folder / "plans").glob("*.json")):
        plan = json.loads(path.read_text())
        records[plan["launch_id"]] = {"argv": plan["argv"], "env": plan["env"], "nranks": plan["nranks"]}
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


def _start_folder(folder: Path, raw: dict, run_id: str, where: str) -> None:
    _prepare_folder(folder, where)
    (folder / "suite.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (folder / "run.json").write_text(json.dumps({"run_id": run_id}))


def run_sweep(options: SweepOptions, out: Console) -> int:
    _check_launcher_flags(options)
    if options.launcher == "sbatch":
        return submit_sweep(options, out)
    if options.dry_run:
        return dry_run_commands(options, out)
    suite, raw, folder, run_id = _open_run(options)
    launcher = choose_launcher(options.launcher, suite.slurm)
    _check_fits(suite, raw, launcher, str(options.resume / "suite.yaml") if options.resume else _where(options))
    lock = _lock_folder(options, folder, out)
    try:
        return _sweep(options, suite, raw, folder, run_id, launcher, out)
    finally:
        lock.release()


def _where(options: SweepOptions) -> str:
    return options.suite_where if options.suite_raw is not None else str(options.suite_path)


def _sweep(options: SweepOptions, suite: Suite, raw: dict, folder: Path, run_id: str, launcher: Launcher,
           out: Console) -> int:
    """The sweep proper, in a locked run folder."""
    _start_folder(folder, raw, run_id, "--out" if options.out else "results")
    started = time.time()
    done = {row["cell_key"] for row in read_parts(folder) if row["status"] in FINISHED}
    launches = expand(suite)
    total = sum(len(launch.cells) for launch in launches)
    interrupted = False
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    out.print(f"run [bold]{run_id}[/bold] -> {folder}  ({total} cells, {len(done)} already done; "
              f"launcher {launcher.kind}, {launcher.flavour}; env {recorded_env(launcher.job_env(1, suite.env))})",
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
                _run_launch(launch, todo, suite, launcher, folder, run_id,
                            on_row=lambda row: bar.advance(task),
                            on_start=lambda key, names=names: bar.update(task, current=names.get(key, "")))
    except KeyboardInterrupt:
        interrupted = True
        out.print("[yellow]interrupted: writing the table of the finished cells[/yellow]")
    finally:
        signal.signal(signal.SIGTERM, previous)
    results = finish(folder, suite, run_id, launcher, started)
    _print_summary(results, folder, out)
    return exit_code(results, interrupted)


def _print_summary(results: pd.DataFrame, folder: Path, out: Console) -> None:
    samples_path = folder / "samples.parquet"
    samples = pd.read_parquet(samples_path) if samples_path.exists() else None
    for table in screen.summary_tables(results, samples):
        out.print(table)
    for reason in screen.reasons(results):
        out.print(reason, highlight=False, markup=False)
    out.print(f"{screen.status_line(results)} -> {folder}/results.parquet", highlight=False)


# ---------------------------------------------------------------- --launcher sbatch


def submit_sweep(options: SweepOptions, out: Console) -> int:
    """Submit the sweep as one batch job; with --wait, wait for it and print its summary."""
    suite, raw, folder, run_id = _open_run(options)
    launches = expand(suite)
    script = folder / slurm.BATCH_SCRIPT
    if options.dry_run:
        out.print(f"# {script}", highlight=False)
        out.print(slurm.batch_script(run_id, suite.slurm, launches, folder), highlight=False, soft_wrap=True, end="")
        out.print(shlex.join(slurm.sbatch_argv("sbatch", script, options.wait)), highlight=False, soft_wrap=True)
        return EXIT_OK
    sbatch = find_slurm_tool("sbatch")
    created = not folder.exists()
    # Locked while the folder is set up; released before submitting, because the batch job's
    # own sweep (--resume) locks it, and the job record now refuses a second new run here.
    lock = _lock_folder(options, folder, out)
    try:
        _start_folder(folder, raw, run_id, "--out" if options.out else "results")
        script.write_text(slurm.batch_script(run_id, suite.slurm, launches, folder))
        script.chmod(0o755)
        argv = slurm.sbatch_argv(sbatch, script, options.wait)
        record = slurm.submission_record(argv, script)
        slurm.write_record(folder, record)
    finally:
        lock.release()

    def submitted(job_id: str) -> None:
        slurm.write_record(folder, {**record, "job_id": job_id})
        waiting = "; waiting for it" if options.wait else ""
        out.print(f"submitted batch job {job_id}: run {run_id} -> {folder}{waiting}", highlight=False, soft_wrap=True)

    outcome = slurm.submit(argv, submitted)
    if outcome.job_id is None and not outcome.interrupted:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        raise slurm.refusal(outcome)
    return _after_submission(outcome, folder, options.wait, out)


def _after_submission(outcome: slurm.Submission, folder: Path, wait: bool, out: Console) -> int:
    log = folder / "logs" / f"sbatch-{outcome.job_id}.log"
    if outcome.interrupted:
        job = (f"batch job {outcome.job_id} runs on (scancel {outcome.job_id} stops it) and writes {folder}"
               if outcome.job_id else "sbatch had not answered yet: see squeue")
        out.print(f"[yellow]stopped waiting; {job}[/yellow]", highlight=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    if not wait:
        out.print(f"job output: {log}; the table appears in {folder}/results.parquet", highlight=False, soft_wrap=True)
        return EXIT_OK
    path = folder / "results.parquet"
    if not path.exists():
        tail = log.read_text().splitlines()[-5:] if log.exists() else []
        out.print(f"[red]batch job {outcome.job_id} ended (exit {outcome.returncode}) without writing a table; "
                  f"see {log}[/red]", highlight=False, soft_wrap=True)
        for line in tail:
            out.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)
        return EXIT_CELLS_FAILED
    results = pd.read_parquet(path)
    _print_summary(results, folder, out)
    return exit_code(results, outcome.returncode == EXIT_INTERRUPTED)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
