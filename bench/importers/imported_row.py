"""Build one result row of bench.results.table's schema for an imported measurement."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bench.importers.kinds import busbw_factor, ranks_in_total
from bench.plan.cells import Cell
from bench.plan.hosts import hosts_digest
from bench.results.table import SAMPLE_COLUMNS, SCHEMA_VERSION, timing_stats
from bench.results.table import make_row as table_row

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
    #: None: the tool printed a magnitude (old nccl-tests ``error``) or nothing countable
    n_wrong: int | None = 0
    iters: int = 0
    #: per-iteration times (nccl-tests -I 1 JSON ``times_us``): the cell's samples
    samples_us: list[float] | None = None
    #: the bandwidths the tool printed (GB/s), kept as printed; None: recomputed from the time
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    #: decimals of the printed time (how far a recomputed bandwidth may honestly differ)
    time_decimals: int | None = None
    #: the tool's own verdict where it is not a count (old ``error`` above its tolerance): "wrong"
    status: str | None = None
    #: what the row's ``error`` column says (the old ``error`` magnitude, a tool's note)
    note: str = ""
    #: the line of the file it was read from (0: not a line-based format)
    line: int = 0
    #: which of the runs interleaved in one table it belongs to (bench.importers.frontend.split_by_sizes)
    run: int = 0
    #: "nonblocking" for a non-blocking collective's cell (OSU osu_iallreduce ...): its time is the pure
    #: time (post + wait), and OSU's overlap columns are kept (bench/results/table.py)
    mode: str = "blocking"
    overlap_pct: float | None = None
    pure_us: float | None = None
    compute_us: float | None = None
    overall_us: float | None = None


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
    total_count = m.count_per_rank * ranks_in_total(m.collective, nranks)
    bytes_total = total_count * ITEMSIZE[m.dtype]
    cell = Cell(collective=m.collective, impl=context["impl"], algorithm="native", intra="", inter="",
                device=context["device"], nranks=nranks, nnodes=nnodes, ranks_per_node=max(nranks // nnodes, 1),
                virtual_nodes=False, dtype=m.dtype, op=m.op, placement=m.placement,
                count_per_rank=m.count_per_rank, bytes_per_rank=m.count_per_rank * ITEMSIZE[m.dtype],
                bytes_total=bytes_total, timing_mode="sync", repeat=repeat,
                hosts_digest=hosts_digest(hosts.split(",")) if hosts else "")
    # as the tool printed them, else from its mean time with nccl-tests' formulas (as the tools
    # compute theirs), not from a per-iteration median
    algbw, busbw = bandwidths(m, bytes_total, busbw_factor(m.collective, nranks))
    values = {
        **cell.to_dict(), **{name: context.get(name) for name in (
            "run_id", "suite", "launch_id", "timestamp", "hosts", "library", "library_version", "transport",
            "tool_version", "warmup")},
        "resolved_algorithm": "native", "iters": len(m.samples_us) if m.samples_us else m.iters,
        "n_wrong": m.n_wrong, "status": status_of(m), "error": m.note,
        "mpi_thread_level": "", "oversubscribed": False, "git_sha": "", "schema_version": SCHEMA_VERSION,
        "mode": m.mode, "overlap_pct": m.overlap_pct, "pure_us": m.pure_us, "compute_us": m.compute_us,
        "overall_us": m.overall_us,
    }
    stats = {"time_us_mean": m.time_us, "time_us_p50": m.time_us if m.time_us_p50 is None else m.time_us_p50,
             "time_us_p95": m.time_us_p95, "time_us_p99": m.time_us_p99, "time_us_min": m.time_us_min,
             "time_us_max": m.time_us_max, "time_us_std": None, "algbw_gbps": algbw, "busbw_gbps": busbw}
    if m.samples_us:
        stats.update(sample_stats(m.samples_us))
    return asdict(table_row(values, stats=stats))


def sample_stats(samples_us: list[float]) -> dict:
    """min/p50/p95/p99/max/std of a cell's samples, as bench.results.table.timing_stats computes them
    for a measured row (its bandwidths are not used: an imported row's come from the tool's time,
    and a collective the sweep does not run has no spec there)."""
    stats = timing_stats(samples_us, 0, "allreduce", 1)
    return {name: stats[name] for name in SAMPLE_STATS}


def status_of(m: Measurement) -> str:
    """The row's status: the tool's own verdict where it gave one, else wrong when elements were wrong."""
    return m.status or ("wrong" if m.n_wrong else "ok")


def bandwidths(m: Measurement, bytes_total: int, factor: float | None) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s: as the tool printed them where it did, else from its mean time with
    nccl-tests' formulas (algbw = bytes / time; busbw = algbw * factor, None where none is defined)."""
    algbw = bytes_total / m.time_us / 1e3 if m.time_us > 0 else None
    busbw = algbw * factor if algbw is not None and factor is not None else None
    return (algbw if m.algbw_gbps is None else m.algbw_gbps, busbw if m.busbw_gbps is None else m.busbw_gbps)


#: the printed bandwidths' last digit (nccl-tests and OSU print two decimals)
BANDWIDTH_STEP = 0.01


def bandwidth_mismatch(m: Measurement, bytes_total: int, factor: float | None) -> str | None:
    """Why the printed busbw (or algbw) is not what its printed time gives, or None when they agree
    within the rounding of both (the printed time's last decimal, the bandwidth's two decimals)."""
    if m.time_us <= 0 or m.time_decimals is None:
        return None
    time_step = 0.5 * 10.0 ** -m.time_decimals
    for name, printed, scale in (("busbw", m.busbw_gbps, factor), ("algbw", m.algbw_gbps, 1.0)):
        if printed is None or scale is None:
            continue
        recomputed = bytes_total / m.time_us / 1e3 * scale
        # the recomputation's own error from a time rounded to its last decimal, plus the printed rounding
        allowed = recomputed * time_step / max(m.time_us - time_step, time_step) + BANDWIDTH_STEP / 2 + 1e-9
        if abs(printed - recomputed) > allowed:
            return f"{name} printed {printed:g} GB/s, {recomputed:.4g} from its time {m.time_us:g} us"
    return None


def sample_rows(row: dict, samples_us: list[float]) -> list[dict]:
    """The samples table's rows of one result row (bench.results.table.SAMPLE_COLUMNS), iterations from 0."""
    identity = {name: row.get(name) for name in SAMPLE_COLUMNS[:-2]}
    return [{**identity, "iteration": iteration, "time_us": value} for iteration, value in enumerate(samples_us)]
