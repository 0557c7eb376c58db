"""Time and peak memory of ``pccl-bench import nccl-tests`` on a large, realistic log.

    python benchmarks/import_large.py [--mb 200] [--json benchmarks/data/inputs/import-large.json] [--keep DIR]

Generates a log of ``--mb`` MB in a temp folder, as a Slurm job writes it when it runs
``all_reduce_perf -b 8 -e 8G -f 2`` again and again: every run prints its full header (versions,
``# nThread``, 16 ``#  Rank`` lines over 2 nodes with new pids, the column header), 31 result lines
(8 B .. 8 GiB, out-of-place and in-place: 62 cells), the bandwidth summary, and a few NCCL INFO
lines between runs. Then runs ``python -m bench import nccl-tests LOG --out DIR`` in a subprocess
and measures its wall time and peak resident memory (``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of
the child alone: the generator runs in this process, not a child).

The target of the issue: 200 MB in <= 60 s with <= 1 GiB peak. The machine may be shared: the
wall time is an upper bound, the peak memory is not affected.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NRANKS, GPUS_PER_NODE = 16, 8
SIZES = [8 << shift for shift in range(31)]  # -b 8 -e 8G -f 2
TARGET_S, TARGET_RSS_MIB = 60.0, 1024.0


def _run_text(run: int, rng: random.Random) -> str:
    """One all_reduce_perf run as nccl-tests 2.13 prints it (the layout of tests/data/nccl-tests)."""
    base_pid = 40000 + (run * 37) % 20000
    lines = [
        "# nccl-tests version 2.13.8 nccl-headers=21803 nccl-library=21803",
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for rank in range(NRANKS):
        host = f"nid{1 + rank // GPUS_PER_NODE:06d}"
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {base_pid + rank:6d} on {host:>10s} device "
                     f"{rank % GPUS_PER_NODE:2d} [0x{7 + 4 * (rank % GPUS_PER_NODE):02x}] NVIDIA A100-SXM4-40GB")
    lines += [
        "#",
        "#                                                              out-of-place                       in-place"
        "          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
        "(GB/s)       ",
    ]
    factor = 2 * (NRANKS - 1) / NRANKS
    for size in SIZES:
        row = [f"{size:12d}  {size // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"]
        for _ in ("out_of_place", "in_place"):
            time_us = (22.0 + size / 180e3) * rng.uniform(0.97, 1.05)
            algbw = size / time_us / 1e3
            row.append(f"  {time_us:7.2f}  {algbw:6.2f}  {algbw * factor:6.2f}  {0:6d}")
        lines.append("".join(row))
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {rng.uniform(40, 60):.4f} ", "#",
              "# Collective test concluded: all_reduce_perf", "#"]
    # NCCL_DEBUG=WARN/INFO noise a job log carries between runs
    lines += [f"nid000001:{base_pid}:{base_pid + 90} [0] NCCL INFO comm 0x5581 rank 0 nranks {NRANKS} cudaDev 0 "
              f"busId 7000 - Destroy COMPLETE" for _ in range(3)]
    return "\n".join(lines) + "\n"


def generate(path: Path, megabytes: float | None = None, runs: int | None = None, seed: int = 1) -> dict:
    """Write runs until the file holds ``megabytes`` MB (10**6 bytes), or ``runs`` runs; what it holds."""
    rng = random.Random(seed)
    target = int(megabytes * 1e6) if megabytes is not None else None
    wanted = runs
    written = runs = 0
    with path.open("w") as handle:
        while (written < target) if target is not None else (runs < (wanted or 0)):
            text = _run_text(runs, rng)
            handle.write(text)
            written += len(text)
            runs += 1
    return {"bytes": written, "runs": runs, "result_lines": runs * len(SIZES), "cells": runs * len(SIZES) * 2}


def measure(log: Path, out: Path, timeout: float) -> dict:
    """Wall time, peak RSS and exit code of ``pccl-bench import nccl-tests LOG --out OUT`` (a child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench", "import", "nccl-tests", str(log), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kib = after.ru_maxrss  # Linux: KiB, the largest child so far
    if peak_kib <= before.ru_maxrss:
        raise SystemExit("a child earlier than the import used more memory: run this script on its own")
    # CPU seconds too: on a shared machine the wall time includes waiting for a core
    return {"exit_code": done.returncode, "wall_s": round(wall, 2), "peak_rss_mib": round(peak_kib / 1024, 1),
            "user_s": round(after.ru_utime - before.ru_utime, 2),
            "system_s": round(after.ru_stime - before.ru_stime, 2),
            "stdout": done.stdout.strip()[-400:], "stderr": done.stderr.strip()[-400:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200.0, help="size of the generated log, MB (default 200)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--keep", type=Path, help="generate into (and keep) this folder instead of a temp one")
    parser.add_argument("--timeout", type=float, default=600.0, help="give the import up after this many seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="import-large-") as temp:
        folder = args.keep or Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "slurm-all_reduce_perf.out"
        started = time.perf_counter()
        generated = generate(log, args.mb)
        generate_s = time.perf_counter() - started
        out = folder / "imported"
        figures = measure(log, out, args.timeout)
        written = {p.name: p.stat().st_size for p in sorted(out.iterdir())} if out.is_dir() else {}
    report = {
        "command": f"python benchmarks/import_large.py --mb {args.mb:g}",
        "log": {**generated, "megabytes": round(generated["bytes"] / 1e6, 1), "generate_s": round(generate_s, 1)},
        "import": figures, "written_bytes": written,
        "target": {"wall_s": TARGET_S, "peak_rss_mib": TARGET_RSS_MIB},
        "within_target": figures["exit_code"] == 0 and figures["wall_s"] <= TARGET_S
        and figures["peak_rss_mib"] <= TARGET_RSS_MIB,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
    print(f"log: {report['log']['megabytes']} MB, {generated['runs']} runs, {generated['result_lines']} result "
          f"lines, {generated['cells']} cells")
    print(f"import: exit {figures['exit_code']}, {figures['wall_s']} s wall ({figures['user_s']} s user, "
          f"{figures['system_s']} s system), {figures['peak_rss_mib']} MiB peak RSS "
          f"(target <= {TARGET_S:g} s, <= {TARGET_RSS_MIB:g} MiB): "
          + ("within" if report["within_target"] else "NOT within"))
    if figures["exit_code"]:
        print(f"stderr: {figures['stderr']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    sys.exit(0 if report["within_target"] else 1)


if __name__ == "__main__":
    main()
