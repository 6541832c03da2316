/* Permits shared by every process of one user in one namespace.
 *
 * A namespace is one System V semaphore set plus one System V shared memory
 * segment, both under the same key (a hash of "bulkhead/<layout>/<euid>/
 * <namespace>"). The semaphores are the permits; the shared memory holds the
 * compartment table (name, live limit) and the counters operators read.
 * See permits.c for the design and why SysV semaphores were chosen, and
 * take.c for an admission's take and give-back.
 *
 * This header is what other rooms see: views, and operations. The layout
 * itself (semaphore numbers, the segment's structs) is layout.h, which
 * only shim/permits includes. */
#ifndef BH_PERMITS_H
#define BH_PERMITS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "permits/adaptive_fields.h"
#include "breaker/breaker_fields.h"
#include "config/config.h"
#include "permits/socket_records.h"
#include "permits/window.h"

enum {
    BH_LAYOUT_VERSION = 13,     /* of layout.h: part of the key */
    BH_MAX_HOLDER_PAGES = 1024,
};

/* Latency histograms: fixed upper bounds, 0.5 ms to 60 s, and one bucket
 * past the last. */
enum { BH_HISTOGRAM_BUCKETS = 16 };
extern const int64_t bh_histogram_bounds_us[BH_HISTOGRAM_BUCKETS] __attribute__((visibility("hidden")));



enum bh_fleet_state {
    BH_FLEET_LEASED,     /* granted by Redis, lease running */
    BH_FLEET_LEARNING,   /* Redis restarted: granted no more than held */
    BH_FLEET_KEPT,       /* Redis unreachable: the grant kept until the lease ends */
    BH_FLEET_FALLBACK,   /* Redis unreachable past the lease: fleet_fallback */
    /* Never stored: what bh_compartment_read says once lease_until_ns has
     * passed or a connect lapsed the share, whatever the agent last wrote
     * (a dead agent cannot say it is dead). */
    BH_FLEET_LAPSED,
};




struct bh_shared_state;   /* layout.h */
struct bh_holder_page;    /* layout.h */
struct bh_holdings;       /* holders.h */

struct bh_namespace {
    uid_t uid;                    /* whose namespace: the key and the owner */
    key_t key;
    int semid;
    int shmid;
    struct bh_shared_state *state;  /* NULL: not attached */
    /* This process's own counts of it (holders.c): the process's first
     * counts, or counts of its own (bh_permits_own_counts). */
    struct bh_holdings *mine;
    /* Told of permits a give-back could not return (bh_permit_release),
     * from any thread or signal handler; NULL: nobody (the opener's to
     * set). */
    void (*refused)(struct bh_namespace *ns, int index, int weight);
    /* Where the fields other rooms own are, per compartment index, once
     * attached: the breaker's, the adaptive controller's, the window's. */
    struct bh_breaker_shared *breakers;
    struct bh_adaptive_shared *adaptives;
    struct bh_window_shared *windows;
    /* Holder pages this process has attached, by their index in
     * page_shmids; NULL: not yet (holders.c). */
    _Atomic(struct bh_holder_page *) pages[BH_MAX_HOLDER_PAGES];
    /* After an EPERM from bh_namespace_open: what is under our key and
     * whose it is ((uid_t)-1: unknown). */
    uid_t squatter_uid;
    unsigned squatter_mode;
    char foreign_what[32];
};

enum bh_acquire_result {
    BH_ACQUIRED,
    BH_REJECTED,   /* full, and no wait allowed (fail fast, non-blocking, too many waiters) */
    BH_TIMED_OUT,  /* full for all of wait_ms */
    BH_BYPASS,     /* the namespace was removed (reset): let it through */
    BH_INTERRUPTED, /* a signal ended the wait: connect() fails with EINTR */
    BH_FAILED,     /* the kernel refused the semop (EACCES, no room for undo
                      records): errno says why; on_failure decides */
};

