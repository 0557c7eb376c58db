"""``pccl-bench model run|fit|check|replay``: the analytical model (docs/MODEL.md)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from bench.errors import EXIT_CODES_HELP, BadInput
from bench.files import atomic_write, measured_run, output_file, output_folder
from bench.model.band import MAX_SAMPLES
from bench.model.check import error_summary, error_table, measured_calls
from bench.model.fit import fit, with_rendezvous
from bench.model.heldout import factor_table, plot_check, repeat_spread, winner_agreement, winner_cells
from bench.model.impls import DEFAULT_VARIANTS, Variant, parse_variant
from bench.model.machine import (
    MAX_GPUS_PER_NODE,
    MAX_PRICE,
    NAME_PATTERN,
    Machine,
    dump_machine,
    load_machine,
    validated,
)
from bench.model.replay import Timed, measured_timer, model_timer, replay_rows
from bench.model.robust import fit_per_library, fit_record, median_cells
from bench.model.run import (
    MAX_MODEL_BYTES,
    MAX_RANKS,
    RANKS_HELP,
    ModelSpec,
    check_ranks,
    node_shape,
    shape_problem,
    write_model_run,
)
from bench.model.workload import MAX_CALLS_PER_STEP, MAX_LAYERS, load_workload
from bench.plan.sizes import format_size, geometric, parse_size
from bench.results.read import read_results
from collectives.dtypes import DTYPES, itemsize
from collectives.spec import COLLECTIVES

app = typer.Typer(help="Model collectives on a machine description: project, fit, check, replay.",
                  no_args_is_help=True)

#: GPU counts one --ranks list may hold
MAX_RANK_COUNTS = 256
#: sizes one --sizes range may give, and the largest --factor
MAX_SIZES = 10_000
MAX_FACTOR = 1 << 20
#: --seed: numpy's generators take any non-negative integer; 64 bits are plenty
MAX_SEED = (1 << 64) - 1
#: --published LOW:HIGH: speedups
MAX_SPEEDUP = 1e9
#: files `model run` writes into its folder (each checked before the work)
RUN_FILES = ("results.parquet", "results.csv", "samples.parquet", "meta.json")
#: files of a run folder that no model command may overwrite when the folder holds a measured run
RUN_FOLDER_FILES = (*RUN_FILES, "samples.csv")

MachineArg = Annotated[str, typer.Argument(
    help=f"Machine description: a name from suites/machines/ or a path (gpus_per_node and nics_per_node at most "
         f"{MAX_GPUS_PER_NODE}; every figure finite and within the bounds of bench/model/machine.py).")]
Ranks = Annotated[str | None, typer.Option(
    "--ranks", "-n", help=f"GPU counts, comma-separated (e.g. 64,512,2048), at most {MAX_RANK_COUNTS}; {RANKS_HELP}.")]
Impls = Annotated[list[str] | None, typer.Option(
    "--impl", "-i", help="mpi | xccl | pccl-flat:<alg> | pccl-hier:<inter>/<intra>; repeatable.")]
OnlyRanks = Annotated[str | None, typer.Option("--ranks", "-n", help="Only cells with these rank counts, e.g. 2,3.")]
Price = Annotated[float | None, typer.Option(
    "--price-per-gpu-hour", help=f"US$ per GPU-hour for the cost columns, 0 to {MAX_PRICE:g} "
                                 "(default: the description's).")]
Results = Annotated[list[Path], typer.Argument(help="Run folders or results.parquet files.")]
#: MAX_MODEL_BYTES as people read it
MAX_SIZE_TEXT = "1 PiB (2^50 B)"
SIZES_HELP = f"min:max nccl-tests sizes, e.g. 1MiB:1GiB; each 1 B to {MAX_SIZE_TEXT}, min <= max."
FACTOR_HELP = f"Each size is the previous times this: a whole number 2 to {MAX_FACTOR}."


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=140)


def _shown(text: object, limit: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[: limit - 5]}...{shown[-2:]}"


def _ranks(text: str | None, default: list[int], flag: str = "--ranks") -> list[int]:
    """GPU counts of a comma-separated list, each 1..MAX_RANKS, repeats dropped (order kept)."""
    if not text:
        return default
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if len(parts) > MAX_RANK_COUNTS:
        raise BadInput(flag, f"{len(parts)} GPU counts: give at most {MAX_RANK_COUNTS}")
    if not all(re.fullmatch(r"[+-]?[0-9]{1,12}", part) for part in parts):
        raise BadInput(flag, f"{_shown(text)} is not a comma-separated list of whole numbers")
    values = list(dict.fromkeys(int(part) for part in parts))
    if not values:
        raise BadInput(flag, f"{_shown(text)}: give at least one GPU count")
    wrong = next((value for value in values if not 1 <= value <= MAX_RANKS), None)
    if wrong is not None:
        raise BadInput(flag, f"{wrong} GPUs: each GPU count must be 1 to {MAX_RANKS}")
    return values


def _size(text: str, where: str) -> int:
    """A size of 1 byte to MAX_MODEL_BYTES."""
    if len(text) > 100:
        raise BadInput(where, f"{_shown(text)} is longer than 100 characters: not a size")
    try:
        size = parse_size(text)
    except ValueError as error:
        raise BadInput(where, str(error)) from None
    if not 1 <= size <= MAX_MODEL_BYTES:
        raise BadInput(where, f"{_shown(text)} is {size} B: expected 1 B to {MAX_SIZE_TEXT}")
    return size


def _sizes(text: str, factor: int) -> list[int]:
    """--sizes min:max by --factor, checked before any size is made (a factor below 2 never ends)."""
    if not 2 <= factor <= MAX_FACTOR:
        raise BadInput("--factor", f"{factor}: each size is the previous times this, a whole number 2 to {MAX_FACTOR}")
    low, sep, high = text.partition(":")
    smallest, largest = _size(low, "--sizes"), _size(high if sep else low, "--sizes")
    if smallest > largest:
        raise BadInput("--sizes", f"{_shown(text)}: min ({smallest} B) is larger than max ({largest} B)")
    try:
        return geometric(smallest, largest, factor, limit=MAX_SIZES)
    except ValueError as error:
        raise BadInput("--sizes", str(error)) from None


def _variants(impls: list[str] | None) -> list[Variant]:
    """The implementations to model, repeats dropped (order kept)."""
    texts = list(dict.fromkeys(impls or DEFAULT_VARIANTS))
    too_long = next((text for text in texts if len(text) > 100), None)
    if too_long is not None:
        raise BadInput("--impl", f"{_shown(too_long)} is longer than 100 characters")
    return [parse_variant(text) for text in texts]


def _runnable(variants: list[Variant], collectives: list[str]) -> None:
    """Every variant runs every collective (replay and band time each one: no cell to skip)."""
    for variant in variants:
        for collective in collectives:
            problem = variant.problem(collective)
            if problem:
                raise BadInput("--impl", f"{variant.label}: no {collective} ({problem})")


def _price(price: float | None) -> float | None:
    if price is not None and not (math.isfinite(price) and 0 <= price <= MAX_PRICE):
        raise BadInput("--price-per-gpu-hour", f"{price}: expected US$ 0 to {MAX_PRICE:g} per GPU-hour")
    return price


def _collectives(names: list[str] | None) -> list[str]:
    collectives = list(dict.fromkeys(names or COLLECTIVES))
    unknown = sorted(set(collectives) - set(COLLECTIVES))
    if unknown:
        raise BadInput("--collective", f"{_shown(unknown)} not in {list(COLLECTIVES)}")
    return collectives


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare the path as given
        return path.absolute()


def _input_files(paths: list[Path]) -> dict[Path, str]:
    """The files a command reads (a run folder's tables and meta), resolved: no output may replace them."""
    files = {}
    for path in paths:
        folder, named = (path, []) if path.is_dir() else (path.parent, [path])
        for item in [*named, *(folder / name for name in RUN_FOLDER_FILES)]:
            files.setdefault(_resolved(item), f"an input of this command ({path})")
    return files


def _outputs(files: list[tuple[Path | None, str]], inputs: list[Path]) -> None:
    """Every output file writable, none the same as another or as a file read, none inside a measured run
    (its tables and meta), all checked before the work."""
    taken = _input_files(inputs)
    for path, flag in files:
        if path is None:
            continue
        output_file(path, flag)
        if path.name in RUN_FOLDER_FILES and measured_run(path.parent):
            raise BadInput(flag, f"{path} would overwrite a file of the measured run in {path.parent}")
        key = _resolved(path)
        if key in taken:
            raise BadInput(flag, f"{path} is also {taken[key]}")
        taken[key] = f"the file of {flag}"


def _plot_file(path: Path | None, flag: str) -> Path | None:
    """A figure path whose suffix matplotlib can write (checked before the work; none: PNG)."""
    if path is None or not path.suffix:
        return path
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise BadInput(flag, f"{path}: {_shown(path.suffix)} is not a figure format ({', '.join(sorted(formats))})")
    return path


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda temp: table.to_csv(temp, index=False))


