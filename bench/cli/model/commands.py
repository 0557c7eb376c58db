"""``pccl-bench model run|fit|check|band|calibrate|replay``: the analytical model (docs/MODEL.md).

Here the command group, ``model run`` and ``model band`` (projections onto a machine description);
``model_fit`` holds fit and check,
``model_calibrate`` calibrate, ``model_replay`` replay, ``model_flags`` and ``model_files`` the
checks of flags and outputs, ``model_tables`` what the commands print.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from bench.cli.model.calibrate_cmd import calibrate_command, load_checked, with_calibrated_band
from bench.cli.model.fit_cmd import check, fit_command
from bench.cli.model.flags import (
    FACTOR_HELP,
    MAX_SEED,
    MAX_SPEEDUP,
    SIZES_HELP,
    Impls,
    MachineArg,
    Price,
    Ranks,
    check_runnable,
    checked_price,
    collectives_of,
    gpu_counts,
    model_sizes,
    quoted,
    variants_of,
)
from bench.cli.model.outputs import check_outputs, plot_file, run_folder, write_csv
from bench.cli.model.replay_cmd import replay
from bench.cli.model.tables import make_console, print_band, print_speedups
from bench.errors import EXIT_CODES_HELP, BadInput
from bench.model.band import MAX_SAMPLES
from bench.model.check import measured_calls
from bench.model.machine import Machine, load_machine
from bench.model.model_run import MAX_RANKS, RANKS_HELP, ModelSpec, check_ranks, shape_problem, write_model_run
from bench.model.robust import median_cells
from bench.results.read import read_results
from collectives.dtypes import DTYPES, itemsize
from collectives.spec import COLLECTIVES

app = typer.Typer(help="Model collectives on a machine description: project, fit, check, replay.",
                  no_args_is_help=True)


def _default_ranks(machine: Machine, where: str) -> list[int]:
    """1, 8, 64 and 256 nodes, those the model can walk."""
    ranks = [machine.gpus_per_node * n for n in (1, 8, 64, 256)]
    ranks = [n for n in ranks if shape_problem(n, machine.gpus_per_node) is None]
    if not ranks:
        raise BadInput(where, f"nodes of {machine.gpus_per_node} GPUs: no default GPU count the model can walk; "
                              "give --ranks")
    return ranks


def run(
    machine_name: MachineArg,
    ranks: Ranks = None,
    sizes: Annotated[str, typer.Option("--sizes", help=SIZES_HELP)] = "1MiB:1GiB",
    factor: Annotated[int, typer.Option("--factor", "-f", help=FACTOR_HELP)] = 2,
    collective: Annotated[list[str] | None, typer.Option(
        "--collective", "-C", help="allgather | reduce_scatter | allreduce; repeatable (default: all).")] = None,
    impl: Impls = None,
    dtype: Annotated[str, typer.Option("--dtype", "-d", help="Element type (sizes in bytes as nccl-tests).")]
    = "float32",
    price: Price = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Run folder (default: results/model-<machine>); not a folder of measured results.")]
    = None,
) -> None:
    """Project every implementation onto a machine: the tidy result table with status=modelled."""
    # Every flag first: the projection of large GPU counts takes minutes.
    size_list, collectives, variants = model_sizes(sizes, factor), collectives_of(collective), variants_of(impl)
    if dtype not in DTYPES:
        raise BadInput("--dtype", f"{quoted(dtype)} is not one of {sorted(DTYPES)}")
    price, requested = checked_price(price), gpu_counts(ranks, [])
    machine, path = load_machine(machine_name)
    folder = run_folder(out or Path("results") / f"model-{machine.name}")
    rank_list = check_ranks(machine, requested) if requested else _default_ranks(machine, str(path))
    spec = ModelSpec(machine, str(path), collectives, variants, rank_list, size_list, dtype,
                     price_per_gpu_hour_usd=price if price is not None else machine.price_per_gpu_hour_usd)
    results, notes = write_model_run(folder, spec)
    console = make_console()
    for note in notes:
        console.print(f"note: {note}", highlight=False)
    print_speedups(results, console)
    console.print(f"{len(results)} modelled cells -> {folder / 'results.parquet'}", highlight=False)


def band(
    machine_name: MachineArg,
    ranks: Annotated[int, typer.Option("--ranks", "-n", help=f"GPU count to project to; {RANKS_HELP}.")] = 2048,
    sizes: Annotated[str, typer.Option("--sizes", help=SIZES_HELP)] = "1MiB:1GiB",
    factor: Annotated[int, typer.Option("--factor", "-f", help=FACTOR_HELP)] = 4,
    collective: Annotated[str, typer.Option("--collective", "-C", help="allgather | reduce_scatter.")] = "allgather",
    impl: Impls = None,
    samples: Annotated[int, typer.Option(
        "--samples", help=f"Parameter draws from the fitted normal (or bootstrap refits), 20 to {MAX_SAMPLES}; "
                          "with --bootstrap also samples x measured cells x 8 bytes <= 2 GiB.")] = 300,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the draws, 0 to 2^64 - 1.")] = 0,
    dtype: Annotated[str, typer.Option("--dtype", "-d", help="Element type (the reproducer's: bfloat16).")]
    = "bfloat16",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the band table as CSV here.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Times and speedups with their bands, as PNG.")] = None,
    published: Annotated[str | None, typer.Option(
        "--published", help="With --plot: a published speedup range to draw, e.g. 6:33 (0 < LOW <= HIGH).")]
    = None,
    bootstrap: Annotated[list[Path] | None, typer.Option(
        "--bootstrap", help="Instead of the fitted normal: refit on these measured runs' cells resampled "
                            "with replacement, --samples times (terms and band windows kept).")] = None,
    calibration: Annotated[Path | None, typer.Option(
        "--calibration", help="Also the band calibrated on held-out checks (`model calibrate --out`): the "
                              "model's own error, widened by the doublings beyond the fitted GPU counts.",
        exists=True, dir_okay=False)] = None,
) -> None:
    """Projection with the fit's uncertainty: times and speedups over the first --impl, 5-50-95% over
    parameter draws from each library's fitted normal (a description fitted by `model fit --per-impl`)."""
    from bench.model.band import band_table, check_resampling, plot_band

    # Every flag and output first: each sample models every size again (bootstrap: a refit each).
    size_list = model_sizes(sizes, factor)
    variants = variants_of(impl or ["xccl", "pccl-hier:mpi/xccl"])
    size = _band_flags(ranks, collective, variants, samples, seed, dtype)
    strip = _published(published, plot)
    machine, path = load_machine(machine_name)
    check_outputs([(out, "--out"), (plot_file(plot, "--plot"), "--plot")], [*(bootstrap or []), path])
    missing = [v.label for v in variants if v.library not in machine.libraries]
    if missing:
        raise BadInput(str(path), f"{', '.join(missing)}: the description has no such library")
    check_ranks(machine, [ranks])
    measured = measured_calls(read_results(bootstrap), set(machine.libraries)) if bootstrap else None
    if measured is not None:
        check_resampling(samples, len(median_cells(measured)))
    calibrated = load_checked(calibration)
    table = band_table(machine, variants, collective, ranks, size_list, samples, seed, size, str(path), measured)
    if calibrated is not None:
        table = with_calibrated_band(table, calibrated, machine, str(path))
    console = make_console()
    print_band(table, console, f"{collective} on {ranks} GPUs of {machine.name}: " + (
        f"{samples} bootstrap refits over the measured cells" if bootstrap else
        f"{samples} draws from the fitted normal") + " (parameter uncertainty only)", variants[0].label,
        calibrated.level if calibrated is not None else None)
    if out:
        write_csv(table, out)
        console.print(f"band -> {out}", highlight=False)
    if plot:
        plot_band(table, plot, f"{collective}, {ranks} GPUs of {machine.name} (model)", strip)
        console.print(f"plot -> {plot}", highlight=False)


