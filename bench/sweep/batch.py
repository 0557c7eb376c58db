"""Launchers whose ``sweep_driver`` is ``batch`` (sbatch): the sweep submitted as batch jobs that run
it with srun inside (bench/driver/slurm.py writes the scripts): one job, or one per node count, each
asking for the nodes of its own launches and started after the one before."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console

from bench.driver import preflight, slurm
from bench.driver.launchers.srun import find_slurm_tool
from bench.errors import EXIT_CELLS_FAILED, EXIT_INTERRUPTED, EXIT_OK, BadInput
from bench.sweep.options import SweepOptions, lock_folder
from bench.sweep.session import Sweep, Tables, print_summary, said_exit_code


@dataclass
class BatchJob:
    """One batch job of the sweep: its script's path and text."""

    script: Path
    text: str


def _jobs(sweep: Sweep, mode: str, allow_unsupported: bool, archive: bool = False) -> list[BatchJob]:
    """The sweep's batch jobs, smallest node count first. Made before anything is written: a value a
    script cannot hold, or a Slurm field the site needs and nobody gave, is bad input, the folder untouched."""
    groups = slurm.batch_groups(sweep.launches, mode)
    slurm.check_job(sweep.label, sweep.suite.slurm, sweep.where.site, groups, sweep.suite.device != "host")
    jobs = []
    for group in groups:
        nodes = group[0].where.nhosts if len(groups) > 1 else None
        text = slurm.batch_script(sweep.run_id, sweep.suite.slurm, group, sweep.folder, sweep.where.site, nodes,
                                  allow_unsupported, archive)
        jobs.append(BatchJob(sweep.folder / slurm.script_name(group, len(groups)), text))
    return jobs


def dry_run(options: SweepOptions, out: Console) -> int:
    """The batch scripts and the sbatch commands, nothing submitted or written."""
    sweep = Sweep.open(options)
    jobs = _jobs(sweep, options.batch_jobs, options.allow_unsupported, options.first_run)
    _say_time(sweep, out, "# ")  # the dry run's lines that are not the scripts' are shell comments
    for line in preflight.mpi_dry_run_lines(sweep):
        out.print(line, highlight=False, soft_wrap=True, markup=False)
    groups = slurm.batch_groups(sweep.launches, options.batch_jobs)
    reason = slurm.batch_jobs_reason(groups, options.batch_jobs)
    out.print(f"# {reason}", highlight=False, soft_wrap=True, markup=False)
    previous = None
    for index, job in enumerate(jobs):
        for line in preflight.probe_dry_run_lines(sweep, groups[index]):  # what this job's own sweep runs first
            out.print(line, highlight=False, soft_wrap=True, markup=False)
        out.print(f"# {shlex.quote(str(job.script))}", highlight=False, markup=False)
        out.print(job.text, highlight=False, soft_wrap=True, end="", markup=False)
        wait = options.wait and index == len(jobs) - 1
        out.print(shlex.join(slurm.sbatch_argv("sbatch", job.script, wait, previous)), highlight=False,
                  soft_wrap=True, markup=False)
        previous = f"<job id of {job.script.name}>"
    return EXIT_OK


def run(options: SweepOptions, out: Console) -> int:
    """Submit the sweep as its batch jobs (chained, smallest node count first); with --wait, wait for
    the last and print the summary."""
    sweep = Sweep.open(options)
    jobs = _jobs(sweep, options.batch_jobs, options.allow_unsupported, options.first_run)
    preflight.check_mpi(sweep, out)  # the login node loads the jobs' Python: refused before submitting
    _say_time(sweep, out, "")
    folder = sweep.folder
    sbatch = find_slurm_tool("sbatch")
    created = not folder.exists()
    # Locked while the folder is set up; released before submitting, because the batch job's
    # own sweep (--resume) locks it, and the job record now refuses a second new run here.
    lock = lock_folder(options, folder, out)
    try:
        sweep.start()
        for job in jobs:
            job.script.write_text(job.text)
            job.script.chmod(0o755)
        first = jobs[0].script
        records = [slurm.submission_record(slurm.sbatch_argv(sbatch, first, options.wait and len(jobs) == 1), first)]
        slurm.write_record(folder, _record(records))
    finally:
        lock.release()
    if len(jobs) > 1:
        out.print(slurm.batch_jobs_reason(slurm.batch_groups(sweep.launches, options.batch_jobs),
                                          options.batch_jobs), highlight=False, soft_wrap=True)
    outcome: slurm.Submission | None = None
    previous = None
    for index, job in enumerate(jobs):
        last = index == len(jobs) - 1
        argv = slurm.sbatch_argv(sbatch, job.script, options.wait and last, previous)
        if index:
            records.append(slurm.submission_record(argv, job.script))
            slurm.write_record(folder, _record(records))

        def submitted(job_id: str, last: bool = last) -> None:
            records[-1] = {**records[-1], "job_id": job_id}
            slurm.write_record(folder, _record(records))
            waiting = "; waiting for it" if options.wait and last else ""
            out.print(f"submitted batch job {job_id}: run {sweep.run_id} -> {folder}{waiting}", highlight=False,
                      soft_wrap=True)

        outcome = slurm.submit(argv, submitted)
        if outcome.job_id is None and not outcome.interrupted:
            if created and index == 0:
                shutil.rmtree(folder, ignore_errors=True)
            refused = slurm.refusal(outcome)
            if previous is None:
                raise refused
            # the jobs before it are queued and fill the folder: say so, and how to stop them
            submitted_ids = " ".join(record["job_id"] for record in records[:-1])
            raise BadInput("sbatch", f"{str(refused).removeprefix('sbatch: ')} ({job.script.name}; the jobs "
                                     f"before it, {submitted_ids}, are queued: scancel {submitted_ids} stops them)")
        if outcome.interrupted:
            break
        previous = outcome.job_id
    return _after_submission(outcome, folder, options.wait, out, options.allow_unsupported)


def _say_time(sweep: Sweep, out: Console, prefix: str) -> None:
    if note := slurm.time_note(sweep.suite.slurm.time):
        out.print(f"[yellow]{prefix}{note}[/yellow]", highlight=False, soft_wrap=True)


def _record(records: list[dict]) -> dict:
    """``slurm.json``: the one job's record, or every job's under ``jobs`` (the last one's on top)."""
    if len(records) == 1:
        return records[0]
    return {**records[-1], "jobs": list(records)}


def _after_submission(outcome: slurm.Submission, folder: Path, wait: bool, out: Console,
                      allow_unsupported: bool = False) -> int:
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
    # the batch job's own process wrote the tables: read them back here
    samples_path = folder / "samples.parquet"
    tables = Tables(pd.read_parquet(path), pd.read_parquet(samples_path) if samples_path.exists() else pd.DataFrame(),
                    {})
    print_summary(tables, folder, out)
    return said_exit_code(tables.results, outcome.returncode == EXIT_INTERRUPTED, allow_unsupported, out)
