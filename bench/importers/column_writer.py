"""An import's rows built column by column and written in bounded chunks.

A 200 MB nccl-tests log holds two million cells. The import used to build a dict of 68 columns per
cell through ``make_row`` (a ``Cell`` and a ``Row`` dataclass, each through ``dataclasses.asdict``,
which deep-copies every field; twice for a repeated cell), keep all of them, then build a DataFrame
and write it: ~0.4 ms and ~4 KiB a cell, 111 s and 1.3 GiB for 20 MB, linear, so ~20 min and
~13 GiB for 200 MB. Here a cell is the 17 values that differ from cell to cell, appended to one flat
list; what a file's cells share is stored once; every ``CHUNK_ROWS`` cells become one Arrow record
batch (a row group of results.parquet) and one block of results.csv, formatted by Arrow compute, so
memory does not grow with the file. The values are those ``make_row`` gives and the CSV text is
what pandas' ``to_csv`` wrote (checked by the tests), the cell keys
``bench.plan.cells.cell_keys``' (the one definition, its shared part written once per group of cells).
The tables go to ``bench.results.writer.RunFolderWriter``, the writer of every run folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from bench.errors import BadInput
from bench.importers.imported_row import (
    ITEMSIZE,
    SAMPLE_STATS,
    Measurement,
    bandwidth_mismatch,
    bandwidths,
    sample_stats,
    status_of,
)
from bench.importers.input_files import INT64_MAX
from bench.importers.kinds import busbw_factor, ranks_in_total
from bench.plan.cells import cell_keys
from bench.plan.hosts import hosts_digest
from bench.results.table import COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION

#: cells per chunk: a row group of results.parquet, a block of results.csv (~16 MiB of memory)
CHUNK_ROWS = 1 << 14
#: and at most this many samples (nccl-tests -I 1 JSON: one per iteration of each cell)
SAMPLE_CHUNK = 1 << 18

_STRING, _INT, _FLOAT, _BOOL = pa.large_string(), pa.int64(), pa.float64(), pa.bool_()
#: the Arrow type of every column an import fills (what pandas wrote for them before); the others
#: (GPU, model, adaptive-timing columns) stay null, as they were
TYPES = {
    **dict.fromkeys(("run_id", "suite", "launch_id", "cell_key", "collective", "impl", "algorithm", "intra", "inter",
                     "resolved_algorithm", "transport", "library", "library_version", "device", "hosts", "dtype",
                     "op", "placement", "timing_mode", "status", "error", "mpi_thread_level", "tool_version",
                     "git_sha", "arm", "hosts_digest", "planned_hosts_digest", "buffers", "mode"), _STRING),
    **dict.fromkeys(("nranks", "nnodes", "ranks_per_node", "count_per_rank", "bytes_per_rank", "bytes_total",
                     "repeat", "warmup", "iters", "n_wrong", "schema_version", "planned_nnodes",
                     "planned_ranks_per_node"), _INT),
    **dict.fromkeys(("time_us_min", "time_us_p50", "time_us_mean", "time_us_p95", "time_us_p99", "time_us_max",
                     "time_us_std", "algbw_gbps", "busbw_gbps", "overlap_pct", "pure_us", "compute_us",
                     "overall_us"), _FLOAT),
    "virtual_nodes": _BOOL, "planned_virtual_nodes": _BOOL, "oversubscribed": _BOOL,
    "timestamp": pa.timestamp("ns", tz="UTC"),
}
RESULT_SCHEMA = pa.schema([(name, TYPES.get(name, pa.null())) for name in COLUMNS])
SAMPLE_SCHEMA = pa.schema([(name, TYPES.get(name, _INT if name == "iteration" else _FLOAT)) for name in SAMPLE_COLUMNS])
#: the columns set per cell, in the order of a cell's values in ImportTable (the rest are the file's
#: constants, the group's, or null)
PER_CELL = ("cell_key", "count_per_rank", "bytes_per_rank", "bytes_total", "repeat", "iters", "time_us_min",
            "time_us_p50", "time_us_mean", "time_us_p95", "time_us_p99", "time_us_max", "time_us_std", "algbw_gbps",
            "busbw_gbps", "n_wrong", "status", "error", "run_id", "launch_id", "overlap_pct", "pure_us", "compute_us",
            "overall_us")
#: per-cell text columns whose values come from files or flags: quoted in results.csv where CSV needs it
FREE_TEXT = ("error", "run_id", "launch_id")
#: set per group of cells (one collective, type, op and placement)
PER_GROUP = ("collective", "dtype", "op", "placement", "mode")
#: the fields of a results.csv line that are not the file's constants
CSV_FIELDS = (*PER_CELL, *PER_GROUP)
ROW_WIDTH = len(PER_CELL) + 1
TIMING_MODE = "sync"


def csv_field(value: object) -> str:
    """``value`` as pandas' ``to_csv`` writes it: floats as repr, NaN/None empty, minimal quoting."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, str):
        return f'"{value.replace(chr(34), chr(34) * 2)}"' if any(c in value for c in ',"\r\n') else value
    return repr(value) if isinstance(value, float) else str(value)


