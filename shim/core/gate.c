/* Admission of outgoing connections.
 *
 * The unmatched path must cost next to nothing: it is a family test, the
 * rule index's port bitmap and, at most, a few hash lookups; no syscall.
 * A matched connect on a socket made through our socket() hook costs one
 * semop, one load for the breaker (shim/breaker: a clock read only when it
 * is not closed) and a clock read for the connection's start; with
 * connect_timeout_ms, one setsockopt (core/deadline.c). Only the rare
 * paths ask the kernel anything more: a socket of unknown kind
 * (getsockopt), a full compartment (fcntl to see whether the socket may
 * block, then GETNCNT and semtimedop). A fleet compartment also reads the
 * clock to see whether the agent still renews this host's share.
 *
 * Policy: what this program is in a compartment (a bypass, a
 * reserve's member) was worked out at start-up (shim.c), so a bypass costs
 * a load and a counter; per_process is this process's own count, an
 * atomic add before anything shared is touched; a rule's weight is the
 * number of permits the one semop takes. */
#include "core/gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "breaker/breaker.h"
#include "core/deadline.h"
#include "core/log.h"
#include "core/outcome.h"
#include "core/shim.h"
#include "core/stall.h"
#include "fdtable/fd_table.h"
#include "libc/libc.h"
#include "libc/proc_stat.h"

static int is_inet_stream(int fd, enum bh_fd_kind kind)
{
    if (kind != BH_FD_UNKNOWN)
        return kind == BH_FD_INET_STREAM;
    int type = 0;
    socklen_t length = sizeof type;
    int saved_errno = errno;
    int rc = libc_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length);
    errno = saved_errno;
    return rc == 0 && type == SOCK_STREAM;
}

static int may_block(int fd)
{
    int saved_errno = errno;
    int flags = libc_fcntl(fd, F_GETFL, NULL);
    errno = saved_errno;
    return flags >= 0 && !(flags & O_NONBLOCK);
}

/* The socket's own send timeout (SO_SNDTIMEO, which bounds a blocking
 * connect() too) in ms, rounded up; 0 when it has none. */
static int own_timeout_ms(int fd)
{
    struct timeval timeout = { 0, 0 };
    socklen_t length = sizeof timeout;
    int saved_errno = errno;
    int rc = libc_getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, &length);
    errno = saved_errno;
    if (rc < 0 || (timeout.tv_sec == 0 && timeout.tv_usec == 0))
        return 0;
    if (timeout.tv_sec >= INT_MAX / 1000)
        return INT_MAX;
    return (int)(timeout.tv_sec * 1000 + (timeout.tv_usec + 999) / 1000);
}

static void describe(const struct sockaddr *to, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (to->sa_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)to;
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
        port = ntohs(v4->sin_port);
        snprintf(out, outlen, "%s:%u", host, port);
    } else {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)to;
        inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
        port = ntohs(v6->sin6_port);
        snprintf(out, outlen, "[%s]:%u", host, port);
    }
}

static int refuse(int local, int shared, const struct sockaddr *to,
                  const char *why)
{
    const struct bh_compartment *compartment = &bh_shim.config.compartments[local];
    char destination[INET6_ADDRSTRLEN + 16];
    describe(to, destination, sizeof destination);
    bh_log_refusal(shared, compartment->name, destination, why);
    errno = compartment->refusal_errno;
    return BH_GATE_REFUSED;
}

/* The shortest of the bounds on a wait, and what set it, in words. */
struct wait_bound {
    int ms;
    char because[112];  /* empty: wait_ms itself */
};

static void bound_by(struct wait_bound *bound, int ms, const char *because)
{
    if (ms >= bound->ms)
        return;
    bound->ms = ms;
    snprintf(bound->because, sizeof bound->because, "%s", because);
}

/* A non-blocking connect that waits stalls the whole program (its event
 * loop, every other connection): a few ms at most, then refused. */
