"""Before launch: do the buffers of the largest cell fit in this host's memory?

A size far past the memory (``max: 1024GiB``) otherwise runs until numpy fails in every rank:
exit 3 and a run folder of failed cells, instead of bad input that names both figures.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import BadInput
from collectives.dtypes import itemsize
from collectives.spec import buffer_counts

if TYPE_CHECKING:
    from bench.plan.cells import Cell, Launch

#: cgroup limits that mean "none" (v1 reports the largest page-aligned int64)
_UNLIMITED = 1 << 60


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """What the memory cgroup still allows (a container's limit below the host's memory)."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(Path(limit_file)), _read_int(Path(usage_file))
        if limit is not None and limit < _UNLIMITED:
            return max(limit - (usage or 0), 0)
    return None


def available_memory() -> tuple[int, str] | None:
    """(bytes this host can still give, where the figure comes from), or None where unknown."""
    figures = []
    available = _meminfo_available()
    if available is not None:
        figures.append((available, "MemAvailable"))
    elif hasattr(os, "sysconf") and "SC_AVPHYS_PAGES" in os.sysconf_names:
        figures.append((os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free pages"))
    room = _cgroup_room()
    if room is not None:
        figures.append((room, "the memory cgroup's limit"))
    return min(figures) if figures else None


def cell_buffer_bytes(cell: Cell) -> int:
    """Send plus receive buffer of one rank for ``cell``, as the worker allocates them."""
    send, recv = buffer_counts(cell.collective, cell.nranks, cell.count_per_rank, cell.placement == "in_place")
    return (send + recv) * itemsize(cell.dtype)


def _human(nbytes: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def check_memory(launches: list[Launch], ranks_per_host: Callable[[int, int], int], raw_max: object,
                 where: str) -> None:
    """BadInput naming sizes.max, the memory the ranks on this host need and the memory there is.

    ``ranks_per_host(nranks, ranks_per_node)``: the launcher's count of ranks sharing this host.
    Host buffers only: device buffers live in GPU memory.
    """
    host = [launch for launch in launches if launch.device == "host" and launch.cells]
    if not host:
        return
    largest = max(((launch, cell) for launch in host for cell in launch.cells),
                  key=lambda pair: cell_buffer_bytes(pair[1]) * ranks_per_host(pair[0].nranks,
                                                                               pair[0].ranks_per_node))
    launch, cell = largest
    per_rank = cell_buffer_bytes(cell)
    ranks = ranks_per_host(launch.nranks, launch.ranks_per_node)
    there = available_memory()
    if there is None or per_rank * ranks <= there[0]:
        return
    raise BadInput(where, f"sizes.max: {raw_max!r} needs {_human(per_rank)} of buffers per rank "
                   f"({cell.collective}, {cell.dtype}, {launch.nranks} ranks) x {ranks} ranks on this host = "
                   f"{_human(per_rank * ranks)}; this host has {_human(there[0])} available ({there[1]})")
