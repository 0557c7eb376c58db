"""``pccl-bench gate BASELINE... CURRENT``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from bench.errors import EXIT_CHECK_FAILED, EXIT_OK, BadInput
from bench.files import output_file
from bench.judge import gate as rules
from bench.judge.allowlist import load_allowlist
from bench.judge.arms import split_arms
from bench.judge.gate import GateOptions, gate
from bench.judge.gate_output import benchmark_json, headline, junit, markdown, rich_table, write_text
from bench.plan.sizes import SIZE_HELP, parse_size
from bench.results.runset import load_runs
from bench.text import printable

GATE_EXIT_HELP = ("Exit codes: 0 pass; 1 a regression (of a cell, or of every cell together in a paired "
                  "comparison), or a cell that failed, returned wrong data, is missing, has too few samples "
                  "to be judged or (--decide) is undecided; 2 bad input (unreadable, empty or mismatched "
                  "tables, bad options).")


def _size(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as error:
        raise BadInput(flag, str(error)) from None


def _output(path: Path | None, flag: str) -> Path | None:
    return output_file(path, flag)


#: the most bootstrap resamples a cell may ask for: each side keeps resamples x launches x 256
#: draws in memory, so 100,000 is about 200 MB per launch (and minutes per cell)
MAX_RESAMPLES = 100_000


def check_thresholds(threshold: float, small_threshold: float) -> None:
    """Thresholds are finite relative slowdowns in [0, 10] (NaN would make every comparison false)."""
    for flag, value in (("--threshold", threshold), ("--small-threshold", small_threshold)):
        if not math.isfinite(value) or not 0 <= value <= 10:
            raise BadInput(flag, f"{value}: a relative slowdown between 0 and 10 (0.1 = 10%)")


def check_normalise(normalise: str) -> None:
    """``--normalise``: nothing, or the machine-speed probe."""
    if normalise not in ("", "probe"):
        raise BadInput("--normalise", f"{printable(normalise)!r}: the only reference is 'probe'")


def _check(options: GateOptions) -> GateOptions:
    if not (math.isfinite(options.confidence) and 0 < options.confidence < 1):
        raise BadInput("--confidence", f"{options.confidence} is not between 0 and 1")
    check_thresholds(options.threshold, options.small_threshold)
    check_normalise(options.normalise)
    if not 1 <= options.min_samples <= 10**9:
        raise BadInput("--min-samples", f"{options.min_samples}: between 1 and 10^9")
    if not 100 <= options.resamples <= MAX_RESAMPLES:
        raise BadInput("--resamples", f"{options.resamples}: between 100 and {MAX_RESAMPLES:,} (memory and time "
                                      "grow with it)")
    if not 0 <= options.seed < 2**63:
        raise BadInput("--seed", f"{options.seed}: a seed is an integer from 0 to 2^63-1")
    return options


def gate_command(
    runs: Annotated[list[Path], typer.Argument(
        help="BASELINE... CURRENT: run folders, results.parquet files or folders of runs; "
             "several baselines are pooled, the last path is the current run.", show_default=False,
        metavar="BASELINE... CURRENT")],
    threshold: Annotated[float, typer.Option(help="Relative slowdown that is a regression (0.1 = 10%).")]
        = rules.THRESHOLD,
    small_threshold: Annotated[float | None, typer.Option(
        help=f"The same below --small-below (noisier between runs) [default: {rules.SMALL_THRESHOLD:g}; "
             f"{rules.SAME_JOB_SMALL_THRESHOLD:g} with --arms]", show_default=False)] = None,
    small_below: Annotated[str, typer.Option(help=f"Size (bytes_total) under which --small-threshold "
                                                  f"applies; {SIZE_HELP}.")] = "64KiB",
    confidence: Annotated[float, typer.Option(help="Two-sided confidence of the bootstrap interval.")]
        = rules.CONFIDENCE,
    min_samples: Annotated[int, typer.Option(help="Fewest timed iterations per side to judge a cell.")]
        = rules.MIN_SAMPLES,
    paired: Annotated[bool, typer.Option("--paired", help="BASELINE and CURRENT hold as many runs, measured in "
                                                         "alternation (b1 c1 c2 b2 ...): judge every cell pair by "
                                                         "pair, so that drift of the machine cancels (6 pairs at "
                                                         "least: fewer cannot bound a ratio at 95%).")] = False,
    arms: Annotated[tuple[str, str] | None, typer.Option(
        "--arms", help="Same-job comparison: RUN holds a suite's arms measured in alternation; judge arm "
                       "CANDIDATE against arm BASELINE turn by turn (arms sharing launches) or pair by pair (one "
                       "pair per launch repeat: 6 at least).",
        metavar="BASELINE CANDIDATE", show_default=False)] = None,
    impl: Annotated[list[str] | None, typer.Option("--impl", help="Gate only this implementation; repeatable.")]
        = None,
    collective: Annotated[list[str] | None, typer.Option("--collective", help="Gate only this collective.")]
        = None,
    nranks: Annotated[list[int] | None, typer.Option("--nranks", help="Gate only this rank count.")] = None,
    min_size: Annotated[str | None, typer.Option(help="Gate only sizes (bytes_total) >= this.")] = None,
    max_size: Annotated[str | None, typer.Option(help="Gate only sizes (bytes_total) <= this.")] = None,
    allow: Annotated[Path | None, typer.Option(help="YAML allow-list of known regressions (docs/GATE.md).")]
        = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown summary here.")] = None,
    junit_out: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML (one case per cell).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write github-action-benchmark JSON "
                                                                 "(customSmallerIsBetter).")] = None,
    allow_insufficient: Annotated[bool, typer.Option(
        "--allow-insufficient", help="Cells with fewer than --min-samples samples on a side (imported OSU tables, "
                                     "nccl-tests text) do not fail the gate; they are still counted as not judged.")]
        = False,
    allow_missing: Annotated[bool, typer.Option(
        "--allow-missing", help="Cells of the baseline that the current run lacks do not fail the gate.")] = False,
    decide: Annotated[bool, typer.Option(
        "--decide", help="A cell whose interval still holds 1 + threshold is undecided (it fails the gate unless "
                         "--allow-undecided), not unchanged: what pccl-bench ab measures until it is decided.")]
        = False,
    allow_undecided: Annotated[bool, typer.Option(
        "--allow-undecided", help="Undecided cells do not fail the gate; they are still counted.")] = False,
    normalise: Annotated[str, typer.Option(
        "--normalise", help="probe: judge each cell relative to the machine-speed probe measured beside it "
                            "(suites with timing.probe: true); the headline says when the whole machine moved.")]
        = "",
    show_all: Annotated[bool, typer.Option("--all", help="List every cell, not only the flagged ones.")] = False,
    seed: Annotated[int, typer.Option(help="Bootstrap seed (verdicts are reproducible).")] = 0,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples per side.")] = 1000,
) -> None:
    """Compare CURRENT with BASELINE cell by cell on the per-iteration samples.

    A cell regressed when the bootstrap interval of median(current)/median(baseline) lies above
    1 + threshold; cells that failed or returned wrong data always fail the gate, and so do cells
    that were never judged (missing, or too few samples) unless --allow-missing / --allow-insufficient.
    A paired comparison (--paired, --arms) is also judged across the board: every cell's ratio in
    each pair, the median over cells, then over pairs; a candidate slower across the board beyond
    the threshold fails the gate even where each cell's interval alone is too wide to say so.
    """
    if len(runs) < (1 if arms else 2):
        raise BadInput("gate", "give at least one BASELINE and the CURRENT run (or --arms A B RUN)")
    if small_threshold is None:
        small_threshold = rules.SAME_JOB_SMALL_THRESHOLD if arms else rules.SMALL_THRESHOLD
    options = _check(GateOptions(
        threshold=threshold, small_threshold=small_threshold, small_below_bytes=_size(small_below, "--small-below"),
        confidence=confidence, min_samples=min_samples, resamples=resamples, seed=seed, paired=paired,
        impls=impl or [],
        collectives=collective or [], nranks=nranks or [], min_bytes=_size(min_size, "--min-size") or 0,
        max_bytes=_size(max_size, "--max-size"), allow=load_allowlist(allow) if allow else [],
        allow_insufficient=allow_insufficient, allow_missing=allow_missing, normalise=normalise, decide=decide,
        allow_undecided=allow_undecided))
    outputs = [(_output(markdown_out, "--markdown"), markdown), (_output(junit_out, "--junit"), junit),
               (_output(json_out, "--json"), benchmark_json)]
    if arms:
        baseline, current, by_pair = split_arms(load_runs(runs), *arms)
        options.paired = options.paired or by_pair
    else:
        baseline, current = load_runs(runs[:-1]), load_runs(runs[-1:])
    result = gate(baseline, current, options)
    console = Console() if Console().is_terminal else Console(width=160)
    if show_all or any(cell.verdict != "unchanged" or cell.allowed for cell in result.cells):
        console.print(rich_table(result, show_all))
    for path, render in outputs:
        if path is not None:
            write_text(path, render(result))
    if warning := result.common_shift():
        console.print(f"warning: {warning}", style="yellow", highlight=False)
    console.print(headline(result), style="bold green" if result.passed else "bold red", highlight=False)
    raise typer.Exit(EXIT_OK if result.passed else EXIT_CHECK_FAILED)
