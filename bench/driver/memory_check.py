"""Before launch: do the buffers of the largest cell fit in the memory of each machine of the
launch (its share of the ranks, bench/sweep/where.py), and can the machine start the ranks at all?

A size far past the memory (``max: 1024GiB``) otherwise runs until numpy fails in every rank:
exit 3 and a run folder of failed cells, instead of bad input that names both figures.
"""

from __future__ import annotations

import functools
import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import BadInput
from bench.rank import buffers
from bench.rank.hostfacts import available_memory  # noqa: F401  (this host's figure, for callers)
from collectives import memory as memory_kinds
from collectives.call import CallSpec
from collectives.dtypes import itemsize
from collectives.spec import buffer_counts

if TYPE_CHECKING:
    from bench.plan.cells import Cell, Launch


def cell_buffer_bytes(cell: Cell) -> int:
    """Send plus receive buffer of one rank for ``cell``, as the worker allocates them: over all their
    positions where they move (bench/rank/buffers.py; cold's from this host's last-level cache)."""
    llc_bytes = _cache_bytes() if cell.buffers == "cold" else 0
    if cell.buffers == "warm" or (cell.buffers == "cold" and not llc_bytes):
        send, recv = buffer_counts(cell.collective, cell.nranks, cell.count_per_rank, cell.placement == "in_place")
        return (send + recv) * itemsize(cell.dtype)
    call = CallSpec(cell.collective, cell.nranks, cell.count_per_rank, cell.dtype, cell.op,
                    cell.placement == "in_place")
    return buffers.layout_of(cell.buffers, call, cell.buffers_max_count, llc_bytes).span_bytes(call)


@functools.cache
def _cache_bytes() -> int:
    return buffers.last_level_cache()[0]


def _human(nbytes: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def check_memory(launches: list[Launch], room: Callable[[Launch], tuple[int, tuple[int, str] | None, str]],
                 max_size: str, where: str) -> None:
    """BadInput naming sizes.max, the memory the ranks of one machine need and the memory it has.

    ``room(launch)``: (the ranks that share the memory of the launch's machine with the least memory a
    rank, (bytes it has available, where the figure comes from) or None where unknown, its name).
    Host buffers only: a memory kind ``on_device`` (collectives/memory: cuda, rocm) lives in GPU memory.
    """
    for launch in launches:
        if memory_kinds.get(launch.device).on_device or not launch.cells:
            continue
        cell = max(launch.cells, key=cell_buffer_bytes)
        per_rank = cell_buffer_bytes(cell)
        ranks, there, machine = room(launch)
        if there is None or per_rank * ranks <= there[0]:
            continue
        raise BadInput(where, f"sizes.max: {max_size} needs {_human(per_rank)} of buffers per rank "
                       f"({cell.collective}, {cell.dtype}, {launch.nranks} ranks) x {ranks} ranks on {machine} = "
                       f"{_human(per_rank * ranks)}; {machine} has {_human(there[0])} available ({there[1]})")


#: the most ranks per core a machine is given. An oversubscribed test (8 ranks on 2 cores, 4 a core)
#: runs, only slowly; past this, ``ranks: [10000]`` on a laptop would fork thousands of processes
#: that thrash or exhaust the process table long before the first cell ends.
MAX_RANKS_PER_CORE = 64


def _int_file(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _processes(uid: int | None = None) -> int:
    """Processes running on this host now (of ``uid`` only, when given)."""
    count = 0
    try:
        entries = os.scandir("/proc")
    except OSError:
        return 0
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                if uid is None or entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                continue  # ended while counted
    return count


def process_room() -> tuple[int, str] | None:
    """(how many more processes this host lets this user start, which limit says so), or None where
    no limit is known: the kernel's pid_max/threads-max, the pids cgroup, RLIMIT_NPROC (not for root)."""
    rooms = []
    running = _processes()
    for path in ("/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"):
        limit = _int_file(path)
        if limit is not None:
            rooms.append((limit - running, f"{path.rsplit('/', 1)[1]} {limit}, {running} running"))
    for limit_file, current_file in (("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids.current"),
                                     ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids/pids.current")):
        limit, current = _int_file(limit_file), _int_file(current_file)
        if limit is not None:  # "max" (no limit) is no number
            rooms.append((limit - (current or 0), f"the pids cgroup's limit {limit}, {current or 0} in use"))
            break
    uid = os.geteuid() if hasattr(os, "geteuid") else 0
    if uid != 0 and hasattr(resource, "RLIMIT_NPROC"):
        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if soft != resource.RLIM_INFINITY:
            mine = _processes(uid)
            rooms.append((soft - mine, f"ulimit -u {soft}, {mine} of them running"))
    return min(rooms) if rooms else None


def check_processes(launches: list[Launch], room: Callable[[Launch], tuple[int, int, str, bool] | None],
                    where: str) -> None:
    """BadInput naming the ranks of a launch's busiest machine where that machine cannot start them.

    ``room(launch)``: (the ranks on that machine, its cores, its name, whether it is this host, whose
    process limits can be read), or None where the machine is unknown (srun's own nodes: Slurm
    refuses an allocation that its nodes cannot hold). Two rules: at most ``MAX_RANKS_PER_CORE`` ranks
    a core, and, on this host, no more ranks than the processes it may still start.
    """
    left = None
    for launch in launches:
        machine = room(launch)
        if machine is None:
            continue
        ranks, cores, name, here = machine
        if ranks > MAX_RANKS_PER_CORE * max(cores, 1):
            raise BadInput(where, f"ranks: {launch.nranks} ({launch.launch_id}) puts {ranks} ranks on {name}, which "
                           f"has {cores} cores: more than {MAX_RANKS_PER_CORE} ranks a core "
                           f"({MAX_RANKS_PER_CORE * max(cores, 1)} here) is refused; an oversubscribed test "
                           "(say 8 ranks on 2 cores) runs, thousands of processes would not")
        if here:
            left = process_room() if left is None else left
            if left is not None and ranks > left[0]:
                raise BadInput(where, f"ranks: {launch.nranks} ({launch.launch_id}) needs {ranks} processes on "
                               f"{name}, which can start {max(left[0], 0)} more ({left[1]})")