/* What `stat` shows for one compartment. */
struct bh_compartment_view {
    char name[BH_NAME_MAX];
    int limit;
    int in_use;      /* limit + debt - free: exact, from the semaphores */
    int waiting;     /* GETNCNT: exact, from the kernel */
    int64_t peak;
    uint64_t acquired, rejected, timed_out, waits;
    int64_t wait_ns_max;  /* the longest wait, granted or not */
    uint64_t connect_failures, connect_timeouts, io_timeouts;
    uint64_t per_process_refused, bypassed;
    int shadow;      /* 1: mode = shadow, live */
    uint64_t shadow_refused, shadow_waited;  /* let through; enforce would not */
    int reserve_count;
    int reserved;    /* the reserves' sizes together; the common pool is
                        limit - reserved */
    int common_free; /* the common pool's permits free now (a shadow
                        compartment's headroom left out) */
    int common_owes; /* permits the common pool owes (DEBT and every ROWED) */
    int shared;      /* connections whose socket record holds their permits
                        (their fds are in more than one process) */
    int shared_permits;
    struct bh_fleet_view {
        int limit, grant, in_use, hosts;
        enum bh_fleet_state state;
        int64_t updated_ns;
        int64_t lease_until_ns;
    } fleet;
    struct bh_histogram_view {
        uint64_t buckets[BH_HISTOGRAM_BUCKETS + 1];  /* not cumulative */
        uint64_t count;
        int64_t sum_ns;
    } connect_time, hold_time, wait_time;  /* wait_time: every wait, however
                                              it ended (layout.h) */
};

key_t bh_namespace_key(uid_t uid, const char *namespace_name);

/* Attaches to a namespace's state; creates it when `create` and absent.
 * Returns 0, or -1 with a one-line reason in err and errno: ENOENT (absent
 * and !create), EEXIST (our key holds something else of ours), EPERM
 * (another user made or owns what is under our key, or it is not mode
 * 0600: never used, see permits.c). */
int bh_namespace_open(const char *namespace_name, int create,
                      struct bh_namespace *ns, char *err, size_t errlen);
/* The same for another user's namespace (root steering a service's);
 * it never creates one for another uid (it would be ours, not theirs). */
int bh_namespace_open_for(uid_t uid, const char *name, int create,
                          struct bh_namespace *ns, char *err, size_t errlen);
void bh_namespace_close(struct bh_namespace *ns);
/* Removes whatever uid made under the namespace's key, of any size or
 * layout (reset --force); returns how many objects went. */
int bh_namespace_remove_key(uid_t uid, const char *name);

/* Finds or adds a compartment by name. A new one starts with `limit`
 * permits and the compartment's reserves (carved out of them); an existing
 * one keeps its live limit and reserves, returned in live_limit. Returns
 * the compartment's index or -1 (table full, lock timeout). */
int bh_compartment_register(struct bh_namespace *ns,
                            const struct bh_compartment *compartment,
                            int limit, int *live_limit);
/* The same for `count` compartments under one take of the lock (a file
 * of a thousand compartments costs two semops, not two thousand): each
 * one's index, or -errno, in indexes[], its live limit in live_limits[].
 * 0, or -1 with errno when the lock could not be taken. */
int bh_compartments_register(struct bh_namespace *ns,
                             const struct bh_compartment *compartments,
                             const int *limits, int count, int *indexes,
                             int *live_limits);
/* Index of a registered compartment, or -1. */
int bh_compartment_find(const struct bh_namespace *ns, const char *name);
/* Index of the compartment's reserve named `who` (as written), or -1. */
int bh_reserve_find(const struct bh_namespace *ns, int index, const char *who);

/* What one connect asks of a compartment. */
struct bh_permit_ask {
    int index;     /* the compartment, in the namespace */
    int reserve;   /* the caller's reserve in it (a member), or -1 */
    int weight;    /* permits the connection takes, >= 1 */
};

/* Permits by the pool they came from: a take's, a process's share of a
 * compartment, a socket record's. */
struct bh_taken {
    uint32_t common;    /* from the common pool */
    uint32_t reserved;  /* from the reserve `reserve` */
    int reserve;
};

