/* The atomics and the pause every C-level wait of cython_ext uses (cython_ext/wait.pxd). */
#ifndef PCCL_WAIT_H
#define PCCL_WAIT_H
#include <stdint.h>

/* Acquire load: the data a peer wrote before its flag is visible once the flag is. */
static inline uint64_t pccl_load_acquire(volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
/* Release store: everything written before it is visible to whoever sees the value. */
static inline void pccl_store_release(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
/* A spin-loop hint: ~100 cycles on x86 that leave the core to its SMT sibling. */
static inline void pccl_cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}
#endif
