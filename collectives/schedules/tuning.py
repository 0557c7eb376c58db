"""``algorithm: auto``: pick a schedule per (collective, implementation, ranks, nodes, bytes).

A tuning table is a JSON list of entries, each the measured (or shipped) winner of
one cell: collective, impl, nranks, nnodes, bytes_total, choice (an algorithm for
pccl-flat, ``inter/intra`` for pccl-hier), and the placement it was measured in
(``out_of_place``/``in_place``; an entry without one, as in the shipped table, holds for
both). A lookup takes the entries of the same collective, implementation and placement
(those of the call's placement where the table has any, else those without one) at the
nearest rank count (then node count, on a
log scale), and among them the smallest size >= the requested one (else the
largest). ``pccl-bench tune RESULTS`` writes a table from measured sweeps.

Where ``auto`` reads: $PCCL_BENCH_TUNING, else ~/.config/pccl-bench/tuning.json if
it exists, else the shipped defaults (tuning_default.json beside this file).
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path

AUTO = "auto"
SHIPPED = Path(__file__).with_name("tuning_default.json")


def user_table_path() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "pccl-bench" / "tuning.json"


def table_path() -> Path:
    if os.environ.get("PCCL_BENCH_TUNING"):
        return Path(os.environ["PCCL_BENCH_TUNING"])
    user = user_table_path()
    return user if user.exists() else SHIPPED


@lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> tuple[dict, ...]:
    entries = json.loads(Path(path).read_text())["entries"]
    return tuple(entries)


def load_table(path: Path | None = None) -> tuple[dict, ...]:
    path = path or table_path()
    try:
        return _load(str(path), path.stat().st_mtime)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"tuning table {path}: cannot read it ({error})") from None


def _distance(a: int, b: int) -> float:
    return abs(math.log2(max(a, 1)) - math.log2(max(b, 1)))


def choose(collective: str, impl: str, nranks: int, nnodes: int, bytes_total: int,
           table: tuple[dict, ...] | None = None, in_place: bool = False) -> str:
    """The tuned choice for one call; ValueError if the table has nothing for it."""
    entries = [e for e in (table if table is not None else load_table())
               if e["collective"] == collective and e["impl"] == impl]
    # a placement's own entries, never the other's: in place a schedule moves different bytes
    placement = "in_place" if in_place else "out_of_place"
    own = [e for e in entries if e.get("placement") == placement]
    entries = own or [e for e in entries if e.get("placement") in (None, "")]
    if not entries:
        raise ValueError(f"the tuning table {table_path()} has no entry for {impl} {collective}")
    best_ranks = min({e["nranks"] for e in entries}, key=lambda n: (_distance(n, nranks), n))
    entries = [e for e in entries if e["nranks"] == best_ranks]
    best_nodes = min({e["nnodes"] for e in entries}, key=lambda n: (_distance(n, nnodes), n))
    entries = sorted((e for e in entries if e["nnodes"] == best_nodes), key=lambda e: e["bytes_total"])
    for entry in entries:
        if entry["bytes_total"] >= bytes_total:
            return entry["choice"]
    return entries[-1]["choice"]


def write_table(entries: list[dict], path: Path, source: str) -> None:
    """Atomically write a tuning table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps({"source": source, "entries": entries}, indent=1) + "\n")
    os.replace(temp, path)
