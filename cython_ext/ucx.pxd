# The part of UCP (UCX's protocol layer) the one-sided path needs: context and worker,
# worker addresses, endpoints, memory mapping and remote keys, non-blocking put,
# fence/flush, progress, request completion, and the queries that tell what UCX chose.
# Declarations only; cython_ext/ucx.pyx wraps them.
from libc.stdint cimport uint64_t, uint32_t
from libc.stdio cimport FILE


cdef extern from "ucp/api/ucp.h" nogil:
    ctypedef int ucs_status_t
    ctypedef void *ucs_status_ptr_t
    enum:
        UCS_OK
        UCS_INPROGRESS
        UCS_ERR_NO_MEMORY
        UCS_ERR_UNREACHABLE
        UCS_ERR_TIMED_OUT
        UCS_ERR_UNSUPPORTED
    const char *ucs_status_string(ucs_status_t status)
    bint UCS_PTR_IS_ERR(ucs_status_ptr_t ptr)
    bint UCS_PTR_IS_PTR(ucs_status_ptr_t ptr)
    ucs_status_t UCS_PTR_STATUS(ucs_status_ptr_t ptr)

    ctypedef enum ucs_memory_type_t:
        UCS_MEMORY_TYPE_HOST
        UCS_MEMORY_TYPE_CUDA
        UCS_MEMORY_TYPE_CUDA_MANAGED
        UCS_MEMORY_TYPE_ROCM
        UCS_MEMORY_TYPE_ROCM_MANAGED
        UCS_MEMORY_TYPE_UNKNOWN
    ctypedef enum ucs_thread_mode_t:
        UCS_THREAD_MODE_SINGLE

    ctypedef struct ucp_config_t:
        pass
    ctypedef struct ucp_context:
        pass
    ctypedef ucp_context *ucp_context_h
    ctypedef struct ucp_worker:
        pass
    ctypedef ucp_worker *ucp_worker_h
    ctypedef struct ucp_ep:
        pass
    ctypedef ucp_ep *ucp_ep_h
    ctypedef struct ucp_address_t:
        pass
    ctypedef struct ucp_mem:
        pass
    ctypedef ucp_mem *ucp_mem_h
    ctypedef struct ucp_rkey:
        pass
    ctypedef ucp_rkey *ucp_rkey_h

    enum:
        UCP_API_MAJOR
        UCP_API_MINOR
        UCP_PARAM_FIELD_FEATURES
        UCP_PARAM_FIELD_ESTIMATED_NUM_EPS
        UCP_FEATURE_RMA
        UCP_WORKER_PARAM_FIELD_THREAD_MODE
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
        UCP_ERR_HANDLING_MODE_NONE
        UCP_EP_CLOSE_FLAG_FORCE
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS
        UCP_MEM_MAP_PARAM_FIELD_LENGTH
        UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE
        UCP_MEM_MAP_PARAM_FIELD_FLAGS
        UCP_MEM_MAP_ALLOCATE
        UCP_MEM_ATTR_FIELD_ADDRESS
        UCP_MEM_ATTR_FIELD_MEM_TYPE
        UCP_ATTR_FIELD_MEMORY_TYPES
        UCP_OP_ATTR_FIELD_FLAGS
        UCP_OP_ATTR_FIELD_MEMORY_TYPE
        UCP_EP_ATTR_FIELD_TRANSPORTS

    ctypedef struct ucp_params_t:
        uint64_t field_mask
        uint64_t features
        size_t estimated_num_eps
    ctypedef struct ucp_worker_params_t:
        uint64_t field_mask
        ucs_thread_mode_t thread_mode
    ctypedef struct ucp_ep_params_t:
        uint64_t field_mask
        const ucp_address_t *address
        int err_mode
    ctypedef struct ucp_mem_map_params_t:
        uint64_t field_mask
        void *address
        size_t length
        unsigned flags
        ucs_memory_type_t memory_type
    ctypedef struct ucp_mem_attr_t:
        uint64_t field_mask
        void *address
        ucs_memory_type_t mem_type
    ctypedef struct ucp_context_attr_t:
        uint64_t field_mask
        uint64_t memory_types
    ctypedef struct ucp_request_param_t:
        uint32_t op_attr_mask
        uint32_t flags
        ucs_memory_type_t memory_type
    ctypedef struct ucp_transport_entry_t:
        const char *transport_name
        const char *device_name
    ctypedef struct ucp_transports_t:
        ucp_transport_entry_t *entries
        unsigned num_entries
        size_t entry_size
    ctypedef struct ucp_ep_attr_t:
        uint64_t field_mask
        ucp_transports_t transports

    void ucp_get_version(unsigned *major, unsigned *minor, unsigned *release)
    const char *ucp_get_version_string()
    ucs_status_t ucp_config_read(const char *env_prefix, const char *filename, ucp_config_t **config)
    void ucp_config_release(ucp_config_t *config)
    ucs_status_t ucp_init_version(unsigned api_major, unsigned api_minor, const ucp_params_t *params,
                                  const ucp_config_t *config, ucp_context_h *context)
    void ucp_cleanup(ucp_context_h context)
    ucs_status_t ucp_context_query(ucp_context_h context, ucp_context_attr_t *attr)
    void ucp_context_print_info(const ucp_context_h context, FILE *stream)

    ucs_status_t ucp_worker_create(ucp_context_h context, const ucp_worker_params_t *params,
                                   ucp_worker_h *worker)
    void ucp_worker_destroy(ucp_worker_h worker)
    ucs_status_t ucp_worker_get_address(ucp_worker_h worker, ucp_address_t **address, size_t *length)
    void ucp_worker_release_address(ucp_worker_h worker, ucp_address_t *address)
    unsigned ucp_worker_progress(ucp_worker_h worker)
    ucs_status_t ucp_worker_fence(ucp_worker_h worker)
    ucs_status_ptr_t ucp_worker_flush_nbx(ucp_worker_h worker, const ucp_request_param_t *param)

    ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t *params, ucp_ep_h *ep)
    ucs_status_ptr_t ucp_ep_close_nbx(ucp_ep_h ep, const ucp_request_param_t *param)
    ucs_status_ptr_t ucp_ep_flush_nbx(ucp_ep_h ep, const ucp_request_param_t *param)
    ucs_status_t ucp_ep_query(ucp_ep_h ep, ucp_ep_attr_t *attr)
    void ucp_ep_print_info(ucp_ep_h ep, FILE *stream)

    ucs_status_t ucp_mem_map(ucp_context_h context, const ucp_mem_map_params_t *params, ucp_mem_h *memh)
    ucs_status_t ucp_mem_unmap(ucp_context_h context, ucp_mem_h memh)
    ucs_status_t ucp_mem_query(const ucp_mem_h memh, ucp_mem_attr_t *attr)
    ucs_status_t ucp_rkey_pack(ucp_context_h context, ucp_mem_h memh, void **rkey_buffer, size_t *size)
    void ucp_rkey_buffer_release(void *rkey_buffer)
    ucs_status_t ucp_ep_rkey_unpack(ucp_ep_h ep, const void *rkey_buffer, ucp_rkey_h *rkey)
    void ucp_rkey_destroy(ucp_rkey_h rkey)
    ucs_status_t ucp_rkey_ptr(ucp_rkey_h rkey, uint64_t raddr, void **addr_p)

    ucs_status_ptr_t ucp_put_nbx(ucp_ep_h ep, const void *buffer, size_t count, uint64_t remote_addr,
                                 ucp_rkey_h rkey, const ucp_request_param_t *param)
    ucs_status_t ucp_request_check_status(void *request)
    void ucp_request_free(void *request)


# The one status-check helper: raises UcxError naming the call and ucs_status_string.
cdef int check(ucs_status_t status, const char *what) except -1 nogil


cdef class Worker:
    """One UCP context and worker (a process keeps one, collectives/transports/rdma/ops.py caches it)."""
    cdef ucp_context_h context
    cdef ucp_worker_h handle
    cdef readonly double timeout_s
    cdef public bint yield_when_idle
    cdef readonly unsigned long progress_calls
    cdef int wait_word(self, volatile uint64_t *word, uint64_t value, const char *what, int peer) except -1 nogil
    cdef int wait_request(self, void *request, const char *what) except -1 nogil


cdef class Endpoints:
    """An endpoint to every rank of a communicator (addresses exchanged over MPI once)."""
    cdef readonly Worker worker
    cdef ucp_ep_h *eps
    cdef readonly int size
    cdef readonly int rank
