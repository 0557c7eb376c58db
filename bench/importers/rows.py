"""Build one result row of bench.results.table's schema for an imported measurement."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bench.plan.cells import Cell
from bench.plan.hosts import hosts_digest
from bench.results.table import SAMPLE_COLUMNS, SCHEMA_VERSION, timing_stats
from bench.results.table import make_row as table_row
from collectives.spec import busbw_factor

#: element sizes of the types other tools print (pccl-bench's own names where they exist)
ITEMSIZE = {"int8": 1, "uint8": 1, "char": 1, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4,
            "float32": 4, "int64": 8, "uint64": 8, "float64": 8, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass
class ImportOptions:
    """What the files may not say: given on the command line, else parsed, else these defaults."""

    nranks: int | None = None
    nnodes: int | None = None
    collective: str | None = None
    impl: str | None = None
    device: str | None = None
    library: str | None = None
    library_version: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass(slots=True)
class Measurement:
    """One size of one tool's output, in the tool's own terms converted to pccl-bench's (slots: an
    import makes millions)."""

    collective: str
    dtype: str
    op: str
    count_per_rank: int
    placement: str
    time_us: float
    time_us_min: float | None = None
    time_us_max: float | None = None
    #: a real per-iteration median/tail where the tool prints one (nccl-tests -I JSON, OSU P50/P95/P99)
    time_us_p50: float | None = None
    time_us_p95: float | None = None
    time_us_p99: float | None = None
    n_wrong: int = 0
    iters: int = 0
    #: per-iteration times (nccl-tests -I 1 JSON ``times_us``): the cell's samples
    samples_us: list[float] | None = None


#: order statistics that come from the samples when a measurement has them
SAMPLE_STATS = ("time_us_min", "time_us_p50", "time_us_p95", "time_us_p99", "time_us_max", "time_us_std")


def make_row(m: Measurement, context: dict, repeat: int = 0) -> dict:
    """A full row: ``context`` holds run_id, suite, launch_id, timestamp, impl, device, nranks, nnodes,
    hosts, library, library_version, transport, tool_version, warmup. The placement the file says
    ran is the cell's (planned: an import has no plan of its own), its hosts' digest in the key. ``repeat`` numbers the
    occurrences of one cell in an import (several files, nccl-tests ``-N`` cycles).

    With samples, min/p50/p95/p99/max/std are pccl-bench's own statistics of them
    (bench.results.table.timing_stats: numpy median and linearly interpolated percentiles), exactly as for a
    measured row, so ``time_us_p50`` is the median the gate compares; the mean and the bandwidths stay
    the tool's reported time."""
    nranks, nnodes = int(context["nranks"]), int(context["nnodes"])
    hosts = context.get("hosts") or ""
    total_count = m.count_per_rank if m.collective == "allreduce" else m.count_per_rank * nranks
    bytes_total = total_count * ITEMSIZE[m.dtype]
    cell = Cell(collective=m.collective, impl=context["impl"], algorithm="native", intra="", inter="",
                device=context["device"], nranks=nranks, nnodes=nnodes, ranks_per_node=max(nranks // nnodes, 1),
                virtual_nodes=False, dtype=m.dtype, op=m.op, placement=m.placement,
                count_per_rank=m.count_per_rank, bytes_per_rank=m.count_per_rank * ITEMSIZE[m.dtype],
                bytes_total=bytes_total, timing_mode="sync", repeat=repeat,
                hosts_digest=hosts_digest(hosts.split(",")) if hosts else "")
    # recomputed from the tool's mean time, as the tools compute theirs (they print two decimals;
    # the formulas are nccl-tests' own), not from a per-iteration median
    algbw = bytes_total / m.time_us / 1e3 if m.time_us > 0 else None
    busbw = algbw * busbw_factor(m.collective, nranks) if algbw is not None else None
    values = {
        **cell.to_dict(), **{name: context.get(name) for name in (
            "run_id", "suite", "launch_id", "timestamp", "hosts", "library", "library_version", "transport",
            "tool_version", "warmup")},
        "resolved_algorithm": "native", "iters": len(m.samples_us) if m.samples_us else m.iters,
        "n_wrong": m.n_wrong, "status": "wrong" if m.n_wrong else "ok", "error": "",
        "mpi_thread_level": "", "oversubscribed": False, "git_sha": "", "schema_version": SCHEMA_VERSION,
    }
    stats = {"time_us_mean": m.time_us, "time_us_p50": m.time_us if m.time_us_p50 is None else m.time_us_p50,
             "time_us_p95": m.time_us_p95, "time_us_p99": m.time_us_p99, "time_us_min": m.time_us_min,
             "time_us_max": m.time_us_max, "time_us_std": None, "algbw_gbps": algbw, "busbw_gbps": busbw}
    if m.samples_us:
        sampled = timing_stats(m.samples_us, bytes_total, m.collective, nranks)
        stats.update({name: sampled[name] for name in SAMPLE_STATS})
    return asdict(table_row(values, stats=stats))


def sample_rows(row: dict, samples_us: list[float]) -> list[dict]:
    """The samples table's rows of one result row (bench.results.table.SAMPLE_COLUMNS), iterations from 0."""
    identity = {name: row.get(name) for name in SAMPLE_COLUMNS[:-2]}
    return [{**identity, "iteration": iteration, "time_us": value} for iteration, value in enumerate(samples_us)]
