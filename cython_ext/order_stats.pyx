"""Order statistics of timing samples: the median and the distribution-free 95% interval of it, and the
summaries a row carries (the interval, the start skew's percentiles)."""
from libc.math cimport ceil, floor, sqrt
from libc.stdlib cimport qsort
from libc.string cimport memcpy

import numpy as np

#: 97.5% normal quantile: the order-statistic interval of the median is two-sided 95%
cdef double Z95 = 1.959964


cdef int _compare(const void *a, const void *b) noexcept nogil:
    cdef double x = (<double *>a)[0]
    cdef double y = (<double *>b)[0]
    return (x > y) - (x < y)


cdef double _sorted_median(double *s, int n) noexcept nogil:
    if n % 2:
        return s[n // 2]
    return 0.5 * (s[n // 2 - 1] + s[n // 2])


cdef double median(double *x, int n, double *scratch) noexcept nogil:
    memcpy(scratch, x, n * sizeof(double))
    qsort(scratch, n, sizeof(double), _compare)
    return _sorted_median(scratch, n)


cdef double median_ci_rel(double *x, int n, double *scratch) noexcept nogil:
    """Half-width of the distribution-free 95% interval of the median (order statistics
    n/2 -+ z sqrt(n)/2), relative to the median; 1e300 when n is too small to bound it."""
    cdef int lo, hi
    cdef double med
    if n < 1:
        return 1e300
    memcpy(scratch, x, n * sizeof(double))
    qsort(scratch, n, sizeof(double), _compare)
    lo = <int>floor(0.5 * n - 0.5 * Z95 * sqrt(<double>n)) - 1
    hi = <int>ceil(0.5 * n + 0.5 * Z95 * sqrt(<double>n))
    med = _sorted_median(scratch, n)
    if lo < 0 or hi > n - 1 or med <= 0:
        return 1e300
    return 0.5 * (scratch[hi] - scratch[lo]) / med


def skew_info(skews) -> dict:
    """The start skew's median and 95th percentile (us) over the calls that measured one; {} if none did."""
    valid = skews[~np.isnan(skews)] if len(skews) else skews
    if not len(valid):
        return {}
    return {"start_skew_us_p50": float(np.median(valid)) * 1e6,
            "start_skew_us_p95": float(np.quantile(valid, 0.95)) * 1e6}


def ci_of(samples) -> float:
    """Relative half-width of the median's distribution-free 95% interval; nan when unbounded."""
    cdef double[::1] x = np.ascontiguousarray(samples, dtype=np.float64)
    cdef int n = x.shape[0]
    if n < 1:
        return float("nan")
    scratch = np.empty(n, dtype=np.float64)
    cdef double[::1] s = scratch
    cdef double rel = median_ci_rel(&x[0], n, &s[0])
    return float("nan") if rel >= 1e299 else float(rel)
