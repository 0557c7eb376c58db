"""Files of another tool -> one pccl-bench run folder (results, samples, meta.json).

Samples exist only where the tool wrote per-iteration times (nccl-tests/rccl-tests ``-I 1 -J
file.json``: ``<placement>_per_iter.times_us``); every other cell has none, as before.

Before anything is parsed, every input must be a regular file, ``--out`` a folder that holds no run,
and every file is split into runs by the front end (bench/importers/frontend.py): each run is read by
the named tool (a run of another tool's format refused, naming its line) or, without a tool, by the
importer its headers name. The rows then stream from the parsers
through ``bench.importers.column_writer.ImportTable`` (a tool read whole, the pccl-reproducer: its tables
in one chunk) into ``bench.results.writer.RunFolderWriter``'s temp files, renamed into place only
when every file parsed: a bad line anywhere leaves nothing behind.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from bench import __version__
from bench.errors import BadInput
from bench.files import output_folder
from bench.importers import IMPORTERS, WHOLE_IMPORTERS, tools
from bench.importers.column_writer import RESULT_SCHEMA, SAMPLE_SCHEMA, ImportCounts, ImportTable
from bench.importers.frontend import Run, head_text, split_runs
from bench.importers.imb import NO_BLOCK
from bench.importers.imported_row import ImportOptions, Measurement
from bench.importers.input_files import FORMATS, NCCL_TESTS, TOOL_OF, NoResults, check_input, not_this_format
from bench.importers.nccl_text import separate_tests
from bench.results.table import SCHEMA_VERSION, write_run
from bench.results.writer import RUN_FILES, RunFolderWriter

#: what a sweep leaves in its run folder before the table exists
SWEEP_FILES = ("parts", "plans", ".sweep.lock")
#: more ranks than any machine has (a larger --nranks is a typo)
MAX_RANKS = 1 << 24


def check_out_folder(folder: Path) -> Path:
    """``--out`` checked before any parsing: a folder that can be written (bench.files.output_folder:
    not a file, not under a file, no over-long name, not in results/baselines/) and holds no run,
    measured, imported or in progress: an import never overwrites one."""
    output_folder(folder, "--out")
    held = [name for name in (*RUN_FILES, *SWEEP_FILES) if os.path.lexists(folder / name)]
    if held:
        raise BadInput("--out", f"{folder} already holds a run ({', '.join(held)}); an import never overwrites "
                                "one: choose another --out")
    return folder


def preflight(kind: str | None, paths: list[Path]) -> None:
    """Every input a regular file, readable, and (a tool named) not of another tool's format by its
    first lines, prefixes stripped: before any is parsed. Each run is checked again when it is split."""
    if not paths:
        raise BadInput("import", "no FILE given")
    for path in paths:
        check_input(path)
        if kind is not None and (refused := not_this_format(path, head_text(path), kind, FORMATS.get(kind, ()))):
            raise refused


def _context(parsed: dict, options: ImportOptions, path: Path, run_id: str, kind: str, launch: str) -> dict:
    nranks = options.nranks or parsed.get("nranks")
    hosts = parsed.get("hosts") or []
    if not nranks and parsed.get("nranks_unknown"):  # the importer said why (its inferred note); rows keep it empty
        nnodes = options.nnodes or parsed.get("nnodes") or len(hosts) or None
        return {**_common(parsed, options, path, run_id, kind, launch, hosts), "nranks": None, "nnodes": nnodes}
    if not nranks:
        raise BadInput(str(path), "cannot tell how many ranks ran: pass --nranks N")
    if not 1 <= int(nranks) <= MAX_RANKS:
        raise BadInput(str(path), f"{nranks} ranks: not a rank count (1 to {MAX_RANKS})")
    nnodes = options.nnodes or parsed.get("nnodes") or len(hosts) or 1
    if nnodes > nranks:
        raise BadInput("--nnodes" if options.nnodes else str(path), f"{nnodes} nodes for {nranks} ranks: a node "
                                                                    "runs at least one rank")
    return {**_common(parsed, options, path, run_id, kind, launch, hosts), "nranks": int(nranks),
            "nnodes": int(nnodes)}


def _common(parsed: dict, options: ImportOptions, path: Path, run_id: str, kind: str, launch: str,
            hosts: list[str]) -> dict:
    """The context of a run but its rank and node counts."""
    return {**parsed, "run_id": run_id, "suite": f"import:{kind}", "launch_id": launch,
            "timestamp_ns": os.stat(path).st_mtime_ns, "hosts": ",".join(hosts), "impl": options.impl or parsed["impl"],
            "device": options.device or parsed.get("device", "host"),
            "library": options.library or parsed.get("library", ""),
            "library_version": options.library_version or parsed.get("library_version", "")}


Emit = Callable[["pa.RecordBatch | pa.Table", "memoryview | bytes", "pa.RecordBatch | pa.Table | None"], None]


def _read_whole(kind: str, paths: list[Path], options: ImportOptions,
                planned: list[Planned]) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """A tool read whole (WHOLE_IMPORTERS): (results, meta, samples); meta.json's ``imported_from``
    says which importer read each file and why, as a per-run import's does (the CLI says it under --auto)."""
    results, meta, samples = WHOLE_IMPORTERS[kind](paths, options)
    chosen = {}
    for item in planned:
        chosen.setdefault(str(item.path), item)
    for entry in meta.get("imported_from", []):
        if run := chosen.get(entry.get("path")):
            entry.update(read_as=run.tool, chosen_by=run.chosen_by)
    return results, meta, samples


