"""``pccl-bench ab SUITE --out DIR``: two arms of a suite measured in alternation, gated pair by pair,
and the cells not yet decided measured again until they are (bench/sweep/ab.py).

Arms that differ in what a cell runs (impl, algorithm, phases) share each launch and are timed in turns;
arms that differ in the MPI settings (env) or in the install of this project (install) alternate launch
by launch (ABBA). Rounds of more launch repeats of only the undecided cells follow until every cell
is decided or ``--budget`` seconds are spent; a cell still undecided then fails the gate unless
``--allow-undecided`` (never a silent pass). A candidate slower across the board fails it too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from bench.cli.gate_cmd import check_normalise, check_thresholds
from bench.errors import EXIT_CHECK_FAILED, EXIT_OK, BadInput
from bench.files import output_file, output_folder
from bench.judge import gate as rules
from bench.judge.allowlist import load_allowlist
from bench.judge.gate import GateOptions
from bench.judge.gate_output import benchmark_json, headline, junit, markdown, rich_table, write_text
from bench.plan.suite import parse_suite
from bench.plan.suite_files import load_suite, resolve_suite_path
from bench.sweep.ab import Question, measure_until_decided
from bench.text import console_text, printable

AB_EXIT_HELP = ("Exit codes: 0 pass; 1 a regression (of a cell, or of the candidate across the board), or a "
                "cell that failed, returned wrong data, is missing, has too few samples to be judged "
                "(unless --allow-insufficient) or is still undecided when --budget is spent (unless "
                "--allow-undecided); 2 bad input (suite, arms, options).")
#: rounds that must confirm a regressed cell, at most
MAX_CONFIRM = 10
#: seconds an ab may measure: at least one round, at most a day
BUDGET_RANGE = (1.0, 86400.0)
#: launch repeats a round adds
MAX_ROUND_PAIRS = 100


def _installs(raw: dict, given: list[str], names: list[str]) -> list[str]:
    """``--install ARM=PATH``: that arm's ``install`` in the suite (the overrides --set cannot name)."""
    overrides = []
    for item in given:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise BadInput("--install", f"{printable(item)!r} is not ARM=PATH (e.g. cand=../main/.venv)")
        if name not in names:
            raise BadInput("--install", f"{printable(name)!r} is not an arm of the suite; it has {', '.join(names)}")
        for arm in raw["arms"]:
            if arm.get("name") == name:
                arm["install"] = path
        overrides.append(name)
    return overrides


def _check_loop(confirm: int, budget: float, round_pairs: int) -> None:
    if not 0 <= confirm <= MAX_CONFIRM:
        raise BadInput("--confirm", f"{confirm}: from 0 to {MAX_CONFIRM} rounds")
    if not (math.isfinite(budget) and BUDGET_RANGE[0] <= budget <= BUDGET_RANGE[1]):
        raise BadInput("--budget", f"{budget}: seconds, from {BUDGET_RANGE[0]:g} to {BUDGET_RANGE[1]:g}")
    if not 1 <= round_pairs <= MAX_ROUND_PAIRS:
        raise BadInput("--round-pairs", f"{round_pairs}: from 1 to {MAX_ROUND_PAIRS} launch repeats a round")


