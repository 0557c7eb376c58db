# Order statistics of timing samples (cython_ext/order_stats.pyx); ``scratch`` holds n doubles.

cdef double median(double *x, int n, double *scratch) noexcept nogil
cdef double median_ci_rel(double *x, int n, double *scratch) noexcept nogil
