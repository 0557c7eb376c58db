"""The implementations the model knows, as the schedules they run: one model per registered implementation.

- ``pccl-flat:<algorithm>``: this project's flat schedule over all ranks;
- ``pccl-hier:<inter>/<intra>``: this project's hierarchical composition (phases by name,
  ``mpi`` phases run MPICH's selection on the sub-communicator);
- ``xccl``: NCCL/RCCL as what they are for these collectives: a flat ring for all-gather
  and reduce-scatter; for all-reduce the faster of the ring and a stand-in for NCCL's
  double binary tree (recursive halving + doubling: the same 2 log p latency and 2n
  bandwidth terms); traffic striped over the node's NICs;
- ``mpi``: the system MPI as MPICH's default algorithm selection (bench/model/mpich.py).

Each is an ImplModel in MODELS, keyed by the name it is registered under in collectives.impls (checked
when this module is imported); a Variant asks its model. The registered implementations the model does
not price are in UNMODELLED, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bench.errors import BadInput
from bench.model.mpich import mpich_algorithm, mpich_schedule
from collectives.impls import IMPLEMENTATIONS, Implementation
from collectives.schedules.algorithms import schedule_for, unsupported_reason
from collectives.schedules.hier import composition_problem, hier_schedule
from collectives.schedules.rows import Schedule
from collectives.schedules.topology import Grid
from collectives.schedules.tuning import AUTO

DEFAULT_VARIANTS = ("mpi", "xccl", "pccl-flat:ring", "pccl-flat:rd", "pccl-hier:rd/ring", "pccl-hier:ring/ring")


@dataclass(frozen=True)
class Variant:
    """One implementation with its algorithm (or phases): what the model prices. Hashable: profiles are cached by it."""

    impl: str
    algorithm: str
    intra: str = ""
    inter: str = ""

    @property
    def model(self) -> ImplModel:
        return MODELS[self.impl]

    @property
    def library(self) -> str:
        return self.model.library

    @property
    def label(self) -> str:
        return self.model.label(self)

    def problem(self, collective: str) -> str | None:
        """Why this variant cannot run ``collective`` (None: it can)."""
        return self.model.problem(self, collective)

    def candidates(self, collective: str, nranks: int, bytes_total: int,
                   switches: dict[str, int] | None = None) -> tuple[str, ...]:
        """The schedules that may run; the model takes the fastest (a library's own tuner). ``switches``: the
        MPI library's selection thresholds (a description's; None: MPICH's defaults)."""
        return self.model.candidates(self, collective, nranks, bytes_total, switches)

    def schedule(self, collective: str, grid: Grid, rank: int, count: int, in_place: bool, resolved: str) -> Schedule:
        return self.model.schedule(self, collective, grid, rank, count, in_place, resolved)


class ImplModel:
    """How the model prices one registered implementation (a strategy; Variant delegates to it)."""

    #: the implementation's registered name (collectives.impls.IMPLEMENTATIONS)
    name: ClassVar[str]
    #: the machine description's library whose terms price it
    library: ClassVar[str]
    #: how ``--impl`` spells it (an unknown ``--impl`` is told these)
    syntax: ClassVar[str]
    #: its MPI-library phases (ACT_MPI_* rows of its schedule) run MPICH's selection at their real size
    mpich_phases: ClassVar[bool] = False
    #: the whole call is the MPI library's own selection: the algorithm its description entry pins for the
    #: collective (``algorithms``, stated by rows or fitted), else MPICH's rules at the entry's switch points
    mpich_selection: ClassVar[bool] = False
    #: every variant may have an entry of its own in a description (``libraries: <label>``), fitted per
    #: implementation by ``model fit --per-impl`` (its rail runs Cray MPICH or NCCL, whose costs differ)
    own_entry: ClassVar[bool] = False
    #: resolved algorithms of measured rows that are no library collective but the benchmark's own loop of
    #: point-to-point calls: fitted per implementation as their own entry, ``<library>@<collective>``
    own_loops: ClassVar[tuple[str, ...]] = ()

    @property
    def implementation(self) -> type[Implementation]:
        """The registered class this models (what ``algorithm: None`` means comes from it)."""
        return IMPLEMENTATIONS[self.name]

    def label(self, variant: Variant) -> str:
        """As ``--impl`` and bench.results.labels.impl_label name it."""
        return f"{self.name}:{variant.algorithm}"

    def parse(self, rest: str) -> Variant | None:
        """The variant of ``--impl <name>:<rest>`` (``rest`` empty without a colon); None: not this syntax."""
        raise NotImplementedError

    def of_row(self, row) -> Variant | None:
        """The variant a measured row of this implementation ran (None: one the model does not price)."""
        raise NotImplementedError

    def problem(self, variant: Variant, collective: str) -> str | None:
        return None

    def candidates(self, variant: Variant, collective: str, nranks: int, bytes_total: int,
                   switches: dict[str, int] | None) -> tuple[str, ...]:
        return (variant.algorithm,)

    def schedule(self, variant: Variant, collective: str, grid: Grid, rank: int, count: int, in_place: bool,
                 resolved: str) -> Schedule:
        return schedule_for(collective, resolved, grid.nranks, rank, count, in_place)


#: the models, by registered implementation name, in the order ``--impl`` errors list them
MODELS: dict[str, ImplModel] = {}
#: registered implementations the model does not price, and why
UNMODELLED = {
    "shm": "its copies through a node's shared memory (LL, copy-in pipeline, cma) have no terms in a machine "
           "description",
    "rdma": "its one-sided UCX puts and flags (GDRAA-style) have no terms in a machine description",
}


def modelled(cls: type[ImplModel]) -> type[ImplModel]:
    """Register a model; its name must be a registered implementation that UNMODELLED does not list."""
    if cls.name not in IMPLEMENTATIONS:
        raise RuntimeError(f"model {cls.__name__}: {cls.name!r} is no registered implementation "
                           f"(collectives.impls: {sorted(IMPLEMENTATIONS)})")
    if cls.name in UNMODELLED or cls.name in MODELS:
        raise RuntimeError(f"model {cls.__name__}: {cls.name!r} is already modelled or listed as unmodelled")
    MODELS[cls.name] = cls()
    return cls


class PlainModel(ImplModel):
    """A library's own collective: ``--impl <name>``, always the library's own algorithm."""

    def label(self, variant: Variant) -> str:
        return self.name

    def parse(self, rest: str) -> Variant | None:
        return None if rest else Variant(self.name, self.implementation.default_algorithm)

    def of_row(self, row) -> Variant | None:
        return Variant(self.name, self.implementation.default_algorithm)


@modelled
class MpiModel(PlainModel):
    """``mpi``: MPICH's selection (bench/model/mpich.py), at the description's switch points where fitted."""

    name = "mpi"
    library = "mpi"
    syntax = "mpi"
    mpich_selection = True
    #: the PCCL reproducer's reduce-scatter (Sendrecv, host reductions)
    own_loops = ("rh-dd",)

    def candidates(self, variant, collective, nranks, bytes_total, switches):
        return (mpich_algorithm(collective, nranks, bytes_total, switches),)

    def schedule(self, variant, collective, grid, rank, count, in_place, resolved):
        return mpich_schedule(collective, resolved, grid.nranks, rank, count, in_place)


@modelled
class VendorModel(PlainModel):
    """``xccl``: NCCL/RCCL's own choice ("native" in measured rows): the faster of their ring and tree."""

    name = "xccl"
    library = "xccl"
    syntax = "xccl"

    def candidates(self, variant, collective, nranks, bytes_total, switches):
        return ("ring", "rh+rd") if collective == "allreduce" else ("ring",)


@modelled
class FlatModel(ImplModel):
    """``pccl-flat:<algorithm>``: one registered schedule over all ranks."""

    name = "pccl-flat"
    library = "pccl"
    syntax = "pccl-flat:<algorithm>"

    def parse(self, rest: str) -> Variant | None:
        return Variant(self.name, rest) if rest else None

    def of_row(self, row) -> Variant | None:
        return None if row.algorithm == AUTO else Variant(self.name, row.algorithm)  # tuned: the table's choice

    def problem(self, variant, collective):
        return unsupported_reason(collective, variant.algorithm)  # what FlatSchedule.unsupported_reason asks


@modelled
class HierModel(ImplModel):
    """``pccl-hier:<inter>/<intra>``: the hierarchical composition, phases by name."""

    name = "pccl-hier"
    library = "pccl"
    syntax = "pccl-hier:<inter>/<intra>"
    mpich_phases = True
    own_entry = True
    #: NCCL/RCCL on a sub-communicator: their ring for all-gather and reduce-scatter (REFERENCE.md §1)
    ring_for_xccl: ClassVar[dict[str, str]] = {"xccl": "ring"}

    def label(self, variant):
        return f"{self.name}:{variant.inter}/{variant.intra}"

    def parse(self, rest: str) -> Variant | None:
        if rest.count("/") != 1:
            return None
        inter, intra = rest.split("/")
        return Variant(self.name, self.implementation.default_algorithm, intra=intra, inter=inter)

    def of_row(self, row) -> Variant | None:
        if AUTO in (row.intra, row.inter):
            return None
        return Variant(self.name, self.implementation.default_algorithm, intra=row.intra, inter=row.inter)

    def problem(self, variant, collective):
        return composition_problem(collective, variant.intra, variant.inter)  # as Hierarchical's shape check

    def candidates(self, variant, collective, nranks, bytes_total, switches):
        return (f"{variant.inter}/{variant.intra}",)

    def schedule(self, variant, collective, grid, rank, count, in_place, resolved):
        # an NCCL/RCCL phase (measured rows' ``xccl``) runs their ring
        intra, inter = (self.ring_for_xccl.get(spec, spec) for spec in (variant.intra, variant.inter))
        return hier_schedule(collective, grid, rank, count, in_place, intra, inter)


for _name in UNMODELLED:
    if _name not in IMPLEMENTATIONS:
        raise RuntimeError(f"UNMODELLED lists {_name!r}, no registered implementation ({sorted(IMPLEMENTATIONS)})")


def _syntaxes() -> str:
    *most, last = (model.syntax for model in MODELS.values())
    return f"{', '.join(most)} or {last}"


def parse_variant(text: str) -> Variant:
    """``mpi``, ``xccl``, ``pccl-flat:<algorithm>`` or ``pccl-hier:<inter>/<intra>``."""
    impl, _, rest = text.partition(":")
    if impl in UNMODELLED:
        raise BadInput("--impl", f"{text!r} is not modelled: {UNMODELLED[impl]}; use {_syntaxes()}")
    model = MODELS.get(impl)
    variant = model.parse(rest) if model is not None else None
    if variant is None:
        raise BadInput("--impl", f"{text!r} is not {_syntaxes()}")
    return variant


def variant_of_row(row) -> Variant | None:
    """The variant a measured row ran (None: one the model does not know, e.g. ``auto``, ``shm``)."""
    model = MODELS.get(row.impl)
    return None if model is None else model.of_row(row)
