"""What an imported row's collective means for its byte count and bus bandwidth, for every
collective another tool measures (the sweep runs three; rows keep the others under their own names).

``ranks_in_total``: whether nccl-tests' ``size`` (``bytes_total``) is the per-rank count times the
rank count (all-gather output, reduce-scatter input, alltoall, gather, scatter) or the count
itself (all-reduce, broadcast, reduce, sendrecv, point-to-point). ``busbw``: nccl-tests' documented
factor (doc/PERFORMANCE.md: allreduce 2(n-1)/n; allgather, reducescatter, alltoall (n-1)/n;
broadcast, reduce, sendrecv 1); None where no tool defines one (point-to-point, barrier, IMB's
exchange): the row's busbw stays empty, never invented.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    ranks_in_total: bool
    #: busbw = algbw * scale * (n-1)/n when ``spread`` else algbw * scale; None: not defined
    busbw_scale: float | None
    spread: bool
    reduces: bool


KINDS: dict[str, Kind] = {
    "allreduce": Kind(False, 2.0, True, True),
    "allgather": Kind(True, 1.0, True, False),
    "reduce_scatter": Kind(True, 1.0, True, True),
    "broadcast": Kind(False, 1.0, False, False),
    "reduce": Kind(False, 1.0, False, True),
    "alltoall": Kind(True, 1.0, True, False),
    "sendrecv": Kind(False, 1.0, False, False),
    "gather": Kind(True, 1.0, True, False),
    "scatter": Kind(True, 1.0, True, False),
    "hypercube": Kind(True, 1.0, True, False),
    # variable-count collectives as OSU/IMB run them (equal counts): their fixed-count cousins' bytes
    "allgatherv": Kind(True, None, True, False),
    "alltoallv": Kind(True, None, True, False),
    "gatherv": Kind(True, None, True, False),
    "scatterv": Kind(True, None, True, False),
    "reduce_local": Kind(False, None, False, True),
    "barrier": Kind(False, None, False, False),
    # point-to-point: bytes_total is one message
    "p2p_latency": Kind(False, None, False, False),
    "p2p_bw": Kind(False, None, False, False),
    "p2p_bibw": Kind(False, None, False, False),
    "pingpong": Kind(False, None, False, False),
    "pingping": Kind(False, None, False, False),
    "exchange": Kind(False, None, False, False),
    "imb_sendrecv": Kind(False, None, False, False),
}


def kind(collective: str) -> Kind:
    """The collective's facts; a name no tool here prints is a programming error (KeyError)."""
    return KINDS[collective]


def ranks_in_total(collective: str, nranks: int | None) -> int:
    """bytes_total = bytes_per_rank * this (``nranks`` None, unknown: only for a collective whose bytes
    do not depend on it)."""
    if not KINDS[collective].ranks_in_total:
        return 1
    if nranks is None:
        raise ValueError(f"{collective}: bytes_total needs the rank count")
    return nranks


def busbw_factor(collective: str, nranks: int | None) -> float | None:
    """nccl-tests' busbw / algbw (0 on one rank, as nccl-tests), or None where none is defined (or it
    depends on a rank count that is unknown, ``nranks`` None)."""
    found = KINDS[collective]
    if found.busbw_scale is None:
        return None
    if not found.spread:
        return found.busbw_scale
    if nranks is None:
        return None
    return 0.0 if nranks <= 1 else found.busbw_scale * (nranks - 1) / nranks


def op_of(collective: str, printed: str) -> str:
    """The row's op: what the tool printed for a reduction, ``none`` for a collective that reduces
    nothing (nccl-tests prints ``none`` there; OSU and IMB print nothing)."""
    return printed if KINDS[collective].reduces else "none"
