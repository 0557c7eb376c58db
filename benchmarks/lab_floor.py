"""How well the lab reproduces itself: the same cells measured twice, compared as the model is judged
(docs/LAB-RESULTS.md, "What the lab can tell apart"). A model cannot be held to agree with a measurement more
closely than two measurements of the same cells agree with each other.

    python benchmarks/lab_floor.py RUNS                 # rounds of one job: lab_hier.py --out-runs RUNS/<shape>
    python benchmarks/lab_floor.py --errors DIR_A DIR_B  # two jobs: lab_model.py's per-cell tables

RUNS holds lab_hier's ``--out-runs`` folders (RUNS/<shape>/<round>-<link>/run, shape 2x2 or 4x1): every
pair of rounds of a shape and link is compared. ``--errors`` compares the measured cells (``time_us_p50``)
of two lab_model.py outputs (DIR/lab-<link>.fit.csv: 2 hosts x 2, .check.csv: 4 hosts x 1), e.g. two days'
runs. Per link and shape, over cells (collective, size, implementation; each cell's median over dtypes
and placements, as lab_model.py judges): the median and 90th percentile of the factor
max(a/b, b/a), the lowest and highest median factor of an implementation, the same after dividing out
the pair's median ratio (the whole machine faster or slower that round), how often the fastest
implementation of a (collective, size) is the same in both, and how often one's fastest is within 10%
of the other's fastest.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.results.labels import impl_label

KEY = ["collective", "bytes_total", "label"]
SHAPE_OF_KIND = {"fit": "2x2", "check": "4x1"}


def cells(frame: pd.DataFrame) -> pd.Series:
    """time_us_p50 per (collective, size, implementation): the median over dtypes and placements."""
    frame = frame.assign(label=frame.apply(impl_label, axis=1))
    return frame.groupby(KEY)["time_us_p50"].median()


def compared(a: pd.Series, b: pd.Series) -> dict:
    joined = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    log_ratio = np.log(joined["a"] / joined["b"])
    shift = float(np.median(log_ratio))
    factor = np.exp(np.abs(log_ratio))
    level = np.exp(np.abs(log_ratio - shift))
    by_impl, level_by_impl = factor.groupby(level="label").median(), level.groupby(level="label").median()
    same = near = 0
    groups = list(joined.groupby(level=["collective", "bytes_total"]))
    for _, group in groups:
        fastest_a, fastest_b = group["a"].idxmin(), group["b"].idxmin()
        same += int(fastest_a == fastest_b)
        near += int(group["a"].loc[fastest_b] <= 1.10 * group["a"].min())  # numpy bools add as "or"
        near += int(group["b"].loc[fastest_a] <= 1.10 * group["b"].min())
    return {"cells": int(len(joined)), "median_factor": round(float(factor.median()), 3),
            "p90_factor": round(float(factor.quantile(0.9)), 3),
            "impl_median_factor": [round(float(by_impl.min()), 3), round(float(by_impl.max()), 3)],
            "ratio_of_medians": round(float(np.exp(shift)), 3),
            "leveled_median_factor": round(float(level.median()), 3),
            "leveled_impl_median_factor": [round(float(level_by_impl.min()), 3), round(float(level_by_impl.max()), 3)],
            "same_fastest": round(same / len(groups), 3), "fastest_within_10pct": round(near / (2 * len(groups)), 3),
            "groups": len(groups)}


def from_runs(runs: Path) -> dict:
    rounds: dict[tuple[str, str], dict[str, pd.Series]] = {}
    for run in sorted(runs.glob("*/*/run")):
        shape, (number, link) = run.parent.parent.name, run.parent.name.split("-", 1)
        frame = pd.read_parquet(run / "results.parquet")
        rounds.setdefault((link, shape), {})[number] = cells(frame[frame["status"] == "ok"])
    out = {}
    for (link, shape), by_round in sorted(rounds.items()):
        for (first, a), (second, b) in itertools.combinations(sorted(by_round.items()), 2):
            out[f"{link} {shape} rounds {first}/{second}"] = compared(a, b)
    return out


def from_errors(first: Path, second: Path) -> dict:
    out = {}
    for table in sorted(first.glob("lab-*.*.csv")):
        other = second / table.name
        link, kind = table.name.removeprefix("lab-").removesuffix(".csv").rsplit(".", 1)
        if kind not in SHAPE_OF_KIND or not other.exists():
            continue
        a, b = (cells(pd.read_csv(path, keep_default_na=False, na_values={"time_us_p50": [""]}))
                for path in (table, other))
        out[f"{link} {SHAPE_OF_KIND[kind]} {first.name}/{second.name}"] = compared(a, b)
    return out


def table(result: dict) -> str:
    lines = ["| cells compared | n | median factor (p90) | implementations' median factor | ratio of medians | "
             "leveled: median, implementations | same fastest | fastest within 10% in the other |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in result.items():
        low, high = row["impl_median_factor"]
        level_low, level_high = row["leveled_impl_median_factor"]
        lines.append(f"| {name} | {row['cells']} | {row['median_factor']:.2f} ({row['p90_factor']:.2f}) | "
                     f"{low:.2f}-{high:.2f} | {row['ratio_of_medians']:.2f} | {row['leveled_median_factor']:.2f}, "
                     f"{level_low:.2f}-{level_high:.2f} | {row['same_fastest']:.0%} of {row['groups']} | "
                     f"{row['fastest_within_10pct']:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="?")
    parser.add_argument("--errors", type=Path, nargs=2, metavar="DIR")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if (args.runs is None) == (args.errors is None):
        parser.error("give RUNS or --errors DIR_A DIR_B")
    result = from_runs(args.runs) if args.runs else from_errors(*args.errors)
    if not result:
        raise SystemExit(f"nothing to compare in {args.runs or args.errors}")
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