def _run_folder(folder: Path) -> Path:
    """The folder of `model run`: writable, and not a measured run (its table is somebody's data)."""
    output_folder(folder, "--out")
    if measured_run(folder):
        raise BadInput("--out", f"{folder} holds a measured run (results.parquet with measured rows): "
                                "`model run` writes a new folder or one it wrote itself")
    for name in RUN_FILES:
        output_file(folder / name, "--out")
    return folder


def _default_ranks(machine: Machine, where: str) -> list[int]:
    """1, 8, 64 and 256 nodes, those the model can walk."""
    ranks = [machine.gpus_per_node * n for n in (1, 8, 64, 256)]
    ranks = [n for n in ranks if shape_problem(n, machine.gpus_per_node) is None]
    if not ranks:
        raise BadInput(where, f"nodes of {machine.gpus_per_node} GPUs: no default GPU count the model can walk; "
                              "give --ranks")
    return ranks


@app.command("run", epilog=EXIT_CODES_HELP)
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
    size_list, collectives, variants = _sizes(sizes, factor), _collectives(collective), _variants(impl)
    if dtype not in DTYPES:
        raise BadInput("--dtype", f"{_shown(dtype)} is not one of {sorted(DTYPES)}")
    price, requested = _price(price), _ranks(ranks, [])
    machine, path = load_machine(machine_name)
    folder = _run_folder(out or Path("results") / f"model-{machine.name}")
    rank_list = check_ranks(machine, requested) if requested else _default_ranks(machine, str(path))
    spec = ModelSpec(machine, str(path), collectives, variants, rank_list, size_list, dtype,
                     price_per_gpu_hour_usd=price if price is not None else machine.price_per_gpu_hour_usd)
    results, notes = write_model_run(folder, spec)
    console = _console()
    for note in notes:
        console.print(f"note: {note}", highlight=False)
    _print_speedups(results, console)
    console.print(f"{len(results)} modelled cells -> {folder / 'results.parquet'}", highlight=False)


