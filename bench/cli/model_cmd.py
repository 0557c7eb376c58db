"""``pccl-bench model run|fit|check|replay``: the analytical model (docs/MODEL.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from bench.errors import EXIT_CODES_HELP, BadInput
from bench.model.check import error_summary, error_table, measured_calls
from bench.model.fit import fit, with_rendezvous
from bench.model.heldout import factor_table, plot_check, repeat_spread, winner_agreement, winner_cells
from bench.model.impls import DEFAULT_VARIANTS, parse_variant
from bench.model.machine import Library, Machine, dump_machine, load_machine
from bench.model.replay import Timed, measured_timer, model_timer, replay_rows
from bench.model.robust import fit_per_library, fit_record, median_cells
from bench.model.run import ModelSpec, node_shape, write_model_run
from bench.model.workload import load_workload
from bench.plan.sizes import format_size, geometric, parse_size
from bench.results.read import read_results
from collectives.dtypes import DTYPES, itemsize
from collectives.spec import COLLECTIVES

app = typer.Typer(help="Model collectives on a machine description: project, fit, check, replay.",
                  no_args_is_help=True)

MachineArg = Annotated[str, typer.Argument(help="Machine description: a name from suites/machines/ or a path.")]
Ranks = Annotated[str | None, typer.Option("--ranks", "-n", help="GPU counts, comma-separated (e.g. 64,512,2048).")]
Impls = Annotated[list[str] | None, typer.Option(
    "--impl", "-i", help="mpi | xccl | pccl-flat:<alg> | pccl-hier:<inter>/<intra>; repeatable.")]
OnlyRanks = Annotated[str | None, typer.Option("--ranks", "-n", help="Only cells with these rank counts, e.g. 2,3.")]
Price = Annotated[float | None, typer.Option(
    "--price-per-gpu-hour", help="US$ per GPU-hour for the cost columns (default: the description's).")]
Results = Annotated[list[Path], typer.Argument(help="Run folders or results.parquet files.")]


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=140)


def _ranks(text: str | None, default: list[int]) -> list[int]:
    if not text:
        return default
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadInput("--ranks", f"{text!r} is not a comma-separated list of whole numbers") from None
    if not values or min(values) < 1:
        raise BadInput("--ranks", f"{text!r}: give at least one GPU count, each at least 1")
    return values


def _size(text: str, where: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise BadInput(where, str(error)) from None


def _sizes(text: str, factor: int) -> list[int]:
    low, sep, high = text.partition(":")
    try:
        sizes = geometric(parse_size(low), parse_size(high if sep else low), factor)
    except ValueError as error:
        raise BadInput("--sizes", str(error)) from None
    if not sizes or factor < 2:
        raise BadInput("--sizes", f"{text!r} with factor {factor} gives no sizes (min:max, factor >= 2)")
    return sizes


def _variants(impls: list[str] | None) -> list:
    return [parse_variant(text) for text in (impls or list(DEFAULT_VARIANTS))]


@app.command("run", epilog=EXIT_CODES_HELP)
def run(
    machine_name: MachineArg,
    ranks: Ranks = None,
    sizes: Annotated[str, typer.Option("--sizes", help="min:max nccl-tests sizes, e.g. 1MiB:1GiB.")] = "1MiB:1GiB",
    factor: Annotated[int, typer.Option("--factor", "-f", help="Each size is the previous times this.")] = 2,
    collective: Annotated[list[str] | None, typer.Option(
        "--collective", "-C", help="allgather | reduce_scatter | allreduce; repeatable (default: all).")] = None,
    impl: Impls = None,
    dtype: Annotated[str, typer.Option("--dtype", "-d", help="Element type (sizes in bytes as nccl-tests).")]
    = "float32",
    price: Price = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run folder (default: results/model-<machine>).")]
    = None,
) -> None:
    """Project every implementation onto a machine: the tidy result table with status=modelled."""
    machine, path = load_machine(machine_name)
    collectives = collective or list(COLLECTIVES)
    unknown = sorted(set(collectives) - set(COLLECTIVES))
    if unknown:
        raise BadInput("--collective", f"{unknown} not in {list(COLLECTIVES)}")
    if dtype not in DTYPES:
        raise BadInput("--dtype", f"{dtype!r} is not one of {sorted(DTYPES)}")
    default_ranks = [machine.gpus_per_node * n for n in (1, 8, 64, 256)]
    spec = ModelSpec(machine, str(path), collectives, _variants(impl), _ranks(ranks, default_ranks),
                     _sizes(sizes, factor), dtype, price_per_gpu_hour_usd=price or machine.price_per_gpu_hour_usd)
    folder = out or Path("results") / f"model-{machine.name}"
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
    libraries = {"pccl": Library(name="pccl-bench")}
    if mpi_name := _library_name(results, "mpi", "MPI"):
        libraries["mpi"] = Library(name=mpi_name)
    if xccl_name := _library_name(results, "xccl", "NCCL"):
        libraries["xccl"] = Library(name=xccl_name, nic_policy="striped")
    per_node = gpus_per_node or int(results["ranks_per_node"].max())
    device = str(results["device"].iloc[0]) if "device" in results else "host"
    return Machine(name=name, device=device, gpus_per_node=per_node, intra=link, inter=link, copy_gbps=10.0,
                   reduce_gbps=10.0, host_reduce_gbps=10.0, libraries=libraries)


def _select_ranks(results: pd.DataFrame, ranks: str | None) -> pd.DataFrame:
    if not ranks:
        return results
    chosen = results[results["nranks"].isin(_ranks(ranks, []))]
    if chosen.empty:
        raise BadInput("--ranks", f"no cells with {ranks} ranks in the results")
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
    name: Annotated[str, typer.Option("--name", help="Name of the fitted description.")] = "fitted",
    gpus_per_node: Annotated[int | None, typer.Option(
        "--gpus-per-node", help="Node size of the fitted description (default: the largest in the data).")] = None,
    ranks: OnlyRanks = None,
    tie_links: Annotated[bool, typer.Option("--tie-links", help="One set of link parameters (virtual nodes).")]
    = False,
    rendezvous: Annotated[str, typer.Option(
        "--rendezvous", help="Rendezvous threshold: auto (search powers of two), none, or a size like 8KiB.")]
    = "auto",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the fitted description here.")] = None,
    errors_csv: Annotated[Path | None, typer.Option("--errors", help="Per-cell errors as CSV.")] = None,
    per_impl: Annotated[bool, typer.Option(
        "--per-impl", help="Every library its own link terms, robust log-space fit with uncertainties "
                           "(multi-node data: imported reproducer / nccl-tests / OSU runs).")] = False,
) -> None:
    """Fit latency and bandwidth parameters to measured sweeps; report the fit's error per cell."""
    frame = _select_ranks(read_results(results), ranks)
    start = load_machine(base)[0] if base else _generic_base(name, frame, gpus_per_node)
    if per_impl:
        _fit_per_impl(results, frame, start.model_copy(update={"name": name}), out, errors_csv)
        return
    if rendezvous != "auto":
        start = with_rendezvous(start, None if rendezvous == "none" else _size(rendezvous, "--rendezvous"))
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
        errors.to_csv(errors_csv, index=False)


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
        errors.to_csv(errors_csv, index=False)
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
    machine, path = load_machine(machine_name)
    if fit_on:
        _held_out(machine, read_results(results), results, fit_on, ranks, errors_csv, plot, winners_csv)
        return
    frame = _select_ranks(read_results(results), ranks)
    _needed_libraries(frame, machine, str(path))
    errors = error_table(measured_calls(frame, set(machine.libraries)), machine)
    _print_errors(errors, _console(), f"{machine.name}: |model - measured| / measured (%)")
    if errors_csv:
        errors.to_csv(errors_csv, index=False)


