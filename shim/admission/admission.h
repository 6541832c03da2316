/* Admission of one outgoing connection: the decision the shim makes for
 * its own process (core/gate.c) and `bulkhead run`'s seccomp supervisor
 * makes for a process of its tree (cli/supervisor/). One code path for
 * both, so that compartments, policy (per_process, reserves, bypass,
 * weights), the breaker, the fleet lease and waiting behave alike. */
#ifndef BH_ADMISSION_H
#define BH_ADMISSION_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "config/config.h"
#include "permits/permits.h"

enum {
    BH_GATE_PASS = -1,       /* not ours to count: call libc as is */
    BH_GATE_REFUSED = -2,    /* compartment full: return -1, errno is set */
    BH_GATE_DISCONNECT = -3, /* connect(AF_UNSPEC) of a counted socket */
    BH_GATE_AGAIN = -4,      /* connect() again on a counted socket still
                                connecting: only its outcome is learned */
    BH_GATE_UID_MOVED = -5,  /* from bh_admit_here only: a uid change the
                                applicant saw refused the take (EACCES);
                                nothing taken, nothing said: admit again */
    BH_GATE_WAIT = -6,       /* from bh_admit_here only: full, and a
                                non-blocking socket whose applicant waits
                                elsewhere (wait_elsewhere) may wait;
                                nothing taken, nothing said */
};
enum { BH_SHARED_UNREACHABLE = -2 };

/* What a program image is in one config compartment: fixed for the
 * image's life. */
struct bh_membership {
    short reserve;  /* the namespace's index of the reserve it is a member
                       of, -1: none */
    short bypass;   /* 1: never limited by it */
};

struct bh_identity;

/* What `identity` is in config compartment i, registered in the namespace
 * as `shared`: the first reserve that names it, and whether a bypass does. */
struct bh_membership bh_membership_of(const struct bh_config *config,
                                      struct bh_namespace *ns, int i, int shared,
                                      const struct bh_identity *identity);

/* A fleet compartment starts with no permits on this host: its share is
 * what `bulkhead agent` leases from Redis, and until then it has none. */
static inline int bh_starting_limit(const struct bh_compartment *compartment)
{
    return compartment->fleet_limit > 0 ? 0 : compartment->limit;
}

/* Who decides, with what: fixed once the rules are loaded. */
struct bh_admitter {
    const struct bh_config *config;
    struct bh_namespace *ns;
    /* config compartment i -> its index in the namespace, -1 when
     * unregistered, BH_SHARED_UNREACHABLE (on_failure = closed) */
    const int *shared_index;
    /* [config compartment]: what the applicant is in each there, when the
     * admitter knows it (the shim: per namespace it joined, for its own
     * process); NULL: the applicant's own (its membership, below). */
    const struct bh_membership *membership;
};

/* How a non-blocking connect of an applicant waits for a permit when the
 * compartment is full. */
enum bh_nonblocking_wait {
    /* The shim's own process: it waits elsewhere (wait_elsewhere). */
    BH_NONBLOCKING_OWN = 0,
    /* Only the calling thread waits, and the program runs on meanwhile and
     * can give back what it holds: wait_ms and max_waiters, never
     * hold_wait_ms (which keeps a stalled program from waiting for
     * itself). A Go program under the supervisor, whose runtime parks the
     * goroutine in the trapped connect and runs the others on another
     * thread; the shim's own waiter thread of an asynchronous connect. */
    BH_NONBLOCKING_PARKED,
    /* The wait stalls the program's event loop, which is the code that
     * would give back the connections it holds: wait_ms while the process
     * holds none of the compartment's permits, hold_wait_ms once it holds
     * some, whatever its thread count. Any other program under the
     * supervisor, which cannot keep the socket out of the program's poll
     * or epoll to answer EINPROGRESS at once (see docs/seccomp.md). */
    BH_NONBLOCKING_STALLS,
};

