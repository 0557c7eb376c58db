"""Known regressions: cells the gate still reports but does not fail on (xfail with a reason).

A YAML file holds a list of entries::

    - reason: "MPICH 5.0.2 forces ring all-gather on 2 ranks (upstream issue 1234)"
      match: {collective: allgather, impl: mpi, bytes_total: [8, 64B, 4KiB]}
      verdicts: [regressed]          # optional; default: regressed, failed, missing and insufficient

``match`` names result columns (collective, impl, algorithm, intra, inter, device, nranks,
nnodes, ranks_per_node, dtype, op, placement, buffers, count_per_rank, bytes_per_rank, bytes_total,
timing_mode) with one value or a list; sizes take units.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.errors import BadInput
from bench.plan.cells import CELL_KEY
from bench.plan.sizes import cell_value
from bench.plan.suite_files import read_yaml

MATCHABLE = (*CELL_KEY, "bytes_per_rank", "bytes_total")
ALLOWABLE = ("regressed", "failed", "missing", "insufficient")


@dataclass(frozen=True)
class AllowEntry:
    reason: str
    match: dict[str, tuple]
    verdicts: tuple[str, ...] = ALLOWABLE

    def covers(self, row: dict, verdict: str) -> bool:
        if verdict not in self.verdicts:
            return False
        return all(cell_value(name, row.get(name)) in values for name, values in self.match.items())


def _entry(raw: object, where: str) -> AllowEntry:
    if not isinstance(raw, dict) or not str(raw.get("reason") or "").strip():
        raise BadInput(where, "each entry needs a non-empty 'reason' and a 'match' mapping")
    match = raw.get("match")
    if not isinstance(match, dict) or not match:
        raise BadInput(where, "'match' must map result columns to a value or a list of values")
    unknown = sorted(set(match) - set(MATCHABLE)) + sorted(set(raw) - {"reason", "match", "verdicts"})
    if unknown:
        raise BadInput(where, f"unknown field {unknown[0]!r}; match takes {', '.join(MATCHABLE)}")
    verdicts = raw.get("verdicts") or list(ALLOWABLE)
    verdicts = [verdicts] if isinstance(verdicts, str) else verdicts
    if not set(verdicts) <= set(ALLOWABLE):
        raise BadInput(where, f"verdicts must be among {', '.join(ALLOWABLE)}")
    try:
        values = {name: tuple(cell_value(name, v) for v in (value if isinstance(value, list) else [value]))
                  for name, value in match.items()}
    except ValueError as error:
        raise BadInput(where, str(error)) from None
    return AllowEntry(str(raw["reason"]).strip(), values, tuple(verdicts))


def load_allowlist(path: Path) -> list[AllowEntry]:
    raw = read_yaml(path, "allow-list")  # bounded: size, depth, aliases, regular files only
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadInput(str(path), "expected a list of entries (reason, match)")
    return [_entry(item, f"{path}: entry {index + 1}") for index, item in enumerate(raw)]


def apply_allowlist(cells: list, entries: list[AllowEntry]) -> None:
    """Mark every cell that an entry covers with the entry's reason."""
    for cell in cells:
        for entry in entries:
            if entry.covers(cell.row, cell.verdict):
                cell.allowed = entry.reason
                break