static void bound_nonblocking(struct wait_bound *bound,
                              const struct bh_compartment *compartment)
{
    char because[112];
    if (!compartment->wait_nonblocking) {
        bound_by(bound, 0, "non-blocking socket and wait_nonblocking = no");
        return;
    }
    snprintf(because, sizeof because, "a non-blocking connect waits at most "
             "nonblocking_wait_ms = %d, not to stall its program",
             compartment->nonblocking_wait_ms);
    bound_by(bound, compartment->nonblocking_wait_ms, because);
}

/* The program's threads (/proc/self/stat field 20; 0 if unknown), less
 * the watchdog's (stall.c), read only on the full path, for a process
 * that already holds permits. */
static int thread_count(void)
{
    return (int)bh_proc_stat_field(0, 20) - bh_stall_threads();
}

/* A single-threaded process holding some of the compartment's permits and
 * waiting for more can deadlock with others doing the same (each holds
 * what the others wait for; none of its own can come back while it
 * waits): hold_wait_ms bounds that wait. A thread of a thread pool waits
 * wait_ms as ever: its siblings hold their own connections and give them
 * back, and bounding them would end waiting in every threaded server. */
static void bound_hold_wait(struct wait_bound *bound, const struct bh_compartment *compartment,
                            int held)
{
    char because[112];
    if (held <= 0 || compartment->hold_wait_ms >= bound->ms || thread_count() != 1)
        return;
    snprintf(because, sizeof because, "this process already holds %d of its "
             "permits; hold_wait_ms = %d", held, compartment->hold_wait_ms);
    bound_by(bound, compartment->hold_wait_ms, because);
}

/* The compartment is full: how long this caller may wait for a permit, and
 * when it may not (0), why, in words for the refusal line. */
static int wait_allowed_ms(int fd, const struct bh_compartment *compartment,
                           int shared, char *why, size_t whylen)
{
    /* A fleet compartment at 0 has no share yet: its waiters are how the
     * agent learns this host wants one. */
    if (atomic_load(&bh_shim.ns.state->compartments[shared].limit) == 0 &&
        compartment->fleet_limit == 0) {
        snprintf(why, whylen, "at once: limit 0");
        return 0;
    }
    struct wait_bound bound = { compartment->wait_ms, "" };
    if (bound.ms == 0)
        snprintf(bound.because, sizeof bound.because, "wait_ms = 0");
    int blocking = bound.ms > 0 ? may_block(fd) : 1;
    if (!blocking)
        bound_nonblocking(&bound, compartment);
    bound_hold_wait(&bound, compartment, bh_permit_held(shared));
    int own_ms = blocking && bound.ms > 0 ? own_timeout_ms(fd) : 0;
    if (own_ms > 0)
        bound_by(&bound, own_ms, "the socket's SO_SNDTIMEO");
    if (bound.ms == 0)
        snprintf(why, whylen, "at once: full; %s", bound.because);
    else if (bound.because[0])
        snprintf(why, whylen, "after waiting %d ms (%s)", bound.ms, bound.because);
    else
        snprintf(why, whylen, "after waiting %d ms", bound.ms);
    return bound.ms;
}

static void note_bypass_once(void)
{
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        bh_log(BH_LOG_ERROR, "namespace \"%s\" was removed (bulkhead reset); "
               "connections pass unlimited", bh_shim.config.namespace_name);
}

/* The kernel refused a semop (errno): said once per process, with the
 * cause in words; on_failure decides the connection (see admit). */
