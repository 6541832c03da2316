/* The admission decision itself (see admission.h), as static functions
 * that each caller compiles into itself: the shim's gate.c inlines it with
 * its own constant admitter and applicant, so that its connect path costs
 * what it did when the decision lived there; admission.c wraps it as
 * bh_admit() for the command. One source; include it from one .c file of
 * each program.
 *
 * The matched path costs one semop, one load for the breaker (shim/
 * breaker: a clock read only when it is not closed). Only the rare paths
 * ask the kernel anything more: a full compartment (fcntl to see whether
 * the socket may block, then GETNCNT and semtimedop). A fleet compartment
 * also reads the clock to see whether the agent still renews this host's
 * share.
 *
 * Policy: what the applicant is in a compartment (a bypass, a reserve's
 * member) is worked out by the caller (the shim at start-up), so a bypass
 * costs a load and a counter; per_process is the applicant's own count,
 * an atomic add before anything shared is touched; a rule's weight is the
 * number of permits the one semop takes.
 *
 * Nothing here is process state of its own but the "said once" flags;
 * what is shared lives in shim/permits and shim/breaker. */
#ifndef BH_ADMIT_H
#define BH_ADMIT_H

#include "admission/admission.h"

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
#include "core/log.h"
#include "libc/libc.h"
#include "libc/proc_stat.h"
#include "policy/who.h"

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

/* One admission's context, so that the helpers below take one pointer. */
struct asking {
    const struct bh_admitter *admitter;
    const struct bh_applicant *applicant;
    int fd;
    const struct sockaddr *to;
};

static struct bh_namespace *ns_of(const struct asking *asking)
{
    return asking->admitter->ns;
}

static int refuse(const struct asking *asking, int local, int shared, const char *why)
{
    const struct bh_compartment *compartment = &asking->admitter->config->compartments[local];
    const struct bh_applicant *applicant = asking->applicant;
    char destination[INET6_ADDRSTRLEN + 16];
    describe(asking->to, destination, sizeof destination);
    bh_log_refusal(shared, compartment->name, destination, why,
                   applicant->name ? applicant->name : program_invocation_short_name,
                   applicant->pid ? (int)applicant->pid : (int)getpid());
    errno = compartment->refusal_errno;
    return BH_GATE_REFUSED;
}

/* Permits the applicant holds already, besides those it asks for now
 * (its claimed count includes them). */
