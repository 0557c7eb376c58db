"""The implementations the model knows, as the schedules they run.

- ``pccl-flat:<algorithm>``: this project's flat schedule over all ranks;
- ``pccl-hier:<inter>/<intra>``: this project's hierarchical composition (phases by name,
  ``mpi`` phases run MPICH's selection on the sub-communicator);
- ``xccl``: NCCL/RCCL as what they are for these collectives: a flat ring for all-gather
  and reduce-scatter; for all-reduce the faster of the ring and a stand-in for NCCL's
  double binary tree (recursive halving + doubling: the same 2 log p latency and 2n
  bandwidth terms); traffic striped over the node's NICs;
- ``mpi``: the system MPI as MPICH's default algorithm selection (bench/model/mpich.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.errors import BadInput
from bench.model.mpich import mpich_algorithm, mpich_schedule
from collectives.schedules.algorithms import schedule_for, unsupported_reason
from collectives.schedules.hier import composition_problem, hier_schedule
from collectives.schedules.rows import Schedule
from collectives.schedules.topology import Grid

#: library of each implementation (the machine description's ``libraries`` keys)
LIBRARY_OF = {"pccl-flat": "pccl", "pccl-hier": "pccl", "mpi": "mpi", "xccl": "xccl"}
#: NCCL/RCCL on a sub-communicator: their ring for all-gather and reduce-scatter (REFERENCE.md §1)
RING_FOR_XCCL = {"xccl": "ring"}
DEFAULT_VARIANTS = ("mpi", "xccl", "pccl-flat:ring", "pccl-flat:rd", "pccl-hier:rd/ring", "pccl-hier:ring/ring")


@dataclass(frozen=True)
class Variant:
    impl: str
    algorithm: str
    intra: str = ""
    inter: str = ""

    @property
    def library(self) -> str:
        return LIBRARY_OF[self.impl]

    @property
    def label(self) -> str:
        if self.impl == "pccl-hier":
            return f"pccl-hier:{self.inter}/{self.intra}"
        return self.impl if self.impl in ("mpi", "xccl") else f"{self.impl}:{self.algorithm}"

    def problem(self, collective: str) -> str | None:
        """Why this variant cannot run ``collective`` (None: it can)."""
        if self.impl == "pccl-flat":
            return unsupported_reason(collective, self.algorithm)
        if self.impl == "pccl-hier":
            return composition_problem(collective, self.intra, self.inter)
        return None

    def candidates(self, collective: str, nranks: int, bytes_total: int) -> tuple[str, ...]:
        """The schedules that may run; the model takes the fastest (a library's own tuner)."""
        if self.impl == "mpi":
            return (mpich_algorithm(collective, nranks, bytes_total),)
        if self.impl == "xccl":  # the library's own choice ("native" in measured rows)
            return ("ring", "rh+rd") if collective == "allreduce" else ("ring",)
        return (f"{self.inter}/{self.intra}",) if self.impl == "pccl-hier" else (self.algorithm,)

    def schedule(self, collective: str, grid: Grid, rank: int, count: int, in_place: bool, resolved: str) -> Schedule:
        if self.impl == "pccl-hier":  # an NCCL/RCCL phase (measured rows' ``xccl``) runs their ring
            intra, inter = (RING_FOR_XCCL.get(spec, spec) for spec in (self.intra, self.inter))
            return hier_schedule(collective, grid, rank, count, in_place, intra, inter)
        if self.impl == "mpi":
            return mpich_schedule(collective, resolved, grid.nranks, rank, count, in_place)
        return schedule_for(collective, resolved, grid.nranks, rank, count, in_place)


def parse_variant(text: str) -> Variant:
    """``mpi``, ``xccl``, ``pccl-flat:<algorithm>`` or ``pccl-hier:<inter>/<intra>``."""
    impl, _, rest = text.partition(":")
    if impl in ("mpi", "xccl") and not rest:
        return Variant(impl, "native")
    if impl == "pccl-flat" and rest:
        return Variant(impl, rest)
    if impl == "pccl-hier" and rest.count("/") == 1:
        inter, intra = rest.split("/")
        return Variant(impl, "hier", intra=intra, inter=inter)
    raise BadInput("--impl", f"{text!r} is not mpi, xccl, pccl-flat:<algorithm> or pccl-hier:<inter>/<intra>")


def variant_of_row(row) -> Variant | None:
    """The variant a measured row ran (None: one the model does not know, e.g. ``auto``)."""
    if row.impl == "mpi":
        return Variant("mpi", "native")
    if row.impl == "xccl":
        return Variant("xccl", "native")
    if row.impl == "pccl-flat" and row.algorithm != "auto":
        return Variant("pccl-flat", row.algorithm)
    if row.impl == "pccl-hier" and "auto" not in (row.intra, row.inter):
        return Variant("pccl-hier", "hier", intra=row.intra, inter=row.inter)
    return None
