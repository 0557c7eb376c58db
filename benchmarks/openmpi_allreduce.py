"""The MPI library's own large all-reduce under its tuning knobs, interleaved (docs/OPENMPI.md).

Each variant is one ``mpiexec -n 2 python -c ...`` job timing MPI_Allreduce (float32 sum, out of
place, a barrier before each call, time = max over ranks, as pccl-bench's sync mode) on the sizes
asked for; the variants run round-robin ``--rounds`` times and the table gives the median over rounds
of each job's median (the machine's load moves between rounds: compare within a round), and in brackets the fastest call
seen (what the algorithm costs when neither rank is descheduled).

    python benchmarks/openmpi_allreduce.py                        # the Open MPI knobs, 1 and 4 MiB
    python benchmarks/openmpi_allreduce.py --variants default     # any MPI (MPICH too)
    python benchmarks/openmpi_allreduce.py --explain              # what Open MPI chose, from its verbose output

Run it with the Python of the venv whose mpi4py loads the MPI to look at (its mpiexec is used).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.driver.launchers import BASE_ENV, mpi_flavour  # noqa: E402
from bench.driver.launchers.mpiexec import find_mpiexec  # noqa: E402

#: the timed job: prints one JSON line from rank 0
JOB = r"""
import json, sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
out = {}
for size in map(int, sys.argv[1].split(",")):
    send = np.ones(size // 4, dtype=np.float32)
    recv = np.zeros_like(send)
    for _ in range(5):
        comm.Allreduce(send, recv, op=MPI.SUM)
    times = np.empty(int(sys.argv[2]))
    for i in range(len(times)):
        comm.Barrier()
        start = time.perf_counter()
        comm.Allreduce(send, recv, op=MPI.SUM)
        times[i] = time.perf_counter() - start
    worst = np.empty_like(times)
    comm.Allreduce(times, worst, op=MPI.MAX)
    assert recv[0] == comm.Get_size()
    out[size] = [float(np.median(worst) * 1e6), float(worst.min() * 1e6)]
if comm.Get_rank() == 0:
    print("RESULT " + json.dumps(out))
"""


def open_mpi_major() -> int:
    from mpi4py import MPI

    found = re.search(r"Open MPI v(\d+)", MPI.Get_library_version())
    return int(found.group(1)) if found else 0


Variant = tuple[list[str], dict[str, str]]  # extra mpiexec arguments, extra environment of the ranks


def variants(major: int) -> dict[str, Variant]:
    """name -> variant."""
    # the single-copy (CMA/XPMEM/KNEM) choice: vader's parameter in 4, the smsc framework in 5
    no_single_copy = (["--mca", "btl_vader_single_copy_mechanism", "none"] if major and major < 5
                      else ["--mca", "smsc", "^cma,xpmem,knem"])
    table: dict[str, Variant] = {
        "default": ([], {}), "pccl-bench env": ([], dict(BASE_ENV)),
        "single copy none": (no_single_copy, {}),
        "yield when idle": (["--mca", "mpi_yield_when_idle", "1"], {})}
    # coll/tuned's all-reduce algorithms: 1 basic linear, 2 nonoverlapping, 3 recursive doubling,
    # 4 ring, 5 segmented ring, 6 rabenseifner
    for number, name in ((2, "nonoverlapping"), (3, "recursive doubling"), (4, "ring"), (6, "rabenseifner")):
        table[f"tuned {number} {name}"] = (["--mca", "coll_tuned_use_dynamic_rules", "1",
                                            "--mca", "coll_tuned_allreduce_algorithm", str(number)], {})
    return table


def run_job(mpiexec: str, variant: Variant, sizes: str, iters: int, nranks: int) -> dict[int, list[float]]:
    """{bytes: [median us, min us]} of one job."""
    extra, extra_env = variant
    argv = [mpiexec]
    if mpi_flavour() == "openmpi" and os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    argv += [*extra, "-n", str(nranks), sys.executable, "-c", JOB, sizes, str(iters)]
    # ranks on this host inherit mpiexec's environment (hydra and Open MPI alike)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, **extra_env})
    for line in result.stdout.splitlines():
        if line.startswith("RESULT "):
            return {int(size): value for size, value in json.loads(line[7:]).items()}
    raise SystemExit(f"{' '.join(argv[:-4])}: no result (exit {result.returncode}): {result.stderr[-400:]}")


def explain(mpiexec: str) -> None:
    """The components Open MPI picked for COMM_WORLD and its shared-memory BTL's single-copy mechanism."""
    argv = [mpiexec, "--allow-run-as-root"] if os.geteuid() == 0 else [mpiexec]
    argv += ["--mca", "coll_base_verbose", "10", "--mca", "btl_base_verbose", "30", "-n", "2",
             sys.executable, "-c", JOB, str(4 << 20), "3"]
    job = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    text = job.stdout + job.stderr  # the verbose lines go to stderr
    wanted = re.compile(r"comm_select: selecting|single.copy|Using \w+ btl|disqualif|pick me|smsc|cma|xpmem|knem", re.I)
    for line in sorted({re.sub(r"^\[[^\]]*\]\s*", "", line) for line in text.splitlines() if wanted.search(line)}):
        print(line)
    info = Path(mpiexec).with_name("ompi_info")
    params = subprocess.run([str(info), "--all", "--parsable"], capture_output=True, text=True).stdout
    for line in params.splitlines():
        if re.search(r"single_copy_mechanism:value|coll_tuned_priority:value|coll_han_priority:value"
                     r"|_eager_limit:value|coll_tuned_use_dynamic_rules:value|mca:smsc:base:param:smsc:value", line):
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=f"{1 << 20},{4 << 20}", help="bytes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--nranks", type=int, default=2)
    parser.add_argument("--variants", default="", help="comma-separated names (default: all)")
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    mpiexec = find_mpiexec() or "mpiexec"
    if args.explain:
        explain(mpiexec)
        return
    table = variants(open_mpi_major()) if mpi_flavour() == "openmpi" else {"default": ([], {})}
    chosen = [name for name in args.variants.split(",") if name] or list(table)
    unknown = [name for name in chosen if name not in table]
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(table)})")
    times: dict[str, dict[int, list[list[float]]]] = {name: {} for name in chosen}
    for _ in range(args.rounds):
        for name in chosen:
            for size, value in run_job(mpiexec, table[name], args.sizes, args.iters, args.nranks).items():
                times[name].setdefault(size, []).append(value)
    from mpi4py import MPI

    version = MPI.Get_library_version().splitlines()[0].split(",")[0]
    print(f"{version}; {args.nranks} ranks; us: median over {args.rounds} rounds of each job's median"
          " (min over rounds of each job's fastest call)")
    sizes = sorted({size for by_size in times.values() for size in by_size})
    print("| variant | " + " | ".join(f"{size >> 10} KiB" for size in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name in chosen:
        cells = [f"{statistics.median(t[0] for t in times[name][size]):.0f} "
                 f"({min(t[1] for t in times[name][size]):.0f})" for size in sizes]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