static void note_failure_once(int error)
{
    static _Atomic int said;
    if (atomic_exchange(&said, 1))
        return;
    const char *then = bh_shim.config.on_failure_open
        ? "connections pass unlimited (on_failure = open)"
        : "refusing what the rules match (on_failure = closed)";
    if (error == EACCES)
        bh_log(BH_LOG_ERROR, "namespace \"%s\" of uid %u: permission denied: %s[%d] "
               "runs as uid %u now, changed without setuid() or its kin (a raw "
               "syscall?); %s", bh_shim.config.namespace_name, (unsigned)bh_shim.ns.uid,
               program_invocation_short_name, (int)getpid(), (unsigned)geteuid(), then);
    else
        bh_log(BH_LOG_ERROR, "namespace \"%s\": semop: %s; %s",
               bh_shim.config.namespace_name, strerror(error), then);
}

static void note_taken_over(const struct bh_compartment *compartment,
                            const struct bh_probe_taken *taken)
{
    if (taken->replaced_gone)
        bh_log(BH_LOG_WARN, "[%s]: the probe's process (pid %d) is gone: this "
               "connection probes instead", compartment->name, taken->replaced_pid);
    else
        bh_log(BH_LOG_WARN, "[%s]: the probe (pid %d) showed nothing for %lld ms: "
               "counted as failed; this connection probes instead",
               compartment->name, taken->replaced_pid, (long long)taken->replaced_ms);
}

/* The breaker's word on this connect: BH_BREAKER_PASS or PROBE (then the
 * slot's holding in taken), or a refusal, with why in words. */
static enum bh_breaker_admission ask_breaker(const struct bh_compartment *compartment,
                                             int shared, struct bh_probe_taken *taken,
                                             char *why, size_t whylen)
{
    enum bh_breaker_admission admission = bh_breaker_admit(&bh_shim.ns, shared,
                                                           compartment, taken);
    if (admission == BH_BREAKER_PROBE && taken->replaced_pid) {
        note_taken_over(compartment, taken);
    } else if (admission == BH_BREAKER_REFUSE_PROBING) {
        snprintf(why, whylen, "at once: breaker half-open; another connection "
                 "is the probe");
    } else if (admission == BH_BREAKER_REFUSE_OPEN) {
        struct bh_breaker_view view;
        bh_breaker_read(&bh_shim.ns, shared, &view);
        if (view.forced)
            snprintf(why, whylen, "at once: breaker open (forced by bulkhead set)");
        else
            snprintf(why, whylen, "at once: breaker open (%lld ms left)",
                     (long long)view.open_left_ms);
    }
    return admission;
}

/* Full, or never enough: a weight above all the permits this caller may
 * ever take (the common pool, and its own reserve) can wait for nothing.
 * Not asked for a weight of 1, nor at limit 0 (both have their own
 * lines), nor for a fleet compartment, whose share grows when callers
 * wait for it. */
static int never_enough(const struct bh_compartment *compartment,
                        const struct bh_permit_ask *ask, char *why, size_t whylen)
{
    if (ask->weight == 1 || compartment->fleet_limit > 0 ||
        atomic_load(&bh_shim.ns.state->compartments[ask->index].limit) == 0)
        return 0;
    int most = bh_permit_most(&bh_shim.ns, ask);
    if (ask->weight <= most)
        return 0;
    snprintf(why, whylen, "at once: weight %d exceeds the %d permit%s of the "
             "common pool%s", ask->weight, most, most == 1 ? "" : "s",
             ask->reserve >= 0 ? " and its reserve" : "");
    return 1;
}

