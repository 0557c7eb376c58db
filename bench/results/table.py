"""The tidy result table: one row per cell, per-iteration samples in a long table.

Columns are a contract with the gate, plots and reports: add, never rename.
Files are written atomically (temp files renamed into place: bench/results/writer.py).

Placement: ``nnodes``, ``ranks_per_node``, ``virtual_nodes``, ``hosts`` and ``hosts_digest`` are
where the launch's ranks really were (its topology), as the table has always shown them and the gate
matches them; ``planned_nnodes``, ``planned_ranks_per_node``, ``planned_virtual_nodes`` and
``planned_hosts_digest`` are where the plan put them, what ``cell_key`` hashes (docs/TABLE.md).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from bench.files import atomic_write  # noqa: F401  (the atomic file write, imported from here by callers)
from bench.plan.cells import CELL_KEY
from bench.results.writer import RunFolderWriter
from collectives.spec import busbw_factor

#: 2: cell_key holds the planned placement (bench.plan.cells.CELL_KEY_VERSION), which has columns of its own
SCHEMA_VERSION = 2
#: the schemas this version reads: a schema-1 table or run folder (keys without placement) still
#: loads, resumes and gates; its rows say ``schema_version`` 1
READABLE_SCHEMAS = (1, 2)


@dataclass
class Row:
    """One tidy row of results.parquet: the table's columns are these fields, in this order.

    Every producer (the sweep's part rows, importers, the model) builds rows with ``make_row``;
    a field nobody knows stays None (an empty cell), as in every earlier table."""

    # identity
    run_id: str | None = None
    suite: str | None = None
    launch_id: str | None = None
    timestamp: float | None = None
    #: bench.plan.cells.cell_key: a hash of CELL_KEY, the planned placement (virtual nodes, hosts'
    #: digest) and repeat: the same measurement placed alike in another run has the same key
    #: (schema 1: without the placement)
    cell_key: str | None = None
    # what
    collective: str | None = None
    impl: str | None = None
    algorithm: str | None = None
    intra: str = ""
    inter: str = ""
    #: what ``auto`` or the default became (``ring``, ``rd/ring`` for pccl-hier's inter/intra)
    resolved_algorithm: str | None = None
    #: what moved the bytes: mpi, mpi-gpu-aware, mpi-staged, nccl, ucx:<lanes>, shm:<path>
    transport: str | None = None
    library: str | None = None
    library_version: str | None = None
    # where: as measured (the launch's topology); a launch that got none (its placement failed, it
    # never started) and a row no launch measured (the model) show the planned nnodes,
    # ranks_per_node and virtual_nodes here and no hosts; the plan's own are the planned_* columns
    device: str | None = None
    nranks: int | None = None
    nnodes: int | None = None
    ranks_per_node: int | None = None
    #: nodes cut out of a real node (``ranks_per_node`` below the real placement)
    virtual_nodes: bool | None = None
    #: the hosts' names in rank order (past 16: ``first,...,last (N hosts)``; every name is in
    #: parts/<launch>.placement.json); empty where no launch measured them
    hosts: str | None = None
    #: 16 hex digits of the SHA-256 of the host names, one a line: which hosts, at any length
    hosts_digest: str | None = None
    # size
    dtype: str | None = None
    op: str | None = None
    count_per_rank: int | None = None
    bytes_per_rank: int | None = None
    #: the nccl-tests size: all-gather output, reduce-scatter input, all-reduce buffer
    bytes_total: int | None = None
    placement: str | None = None
    repeat: int | None = None
    # timing
    timing_mode: str | None = None
    warmup: int | None = None
    iters: int | None = None
    #: order statistics of the per-iteration times (each the max over ranks), us
    time_us_min: float | None = None
    time_us_p50: float | None = None
    time_us_mean: float | None = None
    time_us_p95: float | None = None
    time_us_p99: float | None = None
    time_us_max: float | None = None
    time_us_std: float | None = None
    #: nccl-tests' formulas from the median, decimal GB/s
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    # outcome
    n_wrong: int | None = None
    status: str | None = None
    error: str | None = None
    # provenance (full detail in meta.json)
    mpi_thread_level: str | None = None
    oversubscribed: bool | None = None
    #: digest of the site profile's variables as the launch's rank 0 got them (bench.rank.outcome
    #: site_env_digest); the variables: meta.json launches.<launch_id>.site_env. None: no site set any
    site_env_digest: str | None = None
    tool_version: str | None = None
    git_sha: str | None = None
    schema_version: int | None = None
    # GPU cells: how GPU-awareness was decided, which device each rank used
    gpu_aware_how: str | None = None
    gpu_binding: str | None = None
    #: where the rank's local rank came from: a launcher variable before MPI_Init, or the split after it
    gpu_local_rank_from: str | None = None
    #: digest of every rank's (host, GPU index, PCI bus id, NUMA node); the list: meta.json launches.<id>.gpus
    gpu_devices_digest: str | None = None
    #: NCCL/RCCL cells: the network NCCL/RCCL said it uses (NCCL_DEBUG=INFO "Using network ..."), and
    #: the library version it printed at run time
    xccl_net: str | None = None
    xccl_runtime_version: str | None = None
    # modelled runs (pccl-bench model): the machine description, and the GPU-time price of a call
    model_machine: str | None = None
    price_per_gpu_hour_usd: float | None = None
    cost_per_call_usd: float | None = None
    #: same-job comparison: the suite arm of the cell ("" without arms; part of the cell key)
    arm: str = ""
    # the timing loop (cython_ext/timing.pyx measure): adaptive stop and warm-up until stable
    #: why the timed loop stopped: precision (interval of the median narrow enough, timing.target_ci),
    #: budget (timing.budget_s spent), iters (timing.iters reached), fixed (no adaptive stop)
    stop_reason: str | None = None
    #: relative half-width of the distribution-free 95% interval of the cell's median
    ci_rel: float | None = None
    #: iterations run and discarded before the samples (fixed warm-up plus warm-up until stable)
    warmup_discarded: int | None = None
    #: the slowest timed warm-up iteration (max over ranks), in us: the first-call outlier thrown away
    warmup_slowest_us: float | None = None
    #: why the warm-up stopped: fixed, stable, max_warmup, budget
    warmup_reason: str | None = None
    #: the fixed warm-up's time per call (per turn of all arms timed in turns), slowest rank, us: the
    #: pace from which a count without an adaptive stop is sized (timing.budget_s / this, per arm)
    warmup_call_us: float | None = None
    # the machine-speed probe measured right after the cell (bench/rank/probe.py; timing.probe)
    #: median of an 8 B all-reduce of the MPI library, us (max over ranks)
    probe_us: float | None = None
    probe_barrier_us: float | None = None
    #: a 1 MiB memcpy on each rank, us (max over ranks)
    probe_memcpy_us: float | None = None
    #: same-job arms: "iteration" when this cell was timed in turns with its partner arm
    turns: str | None = None
    # synchronised clocks (timing.mode window, or timing.clock_sync; cython_ext/clock.pyx)
    #: the start skew of an iteration: its latest start over ranks minus its earliest, on the
    #: synchronised clocks, us (median and 95th percentile over the cell's iterations)
    start_skew_us_p50: float | None = None
    start_skew_us_p95: float | None = None
    #: the bound of the clocks' synchronisation error (half the shortest round trip), us
    clock_error_us: float | None = None
    #: window mode: the length of each call's window, us, and the iterations dropped because a
    #: rank began after its window allowed
    window_us: float | None = None
    window_missed: int | None = None
    # where the plan put the ranks (bench.plan.cells.Cell's placement; what cell_key hashes); imports
    # have no plan: what the file says ran. Empty in schema-1 tables.
    planned_nnodes: int | None = None
    planned_ranks_per_node: int | None = None
    planned_virtual_nodes: bool | None = None
    #: the named hosts' digest (as hosts_digest, of the plan's host list); "" where the plan named
    #: none (this host, or the launcher's choice)
    planned_hosts_digest: str | None = None
    # where each call's buffers were (bench/rank/buffers.py; docs/SWEEPS.md, "Buffers")
    #: warm (the same every call), rotate (nccl-tests' offset walk), cold (IMB's -off_cache); a key
    #: column (in cell_key unless warm); a table from before it was warm (bench.plan.cells.KEY_DEFAULTS)
    buffers: str = "warm"
    #: rotate: the count_per_rank of the suite's largest size, whose buffers the offset walks (0 otherwise)
    buffers_max_count: int | None = None
    #: how many buffer positions the calls took in turn (1: warm), and the bytes each rank's send and
    #: receive buffers spanned over them (the positions' stride times their number, both buffers)
    buffer_positions: int | None = None
    buffer_span_bytes: int | None = None
    #: cold: the last-level cache size the set was made to exceed (the largest over ranks), bytes
    buffer_llc_bytes: int | None = None
    # non-blocking calls (bench.plan.cells MODES; OSU's osu_iallreduce method, docs/SWEEPS.md): the
    # timing columns above are the pure time's (post + wait); tables from before modes are blocking
    mode: str = "blocking"
    #: OSU's Overlap(%): max(0, 100 - 100 * (overall_us - compute_us) / pure_us)
    overlap_pct: float | None = None
    #: the median pure time (post + wait, as time_us_p50), the compute between post and wait calibrated
    #: to it (MPI_Test calls excluded), the overlapped call (post, compute, wait) and the MPI_Test
    #: calls' time in it; each iteration's time the max over ranks, us
    pure_us: float | None = None
    compute_us: float | None = None
    overall_us: float | None = None
    test_us: float | None = None
    #: MPI_Test calls spread through the compute (timing.nb_test_calls, OSU's -t)
    nb_test_calls: int | None = None


COLUMNS = [f.name for f in fields(Row)]
#: "modelled": rows that an analytical model produced rather than a measurement
STATUSES = ("ok", "wrong", "failed", "timeout", "skipped", "unsupported", "modelled")
SAMPLE_COLUMNS = ["run_id", "cell_key", *CELL_KEY, "repeat", "launch_id", "iteration", "time_us"]


#: what make_row takes: the columns, and the samples they are computed from
ROW_INPUTS = frozenset(COLUMNS) | {"samples_us"}


def make_row(values: dict, identity: dict | None = None, stats: dict | None = None) -> Row:
    """The row of one cell: ``values`` (a part row: the cell, launch facts, outcome; or an importer's or
    the model's fields), ``identity`` (run id, suite, versions) under them, and its timing statistics:
    ``stats`` as given, else computed from ``values["samples_us"]``. A key that is no column (and not
    ``samples_us``) is a producer's mistake, refused: a misspelt field would otherwise vanish."""
    full = {**(identity or {}), **values}
    unknown = sorted(set(full) - ROW_INPUTS)
    if unknown:
        raise ValueError(f"make_row: {', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} no "
                         f"column of the results table (bench/results/table.py Row)")
    if stats is None:
        stats = timing_stats(values.get("samples_us") or [], full["bytes_total"], full["collective"], full["nranks"])
    full.update(stats)
    return Row(**{name: full[name] for name in COLUMNS if name in full})


def sample_rows(row: Row, samples_us: list[float]) -> list[dict]:
    """The samples table's rows of one result row, iterations from 0."""
    identity = {name: getattr(row, name) for name in SAMPLE_COLUMNS[:-2]}
    return [{**identity, "iteration": iteration, "time_us": value} for iteration, value in enumerate(samples_us)]


def frames(rows: list[Row], samples: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results, samples) DataFrames of the contract's columns."""
    results = pd.DataFrame([[getattr(row, name) for name in COLUMNS] for row in rows], columns=COLUMNS)
    if len(results):
        results["timestamp"] = pd.to_datetime(results["timestamp"], unit="s", utc=True)
    return results, pd.DataFrame(samples, columns=SAMPLE_COLUMNS)


TIMING_STATS = ("time_us_min", "time_us_p50", "time_us_mean", "time_us_p95", "time_us_p99", "time_us_max",
                "time_us_std", "algbw_gbps", "busbw_gbps")


def timing_stats(samples_us: list[float], bytes_total: int, collective: str, nranks: int) -> dict:
    """Order statistics of the per-iteration times; bandwidths from the median (decimal GB/s)."""
    if not samples_us:
        return dict.fromkeys(TIMING_STATS, np.nan)
    times = np.asarray(samples_us, dtype=np.float64)
    p50 = float(np.median(times))
    algbw = bytes_total / p50 / 1e3 if p50 > 0 else np.nan
    return {
        "time_us_min": float(times.min()), "time_us_p50": p50, "time_us_mean": float(times.mean()),
        "time_us_p95": float(np.percentile(times, 95)), "time_us_p99": float(np.percentile(times, 99)),
        "time_us_max": float(times.max()), "time_us_std": float(times.std(ddof=1)) if len(times) > 1 else 0.0,
        "algbw_gbps": algbw, "busbw_gbps": algbw * busbw_factor(collective, nranks),
    }


def build_tables(rows: list[dict], identity: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results, samples) DataFrames from part rows (or any ``make_row`` values) plus run identity.

    The samples table is built column by column (a cell's identity repeated, its iterations counted),
    not a dict per sample: a sub-microsecond cell timed for a 2 s budget has millions of samples,
    which as dicts took tens of seconds to tabulate at the end of a sweep."""
    results, sampled, times = [], [], []
    for values in rows:
        row = make_row(values, identity)
        results.append(row)
        samples_us = values.get("samples_us") or []
        if len(samples_us):
            sampled.append(row)
            times.append(np.asarray(samples_us, dtype=np.float64))
    table, _ = frames(results, [])
    if not sampled:
        return table, pd.DataFrame(columns=SAMPLE_COLUMNS)
    counts = [len(part) for part in times]
    # each identity column repeated in C (Arrow-backed strings stay Arrow: a quick Parquet write)
    columns = {name: pd.Series([getattr(row, name) for row in sampled]).repeat(counts).reset_index(drop=True)
               for name in SAMPLE_COLUMNS[:-2]}
    columns["iteration"] = np.concatenate([np.arange(count) for count in counts])
    columns["time_us"] = np.concatenate(times)
    return table, pd.DataFrame(columns, columns=SAMPLE_COLUMNS)


def write_run(folder: Path, results: pd.DataFrame, samples: pd.DataFrame, meta: dict) -> None:
    """The run folder's four files from whole tables, through the one writer (replacing earlier ones)."""
    with RunFolderWriter(folder, flag=str(folder)) as writer:
        writer.write_frames(results, samples)
        writer.commit(meta)
