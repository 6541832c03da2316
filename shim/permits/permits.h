/* Permits shared by every process of one user in one namespace.
 *
 * A namespace is one System V semaphore set plus one System V shared memory
 * segment, both under the same key (a hash of "bulkhead/<layout>/<euid>/
 * <namespace>"). The semaphores are the permits; the shared memory holds the
 * compartment table (name, live limit) and the counters operators read.
 * See permits.c for the design and why SysV semaphores were chosen. */
#ifndef BH_PERMITS_H
#define BH_PERMITS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "permits/socket_records.h"
#include "permits/window.h"

enum {
    BH_LAYOUT_VERSION = 8,
    BH_SEM_LOCK = 0,            /* registration lock, taken with SEM_UNDO */
    BH_MAX_RESERVE_SLOTS = 256, /* reserves per namespace, all compartments */
    BH_HOLDERS_FIRST = 4096,    /* holder records in the main segment */
    BH_HOLDERS_PER_PAGE = 4096, /* in each page added when those run out */
    BH_MAX_HOLDER_PAGES = 1024,
};

/* Semaphore numbers of compartment i in the set: its common pool. */
#define BH_SEM_FREE(i)  (1 + 2 * (i))  /* permits free now */
#define BH_SEM_DEBT(i)  (2 + 2 * (i))  /* permits to retire when given back */
/* ... and of reserve slot s (bh_reserve_shared.slot), after them. */
#define BH_SEM_RESERVES   (1 + 2 * BH_MAX_COMPARTMENTS)
#define BH_SEM_RFREE(s)   (BH_SEM_RESERVES + 4 * (s))      /* reserved permits free now */
#define BH_SEM_RDEBT(s)   (BH_SEM_RESERVES + 1 + 4 * (s))  /* owed to the common pool */
#define BH_SEM_ROWED(s)   (BH_SEM_RESERVES + 2 + 4 * (s))  /* owed by the common pool */
#define BH_SEM_RWAIT(s)   (BH_SEM_RESERVES + 3 + 4 * (s))  /* members waiting (SEM_UNDO) */
#define BH_SEM_COUNT      (BH_SEM_RESERVES + 4 * BH_MAX_RESERVE_SLOTS)

/* Latency histograms: fixed upper bounds, 0.5 ms to 60 s, and one bucket
 * past the last. */
enum { BH_HISTOGRAM_BUCKETS = 16 };
extern const int64_t bh_histogram_bounds_us[BH_HISTOGRAM_BUCKETS];
struct bh_histogram {
    _Atomic uint64_t buckets[BH_HISTOGRAM_BUCKETS + 1];  /* not cumulative */
    _Atomic int64_t sum_ns;
};

/* A fleet compartment's figures, as this host's `bulkhead agent` last
 * learned them from Redis; written only by the agent, read by `stat`. */
struct bh_fleet_shared {
    _Atomic int32_t limit;        /* the fleet limit; 0: not a fleet compartment */
    _Atomic int32_t grant;        /* this host's share */
    _Atomic int32_t in_use;       /* in use across the fleet */
    _Atomic int32_t hosts;        /* live hosts */
    _Atomic int32_t state;        /* enum bh_fleet_state */
    _Atomic int64_t updated_ns;   /* CLOCK_REALTIME of the last answer */
    /* CLOCK_MONOTONIC: when this host's share lapses unless the agent
     * renews it. Past it, the first connect lowers the limit to 0 (a dead
     * agent's host must not keep a share Redis gave to others); 0: none. */
    _Atomic int64_t lease_until_ns;
};
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

/* A compartment's circuit breaker. The layout is here with the rest; what
 * the fields mean, who writes them and when is in shim/breaker/breaker.c,
 * the only code that writes them. */
struct bh_breaker_shared {
    _Atomic int64_t open_until_ns;  /* CLOCK_MONOTONIC; 0: closed */
    _Atomic int64_t changed_at_ns;  /* CLOCK_REALTIME of the last change */
    _Atomic int32_t open_ms;        /* the period it last opened for */
    _Atomic uint32_t failures;      /* consecutive, across processes */
    _Atomic uint32_t needs_bytes;   /* the last failure was an io failure */
    _Atomic uint64_t opened;        /* times it opened (reopens included) */
    _Atomic uint64_t refused;       /* connects it refused */
    _Atomic int64_t probe;          /* the probe slot: who holds it since when
                                       (breaker.c); 0: free */
    _Atomic uint64_t probes_taken_over; /* probes silent past their deadline */
};

/* A compartment's adaptive limit. The layout is here with the rest; what
 * the fields mean, who writes them and when is in shim/adaptive/adaptive.c.
 * Registration writes the settings and the starting estimate once, from
 * the creating process's rules, as it writes the limit. */
