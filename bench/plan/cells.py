"""Expand a suite into cells and group them into launches (one MPI job each)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from hashlib import sha1
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import BadInput
from bench.plan.hosts import HostPlan, Placement, hosts_digest, place, suite_host_plan
from bench.plan.sizes import geometric
from collectives.call import BLOCKING
from collectives.dtypes import itemsize
from collectives.impls import IMPLEMENTATIONS
from collectives.spec import total_count
from collectives.timing_plan import TimingPlan  # the plan JSON's timing block (defined once there)

if TYPE_CHECKING:  # the worker reads plans without the suite schema (pydantic costs ~0.1 s a rank)
    from bench.plan.suite import Suite

#: the fields that say which measurement a row is (the gate matches on these; repeats of a
#: cell in separate launches share them and differ in ``repeat``). In a results table ``nnodes`` and
#: ``ranks_per_node`` are the measured placement (bench/results/table.py Row), as the gate always read them.
CELL_KEY = (
    "collective", "impl", "algorithm", "intra", "inter", "device", "nranks", "nnodes", "ranks_per_node",
    "dtype", "op", "placement", "buffers", "count_per_rank", "timing_mode", "mode", "arm",
)
#: the value of a key column in a table written before the column existed (what those runs measured)
KEY_DEFAULTS = {"buffers": "warm", "mode": BLOCKING}
#: what the gate matches a baseline's cells with a run's on: CELL_KEY and whether the nodes were
#: virtual (a row's measured ``virtual_nodes``), so that namespace "nodes" on one host are never
#: judged against real ones of the same shape; a table that does not say (an import) matches its like
MATCH_KEY = (*CELL_KEY, "virtual_nodes")
#: the fields an arm may set on its cells (bench.plan.suite.Arm); ``gate --arms`` pairs the cells
#: of two arms on every other key field
ARM_FIELDS = ("impl", "algorithm", "intra", "inter")
#: where a cell's ranks are planned to go: in a row these fields are ``planned_<name>``, and the
#: unprefixed columns hold what the launch measured (bench/rank/outcome.py part_row)
PLACEMENT_FIELDS = ("nnodes", "ranks_per_node", "virtual_nodes", "hosts_digest")
#: which formula a cell key is: 1 hashed CELL_KEY and repeat only; 2 adds the planned placement
#: (virtual nodes, the hosts' digest), so cells placed differently never share a key
CELL_KEY_VERSION = 2
#: the fields cell_key hashes, in this order, before count_per_rank and repeat (the two that differ
#: from cell to cell of one import group or launch)
KEY_HEAD = ("collective", "impl", "algorithm", "intra", "inter", "device", "nranks", "nnodes", "ranks_per_node",
            "virtual_nodes", "hosts_digest", "dtype", "op", "placement", "timing_mode", "arm")


def cell_keys(shared: Mapping[str, object]) -> Callable[[int, int], str]:
    """The cell key (version 2) of cells whose KEY_HEAD fields are ``shared``, as a function of
    (count_per_rank, repeat): 16 hex digits of the SHA-1 of the JSON list of KEY_HEAD values, the
    buffers where they are not warm and the ``mode`` where it is not blocking (so a warm, blocking cell
    keeps the key it had before either existed), count_per_rank and repeat. The head is written once: an
    import keys millions of cells. This is the one definition (Cell.key, the sweep's rows, every importer)."""
    buffers = [shared["buffers"]] if shared.get("buffers", "warm") != "warm" else []
    mode = shared.get("mode") or BLOCKING
    head = json.dumps([shared[name] for name in KEY_HEAD] + buffers + ([mode] if mode != BLOCKING else []))[:-1]

    def key(count_per_rank: int, repeat: int) -> str:
        return sha1(f"{head}, {int(count_per_rank)}, {int(repeat)}]".encode()).hexdigest()[:16]

    return key


def cell_key(values: Mapping[str, object]) -> str:
    """The cell key of one cell's fields (a Cell's, or a row's with the placement planned)."""
    return cell_keys(values)(values["count_per_rank"], values["repeat"])


def legacy_cell_key(values: Mapping[str, object]) -> str:
    """The cell key of version 1 (results schema 1): CELL_KEY and repeat, the arm only when set, no
    placement. Only to find the rows of a run folder written before version 2 (``--resume``)."""
    names = [name for name in CELL_KEY if name not in ("arm", "buffers", "mode")]
    arm = [values["arm"]] if values.get("arm") else []
    return sha1(json.dumps([values[name] for name in (*names, "repeat")] + arm).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Cell:
    """One measurement as planned; its placement fields (PLACEMENT_FIELDS) are where the plan puts
    its ranks, the ones its key hashes."""

    collective: str
    impl: str
    algorithm: str
    intra: str  # pccl-hier phases; "" for flat implementations
    inter: str
    device: str
    nranks: int
    nnodes: int
    ranks_per_node: int
    virtual_nodes: bool
    dtype: str
    op: str
    placement: str
    count_per_rank: int
    bytes_per_rank: int
    bytes_total: int
    timing_mode: str
    repeat: int = 0
    #: same-job comparison: the suite arm this cell belongs to ("" without arms)
    arm: str = ""
    #: the planned hosts (bench.plan.hosts.hosts_digest of the launch's named hosts in rank order;
    #: "" where none are named: this host, or the launcher's choice)
    hosts_digest: str = ""
    #: where each call's buffers are: warm, rotate, cold (bench/rank/buffers.py; in the key unless warm)
    buffers: str = "warm"
    #: rotate: the count_per_rank of the suite's largest size, whose buffers the offset walks through
    #: (nccl-tests' maxbytes); 0 for warm and cold
    buffers_max_count: int = 0
    #: blocking, or nonblocking: posted, then waited for, with OSU's overlap measured (collectives.call MODES)
    mode: str = BLOCKING

    @cached_property
    def key(self) -> str:
        """Stable id of one measurement (the same cell, placement and repeat in another run = the same key);
        hashed once per cell (the worker asks for it twice a cell, the sweep a few times more)."""
        return cell_key(vars(self))

    @property
    def legacy_key(self) -> str:
        """The key this cell had in a run folder of schema 1 (bench.rank.parts.cell_rows)."""
        return legacy_cell_key(vars(self))

    def to_dict(self) -> dict:
        """The cell as row columns: the planned placement as ``planned_<name>``, and the unprefixed
        placement columns the planned values too until a launch's measurement replaces them."""
        values = dict(vars(self))  # flat fields: asdict's deep copy is a cost a cell
        values.pop("key", None)  # the cached key, not a field: it goes in as cell_key below
        for name in PLACEMENT_FIELDS:
            values["planned_" + name] = values[name]
        del values["hosts_digest"]  # the measured hosts' digest: known only once a launch ran
        values["cell_key"] = self.key
        return values

    @classmethod
    def from_dict(cls, values: dict) -> Cell:
        """The cell of a plan or part row (other keys are ignored); the planned placement where the
        row has it (``planned_<name>``), else the unprefixed fields (rows of schema 1)."""
        return cls(**{name: values.get("planned_" + name, values.get(name)) for name in CELL_FIELDS
                      if "planned_" + name in values or name in values})


CELL_FIELDS = tuple(f.name for f in fields(Cell))


@dataclass
class LaunchPlan:
    """What one MPI job runs: written by the sweep, read by the worker on every rank (plans/<launch>.json)."""

    run_id: str
    launch_id: str
    nranks: int
    ranks_per_node: int
    #: the suite's ranks_per_node (None: take the real placement)
    requested_ranks_per_node: int | None
    part: str  # the part file rank 0 appends rows to
    timing: TimingPlan
    check: bool
    cells: list[Cell]
    #: fields every row of the launch carries (``oversubscribed``)
    row_extra: dict = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: the hosts the launcher was told to use ([]: this host, or the launcher's choice) and how
    #: many ranks each must hold; the worker checks the real placement against them
    hosts: list[str] = field(default_factory=list)
    ranks_per_host: int = 0
    #: the site profile's variables of this launch (a part of ``env``); every row's site_env_digest
    site_env: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        values = asdict(self)
        values["cells"] = [cell.to_dict() for cell in self.cells]
        if not values["site_env"]:  # left out: an install from before it reads a plan without a site
            del values["site_env"]
        if not values["timing"]["nb_test_calls"]:  # likewise: a plan without non-blocking test calls
            del values["timing"]["nb_test_calls"]
        return values

    @classmethod
    def from_dict(cls, values: dict) -> LaunchPlan:
        values = dict(values)
        values["timing"] = TimingPlan(**values["timing"])
        values["cells"] = [Cell.from_dict(cell) for cell in values["cells"]]
        return cls(**values)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict()))

    @classmethod
    def read(cls, path: Path | str) -> LaunchPlan:
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass
class Launch:
    launch_id: str
    nranks: int
    ranks_per_node: int
    device: str
    #: the suite's ranks_per_node (None: take the real placement)
    requested_ranks_per_node: int | None = None
    cells: list[Cell] = field(default_factory=list)
    #: environment of this launch on top of the suite's (an arm's ``env``)
    env: dict[str, str] = field(default_factory=dict)
    #: the install whose worker runs this launch (an arm's ``install``; None: this one)
    install: str | None = None
    #: where its ranks go (None: all on this host)
    placement: Placement | None = None

    @property
    def where(self) -> Placement:
        return self.placement or Placement(1, self.nranks)


def counts_for(collective: str, nranks: int, dtype: str, sizes: list[int], semantics: str) -> list[int]:
    """Distinct per-rank counts for the requested sizes (at least one element each).

    ``total`` sizes are rounded down to a multiple of the ranks' share, as nccl-tests does.
    """
    counts: list[int] = []
    for nbytes in sizes:
        if semantics == "per_rank":
            count = nbytes // itemsize(dtype)
        else:
            count = nbytes // (itemsize(dtype) * total_count(collective, nranks, 1))
        count = max(count, 1)
        if count not in counts:
            counts.append(count)
    return counts


def node_shapes(suite: Suite, nranks: int) -> list[int | None]:
    """The ranks-per-node values ``nranks`` runs with (None: one node holds all ranks)."""
    if not suite.ranks_per_node:
        return [None]
    return [per_node for per_node in suite.ranks_per_node if nranks % per_node == 0]


def expand(suite: Suite, hosts: HostPlan | None = None) -> list[Launch]:
    """The suite's launches and their cells; ``hosts``: where launches go (default: the suite's
    ``hosts``/``hostfile``, else this host). A rank count the hosts cannot hold evenly is BadInput."""
    hosts = hosts if hosts is not None else suite_host_plan(suite)
    sizes = geometric(suite.sizes.min, suite.sizes.max, suite.sizes.factor)
    launches: list[Launch] = []
    # One launch per (rank count, node shape that divides it); the id names both, and the hosts.
    for repeat, nranks, requested in ((r, n, shape) for r in range(suite.repeats) for n in suite.ranks
                                      for shape in node_shapes(suite, n)):
        try:
            spread = place(nranks, requested, hosts)
        except ValueError as error:
            raise BadInput(hosts.source, f"ranks {nranks}: {error}") from None
        per_node = requested or (spread.ranks_per_host if spread.named else nranks)
        suffix = f"-r{repeat}" if suite.repeats > 1 else ""
        on_hosts = f"-{spread.label()}" if spread.named else ""
        planned_hosts = hosts_digest(spread.names) if spread.named else ""
        launch = Launch(f"n{nranks}-rpn{per_node}{on_hosts}-{suite.device}{suffix}", nranks, per_node, suite.device,
                        requested, placement=spread)
        for collective in suite.collectives:
            for entry in suite.implementations:
                if entry.collectives and collective not in entry.collectives:
                    continue
                implementation = IMPLEMENTATIONS[entry.impl]
                names = entry.algorithms or [implementation.default_algorithm]
                phases = [(intra, inter) for intra in entry.intra or [getattr(implementation, "default_intra", "")]
                          for inter in entry.inter or [getattr(implementation, "default_inter", "")]]
                for algorithm, (intra, inter) in ((a, p) for a in names for p in phases):
                    for dtype in suite.dtype:
                        for op in suite.op:
                            counts = counts_for(collective, nranks, dtype, sizes, suite.sizes.semantics)
                            for placement, mode, count, buffers in ((p, m, c, b) for p in suite.placement
                                                                    for m in suite.mode for c in counts
                                                                    for b in suite.buffers):
                                launch.cells.append(Cell(
                                    collective=collective, impl=entry.impl, algorithm=algorithm,
                                    intra=intra, inter=inter,
                                    device=suite.device, nranks=nranks, nnodes=nranks // per_node,
                                    ranks_per_node=per_node,
                                    virtual_nodes=per_node < spread.ranks_per_host,
                                    dtype=dtype, op=op, placement=placement, count_per_rank=count,
                                    bytes_per_rank=count * itemsize(dtype),
                                    bytes_total=total_count(collective, nranks, count) * itemsize(dtype),
                                    timing_mode=suite.timing.mode, repeat=repeat, hosts_digest=planned_hosts,
                                    buffers=buffers, buffers_max_count=max(counts) if buffers == "rotate" else 0,
                                    mode=mode,
                                ))
        # Entries may overlap (a default algorithm listed again): each cell is measured once.
        cells = [cell for cell in {cell.key: cell for cell in launch.cells}.values() if selected(cell, suite.select)]
        if not cells:
            continue
        # Implementations take turns at each size, so slow drift of the machine (or of the MPI
        # library's internal state) lands on all of them alike: side by side means adjacent in time
        # (and a cell's buffers, warm, rotate and cold, one after another).
        position = {cell.key: index for index, cell in enumerate(cells)}
        launch.cells = sorted(cells, key=lambda c: (c.collective, c.dtype, c.op, c.placement, c.mode,
                                                    c.count_per_rank, position[c.key]))
        launches += with_arms(launch, suite)
    return launches


def selected(cell: Cell, select: list[dict[str, tuple]]) -> bool:
    """Whether one of the suite's ``select:`` entries matches the cell (no entries: every cell)."""
    return not select or any(all(getattr(cell, name) in values for name, values in entry.items())
                             for entry in select)


def arm_cell(cell: Cell, arm) -> Cell:
    """``cell`` as ``arm`` measures it: the fields the arm names; an arm of another implementation
    takes that implementation's defaults for what it does not name (an arm ``impl: pccl-hier`` of an
    ``mpi`` entry runs pccl-hier's own phases, not the MPI library's algorithm name)."""
    named = {name: getattr(arm, name) for name in ARM_FIELDS if getattr(arm, name) is not None}
    if arm.impl is not None and arm.impl != cell.impl:
        implementation = IMPLEMENTATIONS[arm.impl]
        named = {"algorithm": implementation.default_algorithm, "intra": getattr(implementation, "default_intra", ""),
                 "inter": getattr(implementation, "default_inter", ""), **named}
    return replace(cell, arm=arm.name, **named)


def with_arms(launch: Launch, suite: Suite) -> list[Launch]:
    """The launch as the suite's arms measure it: arms that share an environment and an install
    take turns cell by cell inside one launch; an arm with another environment (read at MPI_Init)
    or another install gets a launch of its own. The launches of one repeat follow each other, in
    the arms' order on even repeats and the reverse on odd ones (ABBA: a drift of the machine over
    two repeats lands on every arm alike)."""
    if not suite.arms:
        return [launch]
    groups: dict[tuple, list] = {}
    for arm in suite.arms:
        groups.setdefault(arm.launch_setting(), []).append(arm)
    out = []
    for (_, install), members in groups.items():
        env = {name: str(value) for name, value in members[0].env.items()}
        suffix = "" if len(groups) == 1 else "-" + "+".join(arm.name for arm in members)
        cells = [arm_cell(cell, arm) for cell in launch.cells for arm in members]
        out.append(Launch(launch.launch_id + suffix, launch.nranks, launch.ranks_per_node, launch.device,
                          launch.requested_ranks_per_node, list({cell.key: cell for cell in cells}.values()), env,
                          install, launch.placement))
    repeat = launch.cells[0].repeat if launch.cells else 0
    return out[::-1] if repeat % 2 else out
