"""A mapped buffer for one-sided puts (cython_ext/ucx.pyx's third object, beside Worker and Endpoints).

Collective over MPI when made: ``ucp_mem_map`` (or UCX's own allocation), the rkey packed and
exchanged with an allgather, each peer's rkey unpacked once; ``put`` is the hot path (nogil).
"""
cimport cython
from libc.stdint cimport uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset

from cython_ext.ucx cimport *

from cython_ext.ucx import MEMORY_TYPE_CODES, MEMORY_TYPES, UcxError, UcxTimeout, _agree
from cython_ext.wait cimport now

# Process-wide setup counters (ucx.counters() reports them with the workers' and endpoints').
cdef unsigned long n_registrations = 0, n_rkey_unpacks = 0


def region_counters() -> dict:
    return {"registrations": n_registrations, "rkey_unpacks": n_rkey_unpacks}


@cython.no_gc_clear
cdef class Region:
    def __cinit__(self, Endpoints endpoints, comm, uintptr_t address, size_t length, owner=None,
                  str memory_type="auto"):
        """Collective over ``comm`` (the endpoints' communicator): map ``length`` bytes at ``address``,
        exchange (base, rkey) with every rank and unpack each peer's rkey once.

        ``owner`` keeps the memory alive as long as the mapping. ``memory_type``: 'auto' lets UCX
        detect it; otherwise one of MEMORY_TYPES' names. ``address`` 0: UCX allocates ``length``
        zeroed bytes of host memory itself (``address`` property), in a segment its shared-memory
        transports can map into the peers, so puts there need no system call on one host."""
        global n_rkey_unpacks
        cdef int peer
        cdef bytes key
        self.endpoints = endpoints
        self.memh = NULL
        self.base = <char *>address
        self.length = length
        self.owner = owner
        self.memory_type = UCS_MEMORY_TYPE_HOST
        self.remote_base = <uint64_t *>calloc(endpoints.size, sizeof(uint64_t))
        self.rkeys = <ucp_rkey_h *>calloc(endpoints.size, sizeof(ucp_rkey_h))
        if self.remote_base == NULL or self.rkeys == NULL:
            raise MemoryError()
        error, address, rkey = self._map(endpoints.worker.context, address, length, memory_type)
        peers = comm.allgather((error, address, rkey))
        _agree(comm, error)
        for peer in range(endpoints.size):
            self.remote_base[peer] = peers[peer][1]
            key = peers[peer][2]
            if key:
                check(ucp_ep_rkey_unpack(endpoints.eps[peer], <const char *>key, &self.rkeys[peer]),
                      b"ucp_ep_rkey_unpack")
                n_rkey_unpacks += 1

    cdef tuple _map(self, ucp_context_h context, uintptr_t address, size_t length, str memory_type):
        """This rank's part: (error or "", the region's address, its packed rkey); every rank goes on to
        the exchange whatever happened here, so that a failure is agreed instead of hanging the others."""
        global n_registrations
        cdef ucp_mem_map_params_t params
        cdef ucp_mem_attr_t attr
        cdef void *packed = NULL
        cdef size_t packed_size = 0
        error, rkey = "", b""
        if not length:
            return error, address, rkey
        try:
            memset(&params, 0, sizeof(params))
            params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH
            params.address = <void *>address
            params.length = length
            if address == 0:
                params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS
                params.flags = UCP_MEM_MAP_ALLOCATE
            if memory_type != "auto":
                params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE
                params.memory_type = <ucs_memory_type_t>MEMORY_TYPE_CODES[memory_type]
            check(ucp_mem_map(context, &params, &self.memh), b"ucp_mem_map")
            n_registrations += 1
            memset(&attr, 0, sizeof(attr))
            attr.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE | UCP_MEM_ATTR_FIELD_ADDRESS
            check(ucp_mem_query(self.memh, &attr), b"ucp_mem_query")
            self.memory_type = attr.mem_type
            if address == 0:
                self.base = <char *>attr.address
                address = <uintptr_t>attr.address
                memset(self.base, 0, length)
            check(ucp_rkey_pack(context, self.memh, &packed, &packed_size), b"ucp_rkey_pack")
            rkey = (<char *>packed)[:packed_size]
            ucp_rkey_buffer_release(packed)
        except UcxError as failure:
            error = f"registering {length} bytes: {failure}"
        return error, address, rkey

    def __dealloc__(self):
        cdef int peer
        if self.rkeys != NULL:
            for peer in range(self.endpoints.size):
                if self.rkeys[peer] != NULL:
                    ucp_rkey_destroy(self.rkeys[peer])
        if self.memh != NULL:
            ucp_mem_unmap(self.endpoints.worker.context, self.memh)
        free(self.rkeys)
        free(self.remote_base)

    @property
    def address(self) -> int:
        """Where the mapped memory starts (UCX's own allocation when it was asked to allocate)."""
        return <uintptr_t>self.base

    def mappable(self, int peer) -> bool:
        """Whether UCX maps ``peer``'s twin into this process (ucp_rkey_ptr): puts there can be
        plain copies through a shared-memory segment (sysv, posix, xpmem) instead of RMA."""
        cdef void *local = NULL
        if self.rkeys[peer] == NULL:
            return False
        return ucp_rkey_ptr(self.rkeys[peer], self.remote_base[peer], &local) == UCS_OK

    @property
    def memory_type_name(self) -> str:
        """What UCX detected (or was told) the mapped memory is."""
        return MEMORY_TYPES.get(self.memory_type, f"type {self.memory_type}")

    cdef int put(self, int peer, const void *source, size_t nbytes, size_t offset,
                 ucp_request_param_t *param, void **request) except -1 nogil:
        """Start a put of ``nbytes`` into the peer's twin at ``offset``; ``*request``: NULL when done already."""
        cdef ucs_status_ptr_t started
        request[0] = NULL
        if nbytes == 0:
            return 0
        started = ucp_put_nbx(self.endpoints.eps[peer], source, nbytes, self.remote_base[peer] + offset,
                              self.rkeys[peer], param)
        if UCS_PTR_IS_ERR(started):
            return check(UCS_PTR_STATUS(started), b"ucp_put_nbx")
        request[0] = started
        return 0