/* ---- the take: one admission's permits, decided in one place ---- */

/* What one take asks, and of whom it may ask more when the compartment is
 * full (the rare path: the callbacks may ask the kernel about the
 * caller's socket; the common path never calls them). */
struct bh_take {
    struct bh_permit_ask ask;
    /* Its rules: per_process, fleet_limit, max_waiters, the breaker's. */
    const struct bh_compartment *compartment;
    /* For bh_permit_take_for_another: the applicant's per_process
     * counts, [namespace index], kept by the caller (taken there, given
     * back by bh_permit_give). NULL for bh_permit_take: the calling
     * process's own counts. */
    _Atomic uint32_t *claimed;
    /* Full: permits of the caller's own sockets the kernel says are gone
     * given back; how many (NULL: none to look at). The namespace's
     * shared socket records are always looked at. */
    int (*reap)(void *ctx);
    /* Still full: how long the caller may wait, 0: not at all,
     * BH_WAIT_ELSEWHERE: the caller waits by a take of its own elsewhere
     * (the shim's asynchronous admission), so this one ends with
     * BH_TAKE_ELSEWHERE, nothing counted; and in *restart what to ask
     * when a signal ends the wait: nonzero to wait on, to the same
     * deadline (NULL, as it starts: the wait ends, BH_TAKE_INTERRUPTED). */
    int (*wait_ms)(void *ctx, const struct bh_permit_ask *ask,
                   int (**restart)(void *ctx));
    void *ctx;
};

enum { BH_WAIT_ELSEWHERE = -1 };

enum bh_take_result {
    BH_TAKE_GRANTED,
    BH_TAKE_PER_PROCESS,      /* refused: the process would hold more than per_process */
    BH_TAKE_BREAKER_OPEN,     /* refused: the breaker is open */
    BH_TAKE_BREAKER_PROBING,  /* refused: half-open, and another connection probes */
    BH_TAKE_NEVER_ENOUGH,     /* refused: the weight is above all it may ever take */
    BH_TAKE_FULL,             /* refused: full, and wait_ms said not to wait */
    BH_TAKE_WAITERS,          /* refused: max_waiters already wait */
    BH_TAKE_TIMED_OUT,        /* full for all of wait_ms */
    BH_TAKE_INTERRUPTED,      /* a signal ended the wait */
    BH_TAKE_GONE,             /* the namespace was removed (reset): let it through */
    BH_TAKE_FAILED,           /* the kernel refused a semop: errno says why */
    BH_TAKE_ELSEWHERE,        /* full, and the caller waits by a take of its own */
};

/* What a take has to say besides its result. A plain grant writes only
 * from_reserve, probe and tell; the rest is meaningful when tell is
 * nonzero, or the result is not BH_TAKE_GRANTED. */
struct bh_take_outcome {
    uint32_t from_reserve;   /* granted: permits from the reserve; the rest
                                came from the common pool */
    int64_t probe;           /* granted as the breaker's probe: its holding of
                                the slot (breaker.h), else 0 */
    int tell;                /* nonzero: lapsed, or the probe slot was taken over */
    int lapsed;              /* this take found the fleet share lapsed and
                                lowered the limit to 0 */
    struct bh_probe_taken breaker;  /* the probe slot was taken over
                                       (replaced_pid > 0), whatever came next */
    int most;                /* NEVER_ENOUGH: the most it may ever take */
    /* Granted in shadow mode where enforce would not have granted at once:
     * what enforce would have said (tell is nonzero), else BH_TAKE_GRANTED;
     * would_wait: enforce would have waited (its wait_ms callback said so). */
    enum bh_take_result shadowed;
    int would_wait;
};

/* Takes ask.weight permits for an admission of the calling process's
 * own (take->claimed NULL): the fleet lease, the breaker, the per_process
 * cap, the reserve or the common pool (now, or after a wait) and the
 * holder record, in that order, with one result. Granted: the permits
 * are held (SEM_UNDO) until bh_permit_release. Anything
 * else: nothing is held (the claim and any probe slot are given back) and
 * the refusal is counted. errno is kept, but for BH_TAKE_FAILED. */
