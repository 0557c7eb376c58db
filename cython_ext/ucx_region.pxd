# A mapped buffer and its peers' rkeys (cython_ext/ucx_region.pyx).
from libc.stdint cimport uint64_t, uintptr_t

from cython_ext.ucx cimport Endpoints, ucp_context_h, ucp_mem_h, ucp_request_param_t, ucp_rkey_h


cdef class Region:
    """A mapped local buffer and, per peer, the base address and unpacked rkey of the peer's twin."""
    cdef readonly Endpoints endpoints
    cdef ucp_mem_h memh
    cdef char *base
    cdef readonly size_t length
    cdef uint64_t *remote_base
    cdef ucp_rkey_h *rkeys
    cdef readonly int memory_type
    cdef object owner
    cdef tuple _map(self, ucp_context_h context, uintptr_t address, size_t length, str memory_type)
    cdef int put(self, int peer, const void *source, size_t nbytes, size_t offset,
                 ucp_request_param_t *param, void **request) except -1 nogil
