/* The admission decision itself (see admission.h), as static functions
 * that each caller compiles into itself: the shim's gate.c inlines it with
 * its own constant admitter and applicant; admission.c wraps it as
 * bh_admit() for the command. One source; include it from one .c file of
 * each program.
 *
 * The permits themselves are one take (bh_permit_take, shim/permits):
 * the fleet lease, the breaker, per_process, the reserve or the common
 * pool, the holder record, with one result. What stays here is what
 * needs the caller: who the applicant is in the compartment (a bypass,
 * a reserve's member: worked out by the caller, so a bypass costs a load
 * and a counter), how long it may wait when full (wait_ms, hold_wait_ms
 * and, for a blocking socket, its SO_SNDTIMEO: an fcntl and a
 * getsockopt, read only then), where (a non-blocking socket's wait may
 * be the caller's to place: wait_elsewhere), and the refusal's words and
 * log line.
 *
 * The matched path costs one semop and, for the breaker, one load (a
 * clock read only when it is not closed); a fleet compartment also reads
 * the clock to see whether the agent still renews this host's share.
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
#include "log/log.h"
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

/* One admission's context, so that the helpers below take one pointer;
 * why: the wait's bound in words, written only when the compartment is
 * full (wait_allowed_ms), for the refusal line. */
struct asking {
    const struct bh_admitter *admitter;
    const struct bh_applicant *applicant;
    int fd;
    const struct sockaddr *to;
    int local;  /* the config compartment */
    char why[192];
};

static struct bh_namespace *ns_of(const struct asking *asking)
{
    return asking->admitter->ns;
}

