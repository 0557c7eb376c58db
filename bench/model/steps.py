"""Walk the real schedules of one call into per-step link use: the model's input.

For every step (row) and every representative rank (column) a Profile holds the largest
message on each link class, the NIC share of the inter-node one, the bytes copied
and reduced, and the inter-node bytes of all ranks of the step together (a shared
fabric's load). A step's link class is that of its communicator: intra-node (comm 1),
rail = inter-node (comm 2), or for the whole communicator (comm 0) whether the peer
shares the rank's node. A row that runs the MPI library's collective (ACT_MPI_*) is replaced by
the steps of MPICH's algorithm on that sub-communicator.

Schedules are built for ``unit_count`` elements per rank (UNIT_ELEMENTS; all-reduce p times that)
and scaled: every message, copy and reduction of a schedule is linear in count.

Representative ranks: every rank up to 64 ranks; above, whole nodes only (the first,
the last, and those around the fold boundary of recursive algorithms on p or on the node
count), since ranks with the same role repeat the same link pattern. NIC sharing is
counted among the ranks of one node in the same step, so representatives are whole nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from bench.model.impls import Variant
from bench.model.mpich import mpich_algorithm, mpich_schedule
from collectives.schedules.hier import MAX_PIECES
from collectives.schedules.rows import ACT_COPY, ACT_REDUCE, LIBRARY_ACTIONS, Schedule
from collectives.schedules.rows import COLUMN as C
from collectives.schedules.topology import Grid

ALL_RANKS_UP_TO = 64
FIELDS = ("intra_bytes", "inter_bytes", "send_inter", "recv_inter", "send_bytes_inter", "recv_bytes_inter",
          "send_messages_inter", "copy_bytes", "reduce_bytes", "mpi_reduce_bytes")


@dataclass(frozen=True)
class NicLayout:
    """How one implementation's inter-node flows use the NICs of a node."""

    policy: str  # mapped | single | striped
    nics_per_node: int
    nic_of_local: tuple[int, ...]  # NIC of each local rank


@dataclass(frozen=True)
class Profile:
    """Arrays of shape (steps, representative ranks), for ``unit_count`` elements per rank."""

    unit_count: int
    intra_bytes: np.ndarray  # largest intra-node message (send or receive) of the step
    inter_bytes: np.ndarray  # largest inter-node message
    inter_shared_bytes: np.ndarray  # inter-node bytes times the NIC share (flows per NIC / NICs per flow)
    copy_bytes: np.ndarray
    reduce_bytes: np.ndarray  # reductions by the implementation's library
    mpi_reduce_bytes: np.ndarray  # reductions inside MPI-library phases (``mpi`` phases of pccl-hier)
    #: the inter-node bytes every rank of the call sends in the step, the same in every column (a shared fabric's load)
    fabric_bytes: np.ndarray
    #: the inter-node messages all ranks of the call send in the step, the same in every column (a shared fabric's
    #: message load: in the lab, frames that one machine's kernel and emulator handle one after another)
    fabric_messages: np.ndarray
    ranks: tuple[int, ...]
    #: the first of every distinct step (the same bytes on every rank: a ring repeats one step p - 1 times)
    distinct: np.ndarray | None = None
    #: (steps,): the distinct step of every step, in order
    order: np.ndarray | None = None

    def merged(self) -> Profile:
        """The distinct steps only: a step's features are functions of its own bytes, so equal steps cost the
        same under any parameters (their sum over steps is taken with ``order``)."""
        pick = self.distinct
        return replace(self, intra_bytes=self.intra_bytes[pick], inter_bytes=self.inter_bytes[pick],
                       inter_shared_bytes=self.inter_shared_bytes[pick], copy_bytes=self.copy_bytes[pick],
                       reduce_bytes=self.reduce_bytes[pick], mpi_reduce_bytes=self.mpi_reduce_bytes[pick],
                       fabric_bytes=self.fabric_bytes[pick], fabric_messages=self.fabric_messages[pick])


#: the elements of a block in the call the model walks: as many as a pipelined composition's most
#: pieces (collectives/schedules/hier.py), so its pieces, and their overlap, are in the walked rows
UNIT_ELEMENTS = MAX_PIECES


def unit_count(collective: str, nranks: int) -> int:
    return nranks * UNIT_ELEMENTS if collective == "allreduce" else UNIT_ELEMENTS


