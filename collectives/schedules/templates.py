"""Schedules built once per shape: a template per (collective, algorithm, p, rank, placement), scaled
to every count of a sweep.

Every length in a schedule row (offsets, counts, strides) and the scratch are linear in the count
of a block, so the schedule of ``n`` elements a block is the one of one element a block with those
columns times ``n`` (``Schedule.scaled``): one build serves every size, where each size of each cell
was a build of its own (14 us a row in Python: 46 ms a cell for a ring all-reduce at 2048 ranks).
An all-reduce whose count is no multiple of p has uneven blocks, not a scaling of one template, and
is built as it is. tests/collectives/schedules/test_schedule.py checks scaled == built for every
registered algorithm and hierarchical composition.
"""

from __future__ import annotations

import functools
import inspect
from collections import OrderedDict
from collections.abc import Callable

from collectives.schedules.rows import Schedule

#: what one rank keeps of built schedules (times the ranks of a node: 512 MiB for 64): a ring
#: all-reduce's rows at 8192 ranks are 3.3 MB, so a cache of entries, not bytes, held gigabytes
MAX_CACHED_SCHEDULE_BYTES = 8 << 20


def template_count(collective: str, nranks: int, count: int, granule: int = 1) -> tuple[int, int] | None:
    """(the count of the shape's template, the unit it is scaled by) where a call of ``count`` is
    the template scaled (all-gather and reduce-scatter: blocks of ``count``; all-reduce: p equal
    blocks); None where it is not (an all-reduce of count % p != 0, or an empty call). ``granule``:
    the elements a block must hold for the shape to be the same (a block cut in that many pieces:
    a pipelined hierarchy), so the template's blocks hold that many and a count that is no
    multiple of it is built as it is."""
    unit = nranks * granule if collective == "allreduce" else granule
    return (unit, count // unit) if count >= unit and count % unit == 0 else None


def schedule_templates(build: Callable[..., Schedule] | None = None, *,
                       granule: Callable[[tuple], int] | None = None) -> Callable[..., Schedule]:
    """``build`` (positional arguments: the collective first, ``count`` and ``nranks`` or a ``grid``
    among the others) built once per shape for every count: the cached template scaled to the call,
    so the sizes of a sweep share one build (scaled == built: tests/collectives/schedules/test_schedule.py).
    Templates are kept up to MAX_CACHED_SCHEDULE_BYTES, least recently used dropped first.
    ``granule(key)``: template_count's granule of a call (default 1); used as
    ``@schedule_templates(granule=...)``."""
    if build is None:
        return functools.partial(schedule_templates, granule=granule)
    names = list(inspect.signature(build).parameters)
    at_count = names.index("count")
    at_group = names.index("nranks") if "nranks" in names else names.index("grid")
    kept: OrderedDict[tuple, Schedule] = OrderedDict()
    held = [0]

    def cached(key: tuple) -> Schedule:
        if key in kept:
            kept.move_to_end(key)
            return kept[key]
        schedule = kept[key] = build(*key)
        held[0] += schedule.steps.nbytes
        while held[0] > MAX_CACHED_SCHEDULE_BYTES and len(kept) > 1:
            held[0] -= kept.popitem(last=False)[1].steps.nbytes
        return schedule

    @functools.wraps(build)
    def schedule(*key) -> Schedule:
        group = key[at_group]
        template = template_count(key[0], group if isinstance(group, int) else group.nranks, key[at_count],
                                  granule(key) if granule else 1)
        if template is None:
            return cached(key)
        return cached((*key[:at_count], template[0], *key[at_count + 1:])).scaled(template[1])

    def cache_clear() -> None:
        kept.clear()
        held[0] = 0

    schedule.cache_clear = cache_clear  # type: ignore[attr-defined]
    schedule.cached_bytes = lambda: held[0]  # type: ignore[attr-defined]
    schedule.build = build  # type: ignore[attr-defined]  (the uncached builder, for tests)
    return schedule
