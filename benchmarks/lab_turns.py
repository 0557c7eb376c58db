"""A suite's arms timed in turns across the lab (2 namespace hosts x 2 ranks), at each link setting,
in rounds, with the turn-by-turn ratio of chosen pairs of arms.

    python benchmarks/lab_turns.py SUITE --pairs "slower/faster,..." [--rounds 3] [--links "50 us,200 us"]
                                   [--json FILE]                                          # as root

SUITE is a suite with ``arms`` (suites/lab-intra.yaml, suites/lab-direct.yaml). Per link, collective
and size: each arm's median, and per pair the turn-by-turn ratio slower / faster (> 1: the second arm
is faster; bench.results.stats.turn_ratio; median over rounds, range); with a rate each arm's median
over the bytes-over-rate bound of its schedule (benchmarks/lab_hier.py link_bound_us: the bytes of
the busiest host link, one way). benchmarks/lab_intra.py is this with suites/lab-intra.yaml.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from in_lab import arguments, link_slug, own_lab, sweep_on_login  # beside this script
from lab_arms import arm_samples, as_run, ratio_of
from lab_hier import LINKS, link_bound_us

from bench.lab import lab as lab_ops
from bench.plan.sizes import format_size

LAB = "turns"


def figures(run: Path, rate_gbit: float | None, pairs: list[tuple[str, str]]) -> dict:
    rows, times = arm_samples(run)
    cells = {}
    for (collective, size), group in rows.groupby(["collective", "bytes_total"]):
        by_arm = {row.arm: row for row in group.itertuples() if row.status == "ok"}
        if not by_arm:
            continue
        cell = {"median_us": {arm: float(row.time_us_p50) for arm, row in by_arm.items()},
                "transport": {arm: str(row.transport) for arm, row in by_arm.items()},
                "ratios": {f"{slower} / {faster}": ratio_of(times, by_arm, slower, faster)
                           for slower, faster in pairs if slower in by_arm and faster in by_arm}}
        if rate_gbit:
            cell["over_bound"] = {arm: cell["median_us"][arm] / link_bound_us(as_run(row), rate_gbit)
                                  for arm, row in by_arm.items()}
        cells[f"{collective} {int(size)}"] = cell
    return {"cells": cells, "wrong": int(rows["n_wrong"].fillna(0).sum()),
            "failed": int((~rows["status"].isin(["ok", "unsupported"])).sum())}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})" if values else "-"


def main(suite: Path | None = None, pairs: str | None = None, links: str = "bridge,50 us + 1 Gbit/s",
         doc: str = __doc__) -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        if suite is None:
            parser.add_argument("suite", type=Path, help="a suite with arms")
            parser.add_argument("--pairs", required=True, help="slower/faster arm pairs, comma-separated")
        parser.add_argument("--links", default=links, help=f"of: {', '.join(LINKS)}")

    args = arguments(doc, rounds=3, extra=options)
    suite_path = suite or args.suite
    if not suite_path.is_file():
        raise SystemExit(f"{suite_path}: no such suite")
    arms = [arm["name"] for arm in yaml.safe_load(suite_path.read_text()).get("arms") or []]
    chosen = [tuple(part.strip() for part in pair.split("/")) for pair in (pairs or args.pairs).split(",")]
    unknown = [name for pair in chosen for name in pair if name not in arms] + \
        [pair for pair in chosen if len(pair) != 2]
    if unknown or not arms:
        raise SystemExit(f"{suite_path}: --pairs {unknown} not pairs of its arms ({', '.join(arms) or 'none'})")
    chosen_links = [name.strip() for name in args.links.split(",")]
    if any(name not in LINKS for name in chosen_links):
        raise SystemExit(f"--links: one of {', '.join(LINKS)}")
    measured: dict[str, list[dict]] = {link: [] for link in chosen_links}
    with own_lab(LAB, 2), tempfile.TemporaryDirectory() as scratch:
        for index in range(args.rounds):
            for link in chosen_links if index % 2 == 0 else list(reversed(chosen_links)):
                lab_ops.set_link(LAB, LINKS[link])
                folder = Path(scratch) / f"{index}-{link_slug(link)}"
                folder.mkdir()
                measured[link].append(figures(sweep_on_login(LAB, suite_path, "h1,h2", folder),
                                              LINKS[link].rate_gbit, chosen))
                print(f"round {index + 1}/{args.rounds} {link} done", file=sys.stderr, flush=True)
    for link, rounds in measured.items():
        print(f"\n#### {link} ({len(rounds)} rounds; wrong {sum(r['wrong'] for r in rounds)}, failed "
              f"{sum(r['failed'] for r in rounds)})\n")
        rated = "over_bound" in next(iter(rounds[0]["cells"].values()), {})
        print("| collective | size | " + " | ".join(f"{arm} us" for arm in arms) + " | "
              + " | ".join(f"{slower} / {faster}" for slower, faster in chosen) + " |"
              + (" over bound: " + " / ".join(arms) + " |" if rated else ""))
        print("|---|---:|" + "---:|" * (len(arms) + len(chosen) + rated))
        for key in rounds[0]["cells"]:
            present = [r["cells"][key] for r in rounds if key in r["cells"]]

            def median_of(values: list[float]) -> str:
                return f"{statistics.median(values):.0f}" if values else "-"

            line = (f"| {key.split()[0]} | {format_size(int(key.split()[1]))} | "
                    + " | ".join(median_of([c["median_us"][arm] for c in present if arm in c["median_us"]])
                                 for arm in arms) + " | "
                    + " | ".join(spread([c["ratios"][f"{s} / {f}"][0] for c in present
                                         if c["ratios"].get(f"{s} / {f}")]) for s, f in chosen) + " |")
            if rated:
                line += " " + " / ".join(
                    f"{statistics.median(c['over_bound'][arm] for c in present if arm in c['over_bound']):.2f}"
                    if any(arm in c["over_bound"] for c in present) else "-" for arm in arms) + " |"
            print(line)
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1))


if __name__ == "__main__":
    main()
