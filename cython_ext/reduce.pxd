from libc.stdint cimport int64_t

# Codes shared with collectives/dtypes.py (tests check they agree).
cdef enum:
    DT_INT32 = 0
    DT_INT64 = 1
    DT_FLOAT16 = 2
    DT_FLOAT32 = 3
    DT_FLOAT64 = 4

cdef enum:
    OP_SUM = 0
    OP_PROD = 1
    OP_MIN = 2
    OP_MAX = 3

cdef int reduce_into(void *out, const void *a, const void *b, int64_t count,
                     int dtype, int op) except -1 nogil