#: where Arrow's float -> string cast writes what Python's repr (pandas' to_csv) does: non-integral
#: values from 1e-4 to 1e10; outside, Arrow writes 3 for 3.0 and 1e+10 for 10000000000.0
REPR_SAFE = (1e-4, 1e10)


def _float_text(values: pa.Array) -> pa.Array:
    """A float64 column as results.csv text, as pandas writes it (repr; null empty), in C where
    Arrow's formatting agrees with repr, and repr for the rest. A sample is checked against repr,
    so a pyarrow that formats otherwise falls back to repr for the column."""
    text = pc.cast(values, pa.string())
    magnitude = pc.abs(values)
    own = pc.or_(pc.equal(values, pc.floor(values)),
                 pc.or_(pc.less(magnitude, REPR_SAFE[0]), pc.greater_equal(magnitude, REPR_SAFE[1])))
    own = pc.fill_null(own, False)
    python = values.filter(own).to_pylist()
    sample = [(value, shown) for value, shown, mine in zip(values[:8].to_pylist(), text[:8].to_pylist(),
                                                             own[:8].to_pylist(), strict=True)
              if value is not None and not mine]
    if any(shown != repr(value) for value, shown in sample):
        return pa.array(["" if value is None else repr(value) for value in values.to_pylist()], pa.string())
    if python:
        text = pc.replace_with_mask(text, own, pa.array([repr(value) for value in python], pa.string()))
    return pc.fill_null(text, "")


def _csv_text(values: pa.Array) -> pa.Array:
    """Any per-cell column as results.csv text."""
    if values.type == _FLOAT:
        return _float_text(values)
    return pc.fill_null(pc.cast(values, pa.string()), "")