enum bh_take_result bh_permit_take(struct bh_namespace *ns, const struct bh_take *take,
                                   struct bh_take_outcome *outcome);
/* The same on behalf of another process (a supervisor's applicant), with
 * take->claimed its per_process counts: the permits are held by the
 * calling process's undo record and counted in its holder record, never
 * in its own counts (holders.c says why); its caller keeps which pools
 * they came from (bh_take_taken) until bh_permit_give. */
enum bh_take_result bh_permit_take_for_another(struct bh_namespace *ns,
                                               const struct bh_take *take,
                                               struct bh_take_outcome *outcome);
/* Which pools a granted take's permits came from: from_reserve of them
 * from the reserve the ask named (a take only ever falls back from it to
 * none), the rest from the common pool. */
static inline struct bh_taken bh_take_taken(const struct bh_permit_ask *ask,
                                            const struct bh_take_outcome *outcome)
{
    uint32_t reserved = outcome->from_reserve;
    return (struct bh_taken){ (uint32_t)ask->weight - reserved, reserved,
                              reserved ? ask->reserve : -1 };
}
/* The mirror of a take for another process (claimed != NULL): gives back
 * exactly the permits `taken` names (its bh_take_taken) to exactly those
 * pools, with SEM_UNDO (the caller's undo record holds them), out of the
 * caller's holder record, and their claim. A process's own permits go
 * back with bh_permit_release. Async-signal-safe. */
void bh_permit_give(struct bh_namespace *ns, int index, struct bh_taken taken,
                    _Atomic uint32_t *claimed);
/* The same once they were parked (bh_socket_park_for_another, as
 * `share`): the record's one reference goes, which gives them back unless
 * a reaper already did, and so does their claim. */
void bh_permit_give_parked(struct bh_namespace *ns, int index, bh_share share, int weight,
                           _Atomic uint32_t *claimed);

/* ---- its parts, for the command and the tests ---- */

/* Counts `ask` against this process's per_process cap (0: none) before it
 * takes anything: 0, or -1 when the process would hold more than the cap.
 * bh_permit_unclaim undoes it when no permit was taken. */
int bh_permit_claim(struct bh_namespace *ns, const struct bh_permit_ask *ask, int per_process);
void bh_permit_unclaim(struct bh_namespace *ns, const struct bh_permit_ask *ask);
/* Takes ask->weight permits for this process if they are free now
 * (SEM_UNDO: the kernel gives them back if the process dies): a member
 * from its reserve first, then from the common pool. BH_REJECTED here
 * means only "full": the caller decides between waiting and refusing.
 * errno is kept, but for BH_FAILED, where it is the cause. */
enum bh_acquire_result bh_permit_try(struct bh_namespace *ns,
                                     const struct bh_permit_ask *ask);
/* Waits up to wait_ms, in arrival order, unless max_waiters already wait.
 * Counts the outcome (rejected or timed_out). errno as bh_permit_try. */
enum bh_acquire_result bh_permit_wait(struct bh_namespace *ns,
                                      const struct bh_permit_ask *ask,
                                      int wait_ms, int max_waiters);
/* Permits of compartment index this process holds now: one load each
 * of two process-local atomics. */
int bh_permit_held(struct bh_namespace *ns, int index);
/* The most `ask` could ever be granted at once: the live common pool,
 * plus the caller's own reserve for a member. */
int bh_permit_most(const struct bh_namespace *ns, const struct bh_permit_ask *ask);
/* A process holding permits of index starts (+1) or ends (-1) a wait for
 * more: its holder record says so, for `stat`. */
void bh_permit_note_waiting(struct bh_namespace *ns, int index, int delta);
/* A refusal without waiting (fail fast, or a non-blocking socket). */
void bh_permit_count_rejected(struct bh_namespace *ns, int index);
/* A refusal because the process was at its per_process cap. */
void bh_permit_count_per_process(struct bh_namespace *ns, int index);
/* A connect let through by bypass. */
void bh_permit_count_bypassed(struct bh_namespace *ns, int index);
/* A connect let through in shadow mode that enforce would have refused
 * (waited 0) or made wait (waited 1). */
