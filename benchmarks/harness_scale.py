"""What the harness costs as ranks grow (issue 29): per-cell and per-launch cost at 2-128 ranks on
this host, and the in-process cost of every per-cell step at p = 512, 2048, 8192.

    python benchmarks/harness_scale.py ranks [--ranks 2 8 32 64 128] [--rounds 1] [--install NAME=REPO ...]
    python benchmarks/harness_scale.py steps [--p 512 2048 8192] [--tree DIR] [--json FILE]

``ranks``: one sweep per rank count and install (a checkout with its own .venv; default this one),
installs alternating in order every round, of a small suite (mpi and pccl-flat ring/rd, all-reduce
and all-gather, 8 B - 64 KiB, 5 fixed iterations after 2 warm-up, sync timing, no probe). From the
part rows: the in-worker harness per cell (cell start to next cell start, less its timed and warm-up
calls, as benchmarks/cell_overhead.py) and per launch (wall - the cells' span: the CLI, mpiexec,
Python and MPI start of every rank, the topology, the table). Oversubscribed: 128 ranks share 2 cores.

``steps``: without MPI, what one rank computes per cell, at p ranks: the pccl-flat schedule of each
algorithm and collective for a sweep's sizes (the first size builds the template, every other size
scales it; before templates every size was a build), the bytes kept, and the bookkeeping's message
sizes per cell and per launch, with the time of each at a stated latency (2.5 us a hop, a
recursive-doubling all-reduce or binomial tree of log2 p hops). ``--tree DIR`` times another
checkout's collectives/ (the before side; its schedule_for is timed as it is).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from cell_overhead import cell_costs  # noqa: E402

HOP_US = 2.5  # one message's latency at scale (the latency model)
SIZES = [8 << k for k in range(0, 21, 2)]  # 8 B .. 8 MiB in steps of 4x: 11 sizes of a sweep
ALGORITHMS = [("allreduce", "ring"), ("allgather", "ring"), ("reduce_scatter", "ring"), ("allreduce", "rd"),
              ("allgather", "bruck"), ("allreduce", "rdfull"), ("allreduce", "tree")]

SUITE = """name: harness-scale
description: per-cell and per-launch harness cost at {ranks} ranks (benchmarks/harness_scale.py)
collectives: [allreduce, allgather]
implementations:
  - mpi
  - impl: pccl-flat
    algorithms: [ring, rd]