struct bh_adaptive_shared {
    _Atomic int32_t mode;             /* enum bh_adaptive_mode; 0: off */
    _Atomic int32_t min_limit;
    _Atomic int32_t max_limit;
    _Atomic int32_t latency_ms;       /* aimd's adaptive_latency_ms */
    _Atomic uint64_t window;          /* sequence: even open, odd being closed */
    _Atomic int64_t window_start_ns;  /* CLOCK_MONOTONIC */
    _Atomic uint64_t window_sum;      /* samples << 44 | their latency in us */
    _Atomic uint32_t window_drops;
    _Atomic int32_t window_peak;      /* the most in use a sample saw */
    _Atomic uint64_t window_full;     /* rejected + timed_out + waits as it opened */
    _Atomic int64_t estimate_milli;   /* the controller's limit x 1000 */
    _Atomic int32_t applied;          /* the live limit as the controller left it */
    _Atomic int32_t last_reason;      /* enum bh_adaptive_reason */
    _Atomic int32_t last_from;
    _Atomic int32_t last_to;
    _Atomic int64_t baseline_ns;
    _Atomic int32_t probe;            /* enum bh_adaptive_probe: the re-measure's phase */
    _Atomic int64_t resume_milli;     /* the estimate to go back to after it */
    _Atomic int64_t probe_at_ns;      /* CLOCK_MONOTONIC: the next re-measure; 0: at once */
    _Atomic int64_t recent_ns;        /* the last window's mean latency */
    _Atomic int64_t last_change_ns;   /* CLOCK_REALTIME */
    _Atomic int64_t logged_second;    /* CLOCK_MONOTONIC second of the last line */
    _Atomic uint32_t left_out;        /* changes not logged since */
    _Atomic uint64_t windows;         /* windows closed */
    _Atomic uint64_t changes;         /* limits applied */
};

/* A reserve: permits of the compartment only its members may take. The
 * live size is authoritative over rules.ini, like the limit. What the
 * semaphores and hints mean is in reserve.c, the only code that moves
 * permits between pools. */
struct bh_reserve_shared {
    char who[BH_WHO_MAX];          /* as written in rules.ini: its name */
    _Atomic int32_t permits;       /* live size */
    _Atomic int32_t slot;          /* its semaphores: BH_SEM_RFREE(slot)... */
    _Atomic int32_t waiting_hint;  /* nonzero while BH_SEM_RWAIT may be > 0 */
    _Atomic uint32_t debt_hint;    /* nonzero while BH_SEM_RDEBT may be > 0 */
    _Atomic uint32_t owed_hint;    /* nonzero while BH_SEM_ROWED may be > 0 */
};

/* One compartment's live state and counters. Every field is written with
 * atomics by many processes; no lock guards them. */
struct bh_shared_compartment {
    char name[BH_NAME_MAX];       /* written once under the registration lock */
    _Atomic uint32_t registered;  /* 1 once name, limit and semaphore are set */
    _Atomic int32_t limit;        /* live limit: authoritative over rules.ini */
    _Atomic uint32_t debt_hint;   /* nonzero while BH_SEM_DEBT may be > 0 */
    _Atomic uint64_t acquired;    /* permits granted */
    _Atomic uint64_t rejected;    /* refused at once */
    _Atomic uint64_t timed_out;   /* waited wait_ms, then refused */
    _Atomic uint64_t waits;       /* acquisitions that had to wait */
    _Atomic int64_t wait_ns_total;
    _Atomic int64_t wait_ns_max;
    _Atomic int64_t holders_hint; /* in use, as counted by acquire/release; a
                                     SIGKILLed holder leaves it high until its
                                     process slot is reaped. Feeds peak only. */
    _Atomic int64_t peak_in_use;
    _Atomic uint64_t connect_failures; /* refused, unreachable, timed out, reset */
    _Atomic uint64_t connect_timeouts; /* ETIMEDOUT on connect */
    _Atomic uint64_t io_timeouts;      /* io_timeout_ms expiries */
    struct bh_histogram connect_time;  /* connect() to established */
    struct bh_histogram hold_time;     /* permit taken to permit given back */
    struct bh_breaker_shared breaker;
    struct bh_fleet_shared fleet;
    _Atomic uint64_t per_process_refused; /* refused: the process was at per_process */
    _Atomic uint64_t bypassed;            /* connects let through by bypass */
    _Atomic int32_t reserve_count;        /* set at registration */
    _Atomic int32_t reserved;             /* sum of the reserves' live sizes */
    _Atomic uint32_t owed_hint;           /* some reserve's ROWED may be > 0 */
    struct bh_reserve_shared reserves[BH_MAX_RESERVES];
    struct bh_adaptive_shared adaptive;
};

/* What one process holds of one compartment: lets `stat` name holders and
 * a new program image (exec) learn what the old one held. Written by that
 * process; freed by it, or by whoever finds it dead (holders.c). */
struct bh_holder {
    _Atomic int32_t pid;          /* 0 = free, -1 = being claimed or freed */
    _Atomic int32_t compartment;
    _Atomic uint32_t common;      /* permits from the common pool */
    _Atomic uint32_t reserved;    /* from the reserve `slot` */
    _Atomic int32_t slot;         /* index in the compartment's reserves */
    _Atomic uint32_t waiting;     /* its threads waiting for more permits */
    uint64_t start_time;          /* /proc/<pid>/stat field 22, against pid reuse */
};

