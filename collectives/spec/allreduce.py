"""All-reduce: ``count`` elements reduced over ranks, the whole result on every rank."""

from __future__ import annotations

import numpy as np

from collectives.dtypes import numpy_dtype
from collectives.spec import Collective, register
from collectives.spec.inputs import reduced_range, reduction_buffers


@register
class Allreduce(Collective):
    name = "allreduce"
    #: reduce-scatter then all-gather (PCCL's composition)
    phases = ("reduce_scatter", "allgather")
    busbw_scale = 2.0

    def buffer_counts(self, nranks, count, in_place):
        return (0 if in_place else count), count

    def total_count(self, nranks, count):
        return count

    def count_from_recv(self, nranks, recv_count, in_place):
        return recv_count

    def inputs(self, call, rank):
        return reduction_buffers(call, rank, call.count)

    def expected(self, call, rank, xp=np):
        return reduced_range(call.op, 0, call.count, call.nranks, numpy_dtype(call.dtype), xp)
