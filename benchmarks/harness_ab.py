"""The timed path of two installs side by side: benchmarks/harness_overhead.py of each, interleaved.

    python benchmarks/harness_ab.py --install before=REPO_A --install after=REPO_B [--rounds 3]
                                    [--iters 1000] [--max-bytes 1048576]

Each REPO is a checkout with its own ``.venv``; every round runs that checkout's
harness_overhead.py once per install, in alternating order, so slow drift of a shared machine
lands on both. Per size: the median over rounds of the Cython loop around MPI_Allgather
(``cython-native``, what ``mpi`` cells time) and around the ring schedule executor
(``cython-ring``, what ``pccl-flat`` cells time), and the ratio of the second install to the first
(1.00 = the same; the spread of the ratios over rounds is the noise).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

from installs import alternating_rounds, install_parser, two_installs  # beside this script

COLUMNS = ("cython-native", "cython-ring")


def run_once(repo: Path, iters: int, max_bytes: int) -> dict[int, dict[str, float]]:
    done = subprocess.run([str(repo / ".venv/bin/python"), str(repo / "benchmarks/harness_overhead.py"),
                           "--iters", str(iters), "--max-bytes", str(max_bytes)],
                          cwd=repo, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{repo}: harness_overhead.py exited {done.returncode}: {done.stderr[-400:]}")
    rows = {}
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) >= 6 and cells[0].isdigit():
            rows[int(cells[0])] = {"cython-native": float(cells[1]), "cython-ring": float(cells[4])}
    return rows


def main() -> int:
    parser = install_parser(__doc__, rounds=3)
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--max-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    installs = two_installs(args.install)
    runs = alternating_rounds(installs, args.rounds, lambda repo: run_once(repo, args.iters, args.max_bytes))
    (first, _), (second, _) = installs
    sizes = sorted(set.intersection(*(set(run) for runs_of in runs.values() for run in runs_of)))
    print(f"all-gather float32, 2 ranks; median over {args.rounds} rounds (us); ratio = {second} / {first}, "
          "median and range of the per-round ratios\n")
    header = " | ".join(f"{column} {name}" for column in COLUMNS for name in (first, second))
    print(f"| size (B) | {header} | native ratio | ring ratio |")
    print("|---:|" + "---:|" * (2 * len(COLUMNS) + 2))
    for size in sizes:
        medians = {(column, name): statistics.median(run[size][column] for run in runs[name])
                   for column in COLUMNS for name in (first, second)}
        ratios = []
        for column in COLUMNS:
            per_round = [b[size][column] / a[size][column] for a, b in zip(runs[first], runs[second], strict=True)]
            ratios.append(f"{statistics.median(per_round):.2f} ({min(per_round):.2f}-{max(per_round):.2f})")
        values = " | ".join(f"{medians[(column, name)]:.2f}" for column in COLUMNS for name in (first, second))
        print(f"| {size} | {values} | {' | '.join(ratios)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
