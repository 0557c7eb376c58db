"""Before launch: do the buffers of the largest cell fit in this host's memory?

A size far past the memory (``max: 1024GiB``) otherwise runs until numpy fails in every rank:
exit 3 and a run folder of failed cells, instead of bad input that names both figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bench.errors import BadInput
from bench.run.hostfacts import available_memory  # noqa: F401  (this host's figure, for callers)
from collectives.dtypes import itemsize
from collectives.spec import buffer_counts

if TYPE_CHECKING:
    from bench.plan.cells import Cell, Launch


def cell_buffer_bytes(cell: Cell) -> int:
    """Send plus receive buffer of one rank for ``cell``, as the worker allocates them."""
    send, recv = buffer_counts(cell.collective, cell.nranks, cell.count_per_rank, cell.placement == "in_place")
    return (send + recv) * itemsize(cell.dtype)


def _human(nbytes: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def check_memory(launches: list[Launch], room: Callable[[Launch], tuple[int, tuple[int, str] | None, str]],
                 raw_max: object, where: str) -> None:
    """BadInput naming sizes.max, the memory the ranks of one machine need and the memory it has.

    ``room(launch)``: (the ranks that share the memory of the launch's busiest machine, (bytes it
    has available, where the figure comes from) or None where unknown, the machine's name).
    Host buffers only: device buffers live in GPU memory.
    """
    for launch in launches:
        if launch.device != "host" or not launch.cells:
            continue
        cell = max(launch.cells, key=cell_buffer_bytes)
        per_rank = cell_buffer_bytes(cell)
        ranks, there, machine = room(launch)
        if there is None or per_rank * ranks <= there[0]:
            continue
        raise BadInput(where, f"sizes.max: {raw_max!r} needs {_human(per_rank)} of buffers per rank "
                       f"({cell.collective}, {cell.dtype}, {launch.nranks} ranks) x {ranks} ranks on {machine} = "
                       f"{_human(per_rank * ranks)}; {machine} has {_human(there[0])} available ({there[1]})")
