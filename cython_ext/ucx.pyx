"""A small binding to UCP for one-sided collectives (declarations in ucx.pxd).

Setup happens once and over MPI: a Worker per process; Endpoints per communicator
(worker addresses exchanged with an allgather); a Region per buffer (cython_ext/ucx_region.pyx:
ucp_mem_map, rkey packed, exchanged with an allgather, unpacked once per peer). The hot path is
``Region.put`` plus ``Worker.wait_word`` (progress until a flag word reaches a
value, bounded by a timeout) and ``Worker.wait_request``; all nogil. Every UCX status
goes through ``check``, which raises UcxError with ucs_status_string.

Setup steps that can fail on one rank (an endpoint, a mapping) exchange the outcome
before anyone waits on a peer, so every rank raises the same error instead of hanging.
"""
cimport cython
from libc.stdint cimport uint64_t, uintptr_t
from libc.stdio cimport FILE, fclose
from libc.stdlib cimport calloc, free
from libc.string cimport memset

from cython_ext.wait cimport Patience, now, out_of_patience, patience_begin, pccl_load_acquire, sched_yield

cdef extern from "<stdio.h>" nogil:
    FILE *open_memstream(char **ptr, size_t *size)


class UcxError(RuntimeError):
    """A UCX call failed, or a one-sided setup step failed on some rank."""


class UcxTimeout(UcxError):
    """A wait for a peer's flag or for a request exceeded the timeout (a peer gone, or no progress)."""


MEMORY_TYPES = {UCS_MEMORY_TYPE_HOST: "host", UCS_MEMORY_TYPE_CUDA: "cuda",
                UCS_MEMORY_TYPE_CUDA_MANAGED: "cuda-managed", UCS_MEMORY_TYPE_ROCM: "rocm",
                UCS_MEMORY_TYPE_ROCM_MANAGED: "rocm-managed"}
MEMORY_TYPE_CODES = {name: code for code, name in MEMORY_TYPES.items()}

# Process-wide setup counters (the setup-once property is checked against them).
cdef unsigned long n_workers = 0, n_endpoints = 0


def counters() -> dict:
    """How many workers, endpoints, memory registrations and rkey unpacks this process made."""
    from cython_ext.ucx_region import region_counters

    return {"workers": n_workers, "endpoints": n_endpoints, **region_counters()}


cdef int check(ucs_status_t status, const char *what) except -1 nogil:
    if status == UCS_OK:
        return 0
    with gil:
        raise UcxError(f"{what.decode()} failed: {ucs_status_string(status).decode()} (UCS status {status})")


cdef str _memstream_text(char *text, size_t size):
    result = text[:size].decode(errors="replace") if text != NULL else ""
    free(text)
    return result


def version() -> str:
    """The version of the libucp this process loaded (not the headers it was built with)."""
    return ucp_get_version_string().decode()


def header_version() -> str:
    return f"{UCP_API_MAJOR}.{UCP_API_MINOR}"


def library_path() -> str:
    """Path of the libucp.so this process loaded (it may be another package's: MPI's own UCX)."""
    import ctypes

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                    ("saddr", ctypes.c_void_p)]

    info = DlInfo()
    libc = ctypes.CDLL(None)
    if libc.dladdr(ctypes.c_void_p(<uintptr_t>ucp_get_version_string), ctypes.byref(info)) and info.fname:
        return info.fname.decode()
    return ""