def _import_whole(kind: str, paths: list[Path], options: ImportOptions, emit: Emit,
                  planned: list[Planned]) -> tuple[dict, ImportCounts]:
    """A tool read whole: its tables as one chunk, as pandas writes them."""
    results, meta, samples = _read_whole(kind, paths, options, planned)
    emit(pa.Table.from_pandas(results, preserve_index=False), results.to_csv(index=False, header=False).encode(),
         pa.Table.from_pandas(samples, preserve_index=False))
    sampled = samples["cell_key"].nunique() if len(samples) else 0
    shapes = {(str(collective), int(nranks)) for collective, nranks in zip(results["collective"], results["nranks"],
                                                                             strict=True)}
    return meta, ImportCounts(len(results), sampled, shapes)


@dataclass
class Planned:
    """One run of one file and the importer that reads it."""

    path: Path
    run: Run
    tool: str
    #: how the tool was chosen: "" (named on the command line) or the header that told
    chosen_by: str = ""


def _tool_of_run(kind: str | None, path: Path, run: Run) -> Planned:
    if kind is not None:
        if run.format and run.format not in FORMATS.get(kind, ()):
            tool = TOOL_OF.get(run.format)
            hint = f"; import it with `pccl-bench import {tool}`" if tool and tool != kind else ""
            raise BadInput(f"{path}:{run.first}", f"{run.span()} look like {run.format} ({run.evidence}), not "
                                                  f"{kind} output{hint}")
        return Planned(path, run, kind)
    tool = "rccl-tests" if run.rccl and run.format == NCCL_TESTS else TOOL_OF.get(run.format)
    if tool is None:
        seen = f" (it looks like {run.format}: {run.evidence})" if run.format else ""
        raise BadInput(str(path), f"{run.span()}: no importer recognises it{seen} (no header of "
                                  f"{', '.join(sorted(FORMATS))}: docs/INPUTS.md); name the tool")
    return Planned(path, run, tool, f"{run.format} ({run.evidence})")


def plan_import(kind: str | None, paths: list[Path]) -> list[Planned]:
    """Every run of every file with its importer: the named tool's (a run of another format refused,
    naming its line), or the one its headers name (``kind`` None: --auto)."""
    preflight(kind, paths)
    return [_tool_of_run(kind, path, run) for path in paths for run in split_runs(path)]


def _whole_tool(planned: list[Planned]) -> str | None:
    """The whole-file tool of an import (the pccl-reproducer), None for per-run tools; a mix refused."""
    whole = {item.tool for item in planned if item.tool in WHOLE_IMPORTERS}
    if not whole:
        return None
    if len(whole) < len({item.tool for item in planned}):
        other = next(item for item in planned if item.tool not in WHOLE_IMPORTERS)
        raise BadInput(str(other.path), f"{other.run.span()} are {other.tool} output, imported apart from the "
                                        f"{', '.join(sorted(whole))} files (one machine over all its files)")
    return next(iter(whole))


