"""The model held against the lab (docs/LAB-RESULTS.md, "The model against the lab"): per link setting, a lab
machine description made from the lab's own probes between two hosts (benchmarks/data/lab/links.json: MPI
ping-pong latency and bandwidth, and the rate of both directions at once, the description's fabric:
every inter-host byte of a step shares it, since all the lab's links run through one machine's network
stack and emulator; where the probes have the pair exchanges, the cost of each further message in flight
in a step, half of two pairs' 8 B exchange minus one pair's; within a host, this machine's fitted shared
memory, suites/machines/local.yaml),
then ``pccl-bench model fit`` from it on the 2-host cells alone (the fabric kept at the probe's rate)
and ``pccl-bench model check`` of the fitted description on every 4-host cell, which the fit never saw.

    python benchmarks/lab_hier.py --hosts 2 --out-runs RUNS/2x2   # as root, then
    python benchmarks/lab_hier.py --hosts 4 --out-runs RUNS/4x1
    python benchmarks/lab_model.py RUNS [--out benchmarks/data/lab/model] [--probes benchmarks/data/lab/links.json]
    python benchmarks/lab_model.py --from-errors benchmarks/data/lab/model/sync --out OUT   # refit the stored cells

RUNS holds lab_hier's ``--out-runs`` folders of both shapes: RUNS/2x2/<round>-<link>/run and
RUNS/4x1/<round>-<link>/run. ``--from-errors DIR`` fits and checks again the cells of an earlier
run's per-cell tables (DIR/lab-<link>.fit.csv and .check.csv: each cell's median over its rounds, as
`model fit` took them) under the descriptions made from today's probes; ``--no-fabric`` leaves the
fabric out (the model before it), ``--message-us X`` sets the cost per message instead of the probes
(0: the fabric's rate alone). Quoted per link, over the held-out cells'
medians across rounds: the median and 90th-percentile error factor (max(model/measured,
measured/model)) per implementation, the share of cells (collective, size) whose predicted fastest
implementation is the measured fastest, and the share where the predicted one measured within 10%
of the fastest; a plot of predicted against measured per link.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from in_lab import ROOT, link_slug  # beside this script

from bench.model.check import error_table, measured_calls
from bench.model.fit import fit
from bench.model.machine import dump_machine, load_machine
from bench.results.labels import impl_label
from collectives.dtypes import DTYPES

PROBES = ROOT / "benchmarks" / "data" / "lab" / "links.json"
#: the link settings of benchmarks/data/lab/links.json that lab_hier measures, by their folder names
LINK_OF_FOLDER = {link_slug(name): name for name in ("bridge", "50 us", "200 us", "50 us + 1 Gbit/s")}


def lab_machine(link: str, folder: Path, fabric: bool = True, probes: Path = PROBES,
                message_us: float | None = None) -> Path:
    """local.yaml with the inter-host link of the probes (median over their rounds) and, with ``fabric``, the
    rate of both directions at once as the fabric's."""
    rounds = json.loads(probes.read_text())["rounds"]

    def median(key: str) -> float:
        return float(pd.Series([entry[link][key] for entry in rounds]).median())

    latency, bandwidth = median("small_us"), median("large_gbps")
    fabric_gbps = median("duplex_gbps") if fabric else None
    from_probe = message_us is None and fabric and "two_pairs_us" in rounds[0][link]
    if from_probe:  # the second pair's two messages, per message: what a message in flight adds to the others
        message_us = max(0.0, float(pd.Series([entry[link].get("message_us", (entry[link]["two_pairs_us"]
                                                                              - entry[link]["pair_us"]) / 2)
                                               for entry in rounds]).median()))
    slug = link_slug(link)
    local, _ = load_machine("local")
    inter = local.inter.model_copy(update={"latency_us": latency, "bandwidth_gbps": bandwidth})
    shared = f", all of them sharing {fabric_gbps:.3f} GB/s" if fabric else ""
    if message_us is not None:
        shared += f", each further message of a step {message_us:.1f} us"
    where = probes.relative_to(ROOT) if probes.is_relative_to(ROOT) else probes
    sources = {**local.sources, "inter": f"{where}, {link}: 8 B one way, 1 MiB GB/s (medians)"}
    if fabric:
        sources["fabric_gbps"] = f"{where}, {link}: 1 MiB both ways at once, GB/s in all (median)"
    if message_us is not None:
        sources["fabric_message_us"] = (f"{where}, {link}: 8 B exchange, two pairs at once minus one, per message "
                                        "(median over rounds)" if from_probe else "given (--message-us)")
    machine = local.model_copy(update={
        "name": f"lab-{slug}", "inter": inter, "fit": None, "fabric_gbps": fabric_gbps,
        "fabric_message_us": message_us,
        "description": f"the lab at {link}: 2-4 namespace hosts on this 2-core machine; between hosts the probes' "
                       f"{latency:.1f} us and {bandwidth:.3f} GB/s{shared}, within a host the local fit",
        "sources": sources})
    path = folder / f"lab-{slug}.yaml"
    dump_machine(machine, path, f"Made by benchmarks/lab_model.py from {where} and local.yaml.")
    return path