ranks: [{ranks}]
device: host
sizes: {{min: 8B, max: 64KiB, factor: 8, semantics: total}}
dtype: float32
op: sum
placement: out_of_place
timing: {{mode: sync, warmup: 2, iters: 5, probe: false}}
check: true
repeats: 1
timeout_s: 1200
"""


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def sweep_once(repo: Path, ranks: int, scratch: Path) -> dict:
    suite = scratch / f"scale-{ranks}.yaml"
    suite.write_text(SUITE.format(ranks=ranks))
    out = scratch / f"run-{ranks}-{time.monotonic_ns()}"
    started = time.perf_counter()
    done = subprocess.run([str(repo / ".venv/bin/pccl-bench"), "run", "sweep", str(suite), "--out", str(out)],
                          cwd=repo, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{repo}: {ranks} ranks exited {done.returncode}: {done.stderr[-800:]}")
    costs = cell_costs(out)
    shutil.rmtree(out, ignore_errors=True)
    harness = [h for h, _ in costs["harness"]]
    timed = [t for _, t in costs["harness"]]
    return {"ranks": ranks, "cells": costs["cells"], "wall_s": wall,
            "harness_mean_ms": _ms(statistics.mean(harness)), "harness_median_ms": _ms(statistics.median(harness)),
            "timed_per_cell_ms": _ms(statistics.mean(timed)), "launch_s": round(wall - costs["in_worker_s"], 2)}


def ranks_mode(args: argparse.Namespace) -> dict:
    installs = [tuple(item.split("=", 1)) for item in (args.install or [f"this={ROOT}"])]
    runs: dict[tuple[str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="harness-scale-") as scratch:
        for round_index in range(args.rounds):
            order = installs if round_index % 2 == 0 else installs[::-1]
            for ranks in args.ranks:
                for name, repo in order:
                    runs.setdefault((name, ranks), []).append(sweep_once(Path(repo), ranks, Path(scratch)))
                    print(f"round {round_index + 1} {ranks} ranks {name}: {runs[(name, ranks)][-1]}",
                          file=sys.stderr, flush=True)
    table = []
    for (name, ranks), found in runs.items():
        median = {key: statistics.median(run[key] for run in found)
                  for key in ("wall_s", "harness_mean_ms", "harness_median_ms", "timed_per_cell_ms", "launch_s")}
        table.append({"install": name, "ranks": ranks, "cells": found[0]["cells"], "rounds": len(found), **median})
    print(f"{args.rounds} round(s), medians; per-cell figures in ms\n")
    print("| ranks | install | cells | wall (s) | harness per cell, mean | median | timed per cell | "
          "target 2 ms + 5% timed | per launch (s) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in sorted(table, key=lambda r: (r["ranks"], r["install"])):
        print(f"| {row['ranks']} | {row['install']} | {row['cells']} | {row['wall_s']:.1f} "
              f"| {row['harness_mean_ms']:.2f} | {row['harness_median_ms']:.2f} | {row['timed_per_cell_ms']:.2f} "
              f"| {2 + 0.05 * row['timed_per_cell_ms']:.2f} | {row['launch_s']:.1f} |")
    return {"mode": "ranks", "rows": table}


def _best_of(function, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def schedule_costs(nranks: int) -> list[dict]:
    from collectives.schedules import algorithms

    rows = []
    rank = nranks // 3  # any rank: every rank's schedule has as many rows
    for collective, algorithm in ALGORITHMS:
        per_rank = [max(size // 4 // (nranks if collective != "allreduce" else 1), 1) for size in SIZES]

        def sweep(counts=per_rank, collective=collective, algorithm=algorithm):
            algorithms.schedule_for.cache_clear()
            return [algorithms.schedule_for(collective, algorithm, nranks, rank, count, False) for count in counts]

        seconds = _best_of(sweep)
        built = sweep()
        kept = getattr(algorithms.schedule_for, "cached_bytes", None)
        rows.append({"p": nranks, "collective": collective, "algorithm": algorithm, "rows": len(built[-1]),
                     "per_cell_ms": _ms(seconds / len(SIZES)),
                     "schedule_bytes": int(built[-1].steps.nbytes),
                     "kept_bytes": int(kept()) if kept else int(sum(s.steps.nbytes for s in built))})
    return rows


def hier_costs(nranks: int, ranks_per_node: int = 8) -> list[dict]:
    """pccl-hier's one schedule per call (inter rd, intra ring: its defaults) over the sweep's sizes
    (none where p is not nodes of ``ranks_per_node``)."""
    from collectives.schedules.hier import hier_schedule
    from collectives.schedules.topology import Grid

    if nranks % ranks_per_node or nranks == ranks_per_node:
        return []
    grid, rank, rows = Grid(nranks, ranks_per_node), nranks // 3, []
    for collective in ("allreduce", "allgather", "reduce_scatter"):
        per_rank = [max(size // 4 // (nranks if collective != "allreduce" else 1), 1) for size in SIZES]

        def sweep(counts=per_rank, collective=collective):
            if hasattr(hier_schedule, "cache_clear"):
                hier_schedule.cache_clear()
            return [hier_schedule(collective, grid, rank, count, False, "ring", "rd") for count in counts]

        seconds = _best_of(sweep)
        built = sweep()
        rows.append({"p": nranks, "collective": collective, "algorithm": f"hier rd/ring ({ranks_per_node} a node)",
                     "rows": len(built[-1]), "per_cell_ms": _ms(seconds / len(SIZES)),
                     "schedule_bytes": int(built[-1].steps.nbytes), "kept_bytes": None})
    return rows


def bookkeeping(nranks: int, ranks_per_node: int = 8) -> dict:
    """Bytes of the per-cell and per-launch exchanges before and after, and the after's time at
    HOP_US a hop (log2 p hops for a small all-reduce, gather or broadcast)."""
    import pickle
    import socket

    hops = math.ceil(math.log2(nranks))
    nodes = nranks // ranks_per_node
    error = len(pickle.dumps(None, protocol=pickle.HIGHEST_PROTOCOL))  # mpi4py's pickle of "no error"
    # the old topology() sent (size, local rank, host name) from every rank to every rank
    placement = len(pickle.dumps((nranks, nranks - 1, socket.gethostname()), protocol=pickle.HIGHEST_PROTOCOL))
    name = len(pickle.dumps(socket.gethostname(), protocol=pickle.HIGHEST_PROTOCOL))
    return {
        "p": nranks, "hop_us": HOP_US, "ranks_per_node": ranks_per_node,
        "cell_before_allgather_error_bytes_in_all": (error + 8) * nranks * nranks,  # + the pickle frame
        "cell_before_allgather_error_bytes_a_rank": (error + 8) * nranks,
        "cell_after_bytes_a_rank": 16, "cell_after_us": round(2 * hops * HOP_US, 1),
        "launch_before_allgather_bytes_in_all": placement * nranks * nranks,
        "launch_after_bytes_a_rank": 24, "launch_after_leaders_names_bytes": nodes * name,
        "launch_after_us": round(3 * hops * HOP_US, 1),
    }


def row_bytes(nhosts: int, cells: int) -> dict:
    """Bytes the host names add to a sweep's part rows and CSV (each row once in each): every name on
    every row (before), or the row's short form and digest (after, where this tree has them)."""
    names = [f"nid{index:06d}" for index in range(nhosts)]  # Frontier's node names: 9 characters
    before = len(json.dumps(",".join(names)))
    try:
        from bench.rank.hostfacts import hosts_digest, hosts_on_row
    except ImportError:  # a tree before the digest
        after = before
    else:
        after = len(json.dumps(hosts_on_row(names))) + len(json.dumps(hosts_digest(names)))
    return {"hosts": nhosts, "cells": cells, "row_bytes_every_name": before, "row_bytes_this_tree": after,
            "sweep_mb_every_name": round(2 * before * cells / 1e6, 1),
            "sweep_mb_this_tree": round(2 * after * cells / 1e6, 3)}