def import_rows(kind: str | None, paths: list[Path], options: ImportOptions,
                emit: Emit, planned: list[Planned] | None = None) -> tuple[dict, ImportTable | ImportCounts]:
    """Every measurement of ``paths`` as result rows, chunk by chunk to ``emit``; (meta, the table's
    counts). ``kind`` None: each run's importer chosen by its headers. Each run of a file (where a
    tool's header starts again) has its own run_id and launch; a cell that occurs more than once (in
    several runs or files, nccl-tests ``-N`` cycles) gets ``repeat`` 0, 1, ... as pccl-bench's own
    repeats do, so every row has its own cell_key. A run without result lines (one that stopped before
    its table) is skipped when its file holds others, and meta.json says so."""
    if kind is not None and kind not in tools():
        raise BadInput(kind, f"unknown tool; expected one of {', '.join(tools())}")
    planned = planned if planned is not None else plan_import(kind, paths)
    if whole := _whole_tool(planned):
        return _import_whole(whole, paths, options, emit, planned)
    base = f"import-{kind or 'auto'}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    started = time.time()
    table = ImportTable(emit)
    files: list[dict] = []
    runs_of = {path: sum(1 for item in planned if item.path == path) for path in paths}
    alone: dict[Path, list[tuple[int, tuple | None]]] = {}  # each run's 1-rank header (nccl-tests), else None
    empty: list[NoResults] = []  # runs without results, skipped beside others
    for index, item in enumerate(planned, 1):
        run_id = base if len(planned) == 1 else f"{base}-{index}"
        launch = item.path.name if runs_of[item.path] == 1 else f"{item.path.name}:{item.run.first}"
        entry = {"path": str(item.path), "run": item.run.span(), "run_id": run_id, "read_as": item.tool,
                 "chosen_by": item.chosen_by, "cells": 0, "cells_with_samples": 0, "inferred": []}
        missing: list[NoResults] = []
        for part in item.run.parts:
            cells, sampled = table.cells, table.cells_with_samples
            try:
                parsed, measurements = IMPORTERS[item.tool](part, options)
                context = _context(parsed, options, item.path, run_id, item.tool, launch)
                table.begin(context)
                if context.get("interleaved"):  # runs told apart by their sizes: each its own run_id and launch
                    _add_interleaved(table, measurements, run_id, launch)
                else:
                    for measurement in measurements:
                        table.add(measurement)
            except NoResults as error:  # a part without results (IMB's banner, a rate-only block)
                missing.append(error)
                continue
            alone.setdefault(item.path, []).append((item.run.first, context.get("alone")))
            entry.update(cells=entry["cells"] + table.cells - cells, nranks=context["nranks"],
                         cells_with_samples=entry["cells_with_samples"] + table.cells_with_samples - sampled,
                         library=context["library"], library_version=context["library_version"],
                         tool_version=context.get("tool_version", item.tool),
                         inferred=[*entry["inferred"], *(note for note in context.get("inferred", [])
                                                         if note not in entry["inferred"])])
            checked, off = table.unit_checks
            if checked >= 3 and off == checked:
                raise BadInput(f"{item.path}:{item.run.first}", f"in every one of its {checked} rows the printed "
                               "algbw is over 100x what size / time gives: its times are not microseconds, or not "
                               f"{item.tool}'s columns (another tool's table?)")
            if table.mismatches[0]:
                count, first = table.mismatches
                entry["bandwidth_check"] = (f"{count} cells' printed bandwidth differs from the one their printed "
                                            f"time gives (kept as printed); first: {first}")
        if missing and not entry["cells"] and runs_of[item.path] == 1:
            raise missing[-1]  # the file's only run has no results
        empty += missing if not entry["cells"] else []
        # what was skipped, but the preamble before a run's first block (IMB's banner)
        skipped = [str(error) for error in missing if not str(error).endswith(NO_BLOCK)]
        if skipped:
            entry["skipped"] = "; ".join(skipped)[:2000]
        files.append(entry)
    for path, headers in alone.items():
        _refuse_separate_tests(path, headers)
    if not table.cells and empty:  # every run of every file skipped: nothing to import
        raise BadInput(str(empty[0]).split(":", 1)[0], f"none of its {len(empty)} runs has result lines "
                                                       f"(the first: {str(empty[0]).split(': ', 1)[-1]})")
    table.finish()
    meta = {"schema_version": SCHEMA_VERSION, "run_id": base, "suite": f"import:{kind or 'auto'}",
            "imported_from": files, "tool_version": __version__, "started": started, "finished": time.time(),
            "note": _note(table.cells_with_samples, table.cells), "machine": {}, "env": {}, "versions": {}}
    return meta, table