def ab_command(
    suite: Annotated[str, typer.Argument(help="Suite file (with an `arms:` list), or a name from suites/.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the runs and the gate's outputs.")],
    arms: Annotated[tuple[str, str] | None, typer.Option(
        "--arms", metavar="BASELINE CANDIDATE", show_default=False,
        help="The two arms to compare (default: the suite's first two).")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", help="Override a suite field (as run sweep).")]
        = None,
    installs: Annotated[list[str] | None, typer.Option(
        "--install", metavar="ARM=PATH", help="Measure ARM with another install of this project (a venv, a checkout "
                                              "with a .venv, or a Python): a branch against main; repeatable.")]
        = None,
    budget: Annotated[float, typer.Option(help="Seconds to measure at most: no round starts that would end "
                                               "later; cells still undecided are reported as such.")] = 600.0,
    round_pairs: Annotated[int, typer.Option(help="Launch repeats each further round adds for the undecided "
                                                  "cells.")] = 4,
    confirm: Annotated[int, typer.Option(help="Further rounds a regressed cell must stay regressed in.")] = 1,
    threshold: Annotated[float, typer.Option(help="Relative slowdown that is a regression.")] = rules.THRESHOLD,
    small_threshold: Annotated[float, typer.Option(help="The same below 64 KiB (arms measured together do "
                                                        "not drift between runs).")] = rules.SAME_JOB_SMALL_THRESHOLD,
    normalise: Annotated[str, typer.Option(
        "--normalise", help="probe: judge each launch relative to the machine-speed probe measured beside it "
                            "(not for arms that change the MPI library or its settings: the probe is theirs; "
                            "it made the launch-arm comparisons of docs/GATE-EVALUATION.md worse).")]
        = "",
    allow_insufficient: Annotated[bool, typer.Option(
        "--allow-insufficient", help=f"Cells with too few samples to be judged (fewer than {rules.MIN_SAMPLES} on "
                                     "a side, or a pair that measured the cell on one side only) do not fail the "
                                     "gate; they are still counted as not judged.")] = False,
    allow_undecided: Annotated[bool, typer.Option(
        "--allow-undecided", help="Cells the budget left undecided do not fail the gate (still counted).")] = False,
    allow: Annotated[Path | None, typer.Option(help="YAML allow-list of known regressions.")] = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown summary here.")] = None,
    junit_out: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML (one case per cell).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write github-action-benchmark JSON.")] = None,
) -> None:
    """Measure two arms of SUITE in alternation, gate them pair by pair, and measure the undecided cells
    again until every cell is decided or the budget is spent.

    What the arms may differ in: the implementation or algorithm (the same launch, timed in turns), the
    environment read at MPI_Init (MPI settings) or the install of this project (another checkout's
    venv: a branch against main); the last two alternate launch by launch (ABBA). An undecided cell
    fails unless --allow-undecided, and so does a candidate slower across the board (exit codes below).
    """
    path = resolve_suite_path(suite)
    definition, raw = load_suite(path, overrides or [])
    names = [arm.name for arm in definition.arms]
    if len(names) < 2:
        raise BadInput(str(path), "the suite has no `arms:` (at least two) to compare; see docs/GATE.md")
    if _installs(raw, installs or [], names):
        definition = parse_suite(raw, str(path))
    arms = arms or (names[0], names[1])
    for name in arms:
        if name not in names:
            raise BadInput("--arms", f"{printable(name)!r} is not an arm of {path}; it has {', '.join(names)}")
    if arms[0] == arms[1]:
        raise BadInput("--arms", "give two different arms: BASELINE CANDIDATE")
    _check_loop(confirm, budget, round_pairs)
    check_thresholds(threshold, small_threshold)
    check_normalise(normalise)
    output_folder(out, "--out")
    for file, flag in ((markdown_out, "--markdown"), (junit_out, "--junit"), (json_out, "--json")):
        output_file(file, flag)
    console = Console() if Console().is_terminal else Console(width=160)
    options = GateOptions(threshold=threshold, small_threshold=small_threshold, allow_insufficient=allow_insufficient,
                          allow_undecided=allow_undecided, normalise=normalise,
                          allow=load_allowlist(allow) if allow else [])
    question = Question(*arms)
    write_suite(raw, out / "suite.yaml")
    outcome = measure_until_decided(raw, str(path), out, [question], options, budget, round_pairs, confirm, console)
    result = outcome.results[question]
    for file, render in ((markdown_out, markdown), (junit_out, junit), (json_out, benchmark_json)):
        if file is not None:
            write_text(file, render(result))
    if any(cell.verdict != "unchanged" for cell in result.cells):
        console.print(rich_table(result))
    if warning := result.common_shift():
        console.print(f"warning: {warning}", style="yellow", highlight=False)
    console.print(f"measured in {outcome.summary()}", highlight=False)
    console.print(f"{console_text(arms[1])} against {console_text(arms[0])}: " + headline(result),
                  style="bold green" if result.passed else "bold red", highlight=False)
    raise typer.Exit(EXIT_OK if result.passed else EXIT_CHECK_FAILED)


def write_suite(raw: dict, path: Path) -> None:
    """The suite as measured (after --set and --install), beside the runs."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)  # output_folder checked that it can be made
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
