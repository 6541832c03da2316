/* The shim's gate: which connects are ours to count, then admission
 * (shim/admission, shared with `bulkhead run`'s seccomp supervisor) and
 * the fd table's record of what the socket holds.
 *
 * The unmatched path must cost next to nothing: it is a family test, the
 * rule index's port bitmap and, at most, a few hash lookups; no syscall.
 * A matched connect on a socket made through our socket() hook costs what
 * admission/admit.h says, a clock read for the connection's start and, with
 * connect_timeout_ms, one setsockopt (core/deadline.c). A socket of
 * unknown kind costs a getsockopt. Under observe = yes, every TCP connect
 * is recorded too (core/observe.h). */
#include "core/gate.h"

#include "admission/admit.h"  /* the decision, inlined here */

#include <errno.h>
#include <time.h>

#include "breaker/breaker.h"
#include "core/async_connect.h"
#include "core/deadline.h"
#include "core/observe.h"
#include "core/outcome.h"
#include "core/shim.h"
#include "core/stall.h"
#include "fdtable/fd_table.h"
#include "libc/libc.h"
#include "libc/signals.h"

/* A socket not made through our socket() hook: ask the kernel. */
static __attribute__((noinline)) int is_inet_stream_socket(int fd)
{
    int type = 0;
    socklen_t length = sizeof type;
    int saved_errno = errno;
    int rc = libc_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length);
    errno = saved_errno;
    return rc == 0 && type == SOCK_STREAM;
}

static int is_inet_stream(int fd, enum bh_fd_kind kind)
{
    if (kind != BH_FD_UNKNOWN)
        return kind == BH_FD_INET_STREAM;
    return is_inet_stream_socket(fd);
}

/* Admitted: the fd holds the permits from now, at their place in the
 * namespace they were taken from, watched as outcome.c says. The probe's
 * since_ns is its holding of the slot (breaker.h). */
static inline __attribute__((always_inline)) int
attach(struct bh_joined *joined, int fd, int local, const struct bh_permit_ask *ask,
       int64_t probe)
{
    const struct bh_compartment *compartment = &bh_shim.config.compartments[local];
    int64_t since_ns = probe;
    uint32_t watch = bh_shim.watch[local];
    if (!probe) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        since_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    } else {
        watch = bh_outcome_watch(compartment, 1);
    }
    int place = bh_place(joined, ask->index);
    if (bh_fd_attach(fd, place, ask->weight, watch, since_ns) < 0) {
        if (probe)
            bh_breaker_abandon(bh_breaker_fields(&joined->ns, ask->index), probe);
        /* another thread counted it */
        bh_permit_release(&joined->ns, ask->index, ask->weight);
        return BH_GATE_PASS;
    }
    bh_deadline_before_connect(fd, compartment);
    return place;
}

/* The shim decides for its own process, in the namespace it counts in
 * now (its admitter, joined.h): what it is in each compartment there was
 * worked out when it joined (shim.c). */
static const struct bh_applicant shim_applicant = {
    0, NULL, NULL, NULL, NULL, NULL, bh_async_own_threads,
    bh_signals_all_restart, bh_shim_uid_settled, bh_async_can_wait, NULL,
};

/* The last try: a refusal is said and on_failure decides. */
static const struct bh_applicant shim_applicant_last_try = {
    0, NULL, NULL, NULL, NULL, NULL, bh_async_own_threads,
    bh_signals_all_restart, NULL, bh_async_can_wait, NULL,
};

enum { UID_MOVED_TRIES = 16 };

/* A uid change refused the take half way (siblings run as the new uid
 * before the namespace follows): asked again, in the namespace the change
 * led to, while changes the shim saw keep refusing it, a few times. */