void bh_permit_count_shadow(struct bh_namespace *ns, int index, int waited);
/* Gives `weight` permits of compartment `index` back, to the pools this
 * process took them from (its counts know, common pool first); unclaims
 * them too: the mirror of bh_permit_take. Refused by the namespace
 * (EACCES: the process runs as a uid that cannot reach it now), they
 * stay its own, counts and all, and ns->refused is told, for a later
 * try. Async-signal-safe: atomics and semops. */
void bh_permit_release(struct bh_namespace *ns, int index, int weight);
/* In a forked child, for its copy of a connection no socket record holds
 * (the table was full): `weight` common permits of its own (SEM_UNDO),
 * given back by bh_permit_release at its close or by the kernel at its
 * exit. Free ones if there are, else owed: the debt retires the next
 * permits given back, so the copy is counted either way. Never waits;
 * async-signal-safe. 0, or -1 (the semaphores refused: nothing taken). */
int bh_permit_take_for_copy(struct bh_namespace *ns, int index, int weight);

/* The process is exiting: its holder records are freed if it holds
 * nothing, so records of exited processes do not wait for a reaper. */
void bh_permits_leave(struct bh_namespace *ns);
/* The calling process was just forked: it holds no permits of its own
 * in ns; its caller calls this for each namespace it counts in. */
void bh_permits_forget_after_fork(struct bh_namespace *ns);
/* bh_namespace_open points ns at the process's first counts of its own
 * permits; a process that counts in several namespaces (it changed its
 * uid) gives each later one counts of its own, with its holder records
 * and claims. They live as long as the process: -1 when there is no
 * memory for them. */
int bh_permits_own_counts(struct bh_namespace *ns);
/* Permits this process holds in ns, every compartment together. */
uint32_t bh_permits_held_total(struct bh_namespace *ns);
/* A new program image of the same process: find the holder records it
 * had before exec, so its releases go to the right pools, and copy how
 * many permits it holds per compartment. -1: none. */
int bh_permits_rejoin_after_exec(struct bh_namespace *ns,
                                 uint32_t held[BH_MAX_COMPARTMENTS]);

int bh_compartment_read(struct bh_namespace *ns, int index,
                        struct bh_compartment_view *view);
/* Calls visit() for every live process holding permits, once per
 * compartment it holds, with how many of its threads wait for more;
 * dead processes' records are freed on the way. No limit on how many:
 * the records live in pages added as needed. */
void bh_holders_visit(struct bh_namespace *ns,
                      void (*visit)(pid_t pid, int index, uint32_t permits,
                                    uint32_t waiting, void *ctx),
                      void *ctx);
/* The agent's figures for a fleet compartment (see bh_fleet_shared). */
void bh_compartment_set_fleet(struct bh_namespace *ns, int index,
                              const struct bh_fleet_view *fleet);

/* The host's share lapsed (the agent did not renew it): the first caller
 * to see it lowers the live limit to 0 and returns 1; 0 for the others. */
int bh_fleet_lapse(struct bh_namespace *ns, int index, int64_t seen_until_ns);
/* The same, once the lease (if any) is seen over: one clock read. */
int bh_fleet_lapse_if_over(struct bh_namespace *ns, int index);

/* Compartment index's windowed figures (window.h), breaker (breaker.c)
 * and adaptive controller (adaptive.c): fields their rooms own. */
static inline struct bh_window_shared *bh_window_of(const struct bh_namespace *ns, int index)
{
    return &ns->windows[index];
}
static inline struct bh_breaker_shared *bh_breaker_fields(const struct bh_namespace *ns,
                                                          int index)
{
    return &ns->breakers[index];
}
static inline struct bh_adaptive_shared *bh_adaptive_fields(const struct bh_namespace *ns,
                                                            int index)
{
    return &ns->adaptives[index];
}

/* What a connection showed, counted in compartment index's figures.
 * Async-signal-safe: atomics. */