cdef class Worker:
    def __cinit__(self, double timeout_s=30.0, bint yield_when_idle=False):
        global n_workers
        cdef ucp_config_t *config = NULL
        cdef ucp_params_t params
        cdef ucp_worker_params_t worker_params
        cdef unsigned major = 0, minor = 0, release = 0
        cdef ucs_status_t status
        self.context = NULL
        self.handle = NULL
        self.timeout_s = timeout_s
        self.yield_when_idle = yield_when_idle
        self.progress_calls = 0
        # Ask for the API level of the library actually loaded when it is older than the headers
        # (MPI's bundled UCX, say); only fields present in both are used.
        ucp_get_version(&major, &minor, &release)
        check(ucp_config_read(NULL, NULL, &config), b"ucp_config_read")
        memset(&params, 0, sizeof(params))
        params.field_mask = UCP_PARAM_FIELD_FEATURES
        params.features = UCP_FEATURE_RMA
        status = ucp_init_version(UCP_API_MAJOR, min(<unsigned>UCP_API_MINOR, minor), &params, config, &self.context)
        ucp_config_release(config)
        check(status, b"ucp_init")
        memset(&worker_params, 0, sizeof(worker_params))
        worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE
        worker_params.thread_mode = UCS_THREAD_MODE_SINGLE
        check(ucp_worker_create(self.context, &worker_params, &self.handle), b"ucp_worker_create")
        n_workers += 1

    def __dealloc__(self):
        if self.handle != NULL:
            ucp_worker_destroy(self.handle)
        if self.context != NULL:
            ucp_cleanup(self.context)

    def address(self) -> bytes:
        cdef ucp_address_t *address = NULL
        cdef size_t length = 0
        check(ucp_worker_get_address(self.handle, &address, &length), b"ucp_worker_get_address")
        try:
            return (<char *>address)[:length]
        finally:
            ucp_worker_release_address(self.handle, address)

    def progress(self) -> int:
        cdef unsigned events
        with nogil:
            events = ucp_worker_progress(self.handle)
        return events

    def memory_types(self) -> list:
        """Memory types this UCX context can move (from ucp_context_query): 'host', 'cuda', ..."""
        cdef ucp_context_attr_t attr
        memset(&attr, 0, sizeof(attr))
        attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES
        check(ucp_context_query(self.context, &attr), b"ucp_context_query")
        return [name for code, name in MEMORY_TYPES.items() if attr.memory_types & (1ULL << code)]

    def context_info(self) -> str:
        """ucp_context_print_info: the context's resources (one line per transport/device)."""
        cdef char *text = NULL
        cdef size_t size = 0
        cdef FILE *stream = open_memstream(&text, &size)
        if stream == NULL:
            raise MemoryError()
        ucp_context_print_info(self.context, stream)
        fclose(stream)
        return _memstream_text(text, size)

    cdef int wait_word(self, volatile uint64_t *word, uint64_t value, const char *what, int peer) except -1 nogil:
        """Progress until ``*word >= value``; UcxTimeout after timeout_s."""
        cdef Patience w
        patience_begin(&w)
        while pccl_load_acquire(word) < value:
            if ucp_worker_progress(self.handle) == 0 and self.yield_when_idle:
                sched_yield()
            if out_of_patience(&w, self.timeout_s):
                with gil:
                    raise UcxTimeout(
                        f"no {what.decode()} from rank {peer} within {self.timeout_s:g} s (flag {word[0]}, "
                        f"want {value}): the peer is gone or no transport makes progress "
                        f"(PCCL_RDMA_TIMEOUT_S sets the bound)")
        self.progress_calls += w.polls
        return 0

    cdef int wait_request(self, void *request, const char *what) except -1 nogil:
        """Progress until a request from a *_nbx call completes, then free it; NULL is done."""
        cdef ucs_status_t status
        cdef Patience w
        if request == NULL:
            return 0
        if UCS_PTR_IS_ERR(request):
            return check(UCS_PTR_STATUS(request), what)
        status = ucp_request_check_status(request)
        patience_begin(&w)
        while status == UCS_INPROGRESS:
            if ucp_worker_progress(self.handle) == 0 and self.yield_when_idle:
                sched_yield()
            if out_of_patience(&w, self.timeout_s):
                with gil:
                    raise UcxTimeout(f"{what.decode()} did not complete within {self.timeout_s:g} s "
                                     f"(PCCL_RDMA_TIMEOUT_S sets the bound)")
            status = ucp_request_check_status(request)
        ucp_request_free(request)
        self.progress_calls += w.polls
        return check(status, what)


def _agree(comm, error: str) -> None:
    """Every rank raises the first rank's error (or none does): no rank waits on a failed peer."""
    errors = [(rank, text) for rank, text in enumerate(comm.allgather(error)) if text]
    if errors:
        rank, text = errors[0]
        raise UcxError(text if f"rank {rank}" in text else f"rank {rank}: {text}")


# Endpoints and Region use their references (worker, endpoints) when deallocated: the GC must
# not clear them first when it breaks a reference cycle (at interpreter exit, say).
@cython.no_gc_clear
cdef class Endpoints:
    def __cinit__(self, Worker worker, comm):
        """Collective over ``comm``: one endpoint to every rank (itself included)."""
        global n_endpoints
        cdef ucp_ep_params_t params
        cdef int peer
        cdef bytes remote
        self.worker = worker
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        self.eps = <ucp_ep_h *>calloc(self.size, sizeof(ucp_ep_h))
        if self.eps == NULL:
            raise MemoryError()
        error = ""
        try:
            addresses = comm.allgather(worker.address())
        except UcxError as failure:
            addresses, error = comm.allgather(b""), str(failure)
        for peer in range(self.size):
            if error:
                break
            remote = addresses[peer]
            memset(&params, 0, sizeof(params))
            params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
            params.address = <const ucp_address_t *><char *>remote
            params.err_mode = UCP_ERR_HANDLING_MODE_NONE
            try:
                check(ucp_ep_create(worker.handle, &params, &self.eps[peer]), b"ucp_ep_create")
                n_endpoints += 1
            except UcxError as failure:
                error = f"endpoint to rank {peer}: {failure}"
        _agree(comm, error)

    def __dealloc__(self):
        cdef ucp_request_param_t param
        cdef int peer
        if self.eps == NULL:
            return
        memset(&param, 0, sizeof(param))
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS
        param.flags = UCP_EP_CLOSE_FLAG_FORCE  # no handshake: the peer may have gone already
        for peer in range(self.size):
            if self.eps[peer] != NULL:
                request = ucp_ep_close_nbx(self.eps[peer], &param)
                try:
                    self.worker.wait_request(request, b"ucp_ep_close_nbx")
                except UcxError:
                    pass
        free(self.eps)

    def transports(self, int peer) -> list:
        """(transport, device) pairs of the lanes UCX set up to ``peer`` (ucp_ep_query)."""
        cdef ucp_ep_attr_t attr
        cdef ucp_transport_entry_t entries[32]
        memset(&attr, 0, sizeof(attr))
        attr.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS
        attr.transports.entries = entries
        attr.transports.num_entries = 32
        attr.transports.entry_size = sizeof(ucp_transport_entry_t)
        check(ucp_ep_query(self.eps[peer], &attr), b"ucp_ep_query")
        return [(entries[i].transport_name.decode(), entries[i].device_name.decode())
                for i in range(attr.transports.num_entries)]

    def info(self, int peer) -> str:
        """ucp_ep_print_info: the endpoint's lanes and what each carries (am, rma, rma_bw, ...)."""
        cdef char *text = NULL
        cdef size_t size = 0
        cdef FILE *stream = open_memstream(&text, &size)
        if stream == NULL:
            raise MemoryError()
        ucp_ep_print_info(self.eps[peer], stream)
        fclose(stream)
        return _memstream_text(text, size)
