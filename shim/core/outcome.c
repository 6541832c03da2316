/* How counted connections turn out, and what the breaker is told.
 *
 * State: per connection, the watch bits in the fd table (outcome.h);
 * shared, the compartment's counters and histograms (permits.h) and its
 * breaker (breaker.c). Each event clears its bit with one atomic
 * fetch-and before acting, so whichever thread or fd sees it first reports
 * it and nobody reports it twice: one connect outcome, one first byte, at
 * most one failure per connection.
 *
 * Turnaround (a compartment's `turnaround = yes`): a connection carrying
 * many requests (keep-alive) holds its permit for minutes, so its hold
 * time says nothing of how long the downstream takes to answer. Its
 * TURNAROUND bit never clears, so each send and receive on it takes the
 * watched path. An exchange runs from the first send after an answer (or
 * the connection's first send) to the first receive that brings bytes
 * after it: the ANSWERED bit flips at both ends, and the watch word's top
 * 16 bits count the exchanges begun, in one compare-and-swap on the
 * connection's own word (outcome.h, inline in the hooks). The first
 * exchange of each connection and then one in BH_TURNAROUND_EVERY (32)
 * is timed: its send reads the clock into the fd table (this process's
 * memory) and sets TIMED, its answer takes the time back and records the
 * difference in the compartment's windowed histogram (permits/window.c)
 * and, adaptive, as a latency sample. So one measurement at a time per
 * connection, and the common send or receive reads no clock: a bit test
 * and a compare-and-swap. Why 32: it cuts the clock reads and shared
 * writes 32-fold (the cost table in README.md) and still times a
 * connection doing 10 exchanges a second every 3.2 s. The timed send
 * also counts, in the window's exchanges, the ones since the last timed
 * one (32; 1 for the first), and the connection's end counts those after
 * the last, so suggest's request rate is every exchange, not only the
 * timed ones (when a connection's counter wraps, every 65,536 exchanges,
 * 31 go uncounted). Threads racing on one connection: each flip goes to
 * one of them; an answer that reads TIMED before its send stored the
 * time records nothing, and that time is overwritten by the next timed
 * send. Connections without the bit pay nothing for it.
 *
 * The probe slot names the process that took it and when (breaker.c), and
 * the connection's since_ns is that when: only that process may give it
 * back, so the PROBE bit is acted on only after the fd table says this
 * process owns it (a vfork child shares our memory, not our pid). A probe
 * that ends without an outcome (closed early, refused by the gate) gives
 * the slot back through bh_give_back.
 *
 * Adaptive compartments (shim/adaptive) are told the same outcomes: a
 * connection's hold time at its end is a latency sample, unless it failed
 * (DROPPED) or its connect's outcome was never learned; with turnaround,
 * each answer's turnaround is the sample instead, and holds are not; a downstream
 * failure is a drop, once per connection. A change of limit is logged at
 * info, at most once a second per compartment across the namespace.
 *
 * io_timeout_ms on a non-blocking socket (stall.c): the first send that
 * goes out asks fcntl whether the socket blocks; if not, the connection
 * gets the STALL bit, its exchanges flip ANSWERED as turnaround's do, and
 * the watchdog that times them shuts its reading side when one goes
 * unanswered; the STALLED bit then makes the EOF the program reads an
 * ETIMEDOUT, counted as an io timeout like a blocking receive's.
 *
 * Everything here is atomics, clock_gettime, semop and socket options,
 * except the log lines on breaker and limit changes, and the start of the
 * watchdog's thread (once per process, at the first non-blocking send on
 * a connection with io_timeout_ms): safe wherever the hooks run, signal
 * handlers included, as the refusal lines are, but for that start. */
#include "core/outcome.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "adaptive/adaptive.h"
#include "breaker/breaker.h"
#include "core/async_connect.h"
#include "core/deadline.h"
#include "core/stall.h"
#include "core/state.h"
#include "log/log.h"
#include "libc/clock.h"
#include "libc/inlined.h"

/* The probe's holding (its since_ns, see breaker.h) if fd is the probe
 * and this process owns it; 0 otherwise. */
static int64_t take_probe(int fd)
{
    if ((bh_fd_watched(fd) & BH_WATCH_PROBE) && bh_fd_table_owned_here() &&
        bh_fd_unwatch(fd, BH_WATCH_PROBE))
        return bh_fd_lookup(fd).since_ns;
    return 0;
}

