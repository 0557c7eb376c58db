"""Launchers whose ``sweep_driver`` is ``batch`` (sbatch): the sweep submitted as one batch job that
runs it with srun inside (bench/run/slurm.py writes the script)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pandas as pd
from rich.console import Console

from bench.errors import EXIT_CELLS_FAILED, EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK
from bench.run import slurm
from bench.run.launchers.srun import find_slurm_tool
from bench.sweep.options import SweepOptions, lock_folder
from bench.sweep.session import Sweep, Tables, exit_code, no_gpu_line, print_summary


def _script(sweep: Sweep) -> tuple[Path, str]:
    # Made before anything is written: a value the script cannot hold is bad input, the folder untouched.
    return sweep.folder / slurm.BATCH_SCRIPT, slurm.batch_script(sweep.run_id, sweep.suite.slurm, sweep.launches,
                                                                 sweep.folder)


def dry_run(options: SweepOptions, out: Console) -> int:
    """The batch script and the sbatch command, nothing submitted or written."""
    sweep = Sweep.open(options)
    script, text = _script(sweep)
    out.print(f"# {shlex.quote(str(script))}", highlight=False, markup=False)
    out.print(text, highlight=False, soft_wrap=True, end="", markup=False)
    out.print(shlex.join(slurm.sbatch_argv("sbatch", script, options.wait)), highlight=False, soft_wrap=True,
              markup=False)
    return EXIT_OK


def run(options: SweepOptions, out: Console) -> int:
    """Submit the sweep as one batch job; with --wait, wait for it and print its summary."""
    sweep = Sweep.open(options)
    script, text = _script(sweep)
    folder = sweep.folder
    sbatch = find_slurm_tool("sbatch")
    created = not folder.exists()
    # Locked while the folder is set up; released before submitting, because the batch job's
    # own sweep (--resume) locks it, and the job record now refuses a second new run here.
    lock = lock_folder(options, folder, out)
    try:
        sweep.start()
        script.write_text(text)
        script.chmod(0o755)
        argv = slurm.sbatch_argv(sbatch, script, options.wait)
        record = slurm.submission_record(argv, script)
        slurm.write_record(folder, record)
    finally:
        lock.release()

    def submitted(job_id: str) -> None:
        slurm.write_record(folder, {**record, "job_id": job_id})
        waiting = "; waiting for it" if options.wait else ""
        out.print(f"submitted batch job {job_id}: run {sweep.run_id} -> {folder}{waiting}", highlight=False,
                  soft_wrap=True)

    outcome = slurm.submit(argv, submitted)
    if outcome.job_id is None and not outcome.interrupted:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        raise slurm.refusal(outcome)
    return _after_submission(outcome, folder, options.wait, out, options.allow_unsupported)


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
    code = exit_code(tables.results, outcome.returncode == EXIT_INTERRUPTED, allow_unsupported)
    if code == EXIT_CHECK_FAILED and (line := no_gpu_line(tables.results)):
        out.print(line, highlight=False, soft_wrap=True, markup=False)
    return code
