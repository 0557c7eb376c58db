"""What one collective call is, independent of who implements it."""

from __future__ import annotations

from dataclasses import dataclass

from collectives.dtypes import DTYPES, OPS
from collectives.spec import COLLECTIVES, buffer_counts, total_count

#: how a call is made: blocking (MPI_Allreduce), or posted and waited for (MPI_Iallreduce + MPI_Wait);
#: a suite's ``mode:`` axis, a cell's ``mode`` (blocking where a table from before modes says nothing)
BLOCKING = "blocking"
MODES = (BLOCKING, "nonblocking")


@dataclass(frozen=True)
class CallSpec:
    collective: str  # allgather | reduce_scatter | allreduce
    nranks: int
    count: int  # per-rank count (collectives.spec)
    dtype: str = "float32"
    op: str = "sum"
    in_place: bool = False
    algorithm: str | None = None  # None: the implementation's default
    intra: str | None = None  # hierarchical phases (pccl-hier); None: defaults
    inter: str | None = None
    nnodes: int = 1  # for ``auto`` choices (the tuning table is keyed by nodes)
    #: posted, then waited for (MPI_Iallreduce + MPI_Wait): the op's call is the two back to back,
    #: and the harness times a compute between them too (OSU's overlap; bench/rank/overlap.py)
    nonblocking: bool = False

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {self.collective!r}; expected one of {COLLECTIVES}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {tuple(DTYPES)}")
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}; expected one of {tuple(OPS)}")
        if self.count < 0 or self.nranks < 1:
            raise ValueError(f"impossible shape: nranks={self.nranks}, count={self.count}")

    @property
    def bytes_total(self) -> int:
        """The nccl-tests size of this call (all-gather output, reduce-scatter input, all-reduce buffer)."""
        return total_count(self.collective, self.nranks, self.count) * DTYPES[self.dtype][0].itemsize

    @property
    def buffer_counts(self) -> tuple[int, int]:
        return buffer_counts(self.collective, self.nranks, self.count, self.in_place)
