"""The lab's links as MPI sees them: 8 B one-way latency and 1 MiB bandwidth between two namespace
hosts, for each link setting, interleaved round by round (docs/LAB.md, "Measured links").

    python benchmarks/lab_links.py [--rounds 5] [--json benchmarks/data/lab/links.json]   # as root

Brings up a lab of its own (``links``: h1, h2), and in every round runs, in a rotated order, each
setting: the kernel bridge; the emulator with 1 us (its floor), 50 us and 200 us of delay; 1 Gbit/s;
50 us + 1 Gbit/s. For each, tests/mpi_scripts/pingpong.py (mpiexec -hosts h1:1,h2:1, MPI_Send/Recv
round trips, one way = half) gives the median one-way time of 8 B (300 round trips) and of 1 MiB
(30), the rate of 1 MiB sent both ways at once (30 MPI_Sendrecv exchanges: both directions' bytes
over the median exchange; what the link setting lets through in all, the lab model's fabric
rate, benchmarks/lab_model.py), the 8 B exchange of one pair of ranks across the hosts while a
second pair waits and while it exchanges too (two ranks a host, as busy as the lab's 4-rank cells; in
turns, 20 blocks of 100 exchanges each; half the difference within a block, the median over blocks, is
what each further message in flight adds, the lab model's cost per message), and the emulator's
own figures: how late frames left against their due time (p50 and p90, as the bound of its
power-of-two histogram bucket) and the CPU it used per second of the run.
Quoted: the median over rounds, and the range.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from in_lab import ROOT, arguments, on_login, own_lab  # beside this script

from bench.driver.launchers.mpiexec import find_mpiexec
from bench.lab import lab as lab_ops
from bench.lab import links
from bench.lab.state import Link

LAB = "links"
SETTINGS = {
    "bridge": Link(),
    "emulated, 1 us": Link(delay_us=1),
    "50 us": Link(delay_us=50),
    "200 us": Link(delay_us=200),
    "1 Gbit/s": Link(rate_gbit=1),
    "50 us + 1 Gbit/s": Link(delay_us=50, rate_gbit=1),
}
SMALL, LARGE = 8, 1 << 20


def pingpong(size: int, repeats: int, mode: str = "pingpong", per_host: int = 1) -> dict:
    argv = [find_mpiexec() or "mpiexec", "-hosts", f"h1:{per_host},h2:{per_host}", "-n", str(2 * per_host),
            sys.executable,
            str(ROOT / "tests" / "mpi_scripts" / "pingpong.py"), str(size), str(repeats), mode]
    result = on_login(LAB, argv, 300)
    if result.returncode != 0:
        raise SystemExit(f"pingpong failed: {result.stderr[-1000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])[str(size)]


def measure(name: str, link: Link) -> dict:
    lab_ops.set_link(LAB, link)
    started = time.monotonic()
    small = pingpong(SMALL, 300)
    large = pingpong(LARGE, 30)
    both = pingpong(LARGE, 30, "exchange")
    # 4 busy ranks on 2 cores: which two run varies over tens of ms, so the arms in turns, 20 blocks of 100 each
    pairs = pingpong(SMALL, 100, "pairs", per_host=2)
    wall = time.monotonic() - started
    figures = {"small_us": small["p50_us"], "small_min_us": small["min_us"], "large_gbps": large["gbps"],
               "duplex_gbps": both["gbps"], **pairs}
    if link.emulated:
        lab = lab_ops.load(LAB)
        links.stop_emulator(lab)  # it writes its last figures as it ends
        stats = json.loads((lab.path / "switch.json").read_text())
        figures["late_p50_us"] = bucket_bound(stats["late_hist_us"], 0.5)
        figures["late_p90_us"] = bucket_bound(stats["late_hist_us"], 0.9)
        figures["cpu_share"] = stats["cpu_s"] / wall
        figures["spin_us"] = stats["spin_us"]
    return figures


def bucket_bound(counts: list[int], share: float) -> float:
    """The upper bound (us) of the histogram bucket holding the ``share`` quantile (buckets < 1 us,
    [1, 2), [2, 4) ...)."""
    total, seen = sum(counts), 0
    for index, count in enumerate(counts):
        seen += count
        if total and seen >= share * total:
            return float(2 ** index)
    return float("inf")


def summary(rounds: list[dict]) -> dict:
    out = {}
    for name in SETTINGS:
        runs = [one[name] for one in rounds]
        out[name] = {key: {"median": statistics.median(run[key] for run in runs),
                           "low": min(run[key] for run in runs), "high": max(run[key] for run in runs)}
                     for key in runs[0]}
    return out


def table(result: dict) -> str:
    base = result["bridge"]["small_us"]["median"]
    lines = ["| link | 8 B one way, us (range) | bridge + delay | 1 MiB, GB/s (range) | set rate, GB/s | "
             "1 MiB both ways at once, GB/s in all (range) | 8 B exchange, 1 pair / 2 pairs at once, us | "
             "per further message, us (range) | frames late, p50 / p90 | emulator CPU |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, link in SETTINGS.items():
        row = result[name]
        small, large = row["small_us"], row["large_gbps"]
        emulator = (f"< {row['late_p50_us']['median']:g} / < {row['late_p90_us']['median']:g} us | "
                    f"{row['cpu_share']['median']:.0%}" if "cpu_share" in row else "- | -")
        rate = f"{link.rate_gbit / 8:.3f}" if link.rate_gbit else "-"
        both = row["duplex_gbps"]
        pairs = (f"{row['pair_us']['median']:.1f} / {row['two_pairs_us']['median']:.1f}" if "pair_us" in row
                 else "-")
        message = row.get("message_us")
        pairs += (f" | {message['median']:.1f} ({message['low']:.1f}-{message['high']:.1f})" if message else " | -")
        lines.append(f"| {name} | {small['median']:.1f} ({small['low']:.1f}-{small['high']:.1f}) | "
                     f"{base + link.delay_us:.1f} | {large['median']:.3f} ({large['low']:.3f}-{large['high']:.3f}) | "
                     f"{rate} | {both['median']:.3f} ({both['low']:.3f}-{both['high']:.3f}) | {pairs} | {emulator} |")
    return "\n".join(lines)


def main() -> None:
    args = arguments(__doc__, rounds=5)
    rounds = []
    with own_lab(LAB, 2):
        names = list(SETTINGS)
        for index in range(args.rounds):
            order = names[index % len(names):] + names[:index % len(names)]  # rotated: drift lands on all
            rounds.append({name: measure(name, SETTINGS[name]) for name in order})
            print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    result = summary(rounds)
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rounds": rounds, "summary": result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
