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
    BH_WATCH_TURNAROUND = 1 << 8,  /* turnaround: kept for the connection's
                                      life, so each send and receive pays a
                                      bit test (and a CAS at an exchange's ends) */
    BH_WATCH_ANSWERED = 1 << 9,    /* turnaround: bytes came back since the
                                      last send; the next send begins an exchange */
    BH_WATCH_TIMED = 1 << 10,      /* turnaround: this exchange is timed */
    BH_WATCH_ARM_STALL = 1 << 11,  /* io_timeout_ms: the first send asks
                                      whether the socket is non-blocking */
    BH_WATCH_STALL = 1 << 12,      /* io_timeout_ms, non-blocking: the
                                      watchdog (stall.c) times each exchange,
                                      which flips ANSWERED as turnaround does */
    BH_WATCH_STALLED = 1 << 13,    /* the watchdog shut its reading side:
                                      the EOF the program reads is ETIMEDOUT */
    BH_WATCH_SENT = 1 << 14,       /* STALL: more of the request went out
                                      since the watchdog last looked */
    BH_WATCH_WAITING = 1 << 15,    /* its connect waits for its permits, or
                                      was refused after a wait: it holds
                                      none (async_connect.c) */
    /* turnaround: the bits above count the exchanges begun (mod 2^16) */
    BH_WATCH_EXCHANGE_SHIFT = 16,
};
/* Bits whose connections flip ANSWERED at each exchange's ends. */
#define BH_WATCH_EXCHANGES (BH_WATCH_TURNAROUND | BH_WATCH_STALL)

/* The bits a new connection of this compartment starts with. */
static inline uint32_t bh_outcome_watch(const struct bh_compartment *compartment,
                                        int probe)
{
    uint32_t watch = BH_WATCH_CONNECTING;
    if (compartment->breaker_failures > 0 || probe)
        watch |= BH_WATCH_FIRST_BYTE | BH_WATCH_MAY_FAIL;
    if (probe)
        watch |= BH_WATCH_PROBE;
    if (compartment->io_timeout_ms > 0)  /* the first send begins an exchange */
        watch |= BH_WATCH_ARM_RECEIVE | BH_WATCH_IO_DEADLINE | BH_WATCH_ARM_STALL |
                 BH_WATCH_ANSWERED;
    if (bh_compartment_turnaround(compartment))
        watch |= BH_WATCH_TURNAROUND | BH_WATCH_ANSWERED;
    return watch;
}

/* The connect completed (errno is kept); it failed with err (a failure
 * for the breaker only if it says something about the downstream). */
void bh_outcome_connected(int fd);
void bh_outcome_connect_failed(int fd, int err);

/* Around a send or receive on a connection with watch bits: before a
 * receive, arms its deadline if due and returns the bits to use after;
 * after a call that failed, returned 0 or had a first outcome to learn,
 * learns what the result says and returns the result, with errno
 * ETIMEDOUT when our deadline expired (the EOF of a socket the watchdog
 * shut is -1/ETIMEDOUT too, once). After the first send that went out on
 * a connection with io_timeout_ms, asks whether the watchdog is to time
 * its exchanges (stall.c). */
uint32_t bh_outcome_before_io(int fd, uint32_t watch, int receive);
ssize_t bh_outcome_after_io(int fd, uint32_t watch, ssize_t result,
                            int receive, int flags);
/* Out of line, once per timed exchange: its send went out (number: the
 * exchange's, mod 2^16), its answer came. */
void bh_outcome_timed_send(int fd, uint32_t number);
void bh_outcome_timed_answer(int fd);

/* Turnaround after a send or receive that moved bytes, with the watch bits
 * seen before it: the first send since an answer begins an exchange
 * (counted, and timed if its number says so), the first receive after it
 * ends it. Between those, a counter step and a compare-and-swap on the
 * connection's own word; a lost race means another thread took the step. */
static inline void bh_outcome_turnaround(int fd, _Atomic uint32_t *word, uint32_t watch,
                                         int receive)
{
    uint32_t next;
    do {
        if (receive ? (watch & BH_WATCH_ANSWERED) : !(watch & BH_WATCH_ANSWERED)) {
            /* more of the same answer, or of the same request: the
             * watchdog's clock restarts after the request's last send */
            if (!receive && (watch & (BH_WATCH_STALL | BH_WATCH_SENT)) == BH_WATCH_STALL)
                atomic_fetch_or(word, BH_WATCH_SENT);
            return;
        }
        if (receive)
            next = (watch | BH_WATCH_ANSWERED) & ~(uint32_t)BH_WATCH_TIMED;
        else if ((watch & BH_WATCH_TURNAROUND) &&
                 (watch >> BH_WATCH_EXCHANGE_SHIFT) % BH_TURNAROUND_EVERY == 0)
            next = ((watch & ~(uint32_t)BH_WATCH_ANSWERED) | BH_WATCH_TIMED) +
                   (1u << BH_WATCH_EXCHANGE_SHIFT);
        else
            next = (watch & ~(uint32_t)BH_WATCH_ANSWERED) + (1u << BH_WATCH_EXCHANGE_SHIFT);
    } while (!atomic_compare_exchange_weak(word, &watch, next));
    if (receive && (watch & BH_WATCH_TIMED))
        bh_outcome_timed_answer(fd);
    else if (!receive && (next & BH_WATCH_TIMED))
        bh_outcome_timed_send(fd, watch >> BH_WATCH_EXCHANGE_SHIFT);
}