def representatives(grid: Grid) -> list[int]:
    if grid.nranks <= ALL_RANKS_UP_TO:
        return list(range(grid.nranks))
    nodes = {0, grid.nnodes - 1}
    for size, per in ((grid.nranks, 1), (grid.nnodes, grid.ranks_per_node)):
        extra = size - (1 << (size.bit_length() - 1))
        if extra:
            nodes |= {min(max(unit, 0), size - 1) * per // grid.ranks_per_node for unit in (2 * extra - 1, 2 * extra)}
    return [node * grid.ranks_per_node + local for node in sorted(nodes) for local in range(grid.ranks_per_node)]


def _world_peers(steps: np.ndarray, column: str, grid: Grid, rank: int) -> np.ndarray:
    peer, comm = steps[:, C[column]], steps[:, C["comm"]]
    node, local = grid.node(rank), grid.local(rank)
    world = np.where(comm == 1, node * grid.ranks_per_node + peer, peer)
    return np.where(comm == 2, peer * grid.ranks_per_node + local, world)


def _message_bytes(steps: np.ndarray, prefix: str, itemsize: int) -> np.ndarray:
    sized = steps[:, C[f"{prefix}_count"]] * steps[:, C[f"{prefix}_nblocks"]] * itemsize
    return np.where(steps[:, C[f"{prefix}_peer"]] >= 0, sized, 0)


def _plain_rows(steps: np.ndarray, grid: Grid, rank: int, itemsize: int) -> dict[str, np.ndarray]:
    """Per-step link use of rows without MPI-library collectives. Posted rows (rows.POST) and the row
    that completes them are one step: their messages are in flight together, so the step's bytes on a
    link class are the sum of theirs (one rank's messages share its injection), its latency one."""
    fields = {}
    node = grid.node(rank)
    for prefix in ("send", "recv"):
        moved = _message_bytes(steps, prefix, itemsize)
        crosses = (_world_peers(steps, f"{prefix}_peer", grid, rank) // grid.ranks_per_node != node) & (moved > 0)
        fields[f"{prefix}_inter"] = crosses
        fields[f"{prefix}_bytes_inter"] = np.where(crosses, moved, 0)
        fields[f"{prefix}_bytes_intra"] = np.where(crosses, 0, moved)
    fields["send_messages_inter"] = fields["send_inter"].astype(np.int64)  # summed over a posted group, not or-ed
    action = steps[:, C["action"]]
    acted = steps[:, C["action_nblocks"]] * steps[:, C["action_count"]] * itemsize
    fields["copy_bytes"] = np.where(action == ACT_COPY, acted, 0)
    fields["reduce_bytes"] = np.where(action == ACT_REDUCE, acted, 0)
    fields["mpi_reduce_bytes"] = np.zeros(len(steps), dtype=np.int64)
    posted = steps[:, C["post"]] != 0
    if posted.any():
        starts = np.flatnonzero(np.concatenate([[True], ~posted[:-1]]))  # a step starts after each completing row
        fields = {name: (np.logical_or if values.dtype == bool else np.add).reduceat(values, starts)
                  for name, values in fields.items()}
    fields["intra_bytes"] = np.maximum(fields.pop("send_bytes_intra"), fields.pop("recv_bytes_intra"))
    fields["inter_bytes"] = np.maximum(fields["send_bytes_inter"], fields["recv_bytes_inter"])
    return fields


def _mpi_phase(row: np.ndarray, grid: Grid, rank: int, itemsize: int, algorithm: str) -> dict[str, np.ndarray]:
    """The steps of MPICH's ``algorithm`` for one ACT_MPI_* row, as plain rows of this rank."""
    comm = int(row[C["comm"]])
    members = grid.members(comm, rank)
    size = len(members)
    sub_grid = Grid(size, size) if comm == 1 else Grid(size, 1)
    collective = LIBRARY_ACTIONS[int(row[C["action"]])]
    in_place = int(row[C["src_buf"]]) < 0
    schedule = mpich_schedule(collective, algorithm, size, members.index(rank), int(row[C["action_count"]]), in_place)
    fields = _plain_rows(schedule.steps, sub_grid, members.index(rank), itemsize)
    fields["mpi_reduce_bytes"], fields["reduce_bytes"] = fields["reduce_bytes"], fields["mpi_reduce_bytes"]
    return fields


def mpi_phase_choices(schedule: Schedule, grid: Grid, rank: int, scale: float, itemsize: int,
                      switches: dict[str, int] | None = None) -> tuple[str, ...]:
    """MPICH's algorithm for each ACT_MPI_* row at the real size (``scale`` x the unit count), by the MPI
    library's ``switches`` (fitted, else MPICH's defaults)."""
    choices = []
    for row in schedule.steps:
        if row[C["action"]] in LIBRARY_ACTIONS:
            size = len(grid.members(int(row[C["comm"]]), rank))
            collective = LIBRARY_ACTIONS[int(row[C["action"]])]
            ranks = 1 if collective == "allreduce" else size  # the all-reduce's count is its whole count
            total = int(ranks * row[C["action_count"]] * scale * itemsize)
            choices.append(mpich_algorithm(collective, size, total, switches))
    return tuple(choices)


def rank_rows(schedule: Schedule, grid: Grid, rank: int, itemsize: int, choices: tuple[str, ...]) -> dict:
    """One rank's link use, step by step, MPI-library rows expanded into their steps."""
    steps = schedule.steps
    native = np.flatnonzero(np.isin(steps[:, C["action"]], list(LIBRARY_ACTIONS)))
    if not len(native):
        return _plain_rows(steps, grid, rank, itemsize)
    pieces, start = [], 0
    for index, algorithm in zip(native, choices, strict=True):
        pieces += [_plain_rows(steps[start:index], grid, rank, itemsize),
                   _mpi_phase(steps[index], grid, rank, itemsize, algorithm)]
        start = index + 1
    pieces.append(_plain_rows(steps[start:], grid, rank, itemsize))
    return {name: np.concatenate([piece[name] for piece in pieces]) for name in pieces[0]}


def _stack(per_rank: list[dict]) -> dict[str, np.ndarray]:
    length = max(len(fields["intra_bytes"]) for fields in per_rank)
    stacked = {}
    for name in FIELDS:
        columns = [np.pad(fields[name], (0, length - len(fields[name]))) for fields in per_rank]
        stacked[name] = np.stack(columns, axis=1) if columns else np.zeros((length, 0))
    return stacked


def _nic_share(fields: dict[str, np.ndarray], ranks: list[int], grid: Grid, nics: NicLayout) -> np.ndarray:
    """Inter-node bytes times the NIC share of each flow, counted among one node's ranks."""
    shared = np.zeros(fields["inter_bytes"].shape, dtype=np.float64)
    by_node: dict[int, list[int]] = {}
    for column, rank in enumerate(ranks):
        by_node.setdefault(grid.node(rank), []).append(column)
    for columns in by_node.values():
        nic = [0 if nics.policy == "single" else nics.nic_of_local[grid.local(ranks[c])] for c in columns]
        for direction in ("send", "recv"):
            flows = fields[f"{direction}_inter"][:, columns].astype(np.float64)
            if nics.policy == "striped":
                share = np.repeat(flows.sum(axis=1, keepdims=True) / nics.nics_per_node, len(columns), axis=1)
            else:
                share = np.stack([flows[:, [i for i, n in enumerate(nic) if n == mine]].sum(axis=1) for mine in nic],
                                 axis=1)
            moved = fields[f"{direction}_bytes_inter"][:, columns] * share
            shared[:, columns] = np.maximum(shared[:, columns], moved)
    return shared


@lru_cache(maxsize=256)
def build_profile(variant: Variant, collective: str, grid: Grid, in_place: bool, itemsize: int, resolved: str,
                  choices: tuple[str, ...], nics: NicLayout) -> Profile:
    """The profile of one call (cached: sizes of one algorithm class share it)."""
    unit = unit_count(collective, grid.nranks)
    ranks = representatives(grid)
    per_rank = [rank_rows(variant.schedule(collective, grid, rank, unit, in_place, resolved), grid, rank, itemsize,
                          choices) for rank in ranks]
    fields = _stack(per_rank)
    arrays = (fields["intra_bytes"], fields["inter_bytes"], _nic_share(fields, ranks, grid, nics),
              fields["copy_bytes"], fields["reduce_bytes"], fields["mpi_reduce_bytes"],
              _fabric_total(fields["send_bytes_inter"], grid), _fabric_total(fields["send_messages_inter"], grid))
    return Profile(unit, *arrays, tuple(ranks), *_distinct_steps(arrays))


def _fabric_total(per_rank: np.ndarray, grid: Grid) -> np.ndarray:
    """Every rank's inter-node bytes (or messages) of the step summed, in every column. Above ALL_RANKS_UP_TO
    ranks the representatives' sum is scaled to the call's ranks (ranks of one role send the same)."""
    sent = per_rank.astype(np.float64)
    total = sent.sum(axis=1, keepdims=True) * (grid.nranks / max(sent.shape[1], 1))
    return np.repeat(total, sent.shape[1], axis=1)


def _distinct_steps(arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(first step of each distinct step, distinct step of every step): steps equal byte for byte."""
    rows = np.hstack([np.ascontiguousarray(a).view(np.uint8) for a in arrays])  # (steps, bytes of every rank)
    numbers: dict[bytes, int] = {}  # distinct steps numbered as they first come
    order = np.array([numbers.setdefault(row.tobytes(), len(numbers)) for row in rows], dtype=np.intp)
    return np.unique(order, return_index=True)[1], order
