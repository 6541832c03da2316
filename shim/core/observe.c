/* Recording for `bulkhead discover` (observe.h). Process-private state,
 * no locks, so that connect() and close() stay async-signal-safe:
 *   - the names the resolver gave, by address: 64 direct-mapped entries,
 *     each behind a sequence word (odd while written; a reader that
 *     sees it move takes no name, and a writer that finds it odd skips);
 *   - per fd below BH_OBSERVED_FDS, the destination slot of its connect
 *     and when it opened (0: the connect's result is not known yet),
 *     taken by atomic exchange, so of a close and a connect on the same
 *     number exactly one ends it.
 * The shared table (permits/destinations.c) says its own rules. A socket
 * numbered above the tracked fds has its connects counted, not its holds. */
#include "core/observe.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "permits/destinations.h"

enum { NAME_CACHE = 64, BH_OBSERVED_FDS = 4096 };

int bh_observing;
static struct bh_destinations *table;

struct resolved {
    _Atomic uint32_t sequence;
    int family;
    uint8_t address[16];
    char name[BH_DESTINATION_NAME_MAX];
};
static struct resolved resolved[NAME_CACHE];

/* slot + 1 in the low 15 bits (0: none), CONNECTING while a non-blocking
 * connect's result is not known, and above them the us after started_us
 * + 1 that it opened (0: not yet): one word, so one exchange takes all. */
enum { SLOT_BITS = 16, SLOT_MASK = (1 << 15) - 1, CONNECTING = 1 << 15 };
_Static_assert((int)BH_DESTINATIONS < (int)SLOT_MASK, "a slot + 1 fits its bits");
static _Atomic uint64_t observed[BH_OBSERVED_FDS];
static int64_t started_us;

static int64_t monotonic_us(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
}

/* Microseconds since start-up, + 1: never 0. */
static uint64_t opened_now(void)
{
    return (uint64_t)(monotonic_us() - started_us + 1);
}

void bh_observe_start(uid_t uid, const char *namespace_name)
{
    started_us = monotonic_us();
    table = bh_destinations_open(uid, namespace_name, 1);
    bh_observing = table != NULL;
}

void bh_observe_after_fork_child(void)
{
    if (bh_observing)
        memset((void *)observed, 0, sizeof observed);
}

static int address_length(int family)
{
    return family == AF_INET ? 4 : 16;
}

static uint32_t address_hash(int family, const void *address)
{
    uint32_t hash = 2166136261u;
    const unsigned char *p = address;
    for (int i = 0; i < address_length(family); i++)
        hash = (hash ^ p[i]) * 16777619u;
    return hash % NAME_CACHE;
}

void bh_observe_resolved_here(const char *name, int family, const void *address)
{
    size_t length = strlen(name);
    if (length >= BH_DESTINATION_NAME_MAX || (family != AF_INET && family != AF_INET6))
        return;
    struct resolved *entry = &resolved[address_hash(family, address)];
    uint32_t sequence = atomic_load(&entry->sequence);
    if ((sequence & 1) || !atomic_compare_exchange_strong(&entry->sequence, &sequence,
                                                          sequence + 1))
        return;
    entry->family = family;
    memcpy(entry->address, address, (size_t)address_length(family));
    memcpy(entry->name, name, length + 1);
    atomic_store_explicit(&entry->sequence, sequence + 2, memory_order_release);
}

/* The name the resolver last gave for the address, into name; 0 if none. */
static int name_of(int family, const void *address, char name[BH_DESTINATION_NAME_MAX])
{
    struct resolved *entry = &resolved[address_hash(family, address)];
    uint32_t sequence = atomic_load_explicit(&entry->sequence, memory_order_acquire);
    if (!sequence || (sequence & 1) || entry->family != family ||
        memcmp(entry->address, address, (size_t)address_length(family)) != 0)
        return 0;
    memcpy(name, entry->name, BH_DESTINATION_NAME_MAX);
    name[BH_DESTINATION_NAME_MAX - 1] = '\0';
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&entry->sequence, memory_order_relaxed) == sequence;
}

static const void *address_of(const struct sockaddr *to)
{
    return to->sa_family == AF_INET
        ? (const void *)&((const struct sockaddr_in *)to)->sin_addr
        : (const void *)&((const struct sockaddr_in6 *)to)->sin6_addr;
}

/* What fd's record held, taken: its slot (-1: none) and its open time
 * (0: not open). */
static int take_record(int fd, int64_t *opened)
{
    if ((unsigned)fd >= BH_OBSERVED_FDS)
        return -1;
    uint64_t record = atomic_exchange(&observed[fd], 0);
    *opened = (int64_t)(record >> SLOT_BITS);
    return (int)(record & SLOT_MASK) - 1;
}

static void end_record(int fd)
{
    int64_t opened;
    int slot = take_record(fd, &opened);
    if (slot >= 0 && opened)
        bh_destination_closed(table, slot, ((int64_t)opened_now() - opened) * 1000);
}

void bh_observe_connect(int fd, const struct sockaddr *to)
{
    int saved_errno = errno;
    end_record(fd);  /* a close we did not see (a raw syscall, dup2 onto it) */
    int slot = bh_destination_slot(table, to);
    if (slot >= 0) {
        char name[BH_DESTINATION_NAME_MAX];
        int named = name_of(to->sa_family, address_of(to), name);
        bh_destination_connect(table, slot, named ? name : NULL);
        if ((unsigned)fd < BH_OBSERVED_FDS)
            atomic_store(&observed[fd], (uint64_t)(slot + 1));
    }
    errno = saved_errno;
}

void bh_observe_refused(int fd)
{
    int64_t opened;
    int slot = take_record(fd, &opened);
    if (slot >= 0)
        bh_destination_refused(table, slot);
}

void bh_observe_left(int fd, int call_failed)
{
    if ((unsigned)fd >= BH_OBSERVED_FDS)
        return;
    uint64_t record = atomic_load(&observed[fd]);
    int slot = (int)(record & SLOT_MASK) - 1;
    if (slot < 0 || (record >> SLOT_BITS))  /* none, or open already (connect again) */
        return;
    if (!call_failed || errno == EINPROGRESS || errno == EINTR) {
        uint64_t opened = opened_now() << SLOT_BITS | (uint64_t)(slot + 1) |
                          (call_failed ? CONNECTING : 0);
        if (atomic_compare_exchange_strong(&observed[fd], &record, opened))
            bh_destination_opened(table, slot);
    } else if (errno != EALREADY && atomic_compare_exchange_strong(&observed[fd], &record, 0)) {
        bh_destination_failed(table, slot);
    }
}

void bh_observe_connect_result(int fd, int err)
{
    if ((unsigned)fd >= BH_OBSERVED_FDS)
        return;
    uint64_t record = atomic_load(&observed[fd]);
    if (!(record & CONNECTING))
        return;
    if (!err) {
        atomic_compare_exchange_strong(&observed[fd], &record, record & ~(uint64_t)CONNECTING);
    } else if (atomic_compare_exchange_strong(&observed[fd], &record, 0)) {
        int slot = (int)(record & SLOT_MASK) - 1;
        bh_destination_failed(table, slot);
        bh_destination_closed(table, slot, -1);
    }
}

void bh_observe_ended(int fd)
{
    int saved_errno = errno;
    end_record(fd);
    errno = saved_errno;
}
