# The collective kinds as the C paths know them (shm, native): one enum, one name lookup.

cdef enum Kind:
    K_ALLGATHER = 0
    K_REDUCE_SCATTER = 1
    K_ALLREDUCE = 2


cdef inline Kind kind_code(str kind) except *:
    """The Kind of a collective's name (``allgather``, ``reduce_scatter``, ``allreduce``)."""
    if kind == "allgather":
        return K_ALLGATHER
    if kind == "reduce_scatter":
        return K_REDUCE_SCATTER
    if kind == "allreduce":
        return K_ALLREDUCE
    raise ValueError(f"no collective kind {kind!r} (allgather, reduce_scatter, allreduce)")