static void log_change(int place, enum bh_breaker_change change, int err)
{
    const struct bh_compartment *compartment = bh_rules_of(place);
    struct bh_breaker_view breaker;
    bh_breaker_read(bh_breaker_fields(BH_AT(place)), &breaker);
    int open_ms = breaker.open_ms;
    if (change == BH_BREAKER_OPENED)
        bh_log(BH_LOG_WARN, "[%s]: breaker open for %d ms after %d failed "
               "connections in a row (the last: %s)", compartment->name, open_ms,
               compartment->breaker_failures, strerror(err));
    else if (change == BH_BREAKER_REOPENED)
        bh_log(BH_LOG_WARN, "[%s]: breaker open again, for %d ms: the probe "
               "failed (%s)", compartment->name, open_ms, strerror(err));
    else if (change == BH_BREAKER_CLOSED)
        bh_log(BH_LOG_INFO, "[%s]: breaker closed: the probe succeeded",
               compartment->name);
}

static void log_limit_change(int place, const struct bh_adaptive_change *change)
{
    char more[64] = "";
    if (change->left_out)
        snprintf(more, sizeof more, " (%u more changes since the last line)",
                 change->left_out);
    bh_log(BH_LOG_INFO, "[%s]: adaptive limit %d -> %d (%s; latency %.1f ms, "
           "baseline %.1f ms)%s", bh_compartment_name(BH_AT(place)), change->from,
           change->to,
           bh_adaptive_reason_name(change->reason), (double)change->recent_ns / 1e6,
           (double)change->baseline_ns / 1e6, more);
}

/* A downstream failure on fd's connection: one drop per connection, and
 * its hold is no latency sample. */
static void adaptive_drop(int fd, int place)
{
    struct bh_adaptive_change change;
    if (!bh_adaptive_on(BH_AT(place)) || (bh_fd_watched(fd) & BH_WATCH_DROPPED))
        return;
    bh_fd_rewatch(fd, BH_WATCH_DROPPED);
    if (bh_adaptive_drop(BH_AT(place), bh_clock_ns(CLOCK_MONOTONIC), &change))
        log_limit_change(place, &change);
}

static void tell_failure(int fd, int place, int err, int io)
{
    uint32_t bits = bh_fd_unwatch(fd, BH_WATCH_MAY_FAIL | BH_WATCH_FIRST_BYTE);
    int64_t probe = take_probe(fd);
    if (!(bits & BH_WATCH_MAY_FAIL) && !probe)
        return;
    const struct bh_compartment *compartment = bh_rules_of(place);
    struct bh_breaker_config config = {
        compartment->breaker_failures, compartment->breaker_open_ms,
        compartment->breaker_open_max_ms,
    };
    log_change(place, bh_breaker_failure(bh_breaker_fields(BH_AT(place)), &config, probe, io),
               err);
}

static void tell_success(int fd, int place, int bytes)
{
    if (!bh_breaker_wants(bh_breaker_fields(BH_AT(place)), bytes))
        return;
    int64_t probe = take_probe(fd);
    log_change(place, bh_breaker_success(bh_breaker_fields(BH_AT(place)), probe), 0);
}

void bh_outcome_connected(int fd)
{
    struct bh_fd_state state;
    if (!bh_fd_unwatch_lookup(fd, BH_WATCH_CONNECTING, &state) || state.compartment < 0)
        return;
    struct bh_joined *joined = bh_joined_of(state.compartment);
    int index = bh_index_of(state.compartment);
    bh_count_connect_time(&joined->ns, index, bh_clock_ns(CLOCK_MONOTONIC) - state.since_ns);
    bh_deadline_established(fd, &bh_shim.config.compartments[joined->local_index[index]]);
    if (state.watch & BH_WATCH_MAY_FAIL) {
        int saved_errno = errno;  /* the breaker may log */
        tell_success(fd, state.compartment, 0);
        errno = saved_errno;
    }
}

void bh_outcome_connect_failed(int fd, int err)
{
    if (!bh_fd_unwatch(fd, BH_WATCH_CONNECTING))
        return;
    int place = bh_fd_lookup(fd).compartment;
    if (place < 0 || !bh_downstream_failure(err))
        return;
    bh_count_connect_failure(BH_AT(place), err == ETIMEDOUT);
    adaptive_drop(fd, place);
    tell_failure(fd, place, err, 0);
}

static void io_timed_out(int fd)
{
    int place = bh_fd_lookup(fd).compartment;
    if (place < 0)
        return;
    bh_count_io_timeout(BH_AT(place));
    adaptive_drop(fd, place);
    tell_failure(fd, place, ETIMEDOUT, 1);
}

/* The first bytes back: the connection works. Without an io deadline
 * nothing later can fail it, and its I/O is watched no more. */
static void first_byte(int fd, uint32_t watch)
{
    uint32_t done = BH_WATCH_FIRST_BYTE;
    if (!(watch & BH_WATCH_IO_DEADLINE))
        done |= BH_WATCH_MAY_FAIL;
    if (!(bh_fd_unwatch(fd, done) & BH_WATCH_FIRST_BYTE))
        return;
    int place = bh_fd_lookup(fd).compartment;
    if (place >= 0)
        tell_success(fd, place, 1);
}

