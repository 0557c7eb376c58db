"""The shared-memory paths of two installs side by side: benchmarks/shm_cutover.py of each, interleaved.

    python benchmarks/shm_ab.py --install before=REPO_A --install after=REPO_B [--rounds 4]
                                [--iters 300] [--max-bytes 1M] [--nranks 2]

Each REPO is a checkout with its own ``.venv``; every round runs that checkout's shm_cutover.py
once per install, in alternating order (ABBA...), so slow drift of a shared machine lands on both.
Prints, per collective and path, the median over sizes of the per-size ratio second / first
(each the median over rounds), with the lowest and highest per-size ratio: 1.00 = the same.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

from installs import alternating_rounds, install_parser, two_installs  # beside this script

HEADING = re.compile(r"^\*\*(\w+), \d+ ranks")
SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}


def run_once(repo: Path, args: argparse.Namespace) -> dict[tuple[str, str, int], float]:
    """(collective, path, bytes) -> median us, from one shm_cutover.py run of ``repo``."""
    done = subprocess.run([str(repo / ".venv/bin/python"), str(repo / "benchmarks/shm_cutover.py"),
                           "--iters", str(args.iters), "--max-bytes", args.max_bytes, "--repeats", "1",
                           "--nranks", str(args.nranks)], cwd=repo, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{repo}: shm_cutover.py exited {done.returncode}: {done.stderr[-400:]}")
    found, collective, paths = {}, "", []
    for line in done.stdout.splitlines():
        if match := HEADING.match(line):
            collective = match.group(1)
        cells = [cell.strip().strip("*") for cell in line.strip().strip("|").split("|")]
        if cells and cells[0] == "size":
            paths = cells[1:]
        elif len(cells) == len(paths) + 1 and cells[0] and cells[0][0].isdigit():
            number, unit = cells[0].split()
            size = int(number) * SIZE_UNITS[unit]
            for path, value in zip(paths, cells[1:], strict=True):
                if value:
                    found[collective, path, size] = float(value)
    return found


def main() -> int:
    parser = install_parser(__doc__, rounds=4)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--max-bytes", default="1M")
    parser.add_argument("--nranks", type=int, default=2)
    args = parser.parse_args()
    installs = two_installs(args.install)
    runs = alternating_rounds(installs, args.rounds, lambda repo: run_once(repo, args))
    (first, _), (second, _) = installs
    keys = sorted(set.intersection(*(set(run) for runs_of in runs.values() for run in runs_of)))
    print(f"shm paths, {args.nranks} ranks, float32; per size the median over {args.rounds} rounds; "
          f"ratio = {second} / {first}: median over sizes (lowest-highest size)\n")
    print(f"| collective | path | sizes | {first} us (median size) | {second} us | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    for collective, path in sorted({(c, p) for c, p, _ in keys}):
        sizes = [s for c, p, s in keys if (c, p) == (collective, path)]
        medians = {name: [statistics.median(run[collective, path, s] for run in runs[name]) for s in sizes]
                   for name in (first, second)}
        ratios = [b / a for a, b in zip(medians[first], medians[second], strict=True)]
        middle = len(sizes) // 2
        print(f"| {collective} | {path} | {len(sizes)} | {medians[first][middle]:.2f} | {medians[second][middle]:.2f} "
              f"| {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
