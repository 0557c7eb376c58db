"""Part files: one JSON row per finished cell, appended and flushed as each cell ends.

An interrupted sweep keeps every row written so far: a killed or crashed process loses
nothing that was flushed (it is in the kernel's page cache). Against the machine itself
going down, rows are also synced to disk, at most ``SYNC_EVERY_S`` apart and at the end of
a job, not after every cell: an fsync costs 0.2-3 ms on a shared disk, more than the rest
of a small cell's harness. A row cut by a crash is skipped on reading and measured again by
``--resume``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

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


def end_with_newline(part: Path) -> None:
    """Terminate a line cut by a crash, so rows appended later stay on lines of their own."""
    if part.exists() and part.stat().st_size:
        with part.open("rb+") as handle:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.write(b"\n")


def read_parts(folder: Path) -> list[dict]:
    """Every complete row of a run's part files; the last row of a cell wins (a rerun replaces it)."""
    by_key: dict[str, dict] = {}
    for part in sorted((folder / "parts").glob("*.jsonl")):
        for line in part.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash mid-write
            by_key[row["cell_key"]] = row
    return list(by_key.values())
