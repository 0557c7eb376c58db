"""``pccl-bench model calibrate``: a prediction band from held-out checks (bench/model/calibrate.py), and
what ``model band --calibration`` adds to a band table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer
from rich.table import Table

from bench.cli.model.outputs import check_outputs, write_csv
from bench.cli.model.tables import make_console
from bench.errors import BadInput
from bench.model.calibrate import Calibration, calibrate, coverage, load_calibration, read_errors
from bench.model.machine import Machine


def calibrate_command(
    errors: Annotated[list[Path], typer.Argument(
        help="Held-out errors of `model check --fit-on ... --errors E.csv` (several checks: several files).",
        exists=True, dir_okay=False)],
    below: Annotated[int, typer.Option(
        "--below", help="Calibrate on the held-out cells below this GPU count; report the band's coverage of the "
                        "cells at and above it.")] = 256,
    level: Annotated[float, typer.Option("--level", help="The band's nominal coverage, 0.5 to 0.99.")] = 0.9,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the calibration (JSON) here.")] = None,
    coverage_csv: Annotated[Path | None, typer.Option("--coverage", help="The coverage table as CSV.")] = None,
) -> None:
    """Calibrate a prediction band on held-out checks; report its coverage of cells it never saw."""
    if not 0.5 <= level <= 0.99:
        raise BadInput("--level", f"{level}: expected 0.5 to 0.99")
    if below < 2:
        raise BadInput("--below", f"{below}: expected a GPU count of at least 2")
    check_outputs([(out, "--out"), (coverage_csv, "--coverage")], errors)
    table = read_errors(errors)
    result = calibrate(table, below, level)
    console = make_console()
    console.print(f"calibrated on {result.cells} held-out cells ({'; '.join(result.checks)}); growth with "
                  f"doublings beyond the fit: k^{result.growth:.2f}", highlight=False)
    widths = Table("band", "half width one doubling out (factor)", title=f"{level:.0%} band", title_justify="left")
    for name, width in [*result.widths.items(), *((f"speedup {k}", w) for k, w in result.pair_widths.items())]:
        widths.add_row(name, f"{np.exp(width):.3g}")
    console.print(widths)
    covered = coverage(result, table)
    if covered.empty:
        console.print(f"no held-out cells at or above {below} GPUs: coverage not checked", highlight=False)
    else:
        shown = Table(*covered.columns, title=f"coverage of the held-out cells at >= {below} GPUs "
                      f"(nominal {level:.0%})", title_justify="left")
        for row in covered.itertuples(index=False):
            shown.add_row(*(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row))
        console.print(shown)
    if out:
        result.save(out)
        console.print(f"calibration -> {out}", highlight=False)
    if coverage_csv:
        write_csv(covered, coverage_csv)


def fitted_up_to(machine: Machine, where: str) -> int:
    """The largest GPU count the description was fitted on (its ``fit.ranks``)."""
    ranks = (machine.fit or {}).get("ranks")
    if not ranks:
        raise BadInput(where, "the description records no fitted GPU counts (fit.ranks): fit it with "
                              "`model fit --per-impl` to use --calibration")
    return int(max(ranks))


def with_calibrated_band(table: pd.DataFrame, calibration: Calibration, machine: Machine, where: str
                         ) -> pd.DataFrame:
    """Band-table rows with the calibrated band of each time and speedup (``*_cal_low`` / ``*_cal_high``)."""
    fitted = fitted_up_to(machine, where)
    rows = []
    for row in table.to_dict("records"):
        doublings = float(np.log2(row["nranks"] / fitted))
        width = calibration.width(f"{row['implementation']}|{row['collective']}", doublings)
        row.update(time_ms_cal_low=row["time_ms"] * np.exp(-width), time_ms_cal_high=row["time_ms"] * np.exp(width),
                   doublings=doublings)
        if row["implementation"] != row["baseline"]:
            pair = calibration.width(f"{row['implementation']}/{row['baseline']}|{row['collective']}", doublings,
                                     pairs=True)
            row.update(speedup_cal_low=row["speedup"] * np.exp(-pair), speedup_cal_high=row["speedup"] * np.exp(pair))
        rows.append(row)
    return pd.DataFrame(rows)


def load_checked(path: Path | None) -> Calibration | None:
    return None if path is None else load_calibration(path)
