/* The time, in nanoseconds, as every room reads it: one inline
 * clock_gettime (vDSO: no system call), safe from a signal handler. */
#ifndef BH_CLOCK_H
#define BH_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t bh_clock_ns(clockid_t clock)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

#endif
