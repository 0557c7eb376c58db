"""pccl-bench as a ReFrame check: a tiny sweep whose medians and bus bandwidths become ReFrame
performance variables, with per-system references, so sites that run ReFrame get the
collectives' numbers (and their regressions) in the pipelines they already have.

    reframe -C reframe_checks/settings.py -c reframe_checks/pccl_bench_check.py -r

The sweep runs through ``pccl-bench run sweep`` (its own launcher: mpiexec here; set
``launcher=srun`` on a Slurm partition), so ReFrame's launcher only starts that one command.
A performance line per figure (``PCCL_PERF <name> <value> <unit>``) is printed after the sweep
from its results.csv; the performance functions read those lines.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_before, sanity_function, variable

#: the figures: (collective, implementation label, total bytes) -> "<collective>_<impl>_<bytes>B"
COLLECTIVES = ("allgather", "allreduce")
IMPLEMENTATIONS = ("mpi", "pccl-flat:ring")
SIZES_BYTES = (8, 1024)
#: prints one "PCCL_PERF name value unit" line per ok row of results.csv (time, then bus bandwidth)
REPORT = """
import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    if row["status"] != "ok":
        continue
    impl = row["impl"] if row["impl"] == "mpi" else row["impl"] + ":" + row["algorithm"]
    name = row["collective"] + "_" + impl.replace(":", "_").replace("-", "_") + "_" + row["bytes_total"] + "B"
    print("PCCL_PERF", name + "_p50", row["time_us_p50"], "us")
    print("PCCL_PERF", name + "_busbw", row["busbw_gbps"], "GB/s")
"""


def figure_name(collective: str, impl: str, nbytes: int) -> str:
    return f"{collective}_{impl.replace(':', '_').replace('-', '_')}_{nbytes}B"


#: references per system:partition: (value, lower, upper, unit), thresholds as fractions of the
#: value. The local entries only show the mechanism on a shared 2-core CI machine (MPICH wheel, 2
#: ranks): a figure fails beyond 1000x the reference. Descheduled ranks on that machine put whole
#: timeslices in a median (8 ms against 50 us at load 8.6, which a 20x bound failed): a site's own
#: entries, on its own nodes, are where a bound means something. '*' records without judging.
LOCAL_TIME_US = {8: 50.0, 1024: 80.0}
LOCAL_UPPER = 1000.0
REFERENCE = {
    "local:default": {f"{figure_name(c, i, b)}_p50": (LOCAL_TIME_US[b], -1.0, LOCAL_UPPER, "us")
                      for c in COLLECTIVES for i in IMPLEMENTATIONS for b in SIZES_BYTES},
    "*": {f"{figure_name(c, i, b)}_p50": (0, None, None, "us")
          for c in COLLECTIVES for i in IMPLEMENTATIONS for b in SIZES_BYTES},
}


@rfm.simple_test
class PcclBenchSweep(rfm.RunOnlyRegressionTest):
    """2 ranks, all-gather and all-reduce, MPI against the pccl-flat ring, 8 B and 1 KiB."""

    descr = "pccl-bench sweep: collective medians and bus bandwidths as performance variables"
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    #: pccl-bench's own launcher (auto | mpiexec | srun | none)
    launcher = variable(str, value="auto")
    #: ranks of the sweep (one MPI job)
    nranks = variable(int, value=2)
    #: the pccl-bench command; default: the one beside the Python running ReFrame
    pccl_bench = variable(str, value=str(Path(sys.executable).with_name("pccl-bench")))
    num_tasks = 1  # ReFrame starts one process: pccl-bench launches the ranks itself
    time_limit = "5m"
    reference = REFERENCE
    tags = {"pccl-bench", "collectives"}

    @run_before("run")
    def write_suite(self) -> None:
        suite = (f"name: reframe\ncollectives: [{', '.join(COLLECTIVES)}]\n"
                 "implementations: [mpi, {impl: pccl-flat, algorithms: [ring]}]\n"
                 f"ranks: [{self.nranks}]\nsizes: {{min: {SIZES_BYTES[0]}B, max: {SIZES_BYTES[-1]}B, "
                 f"factor: {SIZES_BYTES[-1] // SIZES_BYTES[0]}}}\n"
                 "timing: {warmup: 5, iters: 50, min_iters: 10, budget_s: 0.2}\n")
        Path(self.stagedir, "suite.yaml").write_text(suite)
        self.executable = shlex.quote(self.pccl_bench)
        self.executable_opts = ["run", "sweep", "suite.yaml", "--out", "run", "--launcher", self.launcher]
        self.postrun_cmds = [f"{shlex.quote(sys.executable)} -c {shlex.quote(REPORT)} run/results.csv"]

    @sanity_function
    def sweep_passed(self):
        """Every cell ok and bit-exact: pccl-bench exits 0 and its status line is '<n> ok -> ...'
        (any wrong, failed or timed-out cell would stand in that line before or after 'ok')."""
        return sn.all([
            sn.assert_eq(self.job.exitcode, 0),
            sn.assert_found(r"^\d+ ok -> \S*results\.parquet", self.stdout),
            sn.assert_eq(sn.count(sn.findall(r"^PCCL_PERF \S+_p50 ", self.stdout)),
                         len(COLLECTIVES) * len(IMPLEMENTATIONS) * len(SIZES_BYTES)),
        ])

    @run_before("performance")
    def set_perf_variables(self) -> None:
        """Each figure's median (us) and bus bandwidth (GB/s), read from its PCCL_PERF line."""
        self.perf_variables = {}
        for collective in COLLECTIVES:
            for impl in IMPLEMENTATIONS:
                for nbytes in SIZES_BYTES:
                    name = figure_name(collective, impl, nbytes)
                    for suffix, unit in (("_p50", "us"), ("_busbw", "GB/s")):
                        value = sn.extractsingle(rf"^PCCL_PERF {name}{suffix} (\S+) ", self.stdout, 1, float)
                        self.perf_variables[name + suffix] = sn.make_performance_function(value, unit)
