"""Reduce-scatter (MPI_Reduce_scatter_block): p blocks of ``count`` reduced over ranks; rank i keeps block i."""

from __future__ import annotations

import numpy as np

from collectives.dtypes import numpy_dtype
from collectives.spec import Collective, register
from collectives.spec.inputs import reduced_range, reduction_buffers


@register
class ReduceScatter(Collective):
    name = "reduce_scatter"
    phases = ("reduce_scatter",)

    def buffer_counts(self, nranks, count, in_place):
        # In place the input occupies the whole receive buffer (MPI_IN_PLACE semantics).
        return (0 if in_place else nranks * count), (nranks * count if in_place else count)

    def total_count(self, nranks, count):
        return nranks * count

    def count_from_recv(self, nranks, recv_count, in_place):
        return recv_count // nranks if in_place else recv_count

    def inputs(self, call, rank):
        return reduction_buffers(call, rank, call.nranks * call.count)

    def expected(self, call, rank, xp=np):
        return reduced_range(call.op, rank * call.count, call.count, call.nranks, numpy_dtype(call.dtype), xp)