/* Successful calls whose bits ask for more than turnaround; a send's
 * ARM_STALL is looked at after the first that succeeds (no test before
 * the call, so the watched send path pays nothing for it). */
#define BH_WATCH_ON_SUCCESS(receive)                                           \
    (BH_WATCH_CONNECTING | BH_WATCH_FIRST_BYTE | ((receive) ? 0 : BH_WATCH_ARM_STALL))

/* What a send or receive hook does on a connection with watch bits, word
 * its watch word: `call` is the real libc call. The usual case (bytes
 * moved, nothing but turnaround to learn) stays inline and leaves errno
 * alone. The word may be a newer connection's by the time the call
 * returns (another thread closed the fd and the slot was reused), as a
 * lookup after the call could be: it costs a misplaced step, never a
 * permit. */
#define BH_WATCHED_IO(fd, word, receive, flags, call) __extension__ ({         \
        uint32_t watch_ = atomic_load_explicit(word, memory_order_relaxed);    \
        ssize_t result_;                                                       \
        if (__builtin_expect(watch_ & BH_WATCH_WAITING, 0)) {                  \
            result_ = bh_async_io_held(fd) ? -1 : (call);                      \
        } else {                                                               \
            if ((receive) && (watch_ & BH_WATCH_ARM_RECEIVE))                  \
                watch_ = bh_outcome_before_io(fd, watch_, receive);            \
            result_ = (call);                                                  \
            if (__builtin_expect(result_ <= 0 || (watch_ & BH_WATCH_ON_SUCCESS(receive)), 0)) \
                result_ = bh_outcome_after_io(fd, watch_, result_, receive, flags); \
            else if (watch_ & BH_WATCH_EXCHANGES)                              \
                bh_outcome_turnaround(fd, word, watch_, receive);              \
        }                                                                      \
        result_; })

/* A send or receive on a fd whose connect waits (WAITING): 1 with errno
 * set (EAGAIN, or the verdict once), 0: the real call goes ahead. */
int bh_async_io_held(int fd);

/* A parameter list, args a call's arguments, with the connection's slot
 * (bh_fd_entry_slot) first. */
#define BH_WITH_SLOT(...) (size_t slot_, __VA_ARGS__)
#define BH_PASS_SLOT(...) (slot_, __VA_ARGS__)

/* A send or a receive as three functions: the fast path, FAST, is the
 * inline look at the fd's entry and its connection's watch bits, and a
 * tail jump to libc_NAME when they are clear (no connection, or one with
 * nothing left to learn), with no stack frame of its own; the watched
 * path, FAST_watched, is out of line and finds the word from the static
 * slot the fast path read; FAST_far does both for a connection whose id
 * is past the static slots (more than 4,096 in the process). */
#define BH_IO_FUNCTIONS(fast, name, receive, flags, params, args)              \
    static __attribute__((noinline)) ssize_t fast##_watched BH_WITH_SLOT params \
    {                                                                          \
        _Atomic uint32_t *word_ = bh_fd_static_word(slot_);                    \
        return BH_WATCHED_IO(fd, word_, receive, flags, libc_##name args);     \
    }                                                                          \
    static __attribute__((noinline)) ssize_t fast##_far params                 \
    {                                                                          \
        _Atomic uint32_t *word_ = bh_fd_watch_word(fd);                        \
        if (!word_ || !atomic_load_explicit(word_, memory_order_relaxed))      \
            return libc_##name args;                                           \
        return BH_WATCHED_IO(fd, word_, receive, flags, libc_##name args);     \
    }                                                                          \
    static inline ssize_t fast params                                          \
    {                                                                          \
        uint32_t entry_ = bh_fd_entry(fd);                                     \
        if (__builtin_expect(!bh_fd_entry_connected(entry_), 1))               \
            return libc_##name args;                                           \
        if (__builtin_expect(!bh_fd_slot_static(entry_), 0))                   \
            return fast##_far args;                                            \
        size_t slot_ = bh_fd_entry_slot(entry_);                               \
        if (__builtin_expect(!bh_fd_static_watch(slot_), 1))                   \
            return libc_##name args;                                           \
        return fast##_watched BH_PASS_SLOT args;                               \
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

/* A connection ended: its permit goes back to the namespace its place
 * names (joined.h), and its probe slot if it still held one; its hold
 * time is counted. Async-signal-safe. */
void bh_connection_ended(const struct bh_fd_ended *ended);

/* What every path that can end a connection calls with what the fd table
 * returned; inline, since nearly always nothing ended: one test then. */
static inline void bh_give_back(struct bh_fd_ended ended)
{
    if (ended.compartment != BH_FD_NOTHING_ENDED)
        bh_connection_ended(&ended);
}

#endif
