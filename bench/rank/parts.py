"""Part files: one JSON row per finished cell, appended and flushed as each cell ends.

An interrupted sweep keeps every row written so far: a killed or crashed process loses
nothing that was flushed (it is in the kernel's page cache). Against the machine itself
going down, rows are also synced to disk, at most ``SYNC_EVERY_S`` apart and at the end of
a job, not after every cell: an fsync costs 0.2-3 ms on a shared disk, more than the rest
of a small cell's harness. A row cut by a crash is skipped on reading and measured again by
``--resume``: the last line of a file, or a line that the next append marked as cut
(``TORN_MARK``). Any other line that is not a row is bad input naming the file and line.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import BadInput

if TYPE_CHECKING:
    from bench.plan.cells import Cell

#: the most seconds of finished rows a machine crash may cost
SYNC_EVERY_S = 1.0
_last_sync: dict[str, float] = {}


def append_rows(part: Path, rows: list[dict], sync: bool = True) -> None:
    """Append rows and flush them to the kernel; sync them to disk when ``sync`` is True, or when
    ``sync`` is None ("soon") and the file was last synced ``SYNC_EVERY_S`` ago."""
    end_with_newline(part)
    with part.open("a") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
        handle.flush()
        now = time.monotonic()
        if sync or (sync is None and now - _last_sync.get(str(part), 0.0) >= SYNC_EVERY_S):
            os.fsync(handle.fileno())
            _last_sync[str(part)] = now


def sync_file(part: Path) -> None:
    """Sync what was appended to ``part`` to disk (the end of a job)."""
    if part.exists():
        with part.open("a") as handle:
            os.fsync(handle.fileno())
        _last_sync[str(part)] = time.monotonic()


#: appended to a line cut by a crash before rows go after it: the line is then known for a cut row
#: (skipped on reading) wherever it ends up, not taken for garbage
TORN_MARK = "\t<- a row cut short by a crash; skipped"
#: how much of a file's end is read back to find a cut line's start (rows are far shorter)
_TAIL_CHUNK = 1 << 16


def _last_line(handle) -> bytes:
    """The bytes after the last line break of an open binary file (read backwards, chunk by chunk)."""
    end = handle.seek(0, os.SEEK_END)
    tail = b""
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        handle.seek(start)
        tail = handle.read(end - start) + tail
        if b"\n" in tail:
            return tail.rsplit(b"\n", 1)[1]
        end = start
    return tail


def end_with_newline(part: Path) -> None:
    """Terminate a line cut by a crash, so rows appended later stay on lines of their own; a cut that
    is no complete row gets ``TORN_MARK`` (a row whose line break alone was lost stays a row)."""
    if part.exists() and part.stat().st_size:
        with part.open("rb+") as handle:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) == b"\n":
                return
            try:
                complete = isinstance(json.loads(_last_line(handle)), dict)
            except ValueError:
                complete = False
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n" if complete else TORN_MARK.encode() + b"\n")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def row_problem(row: object) -> str | None:
    """Why a parsed line is not a row a sweep writes (None when it is one)."""
    if not isinstance(row, dict):
        return f"a row is a JSON object, not {type(row).__name__}"
    for name in ("cell_key", "status"):
        if not isinstance(row.get(name), str):
            return f"the row has no {name} text (got {row.get(name)!r:.60})"
    samples = row.get("samples_us", [])
    if not isinstance(samples, list) or not all(_is_number(value) for value in samples):
        return "samples_us is not a list of finite numbers"
    return None


def _cell_problem(row: dict) -> str | None:
    """Why a row's cell fields cannot be the cell it names (a missing field, a wrong type); the planned
    placement (``planned_<name>``) where the row has it, else the unprefixed field (schema 1)."""
    from bench.plan.cells import Cell  # plan/cells imports the heavier planning modules

    for field in fields(Cell):
        name = f"planned_{field.name}" if f"planned_{field.name}" in row else field.name
        if name not in row:
            if field.default is MISSING:
                return f"the row has no {field.name}"
            continue
        value, wanted = row[name], {"str": str, "int": int, "bool": bool}[field.type]
        if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
            return f"{name}: {value!r:.60} is not {field.type}"
    return None


def _rows(part: Path, check_cells: bool) -> list[dict]:
    try:
        lines = part.read_text(errors="surrogateescape").splitlines()
    except OSError as error:
        raise BadInput(str(part), f"cannot read the part file: {error.strerror or error}") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if number == len(lines) or line.endswith(TORN_MARK):
                continue  # a line cut by a crash mid-write: the cell is measured again
            raise BadInput(f"{part}: line {number}", f"not a JSON row ({line[:60]!r}); a part file "
                           "holds one JSON object per line (only its last line may be cut short)") from None
        problem = row_problem(row) or (_cell_problem(row) if check_cells else None)
        if problem:
            raise BadInput(f"{part}: line {number}", f"{problem}; not a row that a sweep writes")
        rows.append(row)
    return rows


#: the results schema of a part row written before the planned placement had columns of its own
#: (no ``planned_nnodes``): its cell key is bench.plan.cells.legacy_cell_key's
LEGACY_SCHEMA = 1


def is_legacy(row: dict) -> bool:
    """Whether a part row is of schema 1 (its key without the placement)."""
    return "planned_nnodes" not in row


def read_parts(folder: Path, check_cells: bool = False) -> list[dict]:
    """Every complete row of a run's part files; the last row of a cell wins (a rerun replaces it).

    A line that is not a row (garbage, JSON other than a row object) is BadInput naming the file and
    line; ``check_cells`` also checks each row's cell fields (a resumed run, before it writes)."""
    by_key: dict[str, dict] = {}
    for part in sorted((folder / "parts").glob("*.jsonl")):
        for row in _rows(part, check_cells):
            by_key[row["cell_key"]] = row
    return list(by_key.values())


def cell_rows(rows: list[dict], cells: Iterable[Cell]) -> dict[str, dict]:
    """The row of each of ``cells`` that ``rows`` (read_parts) hold, by the cell's key: the row under
    its key, else a schema-1 row under the cell's schema-1 key (a run folder begun before the key
    held the placement keeps its rows and their keys; such a row cannot say where it was planned,
    so it stands for the cell wherever the cell is planned now)."""
    by_key = {row["cell_key"]: row for row in rows}
    legacy = {row["cell_key"]: row for row in rows if is_legacy(row)}
    found = {}
    for cell in cells:
        row = by_key.get(cell.key)
        if row is None and legacy:
            row = legacy.get(cell.legacy_key)
        if row is not None:
            found[cell.key] = row
    return found


def rows_of_cells(rows: list[dict], cells: Iterable[Cell]) -> list[dict]:
    """The rows that cell_rows finds for ``cells``, in the order of ``rows``; a schema-1 row says so
    (``schema_version`` 1: the table row made of it has a key of that schema)."""
    chosen = {id(row) for row in cell_rows(rows, cells).values()}
    return [{"schema_version": LEGACY_SCHEMA, **row} if is_legacy(row) else row for row in rows if id(row) in chosen]


def finished_keys(rows: list[dict], cells: Iterable[Cell], statuses: tuple[str, ...]) -> set[str]:
    """The keys of ``cells`` whose row (cell_rows) has one of ``statuses``: what a resumed run skips."""
    return {key for key, row in cell_rows(rows, cells).items() if row["status"] in statuses}