def _print_speedups(results: pd.DataFrame, console: Console) -> None:
    frame = results.assign(label=results.apply(_label, axis=1))
    for (collective, nranks), group in frame.groupby(["collective", "nranks"]):
        pivot = group.pivot_table(index="bytes_total", columns="label", values="time_us_p50")
        table = Table(title=f"{collective} on {nranks} GPUs: modelled time (ms)", title_justify="left")
        table.add_column("size", justify="right")
        for name in pivot.columns:
            table.add_column(name, justify="right")
        for size, values in pivot.iterrows():
            table.add_row(format_size(int(size)), *(f"{value / 1e3:.3f}" for value in values))
        console.print(table)


def _label(row) -> str:
    if row["impl"] == "pccl-hier":
        return f"pccl-hier:{row['inter']}/{row['intra']}"
    return row["impl"] if row["impl"] in ("mpi", "xccl") else f"{row['impl']}:{row['algorithm']}"


def _library_name(results: pd.DataFrame, impl: str, fallback: str) -> str | None:
    rows = results[results["impl"] == impl]
    if rows.empty:
        return None
    return str(rows["library"].iloc[0]) if "library" in rows else fallback


def _generic_base(name: str, results: pd.DataFrame, gpus_per_node: int | None) -> Machine:
    """A starting description for a fit without --base: every link alike, one NIC, the data's libraries."""
    link = {"latency_us": 1.0, "bandwidth_gbps": 5.0}
    libraries = {"pccl": {"name": "pccl-bench"}}
    if mpi_name := _library_name(results, "mpi", "MPI"):
        libraries["mpi"] = {"name": mpi_name}
    if xccl_name := _library_name(results, "xccl", "NCCL"):
        libraries["xccl"] = {"name": xccl_name, "nic_policy": "striped"}
    per_node = gpus_per_node or int(results["ranks_per_node"].max())
    device = str(results["device"].iloc[0]) if "device" in results else "host"
    # validated: the node size, device and library names come from the results (a BadInput naming them)
    return validated({"name": name, "device": device, "gpus_per_node": per_node, "intra": link, "inter": link,
                      "copy_gbps": 10.0, "reduce_gbps": 10.0, "host_reduce_gbps": 10.0, "libraries": libraries},
                     "results (no --base: the description to start from)")


