"""What one cell's run gave, what its launch measured, and the part row made of them (in one place).

A part row is the cell as planned (``Cell.to_dict``: its key, the planned placement as
``planned_<name>``), the launch's facts (the MPI thread level; the placement its topology measured,
in the unprefixed ``nnodes``, ``ranks_per_node``, ``virtual_nodes``, ``hosts``, ``hosts_digest``),
the launch's extra fields (``oversubscribed``), the cell's outcome, and when and in which launch it
ran. The sources never overlap except where the measured placement replaces the planned one in the
unprefixed columns; an overlap anywhere else is a bug, refused (it used to win silently).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from bench.plan.cells import Cell
from bench.plan.hosts import hosts_digest
from bench.rank.hostfacts import hosts_on_row

#: the columns the measured placement fills (planned: the Cell's, as ``planned_<name>``)
MEASURED_COLUMNS = ("nnodes", "ranks_per_node", "virtual_nodes", "hosts", "hosts_digest")


@dataclass(frozen=True)
class MeasuredPlacement:
    """Where a launch's ranks really are (its topology), as row columns."""

    nnodes: int
    ranks_per_node: int
    virtual_nodes: bool
    #: the hosts' names in rank order (hosts_on_row)
    hosts: str
    hosts_digest: str

    @classmethod
    def of(cls, topo) -> MeasuredPlacement:
        """The placement of a ``collectives.schedules.topology.Topology``."""
        return cls(topo.grid.nnodes, topo.grid.ranks_per_node, topo.virtual_nodes, hosts_on_row(topo.hosts),
                   hosts_digest(topo.hosts))

    def columns(self) -> dict:
        return {name: getattr(self, name) for name in MEASURED_COLUMNS}


@dataclass
class CellOutcome:
    """What running one cell gave (bench/rank/cell.py), rank 0's view: its status and why, its samples,
    and the columns the implementation, the memory context, the timing loop and the probe report."""

    #: ok, wrong, failed, unsupported, timeout (bench.results.table.STATUSES); "" while it is prepared
    status: str
    error: str = ""
    #: wrong elements over all ranks (the check)
    n_wrong: int = 0
    #: the timed iterations, each the max over ranks, us
    samples_us: list[float] = field(default_factory=list)
    #: the fixed warm-up iterations asked for (None: the cell never got to its timing plan)
    warmup: int | None = None
    #: why the timed loop stopped; for a cell that was not timed, its status (None: not said)
    stop_reason: str | None = None
    #: "iteration" when timed in turns with its partner arms
    turns: str | None = None
    #: what performs the call and where its memory is: Provenance.columns() and the context's columns()
    described: dict = field(default_factory=dict)
    #: what the timing loop reports beside the samples (cython_ext/timing.pyx measure: warm-up,
    #: precision, synchronised clocks, windows)
    timing: dict = field(default_factory=dict)
    #: the machine-speed probe measured right after the cell (bench/rank/probe.py)
    probe: dict = field(default_factory=dict)
    #: a non-blocking cell's overlap with compute (bench/rank/overlap.py overlap_columns)
    overlap: dict = field(default_factory=dict)

    @property
    def iters(self) -> int:
        return len(self.samples_us)

    @classmethod
    def not_run(cls, status: str, error: str) -> CellOutcome:
        """A cell that never reached its run (its launch failed, the job died before it): ``status`` and why."""
        return cls(status=status, error=error)

    def columns(self) -> dict:
        """The outcome's row columns (``samples_us`` among them: the table's statistics come from it)."""
        values = {**self.described, **self.timing, **self.probe, **self.overlap}
        own = {"n_wrong": self.n_wrong, "error": self.error, "status": self.status, "iters": self.iters,
               "samples_us": self.samples_us}
        if self.warmup is not None:
            own["warmup"] = self.warmup
        if self.stop_reason is not None:
            own["stop_reason"] = self.stop_reason
        if self.turns is not None:
            own["turns"] = self.turns
        columns = {**values, **own}
        if len(columns) != len(values) + len(own):  # counted, not intersected: this runs once a cell
            raise ValueError(f"CellOutcome: {sorted(own.keys() & values.keys())} reported twice")
        return columns


@dataclass(frozen=True)
class LaunchFacts:
    """What a launch decides for every row: the MPI thread level, the measured placement (None: the
    launch got no topology), why its cells cannot run ("" when they can), and the digest of the site
    profile's variables as the rank got them ("": no site set any; ``site_env_digest``)."""

    mpi_thread_level: str
    measured: MeasuredPlacement | None = None
    error: str = ""
    site_env_digest: str = ""

    def columns(self) -> dict:
        """The launch's columns, a copy of those made once (every row of the launch has them)."""
        return dict(self._columns)

    @cached_property
    def _columns(self) -> dict:
        return {"mpi_thread_level": self.mpi_thread_level, **(self.measured.columns() if self.measured else {}),
                **({"site_env_digest": self.site_env_digest} if self.site_env_digest else {})}

    def failure(self) -> CellOutcome:
        """The outcome of each cell of a launch that cannot run."""
        return CellOutcome.not_run("failed", self.error)


def site_env_digest(names: Mapping[str, str] | list[str], env: Mapping[str, str]) -> str:
    """12 hex digits of the SHA-256 of the site profile's variables (``names``: a launch plan's
    ``site_env``) with the values ``env`` (the rank's environment) holds, ``NAME=value`` sorted, one a
    line (``NAME`` alone where it is unset): rows with the same digest ran with the same site settings,
    as they reached the rank (a value the launcher replaced shows). "" where the site set none."""
    if not names:
        return ""
    lines = sorted(f"{name}={env[name]}" if name in env else name for name in names)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def part_row(cell: Cell, outcome: CellOutcome, timestamp: float, launch_id: str | None = None,
             facts: LaunchFacts | None = None, extra: dict | None = None) -> dict:
    """One part row (bench/rank/parts.py): the planned cell, the launch's measured placement in the
    unprefixed placement columns (else the planned one stays there), the launch's ``extra`` fields,
    the outcome, ``timestamp`` and ``launch_id`` (None: the caller adds it)."""
    planned = cell.to_dict()
    launch = facts.columns() if facts else {}
    result = outcome.columns()
    extra = extra or {}
    row = {**planned, **launch, **extra, **result}
    # The sources overlap nowhere but where the measured placement replaces the planned one (once):
    # checked by counting the row's columns, as this runs between timed cells; the repeated names
    # are looked for only when the count is off.
    replaced = 0
    for name in MEASURED_COLUMNS:
        if name in planned and (name in launch or name in extra or name in result):
            replaced += 1
    if len(row) != len(planned) + len(launch) + len(extra) + len(result) - replaced:
        _refuse_repeats(planned, launch, extra, result)
    row["timestamp"] = timestamp
    if launch_id is not None:
        row["launch_id"] = launch_id
    return row


def _refuse_repeats(planned: dict, launch: dict, extra: dict, result: dict) -> None:
    """Raise naming the first source of a part row that repeats an earlier one's columns."""
    taken = planned.keys() - set(MEASURED_COLUMNS)  # the measured placement may replace the planned one
    for name, values in (("the launch's facts", launch), ("the launch's extra fields", extra),
                         ("the outcome", result)):
        if clash := taken & values.keys():
            raise ValueError(f"part row: {name} repeat {sorted(clash)}")
        taken |= values.keys()
