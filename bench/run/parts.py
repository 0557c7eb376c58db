"""Part files: one JSON row per finished cell, appended and synced as each cell ends.

An interrupted sweep keeps every row written so far; a row cut by a crash is
skipped on reading and measured again by ``--resume``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def append_rows(part: Path, rows: list[dict]) -> None:
    """Append rows and sync them to disk before returning."""
    end_with_newline(part)
    with part.open("a") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


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
