/* The destinations table (`[global] observe = yes`, `bulkhead discover`).
 *
 * What is shared: one SysV shared memory segment per user and namespace,
 * under a key hashed from "bulkhead/destinations/1/<euid>/<namespace>",
 * mode 0600, checked to be the user's own as the namespace's are; it is
 * attached only by processes that observe and by `discover`. A fresh
 * segment is zero: its first recorder stamps when it started. It holds
 * BH_DESTINATIONS slots and the count of destinations that found no room.
 *
 * Who writes it: every observing process of the user, with atomics and no
 * lock, so each call here is async-signal-safe (connect() and close() may
 * run in a signal handler). A destination's slot is found by hashing its
 * address and port and probing on; a free slot is claimed by a
 * compare-and-swap of its state from FREE to CLAIMED, its key written,
 * then its state set READY with release order: readers and recorders
 * look only at READY slots. Two processes that meet a new destination at
 * once may claim two slots for it; discover adds them up. Names are
 * claimed the same way, one word per name. The counters are atomics;
 * `open` counts up at a connection's start and down at its end, and the
 * recorder whose count passes the peak raises it by compare-and-swap.
 *
 * What a death mid-update costs: a recorder killed between claim and
 * READY leaves that slot (or name) claimed and unused for the table's
 * life; one killed while a connection is open leaves `open` one high, so
 * later peaks read high by one: figures, never a permit (nothing here
 * touches a semaphore). */
#include "permits/destinations.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <time.h>

#include "permits/permits_internal.h"
#include "permits/window.h"

enum { FREE = 0, CLAIMED = 1, READY = 2, PROBES = 64 };
#define DESTINATIONS_MAGIC 0x42484431u  /* "BHD1" */

struct destination {
    _Atomic uint32_t state;
    uint16_t family;
    uint16_t port;                 /* network order */
    uint8_t address[16];
    _Atomic uint64_t connects, refused, failed;
    _Atomic int64_t open, peak;
    _Atomic uint32_t name_state[BH_DESTINATION_NAMES];
    char names[BH_DESTINATION_NAMES][BH_DESTINATION_NAME_MAX];
    _Atomic uint32_t hold[BH_LOGHIST_BUCKETS];  /* hold time, microseconds */
};

struct bh_destinations {
    _Atomic uint32_t magic;
    _Atomic int64_t started_ns;    /* CLOCK_REALTIME; 0: nothing recorded yet */
    _Atomic uint64_t dropped;      /* destinations that found no slot */
    struct destination slots[BH_DESTINATIONS];
};

static int64_t realtime_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static key_t table_key(uid_t uid, const char *name)
{
    char versioned[128];
    snprintf(versioned, sizeof versioned, "bulkhead/destinations/1/%u/%s",
             (unsigned)uid, name);
    uint32_t hash = 2166136261u;                  /* FNV-1a, as the namespace's */
    for (const unsigned char *p = (const unsigned char *)versioned; *p; p++)
        hash = (hash ^ *p) * 16777619u;
    return (key_t)(hash ? hash : 1);
}

struct bh_destinations *bh_destinations_open(uid_t uid, const char *name, int create)
{
    int id = shmget(table_key(uid, name), sizeof(struct bh_destinations),
                    create ? IPC_CREAT | 0600 : 0);
    struct shmid_ds info;
    if (id < 0 || shmctl(id, IPC_STAT, &info) < 0)
        return NULL;
    if (!bh_owned_by(&info.shm_perm, uid) || info.shm_segsz != sizeof(struct bh_destinations)) {
        errno = EPERM;
        return NULL;
    }
    struct bh_destinations *table = shmat(id, NULL, 0);
    if (table == (void *)-1)
        return NULL;
    uint32_t fresh = 0;
    atomic_compare_exchange_strong(&table->magic, &fresh, DESTINATIONS_MAGIC);
    int64_t unstarted = 0;
    atomic_compare_exchange_strong(&table->started_ns, &unstarted, realtime_ns());
    return table;
}

void bh_destinations_close(struct bh_destinations *table)
{
    if (table)
        shmdt(table);
}

int bh_destinations_remove(uid_t uid, const char *name)
{
    int id = shmget(table_key(uid, name), 0, 0);
    struct shmid_ds info;
    return id >= 0 && shmctl(id, IPC_STAT, &info) == 0 && info.shm_perm.cuid == uid &&
           shmctl(id, IPC_RMID, NULL) == 0;
}

/* The key of an address: family, port and 16 address bytes. */
struct key {
    uint16_t family, port;
    uint8_t address[16];
};

static int key_of(const struct sockaddr *to, struct key *key)
{
    memset(key, 0, sizeof *key);
    key->family = to->sa_family;
    if (to->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)to;
        key->port = in->sin_port;
        memcpy(key->address, &in->sin_addr, 4);
        return 0;
    }
    if (to->sa_family != AF_INET6)
        return -1;
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)to;
    key->port = in6->sin6_port;
    memcpy(key->address, &in6->sin6_addr, 16);
    return 0;
}

static uint32_t key_hash(const struct key *key)
{
    uint32_t hash = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)key; p < (const unsigned char *)(key + 1); p++)
        hash = (hash ^ *p) * 16777619u;
    return hash;
}

