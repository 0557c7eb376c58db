"""Algorithm registry: each algorithm is a schedule generator (see schedule.py).

Adding an algorithm = one module here with ``@register("name")`` on a class that
defines ``allgather`` and/or ``reduce_scatter`` (staticmethods returning a
Schedule), plus its import line at the bottom of this file. All-reduce is any
reduce-scatter followed by any all-gather: ``"ring"`` or ``"<rs>+<ag>"``. Any other
collective of collectives/spec is a staticmethod of its name,
``<collective>(nranks, rank, source, result, scratch_base)`` (see ``schedule_for``).
"""

from __future__ import annotations

from typing import Protocol

from collectives.schedules.rows import RECV, SEND, Block, ContiguousLayout, Layout, Schedule, StepList
from collectives.schedules.templates import schedule_templates
from collectives.spec import buffer_counts, even_blocks, phases


class Algorithm(Protocol):
    """A schedule generator. Block i of a layout belongs to rank i of the communicator.

    ``allgather``: every rank's own block is already in place in ``layout``; afterwards
    every block is. ``reduce_scatter``: block i of ``source`` on every rank holds
    contributions to rank i; afterwards ``result`` holds their reduction on rank i.
    Scratch elements from ``scratch_base`` on are free to use.
    """

    name: str

    @staticmethod
    def allgather(nranks: int, rank: int, layout: Layout, scratch_base: int = 0) -> Schedule: ...

    @staticmethod
    def reduce_scatter(nranks: int, rank: int, source: Layout, result: Block, scratch_base: int = 0) -> Schedule: ...


ALGORITHMS: dict[str, type] = {}


def register(name: str):
    def wrap(cls: type) -> type:
        cls.name = name
        ALGORITHMS[name] = cls
        return cls

    return wrap


#: a family name stands for its mirror in the other phase: recursive doubling
#: all-gather <-> recursive halving reduce-scatter
MIRRORS = {("reduce_scatter", "rd"): "rh", ("allgather", "rh"): "rd"}


def supports(algorithm: str, phase: str) -> bool:
    return algorithm in ALGORITHMS and hasattr(ALGORITHMS[algorithm], phase)


def phase_algorithm(spec: str, phase: str) -> str:
    """The algorithm ``spec`` names for ``phase`` (allgather | reduce_scatter): ``rs+ag`` pairs,
    mirrors (``rd`` in a reduce-scatter is ``rh``), or the name itself."""
    if "+" in spec:
        rs, _, ag = spec.partition("+")
        spec = rs if phase == "reduce_scatter" else ag
    return MIRRORS.get((phase, spec), spec)


def unsupported_reason(collective: str, algorithm: str) -> str | None:
    """None if ``algorithm`` can run ``collective``, else why not."""
    if collective == "allreduce" and supports(algorithm, "allreduce"):
        return None
    parts = split_allreduce(algorithm) if collective == "allreduce" else [(collective, algorithm)]
    for phase, name in parts:
        name = phase_algorithm(name, phase)
        if name not in ALGORITHMS:
            return f"unknown algorithm {name!r} (known: {', '.join(sorted(ALGORITHMS))})"
        if not supports(name, phase):
            return f"algorithm {name!r} has no {phase} schedule"
    return None


def split_allreduce(algorithm: str) -> list[tuple[str, str]]:
    return [(phase, phase_algorithm(algorithm, phase)) for phase in phases("allreduce")]


@schedule_templates
def schedule_for(collective: str, algorithm: str, nranks: int, rank: int, count: int, in_place: bool) -> Schedule:
    """The schedule of one rank for one call (``count`` as in collectives.spec).

    A collective other than these three is the algorithm's staticmethod of its name, given the input
    (``source``: the send buffer, in place the receive buffer) and the receive buffer as blocks of the
    spec's buffer counts; its lengths linear in ``count`` (collectives/schedules/templates.py)."""
    reason = unsupported_reason(collective, algorithm)
    if reason:
        raise ValueError(reason)
    source = RECV if in_place else SEND
    if collective == "allgather":
        layout = ContiguousLayout(RECV, (count,) * nranks)
        return own_block_copy(layout, rank, in_place).then(
            ALGORITHMS[phase_algorithm(algorithm, collective)].allgather(nranks, rank, layout))
    if collective == "reduce_scatter":
        return ALGORITHMS[phase_algorithm(algorithm, collective)].reduce_scatter(
            nranks, rank, ContiguousLayout(source, (count,) * nranks), Block(RECV, 0, count))
    if collective != "allreduce":
        send_count, recv_count = buffer_counts(collective, nranks, count, in_place)
        build = getattr(ALGORITHMS[phase_algorithm(algorithm, collective)], collective)
        return build(nranks, rank, Block(source, 0, send_count or recv_count), Block(RECV, 0, recv_count))
    if supports(algorithm, "allreduce"):  # an all-reduce schedule of its own
        return ALGORITHMS[algorithm].allreduce(nranks, rank, Block(source, 0, count), Block(RECV, 0, count))
    # All-reduce: reduce-scatter uneven blocks of the buffer, each rank's result left at
    # its own position, then all-gather those blocks in place.
    (_, rs_name), (_, ag_name) = split_allreduce(algorithm)
    layout = ContiguousLayout(RECV, even_blocks(count, nranks))
    first = ALGORITHMS[rs_name].reduce_scatter(
        nranks, rank, ContiguousLayout(source, layout.counts), layout.block(rank))
    return first.then(ALGORITHMS[ag_name].allgather(nranks, rank, layout))


def own_block_copy(layout: Layout, rank: int, in_place: bool) -> Schedule:
    """Out of place, an all-gather starts by copying the send buffer into its own block."""
    steps = StepList()
    if not in_place:
        own = layout.block(rank)
        steps.step(copy=(Block(SEND, 0, own.total), own))
    return steps.build()


from collectives.schedules.algorithms import bruck, direct, exchange, recursive, ring, tree  # noqa: E402,F401  (registers)
