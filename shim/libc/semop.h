/* semop() straight to the kernel, errno untouched: 0, or -errno. The
 * permits' hot path (permits/pools.h: one take, one give-back per
 * connection) then pays no libc wrapper and saves no errno around the
 * call, which must keep the program's errno whatever it returns; its
 * failures, the rare path, set errno themselves. Where no inline system
 * call is written here, libc's semop with errno kept. Safe in a signal
 * handler. */
#ifndef BH_SEMOP_H
#define BH_SEMOP_H

#include <errno.h>
#include <stddef.h>
#include <sys/sem.h>
#include <sys/syscall.h>

static inline int bh_semop_raw(int semid, struct sembuf *ops, size_t count)
{
#if defined(__x86_64__)
    long rc;
    __asm__ volatile("syscall"
                     : "=a"(rc)
                     : "0"((long)SYS_semop), "D"((long)semid), "S"(ops), "d"(count)
                     : "rcx", "r11", "memory");
    return (int)rc;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = SYS_semop;
    register long x0 __asm__("x0") = semid;
    register long x1 __asm__("x1") = (long)ops;
    register long x2 __asm__("x2") = (long)count;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return (int)x0;
#else
    int saved_errno = errno;
    int rc = semop(semid, ops, count) < 0 ? -errno : 0;
    errno = saved_errno;
    return rc;
#endif
}

#endif