static int holds_key(struct destination *slot, const struct key *key)
{
    return slot->family == key->family && slot->port == key->port &&
           memcmp(slot->address, key->address, sizeof key->address) == 0;
}

int bh_destination_slot(struct bh_destinations *table, const struct sockaddr *to)
{
    struct key key;
    if (key_of(to, &key) < 0)
        return -1;
    uint32_t first = key_hash(&key);
    for (uint32_t probe = 0; probe < PROBES; probe++) {
        uint32_t index = (first + probe) % BH_DESTINATIONS;
        struct destination *slot = &table->slots[index];
        uint32_t state = atomic_load_explicit(&slot->state, memory_order_acquire);
        if (state == READY && holds_key(slot, &key))
            return (int)index;
        if (state != FREE ||
            !atomic_compare_exchange_strong(&slot->state, &state, CLAIMED))
            continue;
        slot->family = key.family;
        slot->port = key.port;
        memcpy(slot->address, key.address, sizeof key.address);
        atomic_store_explicit(&slot->state, READY, memory_order_release);
        return (int)index;
    }
    atomic_fetch_add_explicit(&table->dropped, 1, memory_order_relaxed);
    return -1;
}

/* A name not kept yet goes into the first free name of the slot. */
static void note_name(struct destination *slot, const char *name)
{
    size_t length = strnlen(name, BH_DESTINATION_NAME_MAX);
    if (length == 0 || length == BH_DESTINATION_NAME_MAX)
        return;
    for (int i = 0; i < BH_DESTINATION_NAMES; i++) {
        uint32_t state = atomic_load_explicit(&slot->name_state[i], memory_order_acquire);
        if (state == READY && strcmp(slot->names[i], name) == 0)
            return;
        if (state != FREE ||
            !atomic_compare_exchange_strong(&slot->name_state[i], &state, CLAIMED))
            continue;
        memcpy(slot->names[i], name, length + 1);
        atomic_store_explicit(&slot->name_state[i], READY, memory_order_release);
        return;
    }
}

void bh_destination_connect(struct bh_destinations *table, int slot, const char *name)
{
    atomic_fetch_add_explicit(&table->slots[slot].connects, 1, memory_order_relaxed);
    if (name)
        note_name(&table->slots[slot], name);
}

void bh_destination_refused(struct bh_destinations *table, int slot)
{
    atomic_fetch_add_explicit(&table->slots[slot].refused, 1, memory_order_relaxed);
}

void bh_destination_failed(struct bh_destinations *table, int slot)
{
    atomic_fetch_add_explicit(&table->slots[slot].failed, 1, memory_order_relaxed);
}

void bh_destination_opened(struct bh_destinations *table, int slot)
{
    struct destination *destination = &table->slots[slot];
    int64_t open = atomic_fetch_add_explicit(&destination->open, 1, memory_order_relaxed) + 1;
    int64_t peak = atomic_load_explicit(&destination->peak, memory_order_relaxed);
    while (open > peak && !atomic_compare_exchange_weak(&destination->peak, &peak, open))
        ;
}

void bh_destination_closed(struct bh_destinations *table, int slot, int64_t held_ns)
{
    struct destination *destination = &table->slots[slot];
    atomic_fetch_sub_explicit(&destination->open, 1, memory_order_relaxed);
    if (held_ns < 0)
        return;
    uint64_t us = held_ns > 0 ? (uint64_t)held_ns / 1000 : 0;
    atomic_fetch_add_explicit(&destination->hold[bh_loghist_bucket(us)], 1,
                              memory_order_relaxed);
}

double bh_destinations_window_s(const struct bh_destinations *table)
{
    int64_t started = atomic_load(&table->started_ns);
    return started ? (double)(realtime_ns() - started) / 1e9 : 0;
}

uint64_t bh_destinations_dropped(const struct bh_destinations *table)
{
    return atomic_load(&table->dropped);
}

int bh_destination_read(const struct bh_destinations *table, int slot,
                        struct bh_destination_view *view)
{
    const struct destination *destination = &table->slots[slot];
    if (atomic_load_explicit(&destination->state, memory_order_acquire) != READY)
        return -1;
    memset(view, 0, sizeof *view);
    view->family = destination->family;
    memcpy(view->address, destination->address, sizeof view->address);
    view->port = ntohs(destination->port);
    for (int i = 0; i < BH_DESTINATION_NAMES; i++)
        if (atomic_load_explicit(&destination->name_state[i], memory_order_acquire) == READY)
            memcpy(view->names[i], destination->names[i], BH_DESTINATION_NAME_MAX);
    view->connects = atomic_load(&destination->connects);
    view->refused = atomic_load(&destination->refused);
    view->failed = atomic_load(&destination->failed);
    view->peak = atomic_load(&destination->peak);
    uint64_t counts[BH_LOGHIST_BUCKETS];
    for (int i = 0; i < BH_LOGHIST_BUCKETS; i++) {
        counts[i] = atomic_load_explicit(&destination->hold[i], memory_order_relaxed);
        view->holds += counts[i];
    }
    view->hold_p50_ms = bh_loghist_quantile_us(counts, view->holds, 0.5) / 1e3;
    view->hold_p99_ms = bh_loghist_quantile_us(counts, view->holds, 0.99) / 1e3;
    return 0;
}