static int held_by_applicant(const struct asking *asking, const struct bh_permit_ask *ask)
{
    _Atomic uint32_t *claimed = asking->applicant->claimed;
    if (!claimed)
        return bh_permit_held(ask->index);
    return (int)atomic_load(&claimed[ask->index]) - ask->weight;
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

/* A single-threaded process holding some of the compartment's permits and
 * waiting for more can deadlock with others doing the same (each holds
 * what the others wait for; none of its own can come back while it
 * waits): hold_wait_ms bounds that wait. A thread of a thread pool waits
 * wait_ms as ever: its siblings hold their own connections and give them
 * back, and bounding them would end waiting in every threaded server.
 * Threads: /proc/PID/stat field 20, read only on this rare path. */
static void bound_hold_wait(struct wait_bound *bound, const struct bh_compartment *compartment,
                            int held, pid_t pid)
{
    char because[112];
    if (held <= 0 || compartment->hold_wait_ms >= bound->ms ||
        bh_proc_stat_field(pid, 20) != 1)
        return;
    snprintf(because, sizeof because, "this process already holds %d of its "
             "permits; hold_wait_ms = %d", held, compartment->hold_wait_ms);
    bound_by(bound, compartment->hold_wait_ms, because);
}

/* The compartment is full: how long this caller may wait for a permit, and
 * when it may not (0), why, in words for the refusal line. */
static int wait_allowed_ms(const struct asking *asking,
                           const struct bh_compartment *compartment,
                           const struct bh_permit_ask *ask, char *why, size_t whylen)
{
    int shared = ask->index;
    /* A fleet compartment at 0 has no share yet: its waiters are how the
     * agent learns this host wants one. */
    if (bh_compartment_limit(ns_of(asking), shared) == 0 &&
        compartment->fleet_limit == 0) {
        snprintf(why, whylen, "at once: limit 0");
        return 0;
    }
    struct wait_bound bound = { compartment->wait_ms, "" };
    if (bound.ms == 0)
        snprintf(bound.because, sizeof bound.because, "wait_ms = 0");
    int blocking = bound.ms > 0 ? may_block(asking->fd) : 1;
    if (!blocking)
        bound_nonblocking(&bound, compartment);
    bound_hold_wait(&bound, compartment, held_by_applicant(asking, ask),
                    asking->applicant->pid);
    int own_ms = blocking && bound.ms > 0 ? own_timeout_ms(asking->fd) : 0;
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

static void note_bypass_once(const struct bh_config *config)
{
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        bh_log(BH_LOG_ERROR, "namespace \"%s\" was removed (bulkhead reset); "
               "connections pass unlimited", config->namespace_name);
}

/* The kernel refused a semop (errno): said once per process, with the
 * cause in words; on_failure decides the connection (see bh_admit). */
static void note_failure_once(const struct asking *asking, int error)
{
    static _Atomic int said;
    if (atomic_exchange(&said, 1))
        return;
    const struct bh_config *config = asking->admitter->config;
    const char *then = config->on_failure_open
        ? "connections pass unlimited (on_failure = open)"
        : "refusing what the rules match (on_failure = closed)";
    if (error == EACCES)
        bh_log(BH_LOG_ERROR, "namespace \"%s\" of uid %u: permission denied: %s[%d] "
               "runs as uid %u now, changed without setuid() or its kin (a raw "
               "syscall?); %s", config->namespace_name, (unsigned)ns_of(asking)->uid,
               program_invocation_short_name, (int)getpid(), (unsigned)geteuid(), then);
    else
        bh_log(BH_LOG_ERROR, "namespace \"%s\": semop: %s; %s",
               config->namespace_name, strerror(error), then);
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
static enum bh_breaker_admission ask_breaker(struct bh_namespace *ns,
                                             const struct bh_compartment *compartment,
                                             int shared, struct bh_probe_taken *taken,
                                             char *why, size_t whylen)
{
    enum bh_breaker_admission admission = bh_breaker_admit(ns, shared, compartment, taken);
    if (admission == BH_BREAKER_PROBE && taken->replaced_pid) {
        note_taken_over(compartment, taken);
    } else if (admission == BH_BREAKER_REFUSE_PROBING) {
        snprintf(why, whylen, "at once: breaker half-open; another connection "
                 "is the probe");
    } else if (admission == BH_BREAKER_REFUSE_OPEN) {
        struct bh_breaker_view view;
        bh_breaker_read(ns, shared, &view);
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
static int never_enough(struct bh_namespace *ns, const struct bh_compartment *compartment,
                        const struct bh_permit_ask *ask, char *why, size_t whylen)
{
    if (ask->weight == 1 || compartment->fleet_limit > 0 ||
        bh_compartment_limit(ns, ask->index) == 0)
        return 0;
    int most = bh_permit_most(ns, ask);
    if (ask->weight <= most)
        return 0;
    snprintf(why, whylen, "at once: weight %d exceeds the %d permit%s of the "
             "common pool%s", ask->weight, most, most == 1 ? "" : "s",
             ask->reserve >= 0 ? " and its reserve" : "");
    return 1;
}

static int reap(const struct asking *asking, int index)
{
    const struct bh_applicant *applicant = asking->applicant;
    int reaped = bh_socket_reap(ns_of(asking), index);
    if (applicant->reap)
        reaped += applicant->reap(applicant->reap_ctx);
    return reaped;
}

/* Permits, now or after a wait; BH_ACQUIRED or why not. */
/* Full when first asked: the rare path, out of line, so that the
 * common one builds none of what it needs. Permits after a reap or a
 * wait; BH_ACQUIRED or why not. */
static __attribute__((noinline, cold)) enum bh_acquire_result
when_full(const struct asking *asking, const struct bh_compartment *compartment,
          const struct bh_permit_ask *ask, char *why, size_t whylen)
{
    struct bh_namespace *ns = ns_of(asking);
    /* A shared socket every holder of which died holds permits until
     * someone asks the kernel (socket_records.c), and so may the caller's
     * own counted sockets. */
    enum bh_acquire_result result = BH_REJECTED;
    if (reap(asking, ask->index) > 0)
        result = bh_permit_try(ns, ask);
    if (result != BH_REJECTED)
        return result;
    int wait_ms = 0;
    if (!never_enough(ns, compartment, ask, why, whylen))
        wait_ms = wait_allowed_ms(asking, compartment, ask, why, whylen);
    if (wait_ms == 0) {
        bh_permit_count_rejected(ns, ask->index);
        return BH_REJECTED;
    }
    int holding = bh_permit_held(ask->index) > 0;
    if (holding)  /* hold and wait: stat names it */
        bh_permit_note_waiting(ask->index, +1);
    result = bh_permit_wait(ns, ask, wait_ms, compartment->max_waiters);
    if (holding)
        bh_permit_note_waiting(ask->index, -1);
    if (result == BH_REJECTED)
        snprintf(why, whylen, "at once: full; max_waiters = %d already waiting",
                 compartment->max_waiters);
    return result;
}

/* A fleet compartment's share lapses when the agent stops renewing it
 * (dead, or stuck): Redis gives it to the other hosts after the lease, so
 * this host must stop using it then too. One clock read per connect, for
 * fleet compartments only. */
static void check_fleet_lease(struct bh_namespace *ns,
                              const struct bh_compartment *compartment, int shared)
{
    if (compartment->fleet_limit == 0)
        return;
    if (bh_fleet_lapse_if_over(ns, shared))
        bh_log(BH_LOG_WARN, "[%s]: this host's fleet share lapsed (bulkhead "
               "agent stopped renewing it): limit 0 until it grants one again",
               compartment->name);
}

/* Counts the ask against the applicant's per_process cap (0: none). */
static int claim(const struct bh_applicant *applicant, const struct bh_permit_ask *ask,
                 int per_process)
{
    if (!applicant->claimed)
        return bh_permit_claim(ask, per_process);
    _Atomic uint32_t *claimed = &applicant->claimed[ask->index];
    uint32_t before = atomic_fetch_add(claimed, (uint32_t)ask->weight);
    if (per_process > 0 && before + (uint32_t)ask->weight > (uint32_t)per_process) {
        atomic_fetch_sub(claimed, (uint32_t)ask->weight);
        return -1;
    }
    return 0;
}

static void unclaim(const struct bh_applicant *applicant, const struct bh_permit_ask *ask)
{
    if (applicant->claimed)
        atomic_fetch_sub(&applicant->claimed[ask->index], (uint32_t)ask->weight);
    else
        bh_permit_unclaim(ask);
}

/* The per_process cap: refused at once, since waiting for its own
 * connections could deadlock a single-threaded program. */
static int refuse_per_process(const struct asking *asking, int local,
                              const struct bh_permit_ask *ask)
{
    char why[96];
    snprintf(why, sizeof why, "at once: this process would hold more than "
             "per_process = %d", asking->admitter->config->compartments[local].per_process);
    bh_permit_count_per_process(ns_of(asking), ask->index);
    return refuse(asking, local, ask->index, why);
}

/* Not acquired: what the result means for the connect. */
static int not_acquired(const struct asking *asking, int local, int shared,
                        enum bh_acquire_result result, char *why, size_t whylen)
{
    const struct bh_config *config = asking->admitter->config;
    if (result == BH_BYPASS) {
        note_bypass_once(config);
        return BH_GATE_PASS;
    }
    if (result == BH_FAILED) {
        note_failure_once(asking, errno);
        if (config->on_failure_open)
            return BH_GATE_PASS;
        snprintf(why, whylen, "at once: the namespace is out of reach "
                 "(on_failure = closed)");
    }
    if (result == BH_INTERRUPTED) {
        errno = EINTR;  /* nothing taken; the program decides whether to retry */
        return BH_GATE_REFUSED;
    }
    return refuse(asking, local, shared, why);
}

/* Refused, or not ours after all: the rest of the decision, out of line. */
static __attribute__((noinline, cold)) int
not_admitted(const struct bh_admitter *admitter, const struct bh_applicant *applicant,
             int fd, const struct sockaddr *to, int local, const struct bh_permit_ask *ask,
             int64_t probe, enum bh_acquire_result result, char *why, size_t whylen)
{
    const struct asking asking = { admitter, applicant, fd, to };
    unclaim(applicant, ask);
    if (probe)
        bh_breaker_abandon(admitter->ns, ask->index, probe);
    return not_acquired(&asking, local, ask->index, result, why, whylen);
}

static __attribute__((noinline, cold)) int
refused_early(const struct bh_admitter *admitter, const struct bh_applicant *applicant,
              int fd, const struct sockaddr *to, int local, const struct bh_permit_ask *ask)
{
    const struct asking asking = { admitter, applicant, fd, to };
    if (!ask)
        return refuse(&asking, local, local, "at once: the namespace is out of reach "
                      "(on_failure = closed; see the start-up line)");
    return refuse_per_process(&asking, local, ask);
}

static inline __attribute__((always_inline)) int
bh_admit_here(const struct bh_admitter *admitter, const struct bh_applicant *applicant,
              int fd, const struct bh_rule *rule, const struct sockaddr *to,
              struct bh_admitted *admitted)
{
    int local = rule->compartment;
    const struct bh_compartment *compartment = &admitter->config->compartments[local];
    int shared = admitter->shared_index[local];
    if (shared == BH_SHARED_UNREACHABLE)
        return refused_early(admitter, applicant, fd, to, local, NULL);
    if (shared < 0)
        return BH_GATE_PASS;
    if (applicant->membership[local].bypass) {
        bh_permit_count_bypassed(admitter->ns, shared);
        return BH_GATE_PASS;
    }
    struct bh_permit_ask *ask = &admitted->ask;
    *ask = (struct bh_permit_ask) { shared, applicant->membership[local].reserve,
                                    rule->weight };
    if (claim(applicant, ask, compartment->per_process) < 0)
        return refused_early(admitter, applicant, fd, to, local, ask);
    check_fleet_lease(admitter->ns, compartment, shared);
    char why[192];
    struct bh_probe_taken taken;  /* filled in for PROBE only */
    enum bh_breaker_admission breaker = ask_breaker(admitter->ns, compartment, shared,
                                                    &taken, why, sizeof why);
    enum bh_acquire_result result = BH_REJECTED;
    if (breaker == BH_BREAKER_PASS || breaker == BH_BREAKER_PROBE)
        result = bh_permit_try(admitter->ns, ask);
    if (result == BH_REJECTED && (breaker == BH_BREAKER_PASS || breaker == BH_BREAKER_PROBE)) {
        const struct asking asking = { admitter, applicant, fd, to };
        result = when_full(&asking, compartment, ask, why, sizeof why);
    }
    int64_t probe = breaker == BH_BREAKER_PROBE ? taken.since_ns : 0;
    if (__builtin_expect(result == BH_ACQUIRED, 1)) {
        admitted->probe = probe;
        return shared;
    }
    return not_admitted(admitter, applicant, fd, to, local, ask, probe, result,
                        why, sizeof why);
}

#endif
