"""All-gather: every rank contributes ``count`` elements; every rank ends with all p blocks in rank order."""

from __future__ import annotations

import numpy as np

from collectives.dtypes import numpy_dtype
from collectives.spec import Collective, register
from collectives.spec.inputs import GATHER_PERIOD, SENTINEL, gather_value, periodic


@register
class Allgather(Collective):
    name = "allgather"
    phases = ("allgather",)
    reduces = False

    def buffer_counts(self, nranks, count, in_place):
        return (0 if in_place else count), nranks * count

    def total_count(self, nranks, count):
        return nranks * count

    def count_from_recv(self, nranks, recv_count, in_place):
        return recv_count // nranks

    def inputs(self, call, rank):
        recv = np.full(call.nranks * call.count, SENTINEL, dtype=numpy_dtype(call.dtype))
        own = periodic(lambda index: gather_value(rank, index), 0, call.count, GATHER_PERIOD, recv.dtype)
        if call.in_place:  # the own block already sits at its position
            recv[rank * call.count : (rank + 1) * call.count] = own
            return None, recv
        return own, recv

    def expected(self, call, rank, xp=np):
        dtype = numpy_dtype(call.dtype)
        return xp.concatenate([periodic(lambda index, q=q: gather_value(q, index), 0, call.count, GATHER_PERIOD,
                                        dtype, xp) for q in range(call.nranks)])