def _select_ranks(results: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    if not ranks:
        return results
    chosen = results[results["nranks"].isin(ranks)]
    if chosen.empty:
        raise BadInput("--ranks", f"no cells with {','.join(map(str, ranks))} ranks in the results")
    return chosen


def _print_errors(errors: pd.DataFrame, console: Console, title: str) -> None:
    summary = error_summary(errors)
    table = Table(*summary.columns, title=title, title_justify="left")
    for row in summary.itertuples(index=False):
        table.add_row(*(f"{value:.1f}" if isinstance(value, float) else str(value) for value in row))
    console.print(table)


def _fit_report(results: list[Path], measured: list, result, errors: pd.DataFrame) -> dict:
    """What the fitted description records about its fit."""
    return {"results": [str(p) for p in results], "ranks": sorted({m.call.nranks for m in measured}),
            "cells": len(measured), "rounds": result.rounds, "notes": result.notes,
            "median_abs_error_pct": round(float(errors["error_pct"].abs().median()), 1),
            "p90_abs_error_pct": round(float(errors["error_pct"].abs().quantile(0.9)), 1)}


@app.command("fit", epilog=EXIT_CODES_HELP)
def fit_command(
    results: Results,
    base: Annotated[str | None, typer.Option("--base", help="Description to start from (default: generic).")] = None,
    name: Annotated[str, typer.Option(
        "--name", help="Name of the fitted description: letters, digits and ._- (at most 100).")] = "fitted",
    gpus_per_node: Annotated[int | None, typer.Option(
        "--gpus-per-node", help=f"Node size of the fitted description, 1 to {MAX_GPUS_PER_NODE} "
                                "(default: the largest in the data).")] = None,
    ranks: OnlyRanks = None,
    tie_links: Annotated[bool, typer.Option("--tie-links", help="One set of link parameters (virtual nodes).")]
    = False,
    rendezvous: Annotated[str, typer.Option(
        "--rendezvous", help="Rendezvous threshold: auto (search powers of two), none, or a size like 8KiB "
                             f"(1 B to {MAX_SIZE_TEXT}).")]
    = "auto",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the fitted description here.")] = None,
    errors_csv: Annotated[Path | None, typer.Option("--errors", help="Per-cell errors as CSV.")] = None,
    per_impl: Annotated[bool, typer.Option(
        "--per-impl", help="Every library its own link terms, robust log-space fit with uncertainties "
                           "(multi-node data: imported reproducer / nccl-tests / OSU runs).")] = False,
) -> None:
    """Fit latency and bandwidth parameters to measured sweeps; report the fit's error per cell."""
    # Every flag and output first: a fit takes seconds to minutes.
    name = _description_name(name)
    if gpus_per_node is not None and not 1 <= gpus_per_node <= MAX_GPUS_PER_NODE:
        raise BadInput("--gpus-per-node", f"{gpus_per_node}: expected 1 to {MAX_GPUS_PER_NODE}")
    threshold = None if rendezvous in ("auto", "none") else _size(rendezvous, "--rendezvous")
    only_ranks = _ranks(ranks, [])
    base_machine, base_path = load_machine(base) if base else (None, None)
    _outputs([(out, "--out"), (errors_csv, "--errors")], [*results, *([base_path] if base_path else [])])
    frame = _select_ranks(read_results(results), only_ranks)
    start = base_machine or _generic_base(name, frame, gpus_per_node)
    if per_impl:
        _fit_per_impl(results, frame, start.model_copy(update={"name": name}), out, errors_csv)
        return
    if rendezvous != "auto":
        start = with_rendezvous(start, threshold)
    measured = measured_calls(frame, set(start.libraries))
    result = fit(measured, start.model_copy(update={"name": name}), tie_links, search_rendezvous=rendezvous == "auto")
    errors = error_table(measured, result.machine)
    machine = result.machine.model_copy(update={"fit": _fit_report(results, measured, result, errors)})
    console = _console()
    console.print_json(json.dumps(machine.model_dump(exclude={"sources", "fit"}, exclude_none=True)))
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)
    _print_errors(errors, console, "fit error per cell, |model - measured| / measured (%)")
    if out:
        dump_machine(machine, out, f"Fitted by `pccl-bench model fit` from {', '.join(map(str, results))}.")
        console.print(f"fitted description -> {out}", highlight=False)
    if errors_csv:
        _write_csv(errors, errors_csv)