def _held_out(base: Machine, frame: pd.DataFrame, results: list[Path], fit_on: str, ranks: str | None,
              errors_csv: Path | None, plot: Path | None, winners_csv: Path | None = None) -> None:
    fit_ranks = _ranks(fit_on, [])
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
        winner_cells(errors, spread).to_csv(winners_csv, index=False)
    if errors_csv:
        errors.to_csv(errors_csv, index=False)
    if plot:
        plot_check(fit_errors, errors, plot, title)
        console.print(f"plot -> {plot}", highlight=False)


@app.command("band", epilog=EXIT_CODES_HELP)
def band(
    machine_name: MachineArg,
    ranks: Annotated[int, typer.Option("--ranks", "-n", help="GPU count to project to.")] = 2048,
    sizes: Annotated[str, typer.Option("--sizes", help="min:max nccl-tests sizes, e.g. 1MiB:1GiB.")] = "1MiB:1GiB",
    factor: Annotated[int, typer.Option("--factor", "-f", help="Each size is the previous times this.")] = 4,
    collective: Annotated[str, typer.Option("--collective", "-C", help="allgather | reduce_scatter.")] = "allgather",
    impl: Impls = None,
    samples: Annotated[int, typer.Option("--samples", help="Parameter draws from the fitted normal.")] = 300,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the draws.")] = 0,
    dtype: Annotated[str, typer.Option("--dtype", "-d", help="Element type (the reproducer's: bfloat16).")]
    = "bfloat16",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the band table as CSV here.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Times and speedups with their bands, as PNG.")] = None,
    published: Annotated[str | None, typer.Option(
        "--published", help="A published speedup range to draw, e.g. 6:33.")] = None,
    bootstrap: Annotated[list[Path] | None, typer.Option(
        "--bootstrap", help="Instead of the fitted normal: refit on these measured runs' cells resampled "
                            "with replacement, --samples times (terms and band windows kept).")] = None,
) -> None:
    """Projection with the fit's uncertainty: times and speedups over the first --impl, 5-50-95% over
    parameter draws from each library's fitted normal (a description fitted by `model fit --per-impl`)."""
    from bench.model.band import band_table, plot_band

    machine, path = load_machine(machine_name)
    if collective not in COLLECTIVES:
        raise BadInput("--collective", f"{collective!r} not in {list(COLLECTIVES)}")
    variants = _variants(impl or ["xccl", "pccl-hier:mpi/xccl"])
    missing = [v.label for v in variants if v.library not in machine.libraries]
    if missing:
        raise BadInput(str(path), f"{', '.join(missing)}: the description has no such library")
    if samples < 20:
        raise BadInput("--samples", f"{samples}: at least 20 draws for a 5-95% band")
    size = 2 if dtype == "bfloat16" else itemsize(dtype) if dtype in DTYPES else None
    if size is None:
        raise BadInput("--dtype", f"{dtype!r} is not bfloat16 or one of {sorted(DTYPES)}")
    node_shape(machine, ranks)
    measured = measured_calls(read_results(bootstrap), set(machine.libraries)) if bootstrap else None
    table = band_table(machine, variants, collective, ranks, _sizes(sizes, factor), samples, seed, size, str(path),
                       measured)
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
        table.to_csv(out, index=False)
        console.print(f"band -> {out}", highlight=False)
    if plot:
        low, _, high = (published or "").partition(":")
        try:
            strip = (float(low), float(high)) if published else None
        except ValueError:
            raise BadInput("--published", f"{published!r} is not LOW:HIGH, e.g. 6:33") from None
        plot_band(table, plot, f"{collective}, {ranks} GPUs of {machine.name} (model)", strip)
        console.print(f"plot -> {plot}", highlight=False)