def target_table(result: dict, ranks_json: Path, warmup: int = 5, iters: int = 20) -> list[dict]:
    """Per cell against 2 ms + 5% of the timed time, at the suite defaults (5 warm-up, 20 timed, sync):
    the base harness measured at 2 ranks (ranks mode, the install named ``after``, else the first),
    plus this tree's schedule per cell, the bookkeeping's two all-reduces and a barrier before each
    of the 25 calls (log2 p hops each, HOP_US a hop); the timed time is 20 calls of the schedule's
    communication rows (mpi: log2 p, the latency-optimal bound: the strictest target)."""
    measured = json.loads(ranks_json.read_text())["rows"]
    at_two = [row for row in measured if row["ranks"] == 2]
    base = next((row for row in at_two if row["install"] == "after"), at_two[0])["harness_mean_ms"]
    table = []
    print(f"\nper cell against the target (base harness {base} ms at 2 ranks, {ranks_json}; "
          f"{warmup} warm-up + {iters} timed calls, a barrier each; {HOP_US} us a hop)\n")
    print("| p | impl | collective | harness per cell (ms) | timed per cell (ms) | target (ms) | within |")
    print("|---:|---|---|---:|---:|---:|---|")
    entries = [{"p": b["p"], "algorithm": "mpi", "collective": c, "rows": math.ceil(math.log2(b["p"])),
                "per_cell_ms": 0.0} for b in result["bookkeeping"] for c in ("allreduce", "allgather")]
    for entry in entries + result["schedules"]:
        hops = math.ceil(math.log2(entry["p"]))
        harness = base + entry["per_cell_ms"] + (2 + warmup + iters) * hops * HOP_US / 1e3
        timed = iters * entry["rows"] * HOP_US / 1e3
        target = 2 + 0.05 * timed
        impl = entry["algorithm"] if entry["algorithm"] == "mpi" or "hier" in entry["algorithm"] \
            else f"pccl-flat {entry['algorithm']}"
        row = {"p": entry["p"], "impl": impl, "collective": entry["collective"], "harness_ms": round(harness, 2),
               "timed_ms": round(timed, 1), "target_ms": round(target, 2), "within": harness <= target}
        table.append(row)
        print(f"| {row['p']} | {impl} | {row['collective']} | {row['harness_ms']:.2f} | {row['timed_ms']:.1f} "
              f"| {row['target_ms']:.2f} | {'yes' if row['within'] else 'NO'} |")
    return table