def _description_name(name: str) -> str:
    """--name: what a description's ``name`` may be (it names the default run folder of `model run`)."""
    if len(name) > 100 or not re.fullmatch(NAME_PATTERN, name):
        raise BadInput("--name", f"{_shown(name)}: letters, digits and ._- only, starting with a letter or digit, "
                                 "at most 100 characters")
    return name


def _needed_libraries(frame: pd.DataFrame, machine: Machine, where: str) -> None:
    """Every implementation in the data needs its library's terms in the description."""
    for impl, group in frame[frame["status"] == "ok"].groupby("impl"):
        library = {"pccl-flat": "pccl", "pccl-hier": "pccl"}.get(str(impl), str(impl))
        if library in ("mpi", "xccl", "pccl") and library not in machine.libraries:
            raise BadInput(where, f"{impl}: the description has no {library!r} library (its latency, bandwidth "
                                  f"and call-cost terms), needed for {len(group)} measured cells")


def _fit_per_impl(results: list[Path], frame: pd.DataFrame, start: Machine, out: Path | None,
                  errors_csv: Path | None) -> Machine:
    _needed_libraries(frame, start, "--base")
    measured = measured_calls(frame, set(start.libraries))
    machine, fits = fit_per_library(measured, start)
    errors = error_table(measured, machine)
    record = {"method": "per-impl robust log-space fit (bench/model/robust.py)",
              "results": [str(p) for p in results], "ranks": sorted({m.call.nranks for m in measured}),
              "rows": len(measured), "libraries": fit_record(fits)}
    fitted_from = ", ".join(map(str, results))
    sources = {**machine.sources, "libraries.*.intra / inter / reduce_gbps / call_overhead_us / algorithms":
               f"fitted per library by `model fit --per-impl` from {fitted_from} (values and sd under fit)"}
    description = f"{start.description}; per-library terms fitted from {fitted_from}"
    machine = machine.model_copy(update={"fit": record, "sources": sources, "description": description})
    console = _console()
    _print_terms(fits, console)
    _print_factors(factor_table(errors), console, "fit error on its own cells")
    if out:
        dump_machine(machine, out, f"Fitted by `pccl-bench model fit --per-impl` from {', '.join(map(str, results))}.")
        console.print(f"fitted description -> {out}", highlight=False)
    if errors_csv:
        _write_csv(errors, errors_csv)
    return machine


def _print_terms(fits: list, console: Console) -> None:
    table = Table("library", "term", "value", "+- sd", title="fitted terms (sd from the log-space covariance)",
                  title_justify="left")
    for item in fits:
        for name, value in item.values.items():
            sd = item.sd.get(name)
            shown, spread = (value, sd) if "per_byte" not in name else (
                1e-3 / value if value > 0 else float("inf"), (1e-3 * sd / value**2) if sd and value > 0 else None)
            unit = "GB/s" if "per_byte" in name else "us"
            label = name.replace("us_per_byte", "bandwidth") if "per_byte" in name else name
            table.add_row(item.library, f"{label} ({unit})", f"{shown:.4g}",
                          "-" if spread is None else f"{spread:.2g}" if sd else "at bound / unseen")
        for collective, algorithm in item.algorithms.items():
            table.add_row(item.library, f"{collective} algorithm", algorithm, "stated by the rows or chosen by fit")
        if item.band_bytes:
            table.add_row(item.library, "band (inter-node message bytes)",
                          f"{item.band_bytes[0] >> 10}-{item.band_bytes[1] >> 10} KiB", "chosen by fit")
    console.print(table)
    for item in fits:
        for note in item.selection:
            console.print(f"{item.library}: {note}", highlight=False)


