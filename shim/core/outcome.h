/* How counted connections turn out: learned where the program learns it
 * (connect's return, getsockopt(SO_ERROR), a repeated connect, the results
 * of its sends and receives), counted, and told to the breaker. */
#ifndef BH_OUTCOME_H
#define BH_OUTCOME_H

#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "fdtable/fd_table.h"

/* Per-connection watch bits, kept in the fd table. A connection whose bits
 * are all clear costs its I/O hooks nothing but the lookup. */
enum {
    BH_WATCH_CONNECTING = 1 << 0,  /* connect under way: outcome unknown */
    BH_WATCH_FIRST_BYTE = 1 << 1,  /* breaker on: no byte has come back yet */
    BH_WATCH_MAY_FAIL = 1 << 2,    /* breaker on: no failure told it yet */
    BH_WATCH_PROBE = 1 << 3,       /* holds the breaker's probe slot */
    BH_WATCH_ARM_RECEIVE = 1 << 4, /* io_timeout_ms: the first receive arms SO_RCVTIMEO */
    BH_WATCH_RECEIVE_OURS = 1 << 5, /* SO_RCVTIMEO is ours: a blocking EAGAIN is ETIMEDOUT */
    BH_WATCH_IO_DEADLINE = 1 << 6, /* io_timeout_ms: ETIMEDOUT is an io timeout */
    BH_WATCH_DROPPED = 1 << 7,     /* adaptive: it failed; its hold is no latency */
};

/* The bits a new connection of this compartment starts with. */
uint32_t bh_outcome_watch(const struct bh_compartment *compartment, int probe);

/* The connect completed; it failed with err (a failure for the breaker
 * only if it says something about the downstream). */
void bh_outcome_connected(int fd);
void bh_outcome_connect_failed(int fd, int err);

/* Around a send or receive on a connection with watch bits: before it,
 * arms the receive deadline if due and returns the bits to use after;
 * after it, learns what the result says and returns the result, with
 * errno ETIMEDOUT when our deadline expired. */
uint32_t bh_outcome_before_io(int fd, uint32_t watch, int receive);
ssize_t bh_outcome_after_io(int fd, uint32_t watch, ssize_t result,
                            int receive, int flags);

/* What a send or receive hook does on a connection with watch bits:
 * `call` is the real libc call. */
#define BH_WATCHED_IO(fd, watch, receive, flags, call) __extension__ ({         \
        uint32_t watch_ = bh_outcome_before_io(fd, watch, receive);            \
        ssize_t result_ = (call);                                              \
        bh_outcome_after_io(fd, watch_, result_, receive, flags); })

/* A send or a receive as two functions: the fast path, FAST, is the inline
 * lookup of the fd's watch bits and a tail jump to libc_NAME when there
 * are none (no connection, or one with nothing left to learn), with no
 * stack frame of its own; the watched path, FAST_watched, is out of line. */
#define BH_IO_FUNCTIONS(fast, name, receive, flags, params, args)              \
    static __attribute__((noinline)) ssize_t fast##_watched params             \
    {                                                                          \
        return BH_WATCHED_IO(fd, bh_fd_watched(fd), receive, flags,            \
                             libc_##name args);                                \
    }                                                                          \
    static inline ssize_t fast params                                          \
    {                                                                          \
        if (__builtin_expect(!bh_fd_watched(fd), 1))                           \
            return libc_##name args;                                           \
        return fast##_watched args;                                            \
    }

/* A hook whose every call is a send or a receive: bh_NAME. */
#define BH_IO_HOOK(name, receive, flags, params, args)                         \
    BH_IO_FUNCTIONS(bh_##name, name, receive, flags, params, args)

/* getsockopt(SO_ERROR) read err on a connection being connected. */
void bh_outcome_so_error(int fd, int err);

/* Before an exec: a probe slot held here goes back now. The slot's
 * SEM_UNDO record would outlive the image that knows it holds it, and the
 * breaker would stay half-open until the process exits. */
void bh_outcome_before_exec(void);

#endif