@app.command("replay", epilog=EXIT_CODES_HELP)
def replay(
    workload_name: Annotated[str, typer.Argument(help="Workload: a name from suites/workloads/ or a path.")],
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
    workload = load_workload(workload_name)
    if (machine_name is None) == (not measured):
        raise BadInput("model replay", "give exactly one of --machine (modelled) or --results (measured)")
    if machine_name:
        machine, _ = load_machine(machine_name)
        variants = [v for v in _variants(impl) if v.library in machine.libraries]
        timed = [Timed(v.label, model_timer(machine, v)) for v in variants]
        table = replay_rows(workload, _ranks(ranks, workload.ranks), timed, "modelled", machine.name,
                            lambda n: node_shape(machine, n), price or machine.price_per_gpu_hour_usd)
    else:
        table = _measured_replay(workload, read_results(measured), ranks, impl, price)
    _print_replay(table, _console())
    if out:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "replay.csv", index=False)
        table.to_parquet(out / "replay.parquet", index=False)


def _measured_replay(workload, frame: pd.DataFrame, ranks: str | None, impl: list[str] | None,
                     price: float | None) -> pd.DataFrame:
    """Replay from measured sweeps; implementations without the needed cells are left out, with a note."""
    ok = frame[frame["status"] == "ok"]
    labels = [v.label for v in _variants(impl)] if impl else sorted(set(ok.apply(_label, axis=1)))
    # One node shape per rank count: the one with the most ranks per node where several were swept.
    shapes = ok.groupby("nranks")["ranks_per_node"].agg(lambda values: sorted(set(values)))
    shape = {int(nranks): int(values[-1]) for nranks, values in shapes.items()}
    chosen_ranks = _ranks(ranks, sorted(shape))
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
