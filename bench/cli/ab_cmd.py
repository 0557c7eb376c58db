"""``pccl-bench ab SUITE --out DIR``: same-job comparison of two arms of a suite, confirmed.

The suite's ``arms`` are measured in one run (cells of arms that share an environment take turns
inside each launch; an arm with its own environment alternates launch by launch), then gated arm
against arm pair by pair (``gate --arms``). Cells that look regressed are re-measured: the suite
runs again (``--confirm`` times), restricted by ``select:`` to those cells' collectives and sizes
(every implementation and arm of them), and those cells are judged on every run together; a cell
stays regressed only if the pooled pairs still say so (asv's rerun of suspicious benchmarks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
import yaml
from rich.console import Console

from bench.cli.gate_cmd import check_thresholds
from bench.errors import EXIT_CELLS_FAILED, EXIT_CHECK_FAILED, EXIT_OK, BadInput
from bench.files import output_file, output_folder
from bench.judge import gate as rules
from bench.judge.allowlist import load_allowlist
from bench.judge.arms import split_arms
from bench.judge.gate import GateOptions, GateResult, gate
from bench.judge.gate_output import benchmark_json, headline, junit, markdown, rich_table, write_text
from bench.plan.suite_files import load_suite, resolve_suite_path
from bench.results.runset import load_runs
from bench.sweep import SweepOptions, run_sweep
from bench.text import console_text, printable

#: re-measurements of the flagged cells at most (each is a whole sweep of them)
MAX_CONFIRM = 10


def _measure(path: Path, out: Path, overrides: list[str], console: Console) -> None:
    code = run_sweep(SweepOptions(path, out=out, overrides=overrides), console)
    if code not in (EXIT_OK, EXIT_CHECK_FAILED, EXIT_CELLS_FAILED):
        raise typer.Exit(code)


#: the columns of a flagged cell that its re-measurement selects (not the implementation fields,
#: which an arm may set: every implementation of a flagged collective and size is measured again)
CONFIRM_COLUMNS = ("collective", "nranks", "ranks_per_node", "dtype", "op", "placement", "count_per_rank")


def confirm_suite(raw: dict, result: GateResult, path: Path) -> Path:
    """The suite restricted to the cells that look regressed, written to ``path``."""
    flagged = sorted({tuple((name, _plain(cell.row[name])) for name in CONFIRM_COLUMNS) for cell in result.cells
                      if cell.verdict == "regressed"})
    select = [{**before, **dict(entry)} for before in (raw.get("select") or [{}]) for entry in flagged]
    path.write_text(yaml.safe_dump({**raw, "select": select}, sort_keys=False))
    return path


def _plain(value: object) -> int | str:
    """A table value as YAML writes it (numpy integers as int)."""
    return int(value) if isinstance(value, int | np.integer) else str(value)


def judge_arms(runs: list[Path], arms: tuple[str, str], options: GateOptions) -> GateResult:
    baseline, current, paired = split_arms(load_runs(runs), *arms)
    options.paired = paired
    return gate(baseline, current, options)


def confirmed(first: GateResult, again: GateResult) -> GateResult:
    """First-pass verdicts, except that a cell regressed in the first pass takes the verdict of all
    runs together (the re-measurement confirms it or not)."""
    later = {cell.key: cell for cell in again.cells}
    cells = []
    for cell in first.cells:
        if cell.verdict == "regressed" and cell.key in later:
            redo = later[cell.key]
            if redo.verdict != "regressed":
                redo.reason = "; ".join(filter(None, [redo.reason, "regressed in the first run, not confirmed by "
                                                                    "the re-measurement"]))
            else:
                redo.reason = "; ".join(filter(None, [redo.reason, "confirmed by the re-measurement"]))
            cells.append(redo)
        else:
            cells.append(cell)
    return GateResult(cells, first.options, again.baseline_runs, again.current_runs)


def ab_command(
    suite: Annotated[str, typer.Argument(help="Suite file (with an `arms:` list), or a name from suites/.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the runs and the gate's outputs.")],
    arms: Annotated[tuple[str, str] | None, typer.Option(
        "--arms", metavar="BASELINE CANDIDATE", show_default=False,
        help="The two arms to compare (default: the suite's first two).")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", help="Override a suite field (as run sweep).")]
        = None,
    confirm: Annotated[int, typer.Option(help="Re-measurements of the suite when a cell looks regressed.")] = 1,
    threshold: Annotated[float, typer.Option(help="Relative slowdown that is a regression.")] = rules.THRESHOLD,
    small_threshold: Annotated[float, typer.Option(help="The same below 64 KiB (arms measured together do "
                                                        "not drift between runs).")] = rules.SAME_JOB_SMALL_THRESHOLD,
    allow_insufficient: Annotated[bool, typer.Option("--allow-insufficient")] = False,
    allow: Annotated[Path | None, typer.Option(help="YAML allow-list of known regressions.")] = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown summary here.")] = None,
    junit_out: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML (one case per cell).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write github-action-benchmark JSON.")] = None,
) -> None:
    """Measure two arms of SUITE in alternation in the same job, then gate them pair by pair.

    What the arms may differ in: the implementation or algorithm (in the same launch, cell by cell)
    or the environment read at MPI_Init (MPI settings: separate launches, alternating). Two installs
    of this project cannot share a process: measure those as two arms of env or with `run sweep`
    alternating and `gate --paired`. Exit codes as `gate`.
    """
    path = resolve_suite_path(suite)
    definition, raw = load_suite(path, overrides or [])
    names = [arm.name for arm in definition.arms]
    if len(names) < 2:
        raise BadInput(str(path), "the suite has no `arms:` (at least two) to compare; see docs/GATE.md")
    arms = arms or (names[0], names[1])
    for name in arms:
        if name not in names:
            raise BadInput("--arms", f"{printable(name)!r} is not an arm of {path}; it has {', '.join(names)}")
    if arms[0] == arms[1]:
        raise BadInput("--arms", "give two different arms: BASELINE CANDIDATE")
    if not 0 <= confirm <= MAX_CONFIRM:
        raise BadInput("--confirm", f"{confirm}: from 0 to {MAX_CONFIRM} re-measurements")
    check_thresholds(threshold, small_threshold)
    output_folder(out, "--out")
    for file, flag in ((markdown_out, "--markdown"), (junit_out, "--junit"), (json_out, "--json")):
        output_file(file, flag)
    console = Console() if Console().is_terminal else Console(width=160)
    options = GateOptions(threshold=threshold, small_threshold=small_threshold, allow_insufficient=allow_insufficient,
                          allow=load_allowlist(allow) if allow else [])
    runs = [out / "run-1"]
    _measure(path, runs[0], overrides or [], console)
    result = judge_arms(runs, arms, options)
    for index in range(2, confirm + 2):
        if not any(cell.verdict == "regressed" for cell in result.cells):
            break
        console.print(f"{sum(c.verdict == 'regressed' for c in result.cells)} cells look regressed: "
                      f"re-measuring (run {index})", highlight=False)
        runs.append(out / f"run-{index}")
        _measure(confirm_suite(raw, result, out / f"confirm-{index}.yaml"), runs[-1], [], console)
        result = confirmed(result, judge_arms(runs, arms, GateOptions(**{**options.__dict__})))
    for file, render in ((markdown_out, markdown), (junit_out, junit), (json_out, benchmark_json)):
        if file is not None:
            write_text(file, render(result))
    if any(cell.verdict != "unchanged" for cell in result.cells):
        console.print(rich_table(result))
    if warning := result.common_shift():
        console.print(f"warning: {warning}", style="yellow", highlight=False)
    console.print(f"{console_text(arms[1])} against {console_text(arms[0])}: " + headline(result),
                  style="bold green" if result.passed else "bold red", highlight=False)
    raise typer.Exit(EXIT_OK if result.passed else EXIT_CHECK_FAILED)