def _print_factors(table: pd.DataFrame, console: Console, title: str) -> None:
    out = Table(*table.columns, title=title + ": |log(predicted / measured)| as a factor", title_justify="left")
    for row in table.itertuples(index=False):
        out.add_row(*(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row))
    console.print(out)


@app.command("check", epilog=EXIT_CODES_HELP)
def check(
    machine_name: MachineArg,
    results: Results,
    ranks: OnlyRanks = None,
    errors_csv: Annotated[Path | None, typer.Option("--errors", help="Per-cell errors as CSV.")] = None,
    fit_on: Annotated[str | None, typer.Option(
        "--fit-on", help="Fit (--per-impl) on these GPU counts of RESULTS, starting from MACHINE, and predict "
                         "the others (or --ranks): a held-out check.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="With --fit-on: measured vs predicted plot.")] = None,
    winners_csv: Annotated[Path | None, typer.Option(
        "--winners", help="With --fit-on: the winner of every held-out cell, measured and predicted, as CSV.")] = None,
) -> None:
    """Predict measured cells with a description: the error per cell (validation on held-out sweeps)."""
    only_ranks, fit_ranks = _ranks(ranks, []), _ranks(fit_on, [], "--fit-on")
    if fit_on is not None and not fit_ranks:
        raise BadInput("--fit-on", "give the GPU counts to fit on, e.g. 8,16,32")
    for path, flag in ((plot, "--plot"), (winners_csv, "--winners")):
        if path is not None and not fit_ranks:
            raise BadInput(flag, f"{path}: only with --fit-on (a held-out check writes it)")
    machine, machine_path = load_machine(machine_name)
    _outputs([(errors_csv, "--errors"), (_plot_file(plot, "--plot"), "--plot"), (winners_csv, "--winners")],
             [*results, machine_path])
    if fit_ranks:
        _held_out(machine, read_results(results), results, fit_ranks, only_ranks, errors_csv, plot, winners_csv)
        return
    frame = _select_ranks(read_results(results), only_ranks)
    _needed_libraries(frame, machine, str(machine_path))
    errors = error_table(measured_calls(frame, set(machine.libraries)), machine)
    _print_errors(errors, _console(), f"{machine.name}: |model - measured| / measured (%)")
    if errors_csv:
        _write_csv(errors, errors_csv)


def _held_out(base: Machine, frame: pd.DataFrame, results: list[Path], fit_ranks: list[int], ranks: list[int],
              errors_csv: Path | None, plot: Path | None, winners_csv: Path | None = None) -> None:
    fit_on = ",".join(map(str, fit_ranks))
    train = frame[frame["nranks"].isin(fit_ranks)]
    rest = frame[~frame["nranks"].isin(fit_ranks)]
    test = _select_ranks(rest, ranks) if ranks else rest
    if train.empty or test.empty:
        raise BadInput("--fit-on", f"{fit_on}: need cells both at and outside these GPU counts "
                                   f"(the data have {sorted(set(frame['nranks']))})")
    console = _console()
    machine = _fit_per_impl(results, train, base, None, None)
    errors = error_table(median_cells(measured_calls(test, set(machine.libraries))), machine)
    fit_errors = error_table(median_cells(measured_calls(train, set(machine.libraries))), machine)
    title = f"{base.name}: fitted on {','.join(map(str, fit_ranks))} GPUs, predicting {sorted(set(errors['nranks']))}"
    _print_factors(factor_table(errors), console, title)
    spread = repeat_spread(test)
    agreement = winner_agreement(errors, spread)
    out = Table(*agreement.columns, title="predicted fastest = measured fastest (cells with >= 2 implementations; "
                "tie: the two best measured in >= 2 repeats with overlapping interquartile ranges)",
                title_justify="left")
    for row in agreement.itertuples(index=False):
        out.add_row(*(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row))
    console.print(out)
    if winners_csv:
        _write_csv(winner_cells(errors, spread), winners_csv)
    if errors_csv:
        _write_csv(errors, errors_csv)
    if plot:
        plot_check(fit_errors, errors, plot, title)
        console.print(f"plot -> {plot}", highlight=False)


@app.command("band", epilog=EXIT_CODES_HELP)
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
) -> None:
    """Projection with the fit's uncertainty: times and speedups over the first --impl, 5-50-95% over
    parameter draws from each library's fitted normal (a description fitted by `model fit --per-impl`)."""
    from bench.model.band import band_table, check_resampling, plot_band

    # Every flag and output first: each sample models every size again (bootstrap: a refit each).
    if not 1 <= ranks <= MAX_RANKS:
        raise BadInput("--ranks", f"{ranks} GPUs: expected 1 to {MAX_RANKS}")
    size_list = _sizes(sizes, factor)
    if collective not in COLLECTIVES:
        raise BadInput("--collective", f"{_shown(collective)} not in {list(COLLECTIVES)}")
    variants = _variants(impl or ["xccl", "pccl-hier:mpi/xccl"])
    _runnable(variants, [collective])
    if not 20 <= samples <= MAX_SAMPLES:
        raise BadInput("--samples", f"{samples}: at least 20 draws for a 5-95% band, at most {MAX_SAMPLES}")
    if not 0 <= seed <= MAX_SEED:
        raise BadInput("--seed", f"{seed}: expected 0 to 2^64 - 1")
    size = 2 if dtype == "bfloat16" else itemsize(dtype) if dtype in DTYPES else None
    if size is None:
        raise BadInput("--dtype", f"{_shown(dtype)} is not bfloat16 or one of {sorted(DTYPES)}")
    strip = _published(published, plot)
    machine, path = load_machine(machine_name)
    _outputs([(out, "--out"), (_plot_file(plot, "--plot"), "--plot")], [*(bootstrap or []), path])
    missing = [v.label for v in variants if v.library not in machine.libraries]
    if missing:
        raise BadInput(str(path), f"{', '.join(missing)}: the description has no such library")
    check_ranks(machine, [ranks])
    measured = measured_calls(read_results(bootstrap), set(machine.libraries)) if bootstrap else None
    if measured is not None:
        check_resampling(samples, len(median_cells(measured)))
    table = band_table(machine, variants, collective, ranks, size_list, samples, seed, size, str(path), measured)
    console = _console()
    shown = Table("size", "implementation", "ms", "ms 5-95%", f"speedup over {variants[0].label}", "5-95%",
                  title=f"{collective} on {ranks} GPUs of {machine.name}: " + (
                      f"{samples} bootstrap refits over the measured cells" if bootstrap else
                      f"{samples} draws from the fitted normal") + " (parameter uncertainty only)",
                  title_justify="left")
    for row in table.itertuples(index=False):
        shown.add_row(format_size(int(row.bytes_total)), row.implementation, f"{row.time_ms:.3g}",
                      f"{row.time_ms_p5:.3g}-{row.time_ms_p95:.3g}", f"{row.speedup:.3g}",
                      f"{row.speedup_p5:.3g}-{row.speedup_p95:.3g}")
    console.print(shown)
    if out:
        _write_csv(table, out)
        console.print(f"band -> {out}", highlight=False)
    if plot:
        plot_band(table, plot, f"{collective}, {ranks} GPUs of {machine.name} (model)", strip)
        console.print(f"plot -> {plot}", highlight=False)


def _published(published: str | None, plot: Path | None) -> tuple[float, float] | None:
    """--published LOW:HIGH, two finite speedups 0 < LOW <= HIGH (drawn on --plot only)."""
    if published is None:
        return None
    if plot is None:
        raise BadInput("--published", f"{_shown(published)}: only with --plot (the range is drawn on the figure)")
    low, sep, high = published.partition(":")
    try:
        strip = (float(low), float(high))
    except ValueError:
        raise BadInput("--published", f"{_shown(published)} is not LOW:HIGH, e.g. 6:33") from None
    if not sep or not all(math.isfinite(v) and 0 < v <= MAX_SPEEDUP for v in strip) or strip[0] > strip[1]:
        raise BadInput("--published", f"{_shown(published)}: expected LOW:HIGH with 0 < LOW <= HIGH <= "
                                      f"{MAX_SPEEDUP:g}, e.g. 6:33")
    return strip


@app.command("replay", epilog=EXIT_CODES_HELP)
def replay(
    workload_name: Annotated[str, typer.Argument(
        help=f"Workload: a name from suites/workloads/ or a path (layers at most {MAX_LAYERS}, GPU counts at most "
             f"{MAX_RANKS}, at most {MAX_CALLS_PER_STEP} calls a step).")],
    machine_name: Annotated[str | None, typer.Option("--machine", "-m", help="Model on this description.")] = None,
    measured: Annotated[list[Path] | None, typer.Option(
        "--results", help="Time from these measured runs instead (repeatable).")] = None,
    ranks: Ranks = None,
    impl: Impls = None,
    price: Price = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write replay.csv and replay.parquet here.")]
    = None,
) -> None:
    """Communication time per training step of a workload, per implementation (modelled or measured)."""
    if (machine_name is None) == (not measured):
        raise BadInput("model replay", "give exactly one of --machine (modelled) or --results (measured)")
    price, requested = _price(price), _ranks(ranks, [])
    variants = _variants(impl) if impl or machine_name else None
    workload = load_workload(workload_name)
    machine, machine_path = load_machine(machine_name) if machine_name else (None, None)
    if out is not None:
        output_folder(out, "--out")
        _outputs([(out / "replay.csv", "--out"), (out / "replay.parquet", "--out")],
                 [*(measured or []), *([machine_path] if machine_path else [])])
    if machine is not None:
        variants = [v for v in variants if v.library in machine.libraries]
        if not variants:
            raise BadInput("--impl", f"none of these implementations has its library in {machine_path}")
        issued = sorted({"allreduce"} if workload.strategy == "ddp" else {"allgather", "reduce_scatter"})
        _runnable(variants, issued)
        rank_list = check_ranks(machine, requested) if requested else check_ranks(
            machine, workload.ranks, f"{workload_name}: ranks")
        timed = [Timed(v.label, model_timer(machine, v)) for v in variants]
        table = replay_rows(workload, rank_list, timed, "modelled", machine.name,
                            lambda n: node_shape(machine, n),
                            price if price is not None else machine.price_per_gpu_hour_usd)
    else:
        table = _measured_replay(workload, read_results(measured), requested, variants, price)
    _print_replay(table, _console())
    if out:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "replay.csv", lambda temp: table.to_csv(temp, index=False))
        atomic_write(out / "replay.parquet", lambda temp: table.to_parquet(temp, index=False))


