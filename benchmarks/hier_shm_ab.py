"""pccl-hier's intra phase through shared memory, two installs side by side: suites/hier-shm.yaml of each.

    python benchmarks/hier_shm_ab.py --install before=REPO_A --install after=REPO_B [--rounds 4]
                                     [--json FILE] [--set KEY=VALUE ...]

Each REPO is a checkout with its own ``.venv`` (with its extensions built); every round runs that
checkout's ``pccl-bench run sweep`` of this checkout's suites/hier-shm.yaml once per install, in
alternating order (ABBA...). The suite times three arms in turns (docs/GATE.md, "Same-job comparison"):
``shm`` (the transport as a whole), ``hier`` (pccl-hier ``intra: shm``, ``inter: rd``) and ``packed``
(the same with the MPI library within the node). Per install, collective and size: the turn-by-turn
ratio hier / shm (bench.results.stats.turn_ratio; the median over rounds and its range), and across
installs the ratio of the hier arm's medians, second / first, per round (ABBA pairs; launches apart,
so it carries the machine's drift that the turn ratios cancel).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from installs import alternating_rounds, install_parser, two_installs  # beside this script
from lab_arms import arm_samples, ratio_of  # a run's turns and their ratios, as the lab reads them

SUITE = Path(__file__).resolve().parents[1] / "suites" / "hier-shm.yaml"
PAIRS = (("hier", "shm"), ("packed", "shm"))


def run_once(repo: Path, overrides: list[str]) -> dict:
    """(collective, bytes) -> the arms' medians and the turn ratios of PAIRS, from one sweep of ``repo``."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run"
        env = {**os.environ, "PYTHONPATH": str(repo)}
        done = subprocess.run([str(repo / ".venv/bin/python"), "-m", "bench", "run", "sweep", str(SUITE),
                               *(f"--set={item}" for item in overrides), "--out", str(out)],
                              cwd=repo, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{repo}: sweep exited {done.returncode}: {done.stdout[-800:]} {done.stderr[-800:]}")
        rows, times = arm_samples(out)
    cells = {}
    for (collective, size), group in rows.groupby(["collective", "bytes_total"]):
        by_arm = {row.arm: row for row in group.itertuples() if row.status == "ok"}
        cell = {"median_us": {arm: float(row.time_us_p50) for arm, row in by_arm.items()},
                "transport": {arm: str(row.transport) for arm, row in by_arm.items()}}
        for slower, faster in PAIRS:
            if slower in by_arm and faster in by_arm:
                estimate = ratio_of(times, by_arm, slower, faster)
                cell[f"{slower}/{faster}"] = None if estimate is None else float(estimate[0])
        cells[f"{collective} {int(size)}"] = cell
    return cells


def spread(values: list[float]) -> str:
    values = [v for v in values if v is not None and np.isfinite(v)]
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = install_parser(__doc__, rounds=4)
    parser.add_argument("--json", type=Path, help="write every round's cells here")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="suite override KEY=VALUE")
    args = parser.parse_args()
    installs = two_installs(args.install)
    runs = alternating_rounds(installs, args.rounds, lambda repo: run_once(repo, args.overrides))
    (first, _), (second, _) = installs
    keys = sorted(set.intersection(*(set(run) for name in runs for run in runs[name])),
                  key=lambda key: (key.split()[0], int(key.split()[1])))
    print(f"suites/hier-shm.yaml, 4 ranks as 2 virtual nodes of 2; {args.rounds} rounds per install, ABBA.\n"
          f"hier / shm and packed / shm: turn by turn in one launch (median over rounds, range); "
          f"hier {second} / {first}: the hier arm's medians, per round pair\n")
    print(f"| collective | size | hier us {first} | hier us {second} | shm us | hier / shm {first} | "
          f"hier / shm {second} | packed / shm | hier {second} / {first} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in keys:
        collective, size = key.split()
        a, b = [run[key] for run in runs[first]], [run[key] for run in runs[second]]
        hier = [statistics.median(cell["median_us"].get("hier", np.nan) for cell in cells) for cells in (a, b)]
        shm_us = statistics.median(cell["median_us"].get("shm", np.nan) for cell in a + b)
        across = [y["median_us"]["hier"] / x["median_us"]["hier"] for x, y in zip(a, b, strict=True)
                  if "hier" in x["median_us"] and "hier" in y["median_us"]]
        print(f"| {collective} | {int(size) >> 10} KiB | {hier[0]:.0f} | {hier[1]:.0f} | {shm_us:.0f} | "
              f"{spread([c.get('hier/shm') for c in a])} | {spread([c.get('hier/shm') for c in b])} | "
              f"{spread([c.get('packed/shm') for c in a + b])} | {spread(across)} |")
    if args.json:
        args.json.write_text(json.dumps({"installs": [name for name, _ in installs], "rounds": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