def fit_and_check(base: Path, fit_runs: list[Path], check_runs: list[Path], out: Path) -> dict:
    """``model fit`` on the 2-host runs from ``base``; ``model check`` of the fitted description on the 4-host ones."""
    fitted = out.with_suffix(".fitted.yaml")
    for argv in (["fit", *map(str, fit_runs), "--base", str(base), "--name", fitted.stem, "-o", str(fitted),
                  "--errors", str(out.with_suffix(".fit.csv"))],
                 ["check", str(fitted), *map(str, check_runs), "--errors", str(out.with_suffix(".check.csv"))]):
        result = subprocess.run([sys.executable, "-m", "bench", "model", *argv], capture_output=True, text=True,
                                cwd=ROOT)
        if result.returncode != 0:
            raise SystemExit(f"model {argv[0]} failed ({result.returncode}): {result.stdout[-2000:]} "
                             f"{result.stderr[-2000:]}")
    modes = sorted(set(pd.concat(pd.read_parquet(run / "results.parquet", columns=["timing_mode"])
                                 for run in [*fit_runs, *check_runs])["timing_mode"]))
    title = f"{base.stem}, {'/'.join(modes)} mode"
    return {"timing_mode": "/".join(modes),
            **judged(pd.read_csv(out.with_suffix(".check.csv")), out.with_suffix(".png"), title)}


