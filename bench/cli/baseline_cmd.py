"""``pccl-bench baseline update``: measure a suite afresh and replace its committed baseline."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from bench.errors import EXIT_CHECK_FAILED, EXIT_OK, BadInput
from bench.files import output_folder
from bench.judge.gate import MIN_SAMPLES
from bench.plan.cells import CELL_KEY
from bench.plan.suite_files import load_suite, resolve_suite_path
from bench.results.labels import cell_label
from bench.results.runset import load_runs
from bench.sweep import SweepOptions, run_sweep

app = typer.Typer(help="The committed baselines of the regression gate (results/baselines/).",
                  no_args_is_help=True)
#: what a baseline keeps of each run (the gate reads nothing else)
KEPT = ("results.parquet", "samples.parquet", "meta.json")
BASELINES = Path("results") / "baselines"
#: the folders a baseline holds, one per pooled run
RUN_NAME = re.compile(r"run-[0-9]+")
#: the most entries an existing --dest may hold (a baseline: a few runs of three files)
MAX_ENTRIES = 1000


def _replace(folder: Path, runs: list[Path]) -> None:
    """Swap the new runs in as ``folder`` (run-1, run-2, ...), dropping the old baseline."""
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp makes 0700; a baseline is as readable as the repository
    for index, run in enumerate(runs, start=1):
        target = staging / f"run-{index}"
        target.mkdir()
        for name in KEPT:
            shutil.copy2(run / name, target / name)
    old = folder.with_name(f".{folder.name}.old")
    if folder.exists():
        folder.rename(old)
    staging.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def _foreign(folder: Path) -> str | None:
    """What in an existing ``folder`` says it is no baseline (which this command would destroy):
    a file or link beside the run folders, a measured run's table outside ``run-N/``, or more
    entries than a baseline has. Looks at most ``MAX_ENTRIES`` entries, three levels down."""
    seen = 0
    for entry in folder.iterdir():
        if entry.is_symlink() or not entry.is_dir():
            return f"the file {entry.name!r}"
    for root, dirs, files in os.walk(folder):
        depth = len(Path(root).relative_to(folder).parts)
        seen += len(dirs) + len(files)
        if seen > MAX_ENTRIES:
            return f"more than {MAX_ENTRIES} files"
        inside_run = depth == 1 and RUN_NAME.fullmatch(Path(root).name)
        if "results.parquet" in files and not inside_run:
            return f"the run {Path(root).relative_to(folder)}"
        if depth >= 3:
            dirs.clear()
    return None


def replaceable_baseline(folder: Path, flag: str) -> Path:
    """``folder`` checked before any measuring: a folder path (not a file, not under a file, no
    over-long name), and, where it exists, one that can be replaced whole: not the working directory
    or above it, nothing in it but folders, no measured run but the baseline's own ``run-N``."""
    output_folder(folder, flag, baseline_ok=True)
    if not folder.is_dir():
        return folder
    here = Path.cwd().resolve()
    if folder.resolve() in (here, *here.parents):
        raise BadInput(flag, f"{folder} holds the working directory; the baseline replaces the whole folder")
    foreign = _foreign(folder)
    if foreign:
        raise BadInput(flag, f"{folder} is not a baseline folder (it holds {foreign}); the baseline replaces the "
                             "whole folder, so give a new folder or one that `baseline update` wrote")
    return folder


def too_few_samples(runs: list[Path], least: int = MIN_SAMPLES) -> list[str]:
    """Labels of the good cells that have fewer than ``least`` samples over ``runs`` (a baseline
    must let the gate judge every cell)."""
    pooled = load_runs(runs)
    ok = pooled.results[pooled.results["status"].eq("ok")]
    counts = pooled.samples.groupby(list(CELL_KEY)).size() if len(pooled.samples) else {}
    short = []
    for _, row in ok.drop_duplicates(list(CELL_KEY)).iterrows():
        if counts.get(tuple(row[name] for name in CELL_KEY), 0) < least:
            short.append(cell_label(row))
    return short


@app.command("update")
def update(
    suite: Annotated[str, typer.Argument(help="Suite file, or a name from suites/.")] = "ci",
    runs: Annotated[int, typer.Option(help="Independent runs to pool (each is the suite's repeats launches).")] = 3,
    dest: Annotated[Path | None, typer.Option(help="Baseline folder (default: results/baselines/<suite name>).")]
        = None,
) -> None:
    """Run SUITE --runs times and make the runs the baseline that `pccl-bench gate` compares against.

    The old baseline is replaced only when every run finished with exit code 0.
    Commit the folder afterwards (git add results/baselines/<suite>).
    """
    if runs < 1:
        raise BadInput("--runs", "at least one run")
    path = resolve_suite_path(suite)
    definition, _ = load_suite(path, [])
    folder = replaceable_baseline(dest or BASELINES / definition.name, "--dest" if dest else "baseline")
    folder.parent.mkdir(parents=True, exist_ok=True)
    console = Console() if Console().is_terminal else Console(width=130)
    with tempfile.TemporaryDirectory(prefix="pccl-baseline-") as scratch:
        done = []
        for index in range(1, runs + 1):
            out = Path(scratch) / f"run-{index}"
            code = run_sweep(SweepOptions(path, out=out), console)
            if code != EXIT_OK:
                console.print(f"[red]run {index} exited {code}: the baseline in {folder} is unchanged[/red]")
                raise typer.Exit(code)
            done.append(out)
        if short := too_few_samples(done):
            console.print(f"[red]{len(short)} cells have fewer than {MIN_SAMPLES} samples over the runs (e.g. "
                          f"{short[0]}): the gate could not judge them; raise timing.min_iters or repeats. "
                          f"The baseline in {folder} is unchanged[/red]", highlight=False)
            raise typer.Exit(EXIT_CHECK_FAILED)
        _replace(folder, done)
    console.print(f"baseline of {definition.name}: {runs} runs -> {folder} (commit it: git add {folder})",
                  highlight=False)