/* The first send that went out: a non-blocking socket's exchanges are
 * the watchdog's to time (a blocking one's receives have SO_RCVTIMEO). */
static uint32_t first_send(int fd, uint32_t watch)
{
    watch &= ~(uint32_t)BH_WATCH_ARM_STALL;
    if (!bh_fd_unwatch(fd, BH_WATCH_ARM_STALL) || bh_deadline_call_blocks(fd, 0))
        return watch;
    bh_fd_rewatch(fd, BH_WATCH_STALL);  /* before the watchdog looks: stall.c */
    if (bh_stall_watch())
        return watch | BH_WATCH_STALL;
    bh_fd_unwatch(fd, BH_WATCH_STALL);
    return watch;
}

uint32_t bh_outcome_before_io(int fd, uint32_t watch, int receive)
{
    if (!receive || !(watch & BH_WATCH_ARM_RECEIVE) ||
        !bh_fd_unwatch(fd, BH_WATCH_ARM_RECEIVE))
        return watch;
    int place = bh_fd_lookup(fd).compartment;
    if (place >= 0 && bh_deadline_arm_receive(fd, bh_rules_of(place))) {
        bh_fd_rewatch(fd, BH_WATCH_RECEIVE_OURS);
        watch |= BH_WATCH_RECEIVE_OURS;
    }
    return watch;
}

/* A send or receive failed with err; returns the errno the program sees. */
static int learn_from_error(int fd, uint32_t watch, int err, int receive, int flags)
{
    if (err == EAGAIN && receive && (watch & BH_WATCH_RECEIVE_OURS) &&
        bh_deadline_call_blocks(fd, flags)) {
        io_timed_out(fd);
        return ETIMEDOUT;
    }
    if (!bh_downstream_failure(err) && err != EPIPE)
        return err;
    if (watch & BH_WATCH_CONNECTING)
        bh_outcome_connect_failed(fd, err == EPIPE ? ECONNRESET : err);
    else if (err == ETIMEDOUT && (watch & BH_WATCH_IO_DEADLINE))
        io_timed_out(fd);
    else if (watch & BH_WATCH_FIRST_BYTE) {
        int place = bh_fd_lookup(fd).compartment;
        if (place >= 0) {  /* reset, or timed out, before the first byte */
            adaptive_drop(fd, place);
            tell_failure(fd, place, err, 1);
        }
    } else {
        int place = bh_fd_lookup(fd).compartment;
        if (place >= 0)  /* reset later, on a connection still watched */
            adaptive_drop(fd, place);
    }
    return err;
}

void bh_outcome_timed_send(int fd, uint32_t number)
{
    int saved_errno = errno;
    int64_t now = bh_clock_ns(CLOCK_MONOTONIC);
    int place = bh_fd_note_send(fd, now);
    if (place >= 0)  /* the exchanges since the last timed one, this one included */
        bh_window_count_many(bh_window_of(BH_AT(place)), BH_WINDOW_TURNAROUNDS,
                             number ? BH_TURNAROUND_EVERY : 1, now);
    errno = saved_errno;
}

void bh_outcome_timed_answer(int fd)
{
    int saved_errno = errno;
    int place = -1;
    int64_t sent = bh_fd_take_send(fd, &place);
    if (sent && place >= 0) {
        int64_t now = bh_clock_ns(CLOCK_MONOTONIC);
        struct bh_adaptive_change change;
        bh_window_turnaround(bh_window_of(BH_AT(place)), now - sent, now);
        if (bh_adaptive_on(BH_AT(place)) &&
            bh_adaptive_sample(BH_AT(place), now - sent, 1, now, &change))
            log_limit_change(place, &change);
    }
    errno = saved_errno;
}

ssize_t bh_outcome_after_io(int fd, uint32_t watch, ssize_t result,
                            int receive, int flags)
{
    int err = errno;
    if (result == 0 && receive && (watch & BH_WATCH_STALLED) &&
        (bh_fd_unwatch(fd, BH_WATCH_STALLED) & BH_WATCH_STALLED)) {
        io_timed_out(fd);  /* the EOF the watchdog made (stall.c) */
        result = -1;
        err = ETIMEDOUT;
    } else if (result < 0) {
        err = learn_from_error(fd, watch, err, receive, flags);
    } else {
        if (!receive && (watch & BH_WATCH_ARM_STALL))
            watch = first_send(fd, watch);  /* before its exchange begins */
        if (watch & BH_WATCH_CONNECTING)
            bh_outcome_connected(fd);
        if (receive && result > 0 && (watch & BH_WATCH_FIRST_BYTE))
            first_byte(fd, watch);
        _Atomic uint32_t *word = bh_fd_watch_word(fd);
        if (result > 0 && (watch & BH_WATCH_EXCHANGES) && word)
            bh_outcome_turnaround(fd, word, atomic_load(word), receive);
    }
    errno = err;
    return result;
}

