"""The hierarchy's intra phase across the lab: suites/lab-intra.yaml (2 namespace hosts x 2 ranks;
pccl-hier ring/ring, ring/shm and rdma/shm beside the MPI library, timed in turns) at each link
setting, in rounds.

    python benchmarks/lab_intra.py [--rounds 3] [--links "bridge,50 us + 1 Gbit/s"] [--json FILE]   # as root

Per link, collective and size: the turn-by-turn ratios hier-ring / hier-shm (> 1: the in-place shm
phase is faster), hier-rdma / hier-shm (> 1: UCX puts between hosts slower than MPI's ring) and mpi /
hier-shm (bench.results.stats.turn_ratio; median over rounds, range), and
with a rate each arm's median over the bytes-over-rate bound of its schedule (benchmarks/lab_hier.py
link_bound_us: the bytes of the busiest host link, one way).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from in_lab import ROOT, arguments, link_slug, own_lab, sweep_on_login  # beside this script
from lab_arms import arm_samples, as_run, ratio_of
from lab_hier import LINKS, link_bound_us

from bench.lab import lab as lab_ops

LAB = "intra"
SUITE = ROOT / "suites" / "lab-intra.yaml"
ARMS = ("mpi", "hier-ring", "hier-shm", "hier-rdma")
#: (slower, faster) arm pairs whose turn-by-turn ratio is reported
PAIRS = (("hier-ring", "hier-shm"), ("hier-rdma", "hier-shm"), ("mpi", "hier-shm"))


def figures(run: Path, rate_gbit: float | None) -> dict:
    rows, times = arm_samples(run)
    cells = {}
    for (collective, size), group in rows.groupby(["collective", "bytes_total"]):
        by_arm = {row.arm: row for row in group.itertuples() if row.status == "ok"}
        if "hier-shm" not in by_arm:
            continue
        cell = {"median_us": {arm: float(row.time_us_p50) for arm, row in by_arm.items()},
                "transport": {arm: str(row.transport) for arm, row in by_arm.items()},
                "ratios": {f"{slower} / {faster}": ratio_of(times, by_arm, slower, faster)
                           for slower, faster in PAIRS if slower in by_arm}}
        if rate_gbit:
            cell["over_bound"] = {arm: cell["median_us"][arm] / link_bound_us(as_run(row), rate_gbit)
                                  for arm, row in by_arm.items()}
        cells[f"{collective} {int(size)}"] = cell
    return {"cells": cells, "wrong": int(rows["n_wrong"].fillna(0).sum()),
            "failed": int((~rows["status"].isin(["ok", "unsupported"])).sum())}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})" if values else "-"


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--links", default="bridge,50 us + 1 Gbit/s", help=f"of: {', '.join(LINKS)}")

    args = arguments(__doc__, rounds=3, extra=options)
    links = [name.strip() for name in args.links.split(",")]
    if any(name not in LINKS for name in links):
        raise SystemExit(f"--links: one of {', '.join(LINKS)}")
    measured: dict[str, list[dict]] = {link: [] for link in links}
    with own_lab(LAB, 2), tempfile.TemporaryDirectory() as scratch:
        for index in range(args.rounds):
            for link in links if index % 2 == 0 else list(reversed(links)):
                lab_ops.set_link(LAB, LINKS[link])
                folder = Path(scratch) / f"{index}-{link_slug(link)}"
                folder.mkdir()
                measured[link].append(figures(sweep_on_login(LAB, SUITE, "h1,h2", folder), LINKS[link].rate_gbit))
                print(f"round {index + 1}/{args.rounds} {link} done", file=sys.stderr, flush=True)
    for link, rounds in measured.items():
        print(f"\n### {link} ({len(rounds)} rounds; wrong {sum(r['wrong'] for r in rounds)}, failed "
              f"{sum(r['failed'] for r in rounds)})\n")
        rated = "over_bound" in next(iter(rounds[0]["cells"].values()), {})
        print("| collective | size | " + " | ".join(f"{arm} us" for arm in ARMS) + " | "
              + " | ".join(f"{slower} / {faster}" for slower, faster in PAIRS) + " |"
              + (" over bound: " + " / ".join(ARMS) + " |" if rated else ""))
        print("|---|---:|" + "---:|" * (len(ARMS) + len(PAIRS) + rated))
        for key in rounds[0]["cells"]:
            present = [r["cells"][key] for r in rounds if key in r["cells"]]

            def median_of(values: list[float]) -> str:
                return f"{statistics.median(values):.0f}" if values else "-"

            line = (f"| {key.split()[0]} | {int(key.split()[1]) >> 10} KiB | "
                    + " | ".join(median_of([c["median_us"][arm] for c in present if arm in c["median_us"]])
                                 for arm in ARMS) + " | "
                    + " | ".join(spread([c["ratios"][f"{s} / {f}"][0] for c in present
                                         if c["ratios"].get(f"{s} / {f}")]) for s, f in PAIRS) + " |")
            if rated:
                line += " " + " / ".join(
                    f"{statistics.median(c['over_bound'][arm] for c in present if arm in c['over_bound']):.2f}"
                    if any(arm in c["over_bound"] for c in present) else "-" for arm in ARMS) + " |"
            print(line)
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1))


if __name__ == "__main__":
    main()
