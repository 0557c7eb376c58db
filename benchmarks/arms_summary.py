"""The per-link summary of a benchmarks/lab_arms.py run (its --json), as docs/LAB-RESULTS.md quotes it.

    python benchmarks/arms_summary.py benchmarks/data/lab/arms-direct.json

Per link and collective: mpi / best pccl at <= 4 KiB (the lowest median over rounds, at which size,
and the median over those sizes), its range over the sizes from 32 KiB up, and flat ring / hier auto
at <= 4 KiB (the lowest, at which size). Each figure is a cell's median over rounds of the
turn-by-turn ratio (> 1: pccl, or the hierarchy, faster).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from bench.plan.sizes import format_size

SMALL_BYTES = 4096
COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")


def summary(measured: dict) -> list[str]:
    lines = ["| link | collective | mpi / best pccl at <= 4 KiB: lowest (size), median "
             "| at >= 32 KiB: lowest - highest | flat ring / hier auto at <= 4 KiB, lowest (size) |",
             "|---|---|---|---|---|"]
    for link, rounds in measured.items():
        for collective in COLLECTIVES:
            small, large, ring_over_hier = [], [], []
            for key in rounds[0]["cells"]:
                name, size = key.split()
                if name != collective:
                    continue
                cells = [r["cells"][key] for r in rounds if key in r["cells"]]
                best = statistics.median(c["mpi_over_best"][0] for c in cells if c.get("mpi_over_best"))
                if int(size) <= SMALL_BYTES:
                    small.append((best, int(size)))
                    ring_over_hier.append((statistics.median(c["ring_over_hier"][0] for c in cells
                                                             if c.get("ring_over_hier")), int(size)))
                else:
                    large.append(best)
            if not small or not large:
                continue
            lowest, slowest_ring = min(small), min(ring_over_hier)
            lines.append(f"| {link} | {collective} | {lowest[0]:.2f} ({format_size(lowest[1])}), "
                         f"{statistics.median(value for value, _ in small):.2f} | {min(large):.2f} - {max(large):.2f} "
                         f"| {slowest_ring[0]:.2f} ({format_size(slowest_ring[1])}) |")
    return lines


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        raise SystemExit(__doc__)
    print("\n".join(summary(json.loads(Path(sys.argv[1]).read_text()))))


if __name__ == "__main__":
    main()