void bh_outcome_so_error(int fd, int err)
{
    if (err) {
        bh_outcome_connect_failed(fd, err);
        return;
    }
    /* 0 also while the connect is still under way: ask whether it ended. */
    struct sockaddr_storage peer;
    socklen_t length = sizeof peer;
    int saved_errno = errno;
    if (getpeername(fd, (struct sockaddr *)&peer, &length) == 0)
        bh_outcome_connected(fd);
    errno = saved_errno;
}

static void give_up_probe(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)connection;
    (void)ctx;
    if (bh_fd_unwatch(fd, BH_WATCH_PROBE))
        bh_breaker_abandon(bh_breaker_fields(BH_AT(compartment)),
                           bh_fd_lookup(fd).since_ns);
}

void bh_outcome_before_exec(void)
{
    bh_fd_for_each(give_up_probe, NULL);  /* visits nothing in a vfork child */
}

/* An adaptive compartment's hold, past its connect and not failed: a
 * latency sample, unless the compartment measures turnaround (then each
 * answer was one). Out of line, so that a compartment that is not
 * adaptive pays one load and a branch. */
static __attribute__((noinline)) void adaptive_hold(int place, uint32_t watch,
                                                    int64_t since_ns, int64_t held_ns)
{
    struct bh_adaptive_change change;
    if (!(watch & (BH_WATCH_CONNECTING | BH_WATCH_DROPPED | BH_WATCH_TURNAROUND)) &&
        bh_adaptive_sample(BH_AT(place), held_ns, 0, since_ns + held_ns, &change))
        log_limit_change(place, &change);
}

/* The hold's time in the cumulative histogram, in the window with its
 * permit time (permits/window.c) and, adaptive, as a latency sample.
 * Inlined into both callers. */
static inline __attribute__((always_inline)) void
hold_time(struct bh_namespace *ns, int index, const struct bh_fd_ended *ended)
{
    if (!ended->since_ns)
        return;
    int64_t now = bh_clock_ns(CLOCK_MONOTONIC);
    bh_count_hold(ns, index, ended->weight, ended->since_ns, now);
    if (__builtin_expect(bh_adaptive_on(ns, index), 0))
        adaptive_hold(ended->compartment, ended->watch, ended->since_ns, now - ended->since_ns);
}

/* One process's copy of a socket whose record holds the permit
 * (core/copies.c): the last copy gives it back. */
static __attribute__((noinline)) void copy_ended(const struct bh_fd_ended *ended)
{
    struct bh_namespace *ns = bh_ns_of(ended->compartment);
    int index = bh_index_of(ended->compartment);
    if (ended->watch & BH_WATCH_PROBE)
        bh_breaker_abandon(bh_breaker_fields(ns, index), ended->since_ns);
    if (bh_socket_unref(ns, ended->share))
        hold_time(ns, index, ended);
}

/* A turnaround connection's exchanges after its last timed one: no timed
 * send will count them, so its end does. */
static __attribute__((noinline)) void exchanges_ended(const struct bh_fd_ended *ended)
{
    uint32_t begun = ended->watch >> BH_WATCH_EXCHANGE_SHIFT;
    uint32_t uncounted = begun ? (begun - 1) % BH_TURNAROUND_EVERY : 0;
    if (uncounted)
        bh_window_count_many(bh_window_of(BH_AT(ended->compartment)),
                             BH_WINDOW_TURNAROUNDS, uncounted, bh_clock_ns(CLOCK_MONOTONIC));
}

BH_INLINED_ACROSS void bh_connection_ended(const struct bh_fd_ended *ended)
{
    if (__builtin_expect(ended->watch & BH_WATCH_WAITING, 0)) {
        bh_async_ended(ended->since_ns);  /* it holds nothing; its waiter leaves */
        return;
    }
    if (__builtin_expect(ended->watch & BH_WATCH_TURNAROUND, 0))
        exchanges_ended(ended);
    if (__builtin_expect(ended->share != 0, 0)) {
        copy_ended(ended);
        return;
    }
    struct bh_namespace *ns = bh_ns_of(ended->compartment);
    int index = bh_index_of(ended->compartment);
    hold_time(ns, index, ended);
    if (ended->watch & BH_WATCH_PROBE)
        bh_breaker_abandon(bh_breaker_fields(ns, index), ended->since_ns);
    bh_permit_release(ns, index, ended->weight);
}