def steps_mode(args: argparse.Namespace) -> dict:
    if args.tree:
        sys.path.insert(0, str(Path(args.tree).resolve()))
    import collectives

    print(f"# collectives from {Path(collectives.__file__).parent}", file=sys.stderr)
    result = {"mode": "steps", "tree": str(Path(collectives.__file__).parent.parent), "hop_us": HOP_US,
              "sizes": len(SIZES), "schedules": [], "bookkeeping": []}
    print(f"pccl-flat schedule per cell over a sweep of {len(SIZES)} sizes (8 B - 8 MiB), best of 3; "
          f"tree {result['tree']}\n")
    print("| p | collective | algorithm | rows | per cell (ms) | one schedule (KiB) | kept after the sweep (KiB) |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for nranks in args.p:
        for row in schedule_costs(nranks) + hier_costs(nranks):
            result["schedules"].append(row)
            print(f"| {nranks} | {row['collective']} | {row['algorithm']} | {row['rows']} | {row['per_cell_ms']:.3f} "
                  f"| {row['schedule_bytes'] / 1024:.0f} | "
                  f"{'' if row['kept_bytes'] is None else round(row['kept_bytes'] / 1024)} |")
        result["bookkeeping"].append(bookkeeping(nranks))
    print("\n| p | per cell before: allgather(error), bytes a rank / in all | after: bytes a rank, us | "
          "per launch before: allgather, bytes in all | after: bytes a rank + leaders' names, us |")
    print("|---:|---|---|---|---|")
    for entry in result["bookkeeping"]:
        print(f"| {entry['p']} | {entry['cell_before_allgather_error_bytes_a_rank']:,} / "
              f"{entry['cell_before_allgather_error_bytes_in_all']:,} | {entry['cell_after_bytes_a_rank']}, "
              f"{entry['cell_after_us']} | {entry['launch_before_allgather_bytes_in_all']:,} | "
              f"{entry['launch_after_bytes_a_rank']} + {entry['launch_after_leaders_names_bytes']:,}, "
              f"{entry['launch_after_us']} |")
    if args.base_from:
        result["target"] = target_table(result, Path(args.base_from))
    print("\n| hosts | cells | host names a row, every name (B) | this tree (B) | parts + CSV, every name (MB) | "
          "this tree (MB) |")
    print("|---:|---:|---:|---:|---:|---:|")
    result["row_bytes"] = []
    for nhosts in (1024, 8192):
        for cells in (168, 354):  # the ci and smoke suites' cells
            entry = row_bytes(nhosts, cells)
            result["row_bytes"].append(entry)
            print(f"| {nhosts} | {cells} | {entry['row_bytes_every_name']:,} | {entry['row_bytes_this_tree']:,} "
                  f"| {entry['sweep_mb_every_name']} | {entry['sweep_mb_this_tree']} |")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    ranks = sub.add_parser("ranks")
    ranks.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 32, 64, 128])
    ranks.add_argument("--rounds", type=int, default=1)
    ranks.add_argument("--install", action="append", help="NAME=REPO, a checkout with .venv (repeatable)")
    steps = sub.add_parser("steps")
    steps.add_argument("--p", type=int, nargs="+", default=[512, 2048, 8192])
    steps.add_argument("--tree", help="another checkout whose collectives/ is timed")
    steps.add_argument("--base-from", help="a ranks-mode --json: its 2-rank harness per cell is the base of "
                                           "the per-cell target table")
    for each in (ranks, steps):
        each.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    result = ranks_mode(args) if args.mode == "ranks" else steps_mode(args)
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "when": time.strftime("%Y-%m-%d %H:%M"),
                                               "load": os.getloadavg()[0]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