def _joined(lines: pa.Array) -> memoryview:
    """The UTF-8 text of a string array whose every value ends with a line break: its values back to
    back, as they lie in the array's data buffer (no copy)."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    return memoryview(lines.buffers()[2])[offsets[lines.offset]:offsets[lines.offset + len(lines)]]


def _finite(value: float | None) -> float | None:
    return None if value is None or value != value else float(value)


@dataclass
class ImportCounts:
    """What an import command reports: cells, cells with samples, (collective, nranks) shapes."""

    cells: int
    cells_with_samples: int
    shapes: set[tuple[str, int]]


@dataclass
class _Group:
    """What the cells of one file with one collective, type, op and placement share."""

    index: int
    #: the cell key of (count_per_rank, repeat): bench.plan.cells.cell_keys of the group's shared fields
    key: Callable[[int, int], str]
    key_id: int
    itemsize: int
    ranks_in_total: int  # bytes_total = bytes_per_rank * this
    busbw_factor: float | None  # None: no bus bandwidth defined (point-to-point, barrier)


class ImportTable:
    """Rows of one import, in chunks: ``begin(context)`` for each file, ``add(measurement)`` for each
    cell; every full chunk goes to ``emit(results batch, csv text, samples batch)``; ``finish()``
    sends the rest. ``context`` holds run_id, suite, launch_id, timestamp_ns, impl, device, nranks,
    nnodes, hosts, library, library_version, transport, tool_version, warmup.

    A cell that occurs more than once in the import gets repeat 0, 1, ... (its own cell_key).
    A cell is ROW_WIDTH values in a flat list until its chunk is written."""

    def __init__(self, emit: Callable[[pa.RecordBatch, memoryview, pa.RecordBatch | None], None],
                 chunk_rows: int = CHUNK_ROWS) -> None:
        self._emit = emit
        #: (cell id, count) -> repeats so far: one entry per distinct cell of the import (wherever it ran)
        self._repeats: dict[tuple[int, int], int] = {}
        self._key_ids: dict[tuple, int] = {}
        self._context: dict | None = None
        self._groups: dict[tuple[str, str, str, str], _Group] = {}
        self._group_values: list[tuple[str, str, str, str]] = []
        #: the chunk's cells, ROW_WIDTH values each (PER_CELL, then the group's index), back to back:
        #: one list.extend a cell, a strided slice a column
        self._values: list = []
        self._chunk_values = chunk_rows * ROW_WIDTH
        #: the chunk's cells with samples: (the cell's row in the chunk, its times)
        self._samples: list[tuple[int, list[float]]] = []
        self._pending_samples = 0
        self._segments: list[tuple[str | None, str]] = []
        #: what the import command reports: cells, cells with samples, (collective, nranks) shapes
        self.cells = 0
        self.cells_with_samples = 0
        self.shapes: set[tuple[str, int]] = set()
        #: the current file's cells whose printed bandwidth differs from the one its time gives:
        #: (how many, the first one's line and reason)
        self.mismatches: tuple[int, str] = (0, "")
        #: the current run's cells with a printed algbw, and those where it is over 100x off what
        #: size / time gives (every one: the time is in another unit, or the columns are misread)
        self.unit_checks: tuple[int, int] = (0, 0)

    def begin(self, context: dict) -> None:
        """The next cells are of the run ``context`` describes. A run that shares every constant column
        with the one before (the runs of one log: only run_id and launch_id differ, and they are set
        per cell) goes on in the same chunk; another one starts a new chunk."""
        known = context["nranks"] is not None and context["nnodes"] is not None
        new = {**context, "ranks_per_node": max(int(context["nranks"]) // int(context["nnodes"]), 1) if known else None}
        previous = self._context
        self.mismatches = (0, "")
        self.unit_checks = (0, 0)
        if previous is not None and previous.get("timestamp_ns") == new.get("timestamp_ns") \
                and self._constants(previous) == self._constants(new):
            self._context = new
            return
        self.flush()  # the cells of the previous context
        self._context = new
        self._groups, self._group_values = {}, []
        values = {**self._constants(), "timestamp": str(pd.Timestamp(context["timestamp_ns"], unit="ns", tz="UTC"))}
        # results.csv lines: runs of the file's constant fields written out once, and the per-cell columns
        self._segments: list[tuple[str | None, str]] = []
        constant_run: list[str] = []
        for name in COLUMNS:
            if name in CSV_FIELDS:
                if constant_run:
                    self._segments.append((None, ",".join(constant_run)))
                    constant_run = []
                self._segments.append((name, ""))
            else:
                constant_run.append(csv_field(values.get(name)))
        if constant_run:
            self._segments.append((None, ",".join(constant_run) + "\n"))

    def relabel(self, run_id: str, launch_id: str) -> None:
        """The next cells are of another run of the same table (runs interleaved in one file): only
        their run_id and launch_id differ, which are set per cell."""
        assert self._context is not None, "begin() first"
        self._context = {**self._context, "run_id": run_id, "launch_id": launch_id}

    def _group(self, m: Measurement) -> _Group:
        context = self._context
        assert context is not None, "begin() first"
        nranks = context["nranks"]
        shared = {**self._placement(), "collective": m.collective, "impl": context["impl"],
                  "algorithm": context.get("algorithm", "native"),
                  "intra": "", "inter": "", "device": context["device"], "nranks": nranks, "dtype": m.dtype,
                  "op": m.op, "placement": m.placement, "timing_mode": TIMING_MODE, "arm": "",
                  "buffers": context.get("buffers", "warm"), "mode": m.mode}
        keys = cell_keys(shared)
        # repeats count a cell's occurrences in the import wherever it ran (as before the key held the hosts)
        key_id = self._key_ids.setdefault((m.collective, context["impl"], context.get("algorithm", "native"),
                                           context["device"], nranks,
                                           context["nnodes"], context["ranks_per_node"], m.dtype, m.op, m.placement),
                                          len(self._key_ids))
        group = _Group(len(self._group_values), keys, key_id, ITEMSIZE[m.dtype],
                       ranks_in_total(m.collective, nranks), busbw_factor(m.collective, nranks))
        self._groups[(m.collective, m.dtype, m.op, m.placement, m.mode)] = group
        self._group_values.append((m.collective, m.dtype, m.op, m.placement, m.mode))
        self.shapes.add((m.collective, nranks))
        return group

    def _placement(self, context: dict | None = None) -> dict:
        """A context's (default: the current one's) placement, as its cells' key takes it: what the file
        says ran (an import has no plan of its own), the hosts' digest "" where it names none."""
        context = context or self._context
        hosts = context["hosts"].split(",") if context.get("hosts") else []
        return {"nnodes": context["nnodes"], "ranks_per_node": context["ranks_per_node"], "virtual_nodes": False,
                "hosts_digest": hosts_digest(hosts) if hosts else ""}

    def _constants(self, context: dict | None = None) -> dict:
        """The columns every cell of a context (default: the current one) shares."""
        context = context or self._context
        assert context is not None
        placement = self._placement(context)
        return {
            **{name: context.get(name) for name in ("suite", "impl", "transport", "library", "library_version",
                                                     "device", "nranks", "nnodes", "ranks_per_node", "hosts",
                                                     "tool_version", "warmup")},
            "algorithm": context.get("algorithm", "native"), "intra": "", "inter": "",
            "resolved_algorithm": context.get("algorithm", "native"), "virtual_nodes": False,
            "timing_mode": TIMING_MODE, "mpi_thread_level": "", "oversubscribed": False, "git_sha": "",
            "schema_version": SCHEMA_VERSION, "arm": "", "buffers": context.get("buffers", "warm"),
            # no plan: the measured digest is the planned one, of the hosts the file names (docs/TABLE.md)
            "hosts_digest": placement["hosts_digest"],
            **{f"planned_{name}": value for name, value in placement.items()},
        }

    def add(self, m: Measurement) -> None:
        """One cell (out-of-place or in-place of one size), as ``make_row`` would build it."""
        group = self._groups.get((m.collective, m.dtype, m.op, m.placement, m.mode)) or self._group(m)
        count = m.count_per_rank
        bytes_per_rank = count * group.itemsize
        bytes_total = bytes_per_rank * group.ranks_in_total
        if bytes_total > INT64_MAX:
            raise BadInput(str(self._context["launch_id"]), f"count {count} x {group.itemsize} B x "
                           f"{group.ranks_in_total} ranks is beyond a 64-bit byte count")
        slot = (group.key_id, count)
        repeat = self._repeats.get(slot, 0)
        self._repeats[slot] = repeat + 1
        cell_key = group.key(count, repeat)
        mean = m.time_us
        # as printed where the tool printed them, else from its mean time (make_row); a printed one
        # that its time does not give is kept and counted (meta.json says where)
        algbw, busbw = bandwidths(m, bytes_total, group.busbw_factor)
        if (m.algbw_gbps is not None or m.busbw_gbps is not None) \
                and (why := bandwidth_mismatch(m, bytes_total, group.busbw_factor)):
            seen, first = self.mismatches
            self.mismatches = (seen + 1, first or f"line {m.line}: {why}")
        if m.algbw_gbps and m.time_us > 0 and bytes_total:
            ratio = m.algbw_gbps / (bytes_total / m.time_us / 1e3)
            checked, off = self.unit_checks
            self.unit_checks = (checked + 1, off + (not 0.01 <= ratio <= 100))
        status = status_of(m)
        if m.samples_us:  # the statistics of the samples, as for a measured row (make_row)
            stats = sample_stats(m.samples_us)
            low, p50, p95, p99, high, std = (_finite(stats[name]) for name in SAMPLE_STATS)
            self._samples.append((len(self._values) // ROW_WIDTH, m.samples_us))
            self._pending_samples += len(m.samples_us)
            self.cells_with_samples += 1
            self._values.extend((cell_key, count, bytes_per_rank, bytes_total, repeat, len(m.samples_us), low, p50,
                                 mean, p95, p99, high, std, algbw, busbw, m.n_wrong, status, m.note,
                                 self._context["run_id"], self._context["launch_id"], m.overlap_pct, m.pure_us,
                                 m.compute_us, m.overall_us, group.index))
        else:
            self._values.extend((cell_key, count, bytes_per_rank, bytes_total, repeat, m.iters, m.time_us_min,
                                 mean if m.time_us_p50 is None else m.time_us_p50, mean, m.time_us_p95,
                                 m.time_us_p99, m.time_us_max, None, algbw, busbw, m.n_wrong, status, m.note,
                                 self._context["run_id"], self._context["launch_id"], m.overlap_pct, m.pure_us,
                                 m.compute_us, m.overall_us, group.index))
        self.cells += 1
        if len(self._values) >= self._chunk_values or self._pending_samples >= SAMPLE_CHUNK:
            self.flush()

    def flush(self) -> None:
        """Send the cells added since the last chunk: one record batch, its results.csv text."""
        rows = len(self._values) // ROW_WIDTH
        if not rows:
            return
        context, constants, flat = self._context, self._constants(), self._values
        arrays = {name: pa.array(flat[position::ROW_WIDTH], TYPES[name]) for position, name in enumerate(PER_CELL)}
        groups = pa.array(flat[len(PER_CELL)::ROW_WIDTH], pa.int32())
        for position, name in enumerate(PER_GROUP):  # a group's value on each of its cells
            arrays[name] = pa.array([names[position] for names in self._group_values], _STRING).take(groups)
        built = []
        for field in RESULT_SCHEMA:
            name = field.name
            if name in arrays:
                built.append(arrays[name])
            elif name == "timestamp":
                built.append(pa.repeat(pa.scalar(context["timestamp_ns"], field.type), rows))
            elif name in constants and field.type != pa.null():
                built.append(pa.repeat(pa.scalar(constants[name], field.type), rows))
            else:
                built.append(pa.nulls(rows))
        batch = pa.RecordBatch.from_arrays(built, schema=RESULT_SCHEMA)
        parts = []  # results.csv: the file's constants as scalars, the rest as text columns
        for name, segment in self._segments:
            if name is None:
                parts.append(pa.scalar(segment, pa.string()))
            elif name in PER_GROUP:  # names from files, quoted where CSV needs it
                shown = [csv_field(names[PER_GROUP.index(name)]) for names in self._group_values]
                parts.append(pa.array(shown, pa.string()).take(groups))
            elif name in FREE_TEXT:  # text from files and flags: quoted where CSV needs it
                parts.append(pa.array([csv_field(text) for text in arrays[name].to_pylist()], pa.string()))
            else:
                parts.append(_csv_text(arrays[name]))
        if not isinstance(parts[-1], pa.Scalar):  # every line ends with a line break
            parts[-1] = pc.binary_join_element_wise(parts[-1], pa.scalar("", pa.string()), "\n")
        text = _joined(pc.binary_join_element_wise(*parts, ","))
        samples = self._sample_batch(batch)
        self._values, self._samples, self._pending_samples = [], [], 0
        self._emit(batch, text, samples)

    def _sample_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """The samples table's rows of the chunk's sampled cells: each cell's identity (from its
        result row) once per iteration, iterations from 0."""
        if not self._samples:
            return None
        counts = np.array([len(times) for _, times in self._samples])
        rows = np.repeat(np.array([row for row, _ in self._samples]), counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        columns = {"iteration": pa.array(np.arange(len(rows)) - starts, _INT),
                   "time_us": pa.array(np.concatenate([np.asarray(times, dtype=np.float64)
                                                       for _, times in self._samples]), _FLOAT)}
        indices = pa.array(rows)
        return pa.RecordBatch.from_arrays(
            [columns[name] if name in columns else batch.column(name).take(indices) for name in SAMPLE_SCHEMA.names],
            schema=SAMPLE_SCHEMA)

    def finish(self) -> None:
        self.flush()