void bh_count_connect_time(struct bh_namespace *ns, int index, int64_t elapsed_ns);
/* A hold of `weight` permits from since_ns to now_ns ended: its time in
 * the histogram and, with its permit time, in the window (window.h). */
void bh_count_hold(struct bh_namespace *ns, int index, int weight, int64_t since_ns,
                   int64_t now_ns);
/* A connect that failed (refused, unreachable, reset...; timed_out: ETIMEDOUT). */
void bh_count_connect_failure(struct bh_namespace *ns, int index, int timed_out);
void bh_count_io_timeout(struct bh_namespace *ns, int index);

/* Small reads of the table, for who needs one figure, not a view. */
uint32_t bh_compartment_count(const struct bh_namespace *ns);  /* registered */
const char *bh_compartment_name(const struct bh_namespace *ns, int index);
int bh_compartment_limit(const struct bh_namespace *ns, int index);  /* live */
/* Connects that found it full: refused, timed out, waited (the adaptive
 * controller's measure of demand). */
uint64_t bh_compartment_full_count(const struct bh_namespace *ns, int index);
/* In use as counted by take and give-back: cheap, and high while a killed
 * holder's record is not reaped yet. */
int64_t bh_compartment_holders_hint(const struct bh_namespace *ns, int index);
/* The agent's figures for a fleet compartment, as stored (the state is
 * never BH_FLEET_LAPSED here; bh_compartment_read says that). */
void bh_fleet_read(const struct bh_namespace *ns, int index, struct bh_fleet_view *fleet);

/* Changes the live limit. Raising frees permits at once; lowering retires
 * free permits now and the rest as they are given back. Never blocks.
 * The limit never goes below the reserves (ERANGE). */
int bh_compartment_set_limit(struct bh_namespace *ns, int index, int limit);
/* The same, only while the live limit is still `expected` (checked under
 * the namespace lock): -1 with errno EAGAIN when another writer moved it. */
int bh_compartment_set_limit_if(struct bh_namespace *ns, int index, int expected,
                                int limit);
/* mode = shadow (1) or enforce (0), live, for every process at once:
 * shadow gives the common pool BH_SHADOW_HEADROOM permits past the limit
 * (fewer when the limit is near 32767), enforce retires them, free ones
 * now and held ones as they are given back (pools.c). Idempotent. */
enum { BH_SHADOW_HEADROOM = 8192 };
int bh_compartment_set_shadow(struct bh_namespace *ns, int index, int shadow);
int bh_compartment_shadow(const struct bh_namespace *ns, int index);  /* live */
/* Changes a reserve's live size, moving permits between it and the common
 * pool: free ones at once, the rest as they are given back; no connection
 * is cut and the limit holds throughout. ERANGE: the reserves would add up
 * to more than the limit. */
int bh_reserve_set(struct bh_namespace *ns, int index, int reserve, int permits);

/* A reserve's figures, from the semaphores. */
struct bh_reserve_view {
    char who[BH_WHO_MAX];
    int permits;   /* live size */
    int in_use;    /* held from it now */
    int waiting;   /* members waiting on it */
    int free_now;  /* its semaphore: permits free now */
    int owes;      /* RDEBT: permits it owes the common pool (lent ones) */
};
int bh_reserve_read(struct bh_namespace *ns, int index, int reserve,
                    struct bh_reserve_view *view);
/* Zeroes a compartment's counters; permits, waiters and the limit are not
 * touched. The peak restarts from `in_use`, what is in use now. */
void bh_compartment_reset_counters(struct bh_namespace *ns, int index, int in_use);
/* Removes the namespace (semaphores and memory). Waiters see EIDRM. */
int bh_namespace_remove(struct bh_namespace *ns);
/* Removes it only if no permit is held or waited for, with no window for a
 * new holder in between: every free permit is taken out first, and put
 * back if anyone turns out to hold one. 0 removed, 1 in use (nothing
 * changed), -1 error. */
int bh_namespace_remove_unused(struct bh_namespace *ns);

#endif