def _measured_replay(workload, frame: pd.DataFrame, ranks: list[int], variants: list[Variant] | None,
                     price: float | None) -> pd.DataFrame:
    """Replay from measured sweeps; implementations without the needed cells are left out, with a note."""
    ok = frame[frame["status"] == "ok"]
    labels = [v.label for v in variants] if variants else sorted(set(ok.apply(_label, axis=1)))
    # One node shape per rank count: the one with the most ranks per node where several were swept.
    shapes = ok.groupby("nranks")["ranks_per_node"].agg(lambda values: sorted(set(values)))
    shape = {int(nranks): int(values[-1]) for nranks, values in shapes.items()}
    chosen_ranks = ranks or sorted(shape)
    timed, console = [], _console()
    for nranks, values in shapes.items():
        if len(values) > 1 and nranks in chosen_ranks:
            console.print(f"note: {nranks} ranks were measured with {values} ranks per node; replaying "
                          f"{shape[nranks]} per node", highlight=False)
    for label in labels:
        item = Timed(label, measured_timer(frame, label, lambda n: shape.get(n, n)))
        try:
            replay_rows(workload, chosen_ranks, [item], "measured", "", lambda n: shape.get(n, n), None)
        except BadInput as error:
            console.print(f"note: {label} left out: {error}", highlight=False)
            continue
        timed.append(item)
    if not timed:
        raise BadInput("--results", "no implementation has ok cells covering the workload's sizes")
    return replay_rows(workload, chosen_ranks, timed, "measured", str(frame["run_id"].iloc[0]),
                       lambda n: shape.get(n, n), price)


def _print_replay(table: pd.DataFrame, console: Console) -> None:
    shown = ["nranks", "implementation", "calls", "allgather_ms", "reduce_scatter_ms", "allreduce_ms",
             "comm_ms_per_step", "speedup_vs_baseline", "cost_per_step_usd"]
    first = table.iloc[0]
    out = Table(*shown, title=f"{first['workload']} ({first['strategy']}), {first['source']} on {first['machine']}",
                title_justify="left")
    for row in table[shown].itertuples(index=False):
        out.add_row(*("-" if pd.isna(v) else f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
    console.print(out)