def cells_of(errors_csv: Path) -> pd.DataFrame:
    """A per-cell table of `model fit/check --errors` as the results rows the model reads."""
    frame = pd.read_csv(errors_csv, keep_default_na=False, na_values={"time_us_p50": [""], "model_us": [""]})
    per_rank = np.where(frame["collective"] == "allreduce", 1, frame["nranks"])
    item = frame["dtype"].map(lambda name: DTYPES[name][0].itemsize)
    return frame.assign(count_per_rank=frame["bytes_total"] // item // per_rank, status="ok", run_id=errors_csv.name)


def refit_errors(base: Path, folder: Path, out: Path) -> dict:
    """``model fit`` of FOLDER's 2-host cells from ``base`` and the check of the 4-host ones, in process."""
    start, _ = load_machine(base)
    fit_cells, check_cells = (cells_of(folder / f"{base.stem}.{kind}.csv") for kind in ("fit", "check"))
    measured = measured_calls(fit_cells, set(start.libraries))
    result = fit(measured, start.model_copy(update={"name": f"{base.stem}.fitted"}))
    dump_machine(result.machine, out.with_suffix(".fitted.yaml"),
                 f"Fitted by benchmarks/lab_model.py --from-errors {folder} (model fit, in process).")
    error_table(measured, result.machine).to_csv(out.with_suffix(".fit.csv"), index=False)
    errors = error_table(measured_calls(check_cells, set(start.libraries)), result.machine)
    errors.to_csv(out.with_suffix(".check.csv"), index=False)
    return {"from": str(folder), **judged(errors, out.with_suffix(".png"), f"{base.stem} (cells of {folder.name})")}


def judged(errors: pd.DataFrame, plot: Path, title: str) -> dict:
    """Error factors per implementation and the winners, over the cells' medians across rounds."""
    errors = errors.assign(label=errors.apply(impl_label, axis=1))
    cells = errors.groupby(["collective", "bytes_total", "label"])[["time_us_p50", "model_us"]].median().reset_index()
    cells["factor"] = np.exp(np.abs(np.log(cells["model_us"] / cells["time_us_p50"])))
    by_impl = cells.groupby("label")["factor"]
    right = near = 0
    groups = list(cells.groupby(["collective", "bytes_total"]))
    for _, group in groups:
        measured = group.loc[group["time_us_p50"].idxmin()]
        predicted = group.loc[group["model_us"].idxmin()]
        right += measured["label"] == predicted["label"]
        near += predicted["time_us_p50"] <= 1.10 * measured["time_us_p50"]
    scatter(cells, plot, title)
    return {"median_factor": by_impl.median().round(3).to_dict(),
            "p90_factor": by_impl.quantile(0.9).round(3).to_dict(),
            "all_median_factor": round(float(cells["factor"].median()), 3), "cells": int(len(cells)),
            "winner_right": round(right / len(groups), 3),
            "winner_within_10pct": round(near / len(groups), 3), "winner_cells": len(groups)}


def scatter(cells: pd.DataFrame, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.4, 5.6))
    for index, (label, group) in enumerate(cells.groupby("label")):
        ax.loglog(group["time_us_p50"], group["model_us"], "o", ms=4, color=f"C{index % 10}", label=label,
                  mfc="none" if index >= 10 else None)
    values = cells[["time_us_p50", "model_us"]]
    low, high = values.min().min() / 1.5, values.max().max() * 1.5
    for factor, style in ((1.0, "-"), (1.25, ":"), (1 / 1.25, ":")):
        ax.plot([low, high], [low * factor, high * factor], style, color="0.5", lw=0.8)
    ax.set_xlabel("measured, us (median over rounds)")
    ax.set_ylabel("predicted, us")
    ax.set_title(f"{title}: fitted on 2 hosts x 2, predicting 4 hosts x 1 (dotted: x1.25)", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="?")
    parser.add_argument("--out", type=Path, default=Path("lab-model"))
    parser.add_argument("--from-errors", type=Path, help="refit the cells of an earlier run's per-cell tables")
    parser.add_argument("--no-fabric", action="store_true", help="descriptions without the probes' fabric rate")
    parser.add_argument("--message-us", type=float, help="each inter-host message of a step beyond the first adds "
                        "this (us) to the step, instead of the probes' figure (two pairs against one)")
    parser.add_argument("--probes", type=Path, default=PROBES,
                        help="benchmarks/lab_links.py --json of the probes to describe the links by")
    args = parser.parse_args()
    if (args.runs is None) == (args.from_errors is None):
        parser.error("give RUNS or --from-errors DIR")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_errors:
        summary = {}
        for slug, link in LINK_OF_FOLDER.items():
            if (args.from_errors / f"lab-{slug}.check.csv").exists():
                base = lab_machine(link, args.out, not args.no_fabric, args.probes.resolve(), args.message_us)
                summary[link] = refit_errors(base, args.from_errors, args.out / base.stem)
                print(f"{link}: {json.dumps(summary[link])}", flush=True)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        return
    by_link: dict[str, dict[int, list[Path]]] = {}
    for run in sorted(args.runs.glob("*/*/run")):  # RUNS/<shape>/<round>-<link>/run
        hosts = 4 if run.parent.parent.name.startswith("4") else 2
        by_link.setdefault(run.parent.name.split("-", 1)[1], {}).setdefault(hosts, []).append(run)
    summary = {}
    for folder_name, shapes in by_link.items():
        link = LINK_OF_FOLDER[folder_name]
        if set(shapes) != {2, 4}:
            print(f"{link}: runs of {sorted(shapes)} hosts only; skipped", file=sys.stderr)
            continue
        base = lab_machine(link, args.out, not args.no_fabric, args.probes.resolve(), args.message_us)
        summary[link] = fit_and_check(base, shapes[2], shapes[4], args.out / base.stem)
        print(f"{link}: {json.dumps(summary[link])}", flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
