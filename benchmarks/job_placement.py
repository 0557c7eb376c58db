"""What placing a sweep on a batch job's hosts costs before the first launch, at scale.

    .venv/bin/python benchmarks/job_placement.py [--hosts 128] [--slots 64] [--rounds 7]

A PBS_NODEFILE of HOSTS x SLOTS lines (the ranks of one launch = HOSTS x SLOTS, 8192 by default);
per round, in one process, without a launch: the hosts read from the file (host_plan), the launches
planned (expand), the memory check, the process check and the launch's argv and environment
(job_command, which judges oversubscription), with every host's facts as a probe would give them.
Prints the median and the range over rounds of each step, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.driver import memory_check as memory
from bench.driver.launchers import Launcher
from bench.driver.launchers.mpiexec import Mpiexec
from bench.plan.suite import parse_suite
from bench.rank import hostfacts
from bench.rank.hostfacts import HostFacts
from bench.sweep.session import Sweep
from bench.sweep.where import Where, host_plan

SUITE = {"name": "job", "collectives": ["allreduce"], "implementations": ["mpi"],
         "sizes": {"min": "8B", "max": "1MiB"}}


def one_round(suite, raw: dict, launcher: Launcher, facts: dict[str, HostFacts]) -> dict[str, float]:
    times: dict[str, float] = {}
    started = time.perf_counter()
    plan = host_plan(suite, launcher)
    times["host_plan"] = time.perf_counter() - started
    where = Where(plan, launcher, facts)
    started = time.perf_counter()
    sweep = Sweep.of(suite, where, document=raw)  # the launches, expanded once
    times["expand"] = time.perf_counter() - started
    started = time.perf_counter()
    sweep.check_fits()
    times["memory check"] = time.perf_counter() - started
    started = time.perf_counter()
    memory.check_processes(sweep.launches, where.process_room, "suite")
    times["process check"] = time.perf_counter() - started
    started = time.perf_counter()
    for launch in sweep.launches:
        sweep.job_command(launch, "plan.json")
    times["job_command"] = time.perf_counter() - started
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    for name in ("HYDRA_HOST_FILE", "OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile"):
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory() as folder:
        nodefile = Path(folder) / "nodefile"
        nodefile.write_text("".join(f"node{host:05d}\n" * args.slots for host in range(args.hosts)))
        os.environ["PBS_NODEFILE"] = str(nodefile)
        raw = {**SUITE, "ranks": [args.hosts * args.slots]}
        suite = parse_suite(raw, "suite")
        free = 64 << 30
        facts = {f"node{host:05d}": HostFacts(f"node{host:05d}", f"node{host:05d}", f"boot{host}", args.slots, free,
                                              "MemAvailable") for host in range(args.hosts)}
        hostfacts.local()  # warm: the first read of /proc is not the planning's cost
        rounds = [one_round(suite, raw, Mpiexec.for_flavour("mpich", "mpiexec"), facts) for _ in range(args.rounds)]
    print(f"{args.hosts} hosts x {args.slots} slots = {args.hosts * args.slots} ranks, {args.rounds} rounds "
          "(median [min, max] ms)")
    for step in rounds[0]:
        values = [one[step] * 1e3 for one in rounds]
        print(f"  {step:14s} {statistics.median(values):8.2f}  [{min(values):.2f}, {max(values):.2f}]")


if __name__ == "__main__":
    main()