def _add_interleaved(table: ImportTable, measurements: Iterable[Measurement], run_id: str, launch: str) -> None:
    """The cells of runs interleaved in one table, each run its own run_id (``run_id.K``) and launch
    (``launch#K``): runs of one launch that the size sequence told apart (bench.importers.frontend)."""
    shown = -1
    for measurement in measurements:
        if measurement.run != shown:
            shown = measurement.run
            table.relabel(f"{run_id}.{shown + 1}", f"{launch}#{shown + 1}")
        table.add(measurement)


def _refuse_separate_tests(path: Path, headers: list[tuple[int, tuple | None]]) -> None:
    """A file whose every run is a 1-rank nccl-tests test under one identical header: N processes of an
    nccl-tests built without MPI, their outputs one after the other (nothing was written yet: refused)."""
    shown = {header for _, header in headers}
    if len(headers) < 2 or None in shown or len(shown) > 1:
        return
    lines = ", ".join(str(first) for first, _ in headers[:8]) + (", ..." if len(headers) > 8 else "")
    header = headers[0][1][0][:40]
    raise BadInput(f"{path}:{headers[1][0]}", separate_tests(len(headers), f"the runs from lines {lines}, each one "
                                                                           f"'# Rank  0' under '# {header}...'"))


def import_files(kind: str | None, paths: list[Path],
                 options: ImportOptions) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """(results, meta, samples) for every measurement in ``paths``, in memory (``import_to_folder``
    writes a large import without holding it). ``kind`` None: each run's tool from its headers."""
    planned = plan_import(kind, paths)
    whole = _whole_tool(planned)
    if whole:  # its tables are already frames
        return _read_whole(whole, paths, options, planned)
    results: list[pa.RecordBatch] = []
    samples: list[pa.RecordBatch] = []

    def keep(batch: pa.RecordBatch, _csv: memoryview, sampled: pa.RecordBatch | None) -> None:
        results.append(batch)
        if sampled is not None:
            samples.append(sampled)

    meta, _ = import_rows(kind, paths, options, keep, planned)
    return (pa.Table.from_batches(results, RESULT_SCHEMA).to_pandas(), meta,
            pa.Table.from_batches(samples, SAMPLE_SCHEMA).to_pandas())


def import_to_folder(kind: str | None, paths: list[Path], options: ImportOptions,
                     folder: Path) -> tuple[dict, ImportTable | ImportCounts]:
    """Import ``paths`` into the run folder ``folder`` chunk by chunk (memory bounded whatever the
    files' size); (meta, the table's counts). Nothing is left in ``folder`` when a file is bad."""
    check_out_folder(folder)
    if kind is not None and kind not in tools():
        raise BadInput(kind, f"unknown tool; expected one of {', '.join(tools())}")
    planned = plan_import(kind, paths)
    per_run = _whole_tool(planned) is None
    with RunFolderWriter(folder, RESULT_SCHEMA if per_run else None, SAMPLE_SCHEMA if per_run else None) as writer:
        meta, table = import_rows(kind, paths, options, writer.write, planned)
        writer.commit(meta)
    return meta, table


def _note(with_samples: int, cells: int) -> str:
    """What meta.json says about the samples (imported_from[].cells_with_samples says which file's)."""
    without = ("no per-iteration samples; time_us_p50 holds the tool's reported time (a mean) unless it "
               "printed a median, and the gate cannot judge these cells")
    if not with_samples:
        return f"imported: {without}"
    sampled = ("per-iteration samples (nccl-tests -I 1 JSON times_us) for "
               + ("every cell" if with_samples == cells else f"{with_samples} of {cells} cells")
               + "; their time_us_min/p50/p95/p99/max/std are statistics of the samples, time_us_mean and "
                 "the bandwidths the tool's reported time")
    return f"imported: {sampled}" + ("" if with_samples == cells else f"; the other cells: {without}")


def write_import(folder: Path, results: pd.DataFrame, meta: dict, samples: pd.DataFrame | None = None) -> None:
    """An import held in memory (``import_files``, the pccl-reproducer's) as the run folder ``folder``."""
    check_out_folder(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BadInput("--out", f"cannot write to {folder}: {error.strerror or error}") from None
    write_run(folder, results, pd.DataFrame(columns=SAMPLE_SCHEMA.names) if samples is None else samples, meta)