static int refuse(const struct asking *asking, int local, int shared, const char *why)
{
    const struct bh_compartment *compartment = &asking->admitter->config->compartments[local];
    const struct bh_applicant *applicant = asking->applicant;
    char destination[INET6_ADDRSTRLEN + 16], name[64];
    describe(asking->to, destination, sizeof destination);
    if (applicant->name)
        applicant->name(applicant->pid, name, sizeof name);
    bh_log_refusal(shared, compartment->name, destination, why,
                   applicant->name ? name : program_invocation_short_name,
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
        return bh_permit_held(ns_of(asking), ask->index);
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

/* A single-threaded process holding some of the compartment's permits and
 * waiting for more can deadlock with others doing the same (each holds
 * what the others wait for; none of its own can come back while it
 * waits): hold_wait_ms bounds that wait. A thread of a thread pool waits
 * wait_ms as ever: its siblings hold their own connections and give them
 * back, and bounding them would end waiting in every threaded server.
 * A wait that stalls an event loop (BH_NONBLOCKING_STALLS) is bounded
 * whatever the thread count: the loop it stalls serves the connections.
 * Threads: /proc/PID/stat field 20, read only on this rare path. */
static void bound_hold_wait(struct wait_bound *bound, const struct bh_compartment *compartment,
                            int held, const struct bh_applicant *applicant, int stalls_loop)
{
    char because[112];
    if (held <= 0 || compartment->hold_wait_ms >= bound->ms)
        return;
    if (!stalls_loop) {
        long threads = bh_proc_stat_field(applicant->pid, 20);
        if (applicant->own_threads)
            threads -= applicant->own_threads();
        if (threads != 1)
            return;
    }
    snprintf(because, sizeof because, "this process already holds %d of its "
             "permits%s; hold_wait_ms = %d", held,
             stalls_loop ? " and its loop waits" : "", compartment->hold_wait_ms);
    bound_by(bound, compartment->hold_wait_ms, because);
}

/* The compartment is full: how long this caller may wait for a permit, and
 * when it may not (0), why, in words for the refusal line; or
 * BH_WAIT_ELSEWHERE for a non-blocking socket whose applicant waits
 * elsewhere. A non-blocking socket's bound is a blocking one's but for
 * SO_SNDTIMEO, which bounds only a connect that blocks. */
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
    const struct bh_applicant *applicant = asking->applicant;
    /* Waited for elsewhere, a non-blocking connect stalls nothing: its
     * loop runs on and can give back what it holds, so wait_ms alone
     * bounds it, as it bounds a parked one. */
    if (!blocking && bound.ms > 0 && applicant->wait_elsewhere) {
        if (applicant->wait_elsewhere())
            return BH_WAIT_ELSEWHERE;
        bound_by(&bound, 0, "non-blocking socket in a vfork child, where no "
                 "thread of ours may wait for it");
    }
    enum bh_nonblocking_wait nonblocking = blocking || !applicant->nonblocking_wait
                                               ? BH_NONBLOCKING_OWN
                                               : applicant->nonblocking_wait(applicant->pid);
    if (blocking || nonblocking != BH_NONBLOCKING_PARKED)
        bound_hold_wait(&bound, compartment, held_by_applicant(asking, ask), applicant,
                        !blocking && nonblocking == BH_NONBLOCKING_STALLS);
    /* SO_SNDTIMEO bounds a blocking connect() only, as in the kernel. */
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
    if (error == EACCES && geteuid() != ns_of(asking)->uid)
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

/* The take's questions, asked only when the compartment is full. */
static int reap_own(void *ctx)
{
    const struct bh_applicant *applicant = ((const struct asking *)ctx)->applicant;
    return applicant->reap(applicant->reap_ctx);
}

/* A signal ended the wait: go on where the applicant's kernel connect()
 * would have been restarted. A socket with SO_SNDTIMEO never is: the
 * kernel ends such a connect with EINTR, SA_RESTART or not. */
static int restart_wait(void *ctx)
{
    const struct asking *asking = ctx;
    return asking->applicant->signals_restart && own_timeout_ms(asking->fd) == 0 &&
           asking->applicant->signals_restart();
}

static int wait_for(void *ctx, const struct bh_permit_ask *ask, int (**restart)(void *ctx))
{
    struct asking *asking = ctx;
    *restart = restart_wait;
    const struct bh_compartment *compartment =
        &asking->admitter->config->compartments[asking->local];
    return wait_allowed_ms(asking, compartment, ask, asking->why, sizeof asking->why);
}

/* Why a take was refused, in words for the refusal line (a full one's
 * are wait_for's). */
static const char *refusal_words(struct asking *asking, const struct bh_take *take,
                                 enum bh_take_result result,
                                 const struct bh_take_outcome *outcome)
{
    const struct bh_compartment *compartment = take->compartment;
    char *why = asking->why;
    size_t whylen = sizeof asking->why;
    if (result == BH_TAKE_PER_PROCESS) {
        snprintf(why, whylen, "at once: this process would hold more than "
                 "per_process = %d", compartment->per_process);
    } else if (result == BH_TAKE_BREAKER_OPEN) {
        struct bh_breaker_view view;
        bh_breaker_read(bh_breaker_fields(ns_of(asking), take->ask.index), &view);
        if (view.forced)
            snprintf(why, whylen, "at once: breaker open (forced by bulkhead set)");
        else
            snprintf(why, whylen, "at once: breaker open (%lld ms left)",
                     (long long)view.open_left_ms);
    } else if (result == BH_TAKE_BREAKER_PROBING) {
        snprintf(why, whylen, "at once: breaker half-open; another connection "
                 "is the probe");
    } else if (result == BH_TAKE_NEVER_ENOUGH) {
        snprintf(why, whylen, "at once: weight %d exceeds the %d permit%s of the "
                 "common pool%s", take->ask.weight, outcome->most,
                 outcome->most == 1 ? "" : "s", take->ask.reserve >= 0 ? " and its reserve" : "");
    } else if (result == BH_TAKE_WAITERS) {
        snprintf(why, whylen, "at once: full; max_waiters = %d already waiting",
                 compartment->max_waiters);
    } else if (result == BH_TAKE_FAILED) {
        snprintf(why, whylen, "at once: the namespace is out of reach "
                 "(on_failure = closed)");
    }
    return why;
}

/* Let through in shadow mode: what enforce would have done, at info. */
static void note_shadowed(struct asking *asking, const struct bh_take *take,
                          const struct bh_take_outcome *outcome)
{
    if (!bh_log_enabled(BH_LOG_INFO))
        return;
    const struct bh_applicant *applicant = asking->applicant;
    char destination[INET6_ADDRSTRLEN + 16], name[64];
    describe(asking->to, destination, sizeof destination);
    if (applicant->name)
        applicant->name(applicant->pid, name, sizeof name);
    const char *program = applicant->name ? name : program_invocation_short_name;
    int pid = applicant->pid ? (int)applicant->pid : (int)getpid();
    if (outcome->would_wait)
        bh_log(BH_LOG_INFO, "would wait: %s to [%s] is full, for %s[%d]; let through "
               "at once (mode = shadow)", destination, take->compartment->name, program, pid);
    else
        bh_log(BH_LOG_INFO, "would refuse %s to [%s] %s for %s[%d]; let through "
               "(mode = shadow)", destination, take->compartment->name,
               refusal_words(asking, take, outcome->shadowed, outcome), program, pid);
}

/* Not granted: what the outcome means for the connect. */
static int not_granted(struct asking *asking, const struct bh_take *take,
                       enum bh_take_result result, const struct bh_take_outcome *outcome)
{
    const struct bh_config *config = asking->admitter->config;
    if (result == BH_TAKE_GONE) {
        note_bypass_once(config);
        return BH_GATE_PASS;
    }
    if (result == BH_TAKE_FAILED) {
        if (errno == EACCES && asking->applicant->uid_settled &&
            asking->applicant->uid_settled())
            return BH_GATE_UID_MOVED;
        note_failure_once(asking, errno);
        if (config->on_failure_open)
            return BH_GATE_PASS;
    }
    if (result == BH_TAKE_ELSEWHERE)
        return BH_GATE_WAIT;
    if (result == BH_TAKE_INTERRUPTED) {
        errno = EINTR;  /* nothing taken, nothing sent: connect() may be called again */
        return BH_GATE_REFUSED;
    }
    return refuse(asking, asking->local, take->ask.index,
                  refusal_words(asking, take, result, outcome));
}

/* Anything but a plain grant: what the take has to say, out of line. */
static __attribute__((noinline, cold)) int
not_plainly_granted(struct asking *asking, const struct bh_take *take,
                    enum bh_take_result result, const struct bh_take_outcome *outcome,
                    struct bh_admitted *admitted)
{
    const struct bh_compartment *compartment = take->compartment;
    if (outcome->tell && outcome->lapsed)
        bh_log(BH_LOG_WARN, "[%s]: this host's fleet share lapsed (bulkhead "
               "agent stopped renewing it): limit 0 until it grants one again",
               compartment->name);
    if (outcome->tell && outcome->breaker.replaced_pid)
        note_taken_over(compartment, &outcome->breaker);
    if (result != BH_TAKE_GRANTED)
        return not_granted(asking, take, result, outcome);
    if (outcome->shadowed != BH_TAKE_GRANTED)
        note_shadowed(asking, take, outcome);
    admitted->ask = take->ask;
    admitted->probe = outcome->probe;
    if (asking->applicant->claimed)
        admitted->taken = bh_take_taken(&take->ask, outcome);
    return take->ask.index;
}

static __attribute__((noinline, cold)) int
refused_early(const struct bh_admitter *admitter, const struct bh_applicant *applicant,
              int fd, const struct sockaddr *to, int local)
{
    const struct asking asking = { admitter, applicant, fd, to, local, "" };
    return refuse(&asking, local, local, "at once: the namespace is out of reach "
                  "(on_failure = closed; see the start-up line)");
}

/* The decision: who the applicant is in the compartment, then one take
 * (shim/permits), then words for whatever was not a plain grant. */
static inline __attribute__((always_inline)) int
bh_admit_here(const struct bh_admitter *admitter, const struct bh_applicant *applicant,
              int fd, const struct bh_rule *rule, const struct sockaddr *to,
              struct bh_admitted *admitted)
{
    int local = rule->compartment;
    int shared = admitter->shared_index[local];
    if (shared == BH_SHARED_UNREACHABLE)
        return refused_early(admitter, applicant, fd, to, local);
    if (shared < 0)
        return BH_GATE_PASS;
    const struct bh_membership *membership =
        applicant->membership ? applicant->membership : admitter->membership;
    if (membership[local].bypass) {
        bh_permit_count_bypassed(admitter->ns, shared);
        return BH_GATE_PASS;
    }
    struct asking asking;  /* its why is written only when full */
    asking.admitter = admitter;
    asking.applicant = applicant;
    asking.fd = fd;
    asking.to = to;
    asking.local = local;
    const struct bh_take take = {
        { shared, membership[local].reserve, rule->weight },
        &admitter->config->compartments[local], applicant->claimed,
        applicant->reap ? reap_own : NULL, wait_for, &asking,
    };
    struct bh_take_outcome outcome;
    /* applicant->claimed is a constant NULL in the shim: one call there */
    enum bh_take_result result = applicant->claimed
        ? bh_permit_take_for_another(admitter->ns, &take, &outcome)
        : bh_permit_take(admitter->ns, &take, &outcome);
    if (__builtin_expect(result != BH_TAKE_GRANTED || outcome.tell, 0))
        return not_plainly_granted(&asking, &take, result, &outcome, admitted);
    admitted->ask = take.ask;
    admitted->probe = outcome.probe;
    if (applicant->claimed)
        admitted->taken = bh_take_taken(&take.ask, &outcome);
    return shared;
}

#endif