/* Permits, now or after a wait; BH_ACQUIRED or why not. */
static enum bh_acquire_result take_permit(int fd, const struct bh_compartment *compartment,
                                          const struct bh_permit_ask *ask,
                                          char *why, size_t whylen)
{
    enum bh_acquire_result result = bh_permit_try(&bh_shim.ns, ask);
    /* Full: a shared socket every holder of which died holds permits
     * until someone asks the kernel (socket_records.c). */
    if (result == BH_REJECTED && bh_socket_reap(&bh_shim.ns, ask->index) > 0)
        result = bh_permit_try(&bh_shim.ns, ask);
    if (result != BH_REJECTED)
        return result;
    int wait_ms = 0;
    if (!never_enough(compartment, ask, why, whylen))
        wait_ms = wait_allowed_ms(fd, compartment, ask->index, why, whylen);
    if (wait_ms == 0) {
        bh_permit_count_rejected(&bh_shim.ns, ask->index);
        return BH_REJECTED;
    }
    int holding = bh_permit_held(ask->index) > 0;
    if (holding)  /* hold and wait: stat names it */
        bh_permit_note_waiting(ask->index, +1);
    result = bh_permit_wait(&bh_shim.ns, ask, wait_ms, compartment->max_waiters);
    if (holding)
        bh_permit_note_waiting(ask->index, -1);
    if (result == BH_REJECTED)
        snprintf(why, whylen, "at once: full; max_waiters = %d already waiting",
                 compartment->max_waiters);
    return result;
}

/* Admitted: the fd holds the permits from now, watched as outcome.c says.
 * The probe's since_ns is its holding of the slot (breaker.h). */
static int attach(int fd, const struct bh_compartment *compartment,
                  const struct bh_permit_ask *ask, int64_t probe)
{
    int64_t since_ns = probe;
    if (!probe) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        since_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    }
    if (bh_fd_attach(fd, ask->index, ask->weight, bh_outcome_watch(compartment, probe != 0),
                     since_ns) < 0) {
        if (probe)
            bh_breaker_abandon(&bh_shim.ns, ask->index, probe);
        /* another thread counted it */
        bh_permit_release(&bh_shim.ns, ask->index, ask->weight);
        return BH_GATE_PASS;
    }
    bh_deadline_before_connect(fd, compartment);
    return ask->index;
}

/* A fleet compartment's share lapses when the agent stops renewing it
 * (dead, or stuck): Redis gives it to the other hosts after the lease, so
 * this host must stop using it then too. One clock read per connect, for
 * fleet compartments only. */
static void check_fleet_lease(const struct bh_compartment *compartment, int shared)
{
    if (compartment->fleet_limit == 0)
        return;
    int64_t until = atomic_load_explicit(
        &bh_shim.ns.state->compartments[shared].fleet.lease_until_ns,
        memory_order_relaxed);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (until == 0 || (int64_t)now.tv_sec * 1000000000 + now.tv_nsec <= until)
        return;
    if (bh_fleet_lapse(&bh_shim.ns, shared, until))
        bh_log(BH_LOG_WARN, "[%s]: this host's fleet share lapsed (bulkhead "
               "agent stopped renewing it): limit 0 until it grants one again",
               compartment->name);
}

/* The per_process cap: refused at once, since waiting for its own
 * connections could deadlock a single-threaded program. */
static int refuse_per_process(int local, const struct bh_permit_ask *ask,
                              const struct sockaddr *to)
{
    char why[96];
    snprintf(why, sizeof why, "at once: this process would hold more than "
             "per_process = %d", bh_shim.config.compartments[local].per_process);
    bh_permit_count_per_process(&bh_shim.ns, ask->index);
    return refuse(local, ask->index, to, why);
}

