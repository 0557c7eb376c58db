"""Does an MPI setting slow a cell by the same amount with and without co-tenants? (docs/GATE-EVALUATION.md, "Arms in
launches of their own": the "unaffected" cells that `ab` flagged under load.)

Blocks alternate quiet and loaded (``--load-procs`` co-tenants, scripts/evaluate_gate.py's kind: each
busy-spins for random 0.3-3 s with 0.3-3 s pauses). A block is one ``pccl-bench run sweep`` of
suites/ci-ab.yaml as committed (arms base and cand: MPICH without its shared-memory collectives, launch pairs
alternating ABBA), restricted by ``--set`` to the cells in question, ``--pairs`` launch pairs. Per cell and
condition: the median over all that condition's launch pairs of the pair's ratio cand/base (each launch's
median time), with its 95% distribution-free interval (order statistics of the pairs' ratios), and the same
per block, so a condition's spread between blocks is in view.

    .venv/bin/python benchmarks/setting_effect.py --blocks 3 --pairs 10
        --json benchmarks/data/gate-eval/setting-effect.json
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from evaluate_gate import start_load, stop_load  # noqa: E402

#: the cells docs/GATE-EVALUATION.md's loaded collections flagged although quiet rounds left them within 5%, and the
#: quiet install collection's two: 32 KiB and 256 KiB (sizes of suites/ci-ab.yaml)
DEFAULT_SETS = ("sizes.min=32KiB", "sizes.max=256KiB")


def order_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval of the median: the order statistics a binomial(n, 1/2) leaves outside."""
    ordered = np.sort(values)
    n = len(ordered)
    cumulative = np.cumsum([math.comb(n, k) / 2**n for k in range(n + 1)])
    low = int(np.searchsorted(cumulative, (1 - level) / 2, side="right"))
    if low == 0 or n - 1 - low < low:
        return float("nan"), float("nan")
    return float(ordered[low - 1]), float(ordered[n - low])


def block(out: Path, pairs: int, sets: list[str]) -> pd.DataFrame:
    """One sweep of ci-ab's two arms: every launch pair's ratio cand/base per cell."""
    argv = [sys.executable, "-m", "bench", "run", "sweep", str(ROOT / "suites" / "ci-ab.yaml"), "--out", str(out),
            "--set", f"repeats={pairs}", *(arg for item in sets for arg in ("--set", item))]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"sweep failed ({result.returncode}): {result.stderr[-2000:]}")
    frame = pd.read_parquet(out / "results.parquet")
    frame = frame[frame["status"] == "ok"]
    key = ["collective", "impl", "algorithm", "bytes_total", "repeat"]
    wide = frame.pivot_table(index=key, columns="arm", values="time_us_p50").dropna().reset_index()
    return wide.assign(ratio=wide["cand"] / wide["base"]).drop(columns=["base", "cand"])


def summary(pairs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (collective, impl, algorithm, size, condition), group in pairs.groupby(
            ["collective", "impl", "algorithm", "bytes_total", "condition"]):
        low, high = order_interval(group["ratio"].to_numpy())
        per_block = group.groupby("block")["ratio"].median()
        rows.append({"collective": collective, "impl": f"{impl}:{algorithm}", "bytes": int(size),
                     "condition": condition, "pairs": len(group), "ratio": round(float(group["ratio"].median()), 3),
                     "low": round(low, 3), "high": round(high, 3),
                     "blocks": [round(float(value), 3) for value in per_block]})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=3, help="blocks of each condition, alternating")
    parser.add_argument("--pairs", type=int, default=10, help="launch pairs per block")
    parser.add_argument("--load-procs", type=int, default=1)
    parser.add_argument("--set", dest="sets", action="append", help=f"suite overrides (default: {DEFAULT_SETS})")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sets = args.sets or list(DEFAULT_SETS)
    collected = []
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.blocks):
            for condition in ("quiet", f"load{args.load_procs}"):
                children = start_load(args.load_procs, seed=26 + index) if condition != "quiet" else []
                try:
                    pairs = block(Path(scratch) / f"{index}-{condition}", args.pairs, sets)
                finally:
                    stop_load(children)
                collected.append(pairs.assign(condition=condition, block=index))
                print(f"block {index} {condition}: {len(pairs)} pair ratios", flush=True)
    table = summary(pd.concat(collected, ignore_index=True))
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.max_colwidth", 60):
        print(table.to_string(index=False))
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "sets": sets, "cells": table.to_dict("records")},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()