def _band_flags(ranks: int, collective: str, variants: list, samples: int, seed: int, dtype: str) -> int:
    """``model band``'s numeric flags checked; the element size of --dtype."""
    if not 1 <= ranks <= MAX_RANKS:
        raise BadInput("--ranks", f"{ranks} GPUs: expected 1 to {MAX_RANKS}")
    if collective not in COLLECTIVES:
        raise BadInput("--collective", f"{quoted(collective)} not in {list(COLLECTIVES)}")
    check_runnable(variants, [collective])
    if not 20 <= samples <= MAX_SAMPLES:
        raise BadInput("--samples", f"{samples}: at least 20 draws for a 5-95% band, at most {MAX_SAMPLES}")
    if not 0 <= seed <= MAX_SEED:
        raise BadInput("--seed", f"{seed}: expected 0 to 2^64 - 1")
    size = 2 if dtype == "bfloat16" else itemsize(dtype) if dtype in DTYPES else None
    if size is None:
        raise BadInput("--dtype", f"{quoted(dtype)} is not bfloat16 or one of {sorted(DTYPES)}")
    return size


def _published(published: str | None, plot: Path | None) -> tuple[float, float] | None:
    """--published LOW:HIGH, two finite speedups 0 < LOW <= HIGH (drawn on --plot only)."""
    if published is None:
        return None
    if plot is None:
        raise BadInput("--published", f"{quoted(published)}: only with --plot (the range is drawn on the figure)")
    low, sep, high = published.partition(":")
    try:
        strip = (float(low), float(high))
    except ValueError:
        raise BadInput("--published", f"{quoted(published)} is not LOW:HIGH, e.g. 6:33") from None
    if not sep or not all(math.isfinite(v) and 0 < v <= MAX_SPEEDUP for v in strip) or strip[0] > strip[1]:
        raise BadInput("--published", f"{quoted(published)}: expected LOW:HIGH with 0 < LOW <= HIGH <= "
                                      f"{MAX_SPEEDUP:g}, e.g. 6:33")
    return strip


# In this order: `pccl-bench model --help` lists them so.
app.command("run", epilog=EXIT_CODES_HELP)(run)
app.command("fit", epilog=EXIT_CODES_HELP)(fit_command)
app.command("check", epilog=EXIT_CODES_HELP)(check)
app.command("band", epilog=EXIT_CODES_HELP)(band)
app.command("calibrate", epilog=EXIT_CODES_HELP)(calibrate_command)
app.command("replay", epilog=EXIT_CODES_HELP)(replay)
