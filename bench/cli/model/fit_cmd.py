"""``pccl-bench model fit`` and ``model check``: fit a machine description to measured sweeps, and
predict measured cells with one (held out from the fit with ``--fit-on``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.table import Table

from bench.cli.model.flags import MAX_SIZE_TEXT, MachineArg, OnlyRanks, Results, gpu_counts, model_size, quoted
from bench.cli.model.outputs import check_outputs, plot_file, write_csv
from bench.cli.model.tables import make_console, print_errors, print_factors, print_terms
from bench.errors import BadInput
from bench.model.check import error_table, measured_calls
from bench.model.fit import fit, with_rendezvous
from bench.model.heldout import factor_table, plot_check, repeat_spread, winner_agreement, winner_cells
from bench.model.impls import MODELS
from bench.model.machine import MAX_GPUS_PER_NODE, NAME_PATTERN, Machine, dump_machine, load_machine, validated
from bench.model.robust import fit_record, median_cells
from bench.model.select import fit_per_library
from bench.results.read import read_results


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


def _fit_report(results: list[Path], measured: list, result, errors: pd.DataFrame) -> dict:
    """What the fitted description records about its fit."""
    return {"results": [str(p) for p in results], "ranks": sorted({m.call.nranks for m in measured}),
            "cells": len(measured), "rounds": result.rounds, "notes": result.notes,
            "median_abs_error_pct": round(float(errors["error_pct"].abs().median()), 1),
            "p90_abs_error_pct": round(float(errors["error_pct"].abs().quantile(0.9)), 1)}


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
    threshold = None if rendezvous in ("auto", "none") else model_size(rendezvous, "--rendezvous")
    only_ranks = gpu_counts(ranks, [])
    base_machine, base_path = load_machine(base) if base else (None, None)
    check_outputs([(out, "--out"), (errors_csv, "--errors")], [*results, *([base_path] if base_path else [])])
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
    console = make_console()
    console.print_json(json.dumps(machine.model_dump(exclude={"sources", "fit"}, exclude_none=True)))
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)
    print_errors(errors, console, "fit error per cell, |model - measured| / measured (%)")
    if out:
        dump_machine(machine, out, f"Fitted by `pccl-bench model fit` from {', '.join(map(str, results))}.")
        console.print(f"fitted description -> {out}", highlight=False)
    if errors_csv:
        write_csv(errors, errors_csv)


def _description_name(name: str) -> str:
    """--name: what a description's ``name`` may be (it names the default run folder of `model run`)."""
    if len(name) > 100 or not re.fullmatch(NAME_PATTERN, name):
        raise BadInput("--name", f"{quoted(name)}: letters, digits and ._- only, starting with a letter or digit, "
                                 "at most 100 characters")
    return name


def _needed_libraries(frame: pd.DataFrame, machine: Machine, where: str) -> None:
    """Every implementation in the data needs its library's terms in the description."""
    for impl, group in frame[frame["status"] == "ok"].groupby("impl"):
        model = MODELS.get(str(impl))  # rows of implementations the model does not price need none
        if model is not None and model.library not in machine.libraries:
            raise BadInput(where, f"{impl}: the description has no {model.library!r} library (its latency, "
                                  f"bandwidth and call-cost terms), needed for {len(group)} measured cells")


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
    console = make_console()
    print_terms(fits, console)
    print_factors(factor_table(errors), console, "fit error on its own cells")
    if out:
        dump_machine(machine, out, f"Fitted by `pccl-bench model fit --per-impl` from {', '.join(map(str, results))}.")
        console.print(f"fitted description -> {out}", highlight=False)
    if errors_csv:
        write_csv(errors, errors_csv)
    return machine


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
    only_ranks, fit_ranks = gpu_counts(ranks, []), gpu_counts(fit_on, [], "--fit-on")
    if fit_on is not None and not fit_ranks:
        raise BadInput("--fit-on", "give the GPU counts to fit on, e.g. 8,16,32")
    for path, flag in ((plot, "--plot"), (winners_csv, "--winners")):
        if path is not None and not fit_ranks:
            raise BadInput(flag, f"{path}: only with --fit-on (a held-out check writes it)")
    machine, machine_path = load_machine(machine_name)
    check_outputs([(errors_csv, "--errors"), (plot_file(plot, "--plot"), "--plot"), (winners_csv, "--winners")],
             [*results, machine_path])
    if fit_ranks:
        _held_out(machine, read_results(results), results, fit_ranks, only_ranks, errors_csv, plot, winners_csv)
        return
    frame = _select_ranks(read_results(results), only_ranks)
    _needed_libraries(frame, machine, str(machine_path))
    errors = error_table(measured_calls(frame, set(machine.libraries)), machine)
    fitted_on = (machine.fit or {}).get("ranks")
    if fitted_on:  # how far beyond its fit each cell is (`model calibrate` reads it)
        errors = errors.assign(fit_max_ranks=max(fitted_on))
    print_errors(errors, make_console(), f"{machine.name}: |model - measured| / measured (%)")
    if errors_csv:
        write_csv(errors, errors_csv)


def _held_out(base: Machine, frame: pd.DataFrame, results: list[Path], fit_ranks: list[int], ranks: list[int],
              errors_csv: Path | None, plot: Path | None, winners_csv: Path | None = None) -> None:
    fit_on = ",".join(map(str, fit_ranks))
    train = frame[frame["nranks"].isin(fit_ranks)]
    rest = frame[~frame["nranks"].isin(fit_ranks)]
    test = _select_ranks(rest, ranks) if ranks else rest
    if train.empty or test.empty:
        raise BadInput("--fit-on", f"{fit_on}: need cells both at and outside these GPU counts "
                                   f"(the data have {sorted(set(frame['nranks']))})")
    console = make_console()
    machine = _fit_per_impl(results, train, base, None, None)
    errors = error_table(median_cells(measured_calls(test, set(machine.libraries))), machine)
    errors = errors.assign(fit_max_ranks=max(fit_ranks))  # how far beyond the fit: `model calibrate` reads it
    fit_errors = error_table(median_cells(measured_calls(train, set(machine.libraries))), machine)
    held = sorted(set(errors["nranks"]))
    title = f"{base.name}: fitted on {','.join(map(str, fit_ranks))} GPUs, predicting {held}"
    print_factors(factor_table(errors), console, title)
    spread = repeat_spread(test)
    # per held-out count as well: the error grows with the distance beyond the fitted counts
    for count in held if len(held) > 1 else []:
        print_factors(factor_table(errors[errors["nranks"] == count]), console, f"{base.name}: predicting {count}")
    for count, part in [*((c, errors[errors["nranks"] == c]) for c in (held if len(held) > 1 else [])),
                        ("all held out", errors)]:
        agreement = winner_agreement(part, spread)
        out = Table(*agreement.columns, title=f"{count}: predicted fastest = measured fastest (cells with >= 2 "
                    "implementations; tie: the two best measured in >= 2 repeats with overlapping interquartile "
                    "ranges)", title_justify="left")
        for row in agreement.itertuples(index=False):
            out.add_row(*(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row))
        console.print(out)
    if winners_csv:
        write_csv(winner_cells(errors, spread), winners_csv)
    if errors_csv:
        write_csv(errors, errors_csv)
    if plot:
        plot_check(fit_errors, errors, plot, title)
        console.print(f"plot -> {plot}", highlight=False)
