"""Files of another tool -> one pccl-bench run folder (results, samples, meta.json).

Samples exist only where the tool wrote per-iteration times (nccl-tests/rccl-tests ``-I 1 -J
file.json``: ``<placement>_per_iter.times_us``); every other cell has none, as before.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pandas as pd

from bench import __version__
from bench.errors import BadInput
from bench.importers import IMPORTERS
from bench.importers.rows import ImportOptions, make_row, sample_rows
from bench.results.table import COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION, write_run


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as error:
        raise BadInput(str(path), f"cannot read: {error.strerror or error}") from None


def _context(parsed: dict, options: ImportOptions, path: Path, run_id: str, kind: str) -> dict:
    nranks = options.nranks or parsed.get("nranks")
    if not nranks:
        raise BadInput(str(path), "cannot tell how many ranks ran: pass --nranks N")
    hosts = parsed.get("hosts") or []
    nnodes = options.nnodes or len(hosts) or 1
    return {**parsed, "run_id": run_id, "suite": f"import:{kind}", "launch_id": path.name,
            "timestamp": pd.Timestamp(path.stat().st_mtime, unit="s", tz="UTC"), "nranks": int(nranks),
            "nnodes": int(nnodes), "hosts": ",".join(hosts), "impl": options.impl or parsed["impl"],
            "device": options.device or parsed.get("device", "host"),
            "library": options.library or parsed.get("library", ""),
            "library_version": options.library_version or parsed.get("library_version", "")}


def import_files(kind: str, paths: list[Path], options: ImportOptions) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """(results, meta, samples) for every measurement in ``paths``.

    A cell that occurs more than once (the same test in several files, nccl-tests ``-N`` cycles)
    gets ``repeat`` 0, 1, ... as pccl-bench's own repeats do, so every row has its own cell_key;
    its launch is the file it came from (``launch_id``).
    """
    if kind not in IMPORTERS:
        raise BadInput(kind, f"unknown tool; expected one of {', '.join(sorted(IMPORTERS))}")
    run_id = f"import-{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    rows, samples, files, seen = [], [], [], {}
    for path in paths:
        measurements, parsed = IMPORTERS[kind](_read(path), str(path), options)
        context = _context(parsed, options, path, run_id, kind)
        sampled = 0
        for m in measurements:
            row = make_row(m, context)
            repeat = seen.get(row["cell_key"], 0)
            seen[row["cell_key"]] = repeat + 1
            row = make_row(m, context, repeat) if repeat else row
            rows.append(row)
            if m.samples_us:
                samples += sample_rows(row, m.samples_us)
                sampled += 1
        files.append({"path": str(path), "cells": len(measurements), "cells_with_samples": sampled,
                      "nranks": context["nranks"], "library": context["library"],
                      "library_version": context["library_version"],
                      "tool_version": context.get("tool_version", kind), "inferred": context.get("inferred", [])})
    results = pd.DataFrame(rows, columns=COLUMNS)
    with_samples = sum(entry["cells_with_samples"] for entry in files)
    meta = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": f"import:{kind}", "imported_from": files,
            "tool_version": __version__, "started": time.time(), "finished": time.time(),
            "note": _note(with_samples, len(results)), "machine": {}, "env": {}, "versions": {}}
    return results, meta, pd.DataFrame(samples, columns=SAMPLE_COLUMNS)


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
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BadInput("--out", f"cannot write to {folder}: {error.strerror or error}") from None
    if (folder / "results.parquet").exists():
        raise BadInput("--out", f"{folder} already holds a run; choose another --out")
    write_run(folder, results, pd.DataFrame(columns=SAMPLE_COLUMNS) if samples is None else samples, meta)
