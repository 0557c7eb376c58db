/* The C of the shared-memory collectives (cython_ext/shm.pyx): LL words, cross-memory attach. */
#ifndef PCCL_SHM_OPS_H
#define PCCL_SHM_OPS_H
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/uio.h>
#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

/* LL: nbytes as 8-byte words, data in the low half, the step's flag in the high half, one store each. */
static inline void shm_ll_write(volatile uint64_t *slot, const char *src, int64_t nbytes, uint32_t flag) {
    const uint64_t hi = ((uint64_t)flag) << 32;
    int64_t words = nbytes / 4, i;
    uint32_t d;
    for (i = 0; i < words; i++) {
        memcpy(&d, src + 4 * i, 4);
        __atomic_store_n(&slot[i], hi | d, __ATOMIC_RELAXED);
    }
    if (nbytes % 4) {
        d = 0;
        memcpy(&d, src + 4 * words, nbytes % 4);
        __atomic_store_n(&slot[words], hi | d, __ATOMIC_RELAXED);
    }
}

/* LL: unpack words [start, ...) whose flag is this step's; returns the first word not there yet. */
static inline int64_t shm_ll_read(volatile uint64_t *slot, char *dst, int64_t nbytes, uint32_t flag, int64_t start) {
    int64_t words = (nbytes + 3) / 4, i;
    uint64_t v;
    uint32_t d;
    for (i = start; i < words; i++) {
        v = __atomic_load_n(&slot[i], __ATOMIC_RELAXED);
        if ((uint32_t)(v >> 32) != flag) return i;
        d = (uint32_t)v;
        if (4 * i + 4 <= nbytes) memcpy(dst + 4 * i, &d, 4);
        else memcpy(dst + 4 * i, &d, nbytes - 4 * i);
    }
    return words;
}

/* Let any process of this user read our memory (Yama's ptrace_scope 1 asks for it). */
static int shm_allow_ptrace(void) { return prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); }

/* process_vm_readv until all nbytes arrived; 0, or the errno. */
static int shm_cma_read(pid_t pid, char *dst, uintptr_t src, int64_t nbytes) {
    struct iovec local, remote;
    ssize_t got;
    while (nbytes > 0) {
        local.iov_base = dst; local.iov_len = (size_t)nbytes;
        remote.iov_base = (void *)src; remote.iov_len = (size_t)nbytes;
        got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (got < 0) { if (errno == EINTR) continue; return errno; }
        if (got == 0) return EFAULT;
        dst += got; src += (uintptr_t)got; nbytes -= got;
    }
    return 0;
}

/* npieces pieces of piece bytes, the k-th from src + k * src_stride to dst + k * dst_stride, by
   process_vm_readv of up to 64 pieces at a time (one system call, not one per piece); a short read
   finishes piece by piece. 0, or the errno. */
static int shm_cma_read_pieces(pid_t pid, char *dst, int64_t dst_stride, uintptr_t src, int64_t src_stride,
                               int64_t piece, int64_t npieces) {
    struct iovec local[64], remote[64];
    int64_t k = 0, batch, i, done;
    ssize_t got;
    int err;
    while (k < npieces) {
        batch = npieces - k < 64 ? npieces - k : 64;
        for (i = 0; i < batch; i++) {
            local[i].iov_base = dst + (k + i) * dst_stride; local[i].iov_len = (size_t)piece;
            remote[i].iov_base = (void *)(src + (uintptr_t)((k + i) * src_stride)); remote[i].iov_len = (size_t)piece;
        }
        got = process_vm_readv(pid, local, (unsigned long)batch, remote, (unsigned long)batch, 0);
        if (got < 0) { if (errno == EINTR) continue; return errno; }
        if (got == 0 && piece > 0) return EFAULT;
        done = (int64_t)got / piece;
        if (done < batch) {  /* short: the rest of the piece it stopped in, then on from the next */
            err = shm_cma_read(pid, dst + (k + done) * dst_stride + (int64_t)got % piece,
                               src + (uintptr_t)((k + done) * src_stride + (int64_t)got % piece),
                               piece - (int64_t)got % piece);
            if (err) return err;
            done += 1;
        }
        k += done;
    }
    return 0;
}
#endif
