"""Elementwise reductions out = a (op) b for the schedule executor.

Plain counted loops over typed pointers so the C compiler vectorises them;
``out`` may alias ``a`` or ``b`` (element i only reads element i).
"""
from libc.stdint cimport int32_t, int64_t

cdef extern from *:
    """
    /* Half precision through the compiler's _Float16 (gcc >= 12, clang): each
       operation is correctly rounded, matching numpy's float16. */
    static void pccl_reduce_f16(void *out, const void *a, const void *b, int64_t n, int op) {
        _Float16 *o = (_Float16 *)out;
        const _Float16 *x = (const _Float16 *)a, *y = (const _Float16 *)b;
        int64_t i;
        switch (op) {
        case 0: for (i = 0; i < n; i++) o[i] = x[i] + y[i]; break;
        case 1: for (i = 0; i < n; i++) o[i] = x[i] * y[i]; break;
        case 2: for (i = 0; i < n; i++) o[i] = x[i] < y[i] ? x[i] : y[i]; break;
        default: for (i = 0; i < n; i++) o[i] = x[i] > y[i] ? x[i] : y[i]; break;
        }
    }
    """
    void pccl_reduce_f16(void *out, const void *a, const void *b, int64_t n, int op) noexcept nogil

ctypedef fused num_t:
    int32_t
    int64_t
    float
    double

DTYPE_CODES = {"int32": DT_INT32, "int64": DT_INT64, "float16": DT_FLOAT16,
               "float32": DT_FLOAT32, "float64": DT_FLOAT64}
OP_CODES = {"sum": OP_SUM, "prod": OP_PROD, "min": OP_MIN, "max": OP_MAX}


cdef void _sum(num_t *out, const num_t *a, const num_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        out[i] = a[i] + b[i]

cdef void _prod(num_t *out, const num_t *a, const num_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        out[i] = a[i] * b[i]

cdef void _min(num_t *out, const num_t *a, const num_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        out[i] = a[i] if a[i] < b[i] else b[i]

cdef void _max(num_t *out, const num_t *a, const num_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        out[i] = a[i] if a[i] > b[i] else b[i]


cdef inline int _typed(num_t *out, const num_t *a, const num_t *b, int64_t n, int op) noexcept nogil:
    if op == OP_SUM:
        _sum(out, a, b, n)
    elif op == OP_PROD:
        _prod(out, a, b, n)
    elif op == OP_MIN:
        _min(out, a, b, n)
    elif op == OP_MAX:
        _max(out, a, b, n)
    else:
        return -1
    return 0


cdef int reduce_into(void *out, const void *a, const void *b, int64_t count,
                     int dtype, int op) except -1 nogil:
    cdef int rc = -1
    if dtype == DT_INT32:
        rc = _typed(<int32_t *>out, <const int32_t *>a, <const int32_t *>b, count, op)
    elif dtype == DT_INT64:
        rc = _typed(<int64_t *>out, <const int64_t *>a, <const int64_t *>b, count, op)
    elif dtype == DT_FLOAT16 and OP_SUM <= op <= OP_MAX:
        pccl_reduce_f16(out, a, b, count, op)
        rc = 0
    elif dtype == DT_FLOAT32:
        rc = _typed(<float *>out, <const float *>a, <const float *>b, count, op)
    elif dtype == DT_FLOAT64:
        rc = _typed(<double *>out, <const double *>a, <const double *>b, count, op)
    if rc != 0:
        with gil:
            raise ValueError(f"unsupported reduction: dtype code {dtype}, op code {op}")
    return 0


def reduce_arrays(out, a, b, str dtype, str op):
    """out = a (op) b elementwise on contiguous numpy arrays of ``dtype``."""
    cdef unsigned char[::1] o = out.reshape(-1).view("u1")
    cdef const unsigned char[::1] x = a.reshape(-1).view("u1")
    cdef const unsigned char[::1] y = b.reshape(-1).view("u1")
    cdef int64_t count = out.size
    if a.size != count or b.size != count:
        raise ValueError("reduce_arrays: operands differ in length")
    if count == 0:
        return out
    cdef int dt = DTYPE_CODES[dtype]
    cdef int code = OP_CODES[op]
    with nogil:
        reduce_into(&o[0], &x[0], &y[0], count, dt, code)
    return out