def wire_up(Endpoints endpoints, comm):
    """Collective: connect every endpoint of ``endpoints`` now, so no connection handshake happens inside a call.

    Each rank puts one word into every rank's twin of a small region and flushes, then all
    wait in an MPI barrier that keeps progressing UCX (a rank that is done must still serve
    its peers' connection handshakes and flushes)."""
    import numpy as np

    cdef ucp_request_param_t param
    cdef void *request = NULL
    cdef uint64_t mark = endpoints.rank + 1
    cdef int peer
    words = np.zeros(endpoints.size, dtype=np.uint64)
    region = Region(endpoints, comm, words.ctypes.data, words.nbytes, words, "host")
    memset(&param, 0, sizeof(param))
    for peer in range(endpoints.size):
        region.put(peer, &mark, 8, endpoints.rank * 8, &param, &request)
        endpoints.worker.wait_request(request, b"ucp_put_nbx (wire-up)")
        endpoints.worker.wait_request(ucp_ep_flush_nbx(endpoints.eps[peer], &param), b"ucp_ep_flush_nbx (wire-up)")
    barrier = comm.Ibarrier()
    start = now()
    while not barrier.Test():
        ucp_worker_progress(endpoints.worker.handle)
        if now() - start > endpoints.worker.timeout_s:
            raise UcxTimeout(f"wire-up: not every rank connected within {endpoints.worker.timeout_s:g} s")
    expected = np.arange(1, endpoints.size + 1, dtype=np.uint64)
    if not (words == expected).all():
        raise UcxError(f"wire-up: words {words.tolist()} after the barrier, expected {expected.tolist()}")