static __attribute__((noinline, cold)) int
admit_again(struct bh_joined **joined, int fd, const struct bh_rule *rule,
            const struct sockaddr *to, struct bh_admitted *admitted)
{
    int shared = BH_GATE_UID_MOVED;
    for (int i = 0; i < UID_MOVED_TRIES && shared == BH_GATE_UID_MOVED; i++) {
        *joined = bh_joined_now();
        shared = bh_admit(&(*joined)->admitter, &shim_applicant, fd, rule, to, admitted);
    }
    if (shared == BH_GATE_UID_MOVED) {
        *joined = bh_joined_now();
        shared = bh_admit(&(*joined)->admitter, &shim_applicant_last_try, fd, rule, to,
                          admitted);
    }
    return shared;
}

/* Full, and the non-blocking socket may wait: -1 EINPROGRESS while a
 * thread of ours waits for its permits (core/async_connect.c), or, when
 * no wait can start, refused at once as a fail-fast compartment is. The
 * address's length is its family's (the matched path keeps no other). */
static __attribute__((noinline, cold)) int
wait_elsewhere(struct bh_joined *joined, int fd, const struct bh_rule *rule,
               const struct sockaddr *to)
{
    struct asking asking = { &joined->admitter, &shim_applicant, fd, to, rule->compartment,
                             "" };
    socklen_t length = to->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                : sizeof(struct sockaddr_in6);
    if (bh_async_connect(joined, fd, rule, to, length, asking.why, sizeof asking.why) == 0) {
        errno = EINPROGRESS;
        return BH_GATE_REFUSED;
    }
    int shared = joined->shared_index[rule->compartment];
    bh_permit_count_rejected(&joined->ns, shared);
    return refuse(&asking, rule->compartment, shared, asking.why);
}

static inline __attribute__((always_inline)) int
admit(int fd, const struct bh_rule *rule, const struct sockaddr *to)
{
    struct bh_admitted admitted;
    struct bh_joined *joined = bh_joined_now();
    int shared = bh_admit_here(&joined->admitter, &shim_applicant, fd, rule, to, &admitted);
    if (shared < 0) {
        if (shared == BH_GATE_UID_MOVED)
            shared = admit_again(&joined, fd, rule, to, &admitted);
        if (shared == BH_GATE_WAIT)
            return wait_elsewhere(joined, fd, rule, to);
        if (shared < 0)
            return shared;
    }
    return attach(joined, fd, rule->compartment, &admitted.ask, admitted.probe);
}

/* connect(AF_UNSPEC) dissolves a connection: if it was counted, its
 * permit goes back once the call succeeds (see bh_gate_leave). */
static __attribute__((noinline)) int unspec(int fd)
{
    return bh_fd_lookup(fd).compartment >= 0 ? BH_GATE_DISCONNECT : BH_GATE_PASS;
}

/* A destination a rule matches. Out of line: the unmatched connect pays
 * for no frame that keeps what this needs. */
static __attribute__((noinline)) int enter_matched(int fd, const struct sockaddr *to, int rule)
{
    /* Already counted: connect() again to poll an async connect. */
    uint32_t entry = bh_fd_entry(fd);
    if (bh_fd_entry_connected(entry)) {
        uint32_t watched = bh_fd_watched(fd);
        if (!(watched & BH_WATCH_WAITING))
            return watched & BH_WATCH_CONNECTING ? BH_GATE_AGAIN : BH_GATE_PASS;
        if (bh_async_again(fd))
            return BH_GATE_REFUSED;
        entry = bh_fd_entry(fd);
    }
    if (!is_inet_stream(fd, bh_fd_entry_kind(entry)))
        return BH_GATE_PASS;
    return admit(fd, &bh_shim.config.rules[rule], to);
}

/* observe = yes: every TCP connect is recorded, matched or not, before
 * the matched ones are admitted (core/observe.h). Reached from the gate's
 * slow path only (bh_shim.gate). A matched connect that waits
 * in the background counts as under way. */
