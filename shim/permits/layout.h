/* The layout of a namespace's shared memory and semaphore set: only the
 * files of shim/permits/ (and the unit tests of permits) include this.
 * Everyone else sees views (permits.h) and operations; the breaker, the
 * adaptive controller and the window own their fields' meaning and are
 * handed where they live (bh_breaker_fields, bh_adaptive_fields,
 * bh_window_of). Any change here bumps BH_LAYOUT_VERSION (permits.h). */
#ifndef BH_PERMITS_LAYOUT_H
#define BH_PERMITS_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "permits/permits.h"

enum {
    BH_SEM_LOCK = 0,            /* registration lock, taken with SEM_UNDO */
    BH_MAX_RESERVE_SLOTS = 256, /* reserves per namespace, all compartments */
    BH_HOLDERS_FIRST = 4096,    /* holder records in the main segment */
    BH_HOLDERS_PER_PAGE = 4096, /* in each page added when those run out */
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

/* The sum first: with the shortest buckets, on one cache line. */
struct bh_histogram {
    _Atomic int64_t sum_ns;
    _Atomic uint64_t buckets[BH_HISTOGRAM_BUCKETS + 1];  /* not cumulative */
};

/* Sockets several processes hold (socket_records.c says what the fields
 * mean and who writes them). Slots are claimed lowest first, so only the
 * pages of as many records as were ever live at once are touched. */
enum { BH_SOCKET_RECORDS = 65536 };

struct bh_socket_record {
    _Atomic uint64_t state;     /* references, generation, LIVE and BUSY */
    _Atomic uint64_t inode;     /* the socket's st_ino */
    uint64_t netns;             /* st_ino of the net namespace it lives in */
    int32_t compartment;
    int32_t weight;
    uint32_t common;            /* parked permits of the common pool */
    uint32_t reserved;          /* ... and of reserve `reserve` */
    int32_t reserve;
    uint16_t family;            /* AF_INET, AF_INET6; 0: address unknown */
    uint16_t local_port;        /* network order, as sock_diag wants them */
    uint16_t remote_port;
    uint16_t unlisted;          /* 1: no process but its maker finds it */
    uint32_t local[4];
    uint32_t remote[4];
    int32_t maker;              /* unlisted: the pid that settles it while alive */
};

struct bh_socket_records {
    _Atomic uint32_t live;      /* records LIVE or being made: 0 spares scans */
    _Atomic uint32_t used;      /* no slot at or above it was ever claimed */
    _Atomic uint32_t free_hint; /* the lowest slot that may be free */
    _Atomic uint32_t full_said; /* 1 once a share found the table full (logged) */
    _Atomic uint64_t refused;   /* shares refused: the table was full */
    _Atomic int64_t reap_after_ns;  /* CLOCK_MONOTONIC: no reap starts before it */
    struct bh_socket_record records[BH_SOCKET_RECORDS];
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
 * atomics by many processes; no lock guards them. What a take and its
 * give-back read or write comes first, on one cache line of its own. */
struct bh_shared_compartment {
    _Alignas(64) _Atomic int32_t limit;  /* live limit: authoritative over rules.ini */
    _Atomic uint32_t debt_hint;   /* nonzero while BH_SEM_DEBT may be > 0 */
    _Atomic uint32_t owed_hint;   /* some reserve's ROWED may be > 0 */
    _Atomic int32_t reserve_count;  /* set at registration */
    _Atomic uint64_t acquired;    /* permits granted */
    _Atomic int64_t holders_hint; /* in use, as counted by acquire/release; a
                                     SIGKILLed holder leaves it high until its
                                     process slot is reaped. Feeds peak only. */
    _Atomic int64_t peak_in_use;
    _Atomic uint32_t registered;  /* 1 once name, limit and semaphore are set */
    _Atomic int32_t reserved;     /* sum of the reserves' live sizes */
    /* mode = shadow: permits the common pool holds past the limit, which
     * only connects enforce would refuse or make wait take (pools.c);
     * 0: enforce. */
    _Atomic int32_t headroom;
    char name[BH_NAME_MAX];       /* written once under the registration lock */
    _Atomic uint64_t rejected;    /* refused at once */
    _Atomic uint64_t timed_out;   /* waited wait_ms, then refused */
    _Atomic uint64_t waits;       /* acquisitions that had to wait */
    _Atomic int64_t wait_ns_max;  /* the longest wait_time sample */
    _Atomic uint64_t connect_failures; /* refused, unreachable, timed out, reset */
    _Atomic uint64_t connect_timeouts; /* ETIMEDOUT on connect */
    _Atomic uint64_t io_timeouts;      /* io_timeout_ms expiries */
    struct bh_histogram connect_time;  /* connect() to established */
    struct bh_histogram hold_time;     /* permit taken to permit given back */
    /* Every wait for a permit, however it ended: granted (waits), cut
     * at its bound (timed_out), or by a signal or the kernel; a caller
     * refused at once never waited and is not in it. Each waiter adds
     * its own sample once its wait is over (pools.c, relaxed atomics, as
     * for every histogram); one killed meanwhile adds none, one killed
     * between a bucket and the sum leaves a sample without its time. */
    struct bh_histogram wait_time;
    struct bh_fleet_shared fleet;
    _Atomic uint64_t per_process_refused; /* refused: the process was at per_process */
    _Atomic uint64_t bypassed;            /* connects let through by bypass */
    _Atomic uint64_t shadow_refused;      /* let through that enforce would refuse */
    _Atomic uint64_t shadow_waited;       /* ... that enforce would make wait */
    struct bh_reserve_shared reserves[BH_MAX_RESERVES];
};
_Static_assert(offsetof(struct bh_shared_compartment, headroom) + sizeof(int32_t) <= 64,
               "what a take touches fits one cache line");

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
    /* Each compartment's breaker and adaptive controller: the fields their
     * rooms own (breaker_fields.h, adaptive_fields.h), handed out by
     * index. */
    struct bh_breaker_shared breakers[BH_MAX_COMPARTMENTS];
    struct bh_adaptive_shared adaptives[BH_MAX_COMPARTMENTS];
};

#define BH_STATE_MAGIC 0x42484b31u /* "BHK1" */
#define BH_PAGE_MAGIC 0x42484b50u  /* "BHKP" */

#endif