/* On whose behalf. */
struct bh_applicant {
    pid_t pid;          /* 0: the calling process itself */
    /* For refusal lines: writes the program's short name into `name`
     * (asked only when a line is made: for another process, a read of
     * /proc). NULL: the calling process's own. */
    void (*name)(pid_t pid, char *name, size_t size);
    /* [config compartment]; NULL: the admitter's */
    const struct bh_membership *membership;
    /* [namespace index]: the applicant's per_process count, kept by the
     * caller (taken here, given back by the caller's release); NULL: the
     * calling process's own (bh_permit_claim) */
    _Atomic uint32_t *claimed;
    /* When the compartment is full: gives back the permits of counted
     * sockets the kernel says are gone (besides the namespace's shared
     * records, which are always looked at); how many came back. NULL:
     * none to look at. Rare path only. */
    int (*reap)(void *ctx);
    void *reap_ctx;
    /* Threads the caller itself runs in the applicant's process, which are
     * not the program's (the shim's io watchdog): left out when hold and
     * wait asks whether the program is single-threaded. NULL: none. */
    int (*own_threads)(void);
    /* A signal ended a permit wait (the semaphore wait fails with EINTR
     * even under SA_RESTART): nonzero when no handler without SA_RESTART
     * can have run in the applicant, so that its kernel connect() would
     * have gone on; the wait then goes on, to its first deadline. NULL:
     * the wait ends, and connect() fails with EINTR. */
    int (*signals_restart)(void);
    /* The namespace refused the take (EACCES): nonzero when a uid change
     * the caller saw explains it (see bh_shim_uid_settled); the admission
     * then returns BH_GATE_UID_MOVED. NULL: never. */
    int (*uid_settled)(void);
    /* A non-blocking socket that may wait (its bound, as a blocking
     * socket's without SO_SNDTIMEO, is above 0): NULL, it waits in place,
     * as a blocking one does (the supervisor, whose trapped thread stalls
     * nothing else; the shim's own waiter thread); else nonzero when the
     * caller can wait for it elsewhere, and the admission returns
     * BH_GATE_WAIT (the shim's asynchronous admission, core/async_connect.c),
     * 0 when it cannot (a vfork child): refused at once. */
    int (*wait_elsewhere)(void);
    /* How its non-blocking connects wait (above), asked only when one is
     * full and may wait (the supervisor's answer costs a stat of /proc).
     * NULL: BH_NONBLOCKING_OWN. */
    enum bh_nonblocking_wait (*nonblocking_wait)(pid_t pid);
};

/* What an admitted connect holds: its permits, and the probe slot's
 * holding (breaker.h) when it is the breaker's probe, else 0. */
struct bh_admitted {
    struct bh_permit_ask ask;
    int64_t probe;
    /* Which pools its permits came from, written only for an applicant
     * with claimed counts of its own (not the calling process): what
     * bh_admission_release gives back. */
    struct bh_taken taken;
};

/* The rule matched `to` for the stream socket fd (the applicant's own,
 * or a copy of it: its O_NONBLOCK and SO_SNDTIMEO are read). Returns the
 * namespace index whose permits are now taken (in *admitted), or
 * BH_GATE_PASS, or BH_GATE_REFUSED with errno set (the compartment's
 * refusal_errno, or EINTR) and the refusal logged. */
int bh_admit(const struct bh_admitter *admitter, const struct bh_applicant *applicant,
             int fd, const struct bh_rule *rule, const struct sockaddr *to,
             struct bh_admitted *admitted);

/* Gives back what bh_admit took for an applicant with its own claimed
 * counts: the permits (admitted.taken: to the pools they came from), and
 * the per_process claim. */
void bh_admission_release(const struct bh_admitter *admitter,
                          const struct bh_applicant *applicant, int shared,
                          struct bh_taken taken);
/* The same for permits parked in a socket record since (`share`, of
 * `weight` permits: bh_socket_park_for_another). */
void bh_admission_release_parked(const struct bh_admitter *admitter,
                                 const struct bh_applicant *applicant, int shared,
                                 bh_share share, int weight);

#endif