static __attribute__((noinline)) int observed(int fd, const struct sockaddr *to, int rule)
{
    uint32_t entry = bh_fd_entry(fd);
    if (bh_fd_entry_connected(entry) || !is_inet_stream(fd, bh_fd_entry_kind(entry)))
        return rule < 0 ? BH_GATE_PASS : enter_matched(fd, to, rule);
    bh_observe_connect(fd, to);
    if (rule < 0)
        return BH_GATE_OBSERVED;
    int entered = enter_matched(fd, to, rule);
    if (entered == BH_GATE_REFUSED && errno == EINPROGRESS)
        bh_observe_left(fd, 1);
    else if (entered == BH_GATE_REFUSED)
        bh_observe_refused(fd);
    return entered;
}

/* Whether to is an IPv4 or IPv6 destination, the only ones counted. */
static inline int inet_destination(const struct sockaddr *to, socklen_t length)
{
    return to && length >= sizeof(sa_family_t) &&
           (to->sa_family == AF_INET || to->sa_family == AF_INET6);
}

/* Any other: connect(AF_UNSPEC) may dissolve a counted connection. */
static int other_destination(int fd, const struct sockaddr *to, socklen_t length)
{
    return to && length >= sizeof(sa_family_t) && to->sa_family == AF_UNSPEC
               ? unspec(fd) : BH_GATE_PASS;
}

/* Not plain (bh_shim.gate): the shim still starting (started here), off,
 * or observing. */
int bh_gate_enter_not_plainly(int fd, const struct sockaddr *to, socklen_t length, int gate)
{
    if (!inet_destination(to, length))
        return other_destination(fd, to, length);
    if (gate == BH_SHIM_GATE_NONE &&
        (!bh_shim_active() ||
         (gate = atomic_load_explicit(&bh_shim.gate, memory_order_acquire)) ==
             BH_SHIM_GATE_NONE))
        return BH_GATE_PASS;
    int rule = bh_rule_index_match(bh_shim.rules, to, length);
    if (gate == BH_SHIM_GATE_OBSERVING)
        return observed(fd, to, rule);
    return rule < 0 ? BH_GATE_PASS : enter_matched(fd, to, rule);
}

int bh_gate_enter_plainly(int fd, const struct sockaddr *to, socklen_t length)
{
    if (!inet_destination(to, length))
        return other_destination(fd, to, length);
    int rule = bh_rule_index_match(bh_shim.rules, to, length);
    if (rule < 0)
        return BH_GATE_PASS;
    return enter_matched(fd, to, rule);
}

int bh_gate_fastopen_declined(int fd, const struct sockaddr *to, socklen_t length)
{
    if (!bh_shim.supervised || !to || length < sizeof(sa_family_t) ||
        (to->sa_family != AF_INET && to->sa_family != AF_INET6) || !bh_shim_active() ||
        bh_rule_index_match(bh_shim.rules, to, length) < 0 ||
        !is_inet_stream(fd, bh_fd_lookup(fd).kind))
        return 0;
    errno = EOPNOTSUPP;
    return 1;
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

/* Out of line: the connect that succeeded pays no frame for these. */
static __attribute__((noinline)) void leave_otherwise(int fd, int entered, int call_failed)
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

/* observe = yes: as below, and the record told how the call went. */
static __attribute__((noinline)) void leave_observed(int fd, int entered, int call_failed)
{
    if (entered >= 0 && !call_failed)
        bh_outcome_connected(fd);
    else if (entered != BH_GATE_OBSERVED)
        leave_otherwise(fd, entered, call_failed);
    bh_observe_left(fd, call_failed);  /* keeps errno */
}

void bh_gate_leave(int fd, int entered, int call_failed)
{
    if (__builtin_expect(bh_observing, 0))
        leave_observed(fd, entered, call_failed);
    else if (__builtin_expect(entered >= 0 && !call_failed, 1))
        bh_outcome_connected(fd);  /* keeps errno */
    else
        leave_otherwise(fd, entered, call_failed);
}