static int admit(int fd, const struct bh_rule *rule, const struct sockaddr *to)
{
    int local = rule->compartment;
    const struct bh_compartment *compartment = &bh_shim.config.compartments[local];
    int shared = bh_shim.shared_index[local];
    if (shared == BH_SHARED_UNREACHABLE)
        return refuse(local, local, to, "at once: the namespace is out of reach "
                      "(on_failure = closed; see the start-up line)");
    if (shared < 0)
        return BH_GATE_PASS;
    if (bh_shim.membership[local].bypass) {
        bh_permit_count_bypassed(&bh_shim.ns, shared);
        return BH_GATE_PASS;
    }
    struct bh_permit_ask ask = { shared, bh_shim.membership[local].reserve, rule->weight };
    if (bh_permit_claim(&ask, compartment->per_process) < 0)
        return refuse_per_process(local, &ask, to);
    check_fleet_lease(compartment, shared);
    char why[192];
    struct bh_probe_taken taken;  /* filled in for PROBE only */
    enum bh_breaker_admission breaker = ask_breaker(compartment, shared, &taken,
                                                    why, sizeof why);
    enum bh_acquire_result result = BH_REJECTED;
    if (breaker == BH_BREAKER_PASS || breaker == BH_BREAKER_PROBE)
        result = take_permit(fd, compartment, &ask, why, sizeof why);
    int64_t probe = breaker == BH_BREAKER_PROBE ? taken.since_ns : 0;
    if (result != BH_ACQUIRED) {
        bh_permit_unclaim(&ask);
        if (probe)
            bh_breaker_abandon(&bh_shim.ns, shared, probe);
    }
    if (result == BH_BYPASS) {
        note_bypass_once();
        return BH_GATE_PASS;
    }
    if (result == BH_FAILED) {
        note_failure_once(errno);
        if (bh_shim.config.on_failure_open)
            return BH_GATE_PASS;
        snprintf(why, sizeof why, "at once: the namespace is out of reach "
                 "(on_failure = closed)");
    }
    if (result == BH_INTERRUPTED) {
        errno = EINTR;  /* nothing taken; the program decides whether to retry */
        return BH_GATE_REFUSED;
    }
    if (result != BH_ACQUIRED)
        return refuse(local, shared, to, why);
    return attach(fd, compartment, &ask, probe);
}

/* connect(AF_UNSPEC) dissolves a connection: if it was counted, its
 * permit goes back once the call succeeds (see bh_gate_leave). */
static int unspec(int fd)
{
    return bh_fd_lookup(fd).compartment >= 0 ? BH_GATE_DISCONNECT : BH_GATE_PASS;
}

int bh_gate_enter(int fd, const struct sockaddr *to, socklen_t length)
{
    if (!to || length < sizeof(sa_family_t) ||
        (to->sa_family != AF_INET && to->sa_family != AF_INET6))
        return to && length >= sizeof(sa_family_t) && to->sa_family == AF_UNSPEC
                   ? unspec(fd) : BH_GATE_PASS;
    if (!bh_shim_active())
        return BH_GATE_PASS;
    int rule = bh_rule_index_match(bh_shim.rules, to, length);
    if (rule < 0)
        return BH_GATE_PASS;
    /* Already counted: connect() again to poll an async connect. */
    struct bh_fd_state state = bh_fd_lookup(fd);
    if (state.compartment >= 0)
        return bh_fd_watched(fd) & BH_WATCH_CONNECTING ? BH_GATE_AGAIN : BH_GATE_PASS;
    if (!is_inet_stream(fd, state.kind))
        return BH_GATE_PASS;
    return admit(fd, &bh_shim.config.rules[rule], to);
}

/* A connect() again on a socket still connecting: EALREADY and
 * EINPROGRESS mean still under way, EISCONN that it got there. */
static void learn_again(int fd, int call_failed)
{
    if (!call_failed || errno == EISCONN)
        bh_outcome_connected(fd);
    else if (errno != EALREADY && errno != EINPROGRESS && errno != EINTR)
        bh_outcome_connect_failed(fd, errno);
}

void bh_gate_leave(int fd, int entered, int call_failed)
{
    int saved_errno = errno;
    if (entered == BH_GATE_DISCONNECT) {
        if (!call_failed)  /* the connection is gone: so is its permit */
            bh_give_back(bh_fd_new(fd, BH_FD_INET_STREAM));
    } else if (entered == BH_GATE_AGAIN) {
        learn_again(fd, call_failed);
    } else if (!call_failed) {
        bh_outcome_connected(fd);
    } else if (errno != EINPROGRESS && errno != EINTR) {
        bh_outcome_connect_failed(fd, errno);
        bh_give_back(bh_fd_new(fd, BH_FD_INET_STREAM)); /* drops the connection */
    }
    errno = saved_errno;
}
