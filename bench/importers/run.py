"""Files of another tool -> one pccl-bench run folder (results, an empty samples table, meta.json)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pandas as pd

from bench import __version__
from bench.errors import BadInput
from bench.importers import IMPORTERS
from bench.importers.rows import ImportOptions, make_row
from bench.table import COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION, write_run


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


def import_files(kind: str, paths: list[Path], options: ImportOptions) -> tuple[pd.DataFrame, dict]:
    """(results, meta) for every measurement in ``paths``."""
    if kind not in IMPORTERS:
        raise BadInput(kind, f"unknown tool; expected one of {', '.join(sorted(IMPORTERS))}")
    run_id = f"import-{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    rows, files = [], []
    for path in paths:
        measurements, parsed = IMPORTERS[kind](_read(path), str(path), options)
        context = _context(parsed, options, path, run_id, kind)
        rows += [make_row(m, context) for m in measurements]
        files.append({"path": str(path), "cells": len(measurements), "nranks": context["nranks"],
                      "library": context["library"], "library_version": context["library_version"],
                      "tool_version": context.get("tool_version", kind)})
    results = pd.DataFrame(rows, columns=COLUMNS)
    meta = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": f"import:{kind}", "imported_from": files,
            "tool_version": __version__, "started": time.time(), "finished": time.time(),
            "note": "imported: no per-iteration samples; time_us_p50 holds the tool's reported time",
            "machine": {}, "env": {}, "versions": {}}
    return results, meta


def write_import(folder: Path, results: pd.DataFrame, meta: dict) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BadInput("--out", f"cannot write to {folder}: {error.strerror or error}") from None
    if (folder / "results.parquet").exists():
        raise BadInput("--out", f"{folder} already holds a run; choose another --out")
    write_run(folder, results, pd.DataFrame(columns=SAMPLE_COLUMNS), meta)
