"""What each collective is, one small file per collective (as nccl-tests keeps one per collective).

A spec says: the buffers one rank needs (element counts, MPI semantics), the nccl-tests
``size`` and bus-bandwidth factor, the flat phases a hierarchical composition is made of,
inputs chosen so the exact result is known bit for bit, and that result. The measurement
protocol (check, then time) lives once in the harness; adding a collective is one file here
plus its import line at the bottom. What runs it: the MPI library through the spec's ``mpi_call``
(the three collectives below also straight from C, cython_ext/native.pyx), any algorithm with a
schedule of its name (collectives/schedules/algorithms), pccl-hier for the compositions it knows;
every other implementation and transport declines it by name.

``count`` everywhere is the per-rank count of nccl-tests: the all-gather send count, the
reduce-scatter receive count, the all-reduce buffer length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Protocol

import numpy as np

from collectives.registry import lookup


class CallShape(Protocol):
    """What a spec reads of one call. collectives.call.CallSpec is one; the specs sit below it (it checks
    itself against them), so they name only this shape, never the call module."""

    # read-only (properties), as a frozen CallSpec's fields are
    @property
    def collective(self) -> str: ...
    @property
    def nranks(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def op(self) -> str: ...
    @property
    def in_place(self) -> bool: ...
    @property
    def buffer_counts(self) -> tuple[int, int]: ...


class Collective:
    """One collective's facts; subclasses fill them in (see allgather.py)."""

    name: ClassVar[str]
    #: the flat collectives a hierarchical composition runs, in order
    phases: ClassVar[tuple[str, ...]]
    #: nccl-tests busbw = algbw * factor * (p-1)/p
    busbw_scale: ClassVar[float] = 1.0
    #: whether ``op`` means anything to it (an all-gather reduces nothing: its rows' op is no part of the cell)
    reduces: ClassVar[bool] = True
    #: the MPI library's own call for it through mpi4py: a method ``mpi_call(comm, send, recv, count, op)``
    #: returning a callable that performs one call on these host buffers (``send`` None: in place); the
    #: ``mpi`` transport runs it for a collective cython_ext/native.pyx has no C call for (``native.KINDS``).
    #: None: the MPI library has none here
    mpi_call: ClassVar[Callable[..., Callable[[], object]] | None] = None

    def buffer_counts(self, nranks: int, count: int, in_place: bool) -> tuple[int, int]:
        """(send elements, receive elements) one rank needs. In place there is no send buffer."""
        raise NotImplementedError

    def total_count(self, nranks: int, count: int) -> int:
        """Elements of the nccl-tests ``size`` (all-gather output, reduce-scatter input, all-reduce buffer)."""
        raise NotImplementedError

    def count_from_recv(self, nranks: int, recv_count: int, in_place: bool) -> int:
        """The per-rank count a receive buffer of ``recv_count`` elements stands for."""
        raise NotImplementedError

    def busbw_factor(self, nranks: int) -> float:
        return 0.0 if nranks <= 1 else self.busbw_scale * (nranks - 1) / nranks

    def inputs(self, call: CallShape, rank: int) -> tuple[np.ndarray | None, np.ndarray]:
        """Host send and receive buffers of ``rank`` filled for the check (send is None in place)."""
        raise NotImplementedError

    def expected(self, call: CallShape, rank: int, xp=np) -> np.ndarray:
        """The exact result ``rank`` must hold (the region of recv the collective defines)."""
        raise NotImplementedError


SPECS: dict[str, Collective] = {}


def register(cls: type[Collective]) -> type[Collective]:
    SPECS[cls.name] = cls()
    return cls


def get(name: str) -> Collective:
    return lookup(SPECS, name, "collective")


def buffer_counts(collective: str, nranks: int, count: int, in_place: bool) -> tuple[int, int]:
    return get(collective).buffer_counts(nranks, count, in_place)


def total_count(collective: str, nranks: int, count: int) -> int:
    return get(collective).total_count(nranks, count)


def busbw_factor(collective: str, nranks: int) -> float:
    """nccl-tests: busbw = algbw * factor."""
    return get(collective).busbw_factor(nranks)


def phases(collective: str) -> tuple[str, ...]:
    return get(collective).phases


def reduces(collective: str) -> bool:
    """Whether a row's ``op`` means anything for ``collective`` (True for a name no spec has: a row read
    from a file keeps what it says)."""
    found = SPECS.get(collective)
    return found is None or found.reduces


def make_buffers(call: CallShape, rank: int) -> tuple[np.ndarray | None, np.ndarray]:
    return get(call.collective).inputs(call, rank)


def expected_output(call: CallShape, rank: int, xp=np) -> np.ndarray:
    """``xp``: the array module to compute it with (cupy: on the GPU, next to the result)."""
    return get(call.collective).expected(call, rank, xp)


def count_wrong(call: CallShape, rank: int, recv, xp=np) -> int:
    """Elements of this rank's result that differ bit for bit from the expected ones.

    ``xp``: the array module of ``recv`` (numpy, or cupy for device buffers: the
    comparison then runs on the GPU and only the count comes back)."""
    expected = expected_output(call, rank, xp)
    got = recv[: len(expected)]
    as_bits = f"u{expected.dtype.itemsize}"
    return int(xp.count_nonzero(got.view(as_bits) != expected.view(as_bits)))


def even_blocks(total: int, nranks: int) -> tuple[int, ...]:
    """Split ``total`` elements into nranks blocks; the first ``total % nranks`` get one more."""
    base, extra = divmod(total, nranks)
    return (base + 1,) * extra + (base,) * (nranks - extra)


from collectives.spec import allgather, reduce_scatter, allreduce  # noqa: E402,F401,I001  (registers, in order)
from collectives.spec.inputs import SENTINEL  # noqa: E402

COLLECTIVES: tuple[str, ...] = tuple(SPECS)

__all__ = ["COLLECTIVES", "SENTINEL", "Collective", "buffer_counts", "busbw_factor", "count_wrong", "even_blocks",
           "expected_output", "get", "make_buffers", "phases", "reduces", "register", "total_count"]