/* More holder records, when the main segment's are taken: a private
 * segment, marked for removal as soon as it is made, so it lives exactly
 * as long as some process has it attached (see holders.c). */
struct bh_holder_page {
    uint32_t magic;               /* BH_PAGE_MAGIC */
    int32_t semid;                /* the namespace it belongs to */
    int32_t shmid;                /* its own id, against a reused slot */
    uint32_t unused;
    struct bh_holder holders[BH_HOLDERS_PER_PAGE];
};

struct bh_shared_state {
    uint32_t magic;               /* BH_STATE_MAGIC once initialised */
    uint32_t layout_version;
    uint32_t owner_uid;
    int32_t semid;                /* the set this table belongs to */
    char namespace_name[BH_NAME_MAX];
    _Atomic uint32_t compartment_count;
    _Atomic uint32_t reserve_slots_used;
    struct bh_shared_compartment compartments[BH_MAX_COMPARTMENTS];
    struct bh_holder holders[BH_HOLDERS_FIRST];
    _Atomic int32_t page_shmids[BH_MAX_HOLDER_PAGES];  /* shmid + 1; 0: none */
    struct bh_socket_records sockets;  /* socket_records.c */
    /* Each compartment's figures over the last minute (window.c); apart
     * from the table, so that registering a compartment does not touch
     * their pages. */
    struct bh_window_shared windows[BH_MAX_COMPARTMENTS];
};

#define BH_STATE_MAGIC 0x42484b31u /* "BHK1" */
#define BH_PAGE_MAGIC 0x42484b50u  /* "BHKP" */

struct bh_namespace {
    uid_t uid;                    /* whose namespace: the key and the owner */
    key_t key;
    int semid;
    int shmid;
    struct bh_shared_state *state;
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
    int64_t wait_ns_total, wait_ns_max;
    uint64_t connect_failures, connect_timeouts, io_timeouts;
    uint64_t per_process_refused, bypassed;
    int reserve_count;
    int reserved;    /* the reserves' sizes together; the common pool is
                        limit - reserved */
    int common_free; /* the common pool's semaphore: permits free now */
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
    } connect_time, hold_time;
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

/* Counts `ask` against this process's per_process cap (0: none) before it
 * takes anything: 0, or -1 when the process would hold more than the cap.
 * bh_permit_unclaim undoes it when no permit was taken. */
int bh_permit_claim(const struct bh_permit_ask *ask, int per_process);
void bh_permit_unclaim(const struct bh_permit_ask *ask);
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
int bh_permit_held(int index);
/* The most `ask` could ever be granted at once: the live common pool,
 * plus the caller's own reserve for a member. */
int bh_permit_most(const struct bh_namespace *ns, const struct bh_permit_ask *ask);
/* A process holding permits of index starts (+1) or ends (-1) a wait for
 * more: its holder record says so, for `stat`. */
void bh_permit_note_waiting(int index, int delta);
/* A refusal without waiting (fail fast, or a non-blocking socket). */
void bh_permit_count_rejected(struct bh_namespace *ns, int index);
/* A refusal because the process was at its per_process cap. */
void bh_permit_count_per_process(struct bh_namespace *ns, int index);
/* A connect let through by bypass. */
void bh_permit_count_bypassed(struct bh_namespace *ns, int index);
/* Gives `weight` permits of compartment `index` back, to the pools this
 * process took them from; unclaims them too. Async-signal-safe: atomics
 * and semops. */
void bh_permit_release(struct bh_namespace *ns, int index, int weight);

/* The process is exiting: its holder records are freed if it holds
 * nothing, so records of exited processes do not wait for a reaper. */
void bh_permits_leave(struct bh_namespace *ns);
/* The calling process was just forked: it holds no permits of its own.
 * Also after a uid change: it holds none in the namespace it joins. */
void bh_permits_forget_after_fork(void);
/* Permits this process holds, every compartment together. */
uint32_t bh_permits_held_total(void);
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

/* Compartment index's windowed figures (window.h). */
static inline struct bh_window_shared *bh_window_of(struct bh_namespace *ns, int index)
{
    return &ns->state->windows[index];
}

/* Counts one sample in ns into a histogram. Async-signal-safe. */
void bh_histogram_record(struct bh_histogram *histogram, int64_t ns);

/* Changes the live limit. Raising frees permits at once; lowering retires
 * free permits now and the rest as they are given back. Never blocks.
 * The limit never goes below the reserves (ERANGE). */
int bh_compartment_set_limit(struct bh_namespace *ns, int index, int limit);
/* The same, only while the live limit is still `expected` (checked under
 * the namespace lock): -1 with errno EAGAIN when another writer moved it. */
int bh_compartment_set_limit_if(struct bh_namespace *ns, int index, int expected,
                                int limit);
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
