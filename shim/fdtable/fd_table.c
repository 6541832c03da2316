/* The fd table: fd -> connection, connection -> refcount and compartment.
 *
 * Shared state (this process only): two chunked arrays, allocated with mmap
 * on first use and never freed. fd_entries[fd] packs the fd's kind (2 bits)
 * and its connection id + 1 (0 = none). connections[id] holds a refcount
 * equal to the number of fd entries naming it, and the compartment.
 *
 * Locks: none. Entries change by atomic exchange or compare-and-swap; a
 * connection's refcount by atomic add. Invariant: take the reference before
 * publishing an entry, remove the entry before dropping the reference. The
 * close path is an exchange, a decrement and, for the last fd, the permit
 * release (one semop): all async-signal-safe, so a signal handler may close.
 *
 * Connection ids: the connect()ing fd's own number is tried first, so the
 * usual allocation is a single compare-and-swap. */
#include "fdtable/fd_table.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

enum {
    CHUNK_BITS = 12,
    CHUNK_SIZE = 1 << CHUNK_BITS,   /* entries per chunk */
    CHUNK_COUNT = 256,              /* 1 Mi fds: the usual hard RLIMIT_NOFILE */
    MAX_FDS = CHUNK_SIZE * CHUNK_COUNT,
    KIND_BITS = 2,
    KIND_MASK = (1 << KIND_BITS) - 1,
};

struct connection {
    _Atomic uint32_t refs;
    _Atomic int32_t compartment;
};

static _Atomic(_Atomic uint32_t *) fd_entries[CHUNK_COUNT];
static _Atomic(struct connection *) connections[CHUNK_COUNT];

/* Maps the chunk for a slot the first time it is needed. */
__attribute__((noinline))
static void *map_chunk(void *_Atomic *slot, size_t item_size)
{
    void *chunk = NULL;
    void *fresh = mmap(NULL, CHUNK_SIZE * item_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED)
        return NULL;
    if (!atomic_compare_exchange_strong(slot, &chunk, fresh)) {
        munmap(fresh, CHUNK_SIZE * item_size); /* another thread won */
        return chunk;
    }
    return fresh;
}

/* Returns the chunk holding slot `index`, mapping it when `create`. */
static inline void *chunk_for(void *_Atomic *chunks, unsigned index,
                              size_t item_size, int create)
{
    void *_Atomic *slot = &chunks[index >> CHUNK_BITS];
    void *chunk = atomic_load_explicit(slot, memory_order_acquire);
    if (chunk || !create)
        return chunk;
    return map_chunk(slot, item_size);
}

static _Atomic uint32_t *entry_for(int fd, int create)
{
    if (fd < 0 || fd >= MAX_FDS)
        return NULL;
    _Atomic uint32_t *chunk = chunk_for((void *_Atomic *)fd_entries, (unsigned)fd,
                                        sizeof *chunk, create);
    return chunk ? &chunk[fd & (CHUNK_SIZE - 1)] : NULL;
}

static struct connection *connection_for(uint32_t id, int create)
{
    struct connection *chunk = chunk_for((void *_Atomic *)connections, id,
                                         sizeof *chunk, create);
    return chunk ? &chunk[id & (CHUNK_SIZE - 1)] : NULL;
}

static uint32_t entry_connection(uint32_t entry) { return entry >> KIND_BITS; }

static void drop_reference(uint32_t entry)
{
    uint32_t id_plus_one = entry_connection(entry);
    if (!id_plus_one)
        return;
    struct connection *connection = connection_for(id_plus_one - 1, 0);
    /* Read before the decrement: once it reaches 0 the slot may be reused. */
    int compartment = atomic_load(&connection->compartment);
    if (atomic_fetch_sub(&connection->refs, 1) == 1)
        bh_connection_ended(compartment);
}

enum bh_fd_kind bh_fd_kind(int fd)
{
    _Atomic uint32_t *entry = entry_for(fd, 0);
    return entry ? (enum bh_fd_kind)(atomic_load(entry) & KIND_MASK) : BH_FD_UNKNOWN;
}

int bh_fd_compartment(int fd)
{
    _Atomic uint32_t *entry = entry_for(fd, 0);
    uint32_t id_plus_one = entry ? entry_connection(atomic_load(entry)) : 0;
    if (!id_plus_one)
        return -1;
    return atomic_load(&connection_for(id_plus_one - 1, 0)->compartment);
}

void bh_fd_new(int fd, enum bh_fd_kind kind)
{
    _Atomic uint32_t *entry = entry_for(fd, kind != BH_FD_UNKNOWN);
    if (entry && (kind != BH_FD_UNKNOWN || atomic_load(entry) != 0))
        drop_reference(atomic_exchange(entry, (uint32_t)kind));
}

uint32_t bh_fd_detach(int fd)
{
    _Atomic uint32_t *entry = entry_for(fd, 0);
    if (!entry || atomic_load_explicit(entry, memory_order_relaxed) == 0)
        return 0;
    return atomic_exchange(entry, 0);
}

void bh_fd_release(uint32_t detached)
{
    drop_reference(detached);
}

void bh_fd_closing(int fd)
{
    drop_reference(bh_fd_detach(fd));
}

void bh_fd_closing_range(unsigned first, unsigned last)
{
    if (last >= MAX_FDS)
        last = MAX_FDS - 1;
    for (unsigned fd = first; fd <= last; fd++) {
        if (!atomic_load_explicit(&fd_entries[fd >> CHUNK_BITS], memory_order_acquire)) {
            fd |= CHUNK_SIZE - 1;   /* skip a chunk never used */
            continue;
        }
        bh_fd_closing((int)fd);
    }
}

void bh_fd_duplicated(int oldfd, int newfd)
{
    if (oldfd == newfd)
        return;
    _Atomic uint32_t *source = entry_for(oldfd, 0);
    uint32_t copied = source ? atomic_load(source) : 0;
    uint32_t id_plus_one = entry_connection(copied);
    if (id_plus_one)
        atomic_fetch_add(&connection_for(id_plus_one - 1, 0)->refs, 1);
    _Atomic uint32_t *target = entry_for(newfd, copied != 0);
    if (target)
        drop_reference(atomic_exchange(target, copied));
    else if (id_plus_one)
        drop_reference(copied);  /* no room to track the copy: undo the ref */
}

/* A free connection slot: the fd's own number first, then a scan. */
static uint32_t allocate_connection(int fd, int compartment)
{
    for (uint32_t tries = 0; tries < MAX_FDS; tries++) {
        uint32_t id = ((uint32_t)fd + tries) % MAX_FDS;
        struct connection *connection = connection_for(id, 1);
        uint32_t expected = 0;
        if (connection && atomic_compare_exchange_strong(&connection->refs,
                                                         &expected, 1)) {
            atomic_store(&connection->compartment, compartment);
            return id + 1;
        }
    }
    return 0;
}

int bh_fd_attach(int fd, int compartment)
{
    _Atomic uint32_t *entry = entry_for(fd, 1);
    if (!entry)
        return -1;
    uint32_t id_plus_one = allocate_connection(fd, compartment);
    if (!id_plus_one)
        return -1;
    uint32_t current = atomic_load(entry);
    uint32_t wanted;
    do {
        if (entry_connection(current)) {
            atomic_store(&connection_for(id_plus_one - 1, 0)->refs, 0);
            return -1;
        }
        wanted = (id_plus_one << KIND_BITS) | (current & KIND_MASK);
    } while (!atomic_compare_exchange_weak(entry, &current, wanted));
    return 0;
}

void bh_fd_for_each(void (*visit)(int fd, uint32_t connection, int compartment,
                                  void *ctx), void *ctx)
{
    for (unsigned chunk = 0; chunk < CHUNK_COUNT; chunk++) {
        _Atomic uint32_t *entries = atomic_load(&fd_entries[chunk]);
        for (unsigned i = 0; entries && i < CHUNK_SIZE; i++) {
            uint32_t id_plus_one = entry_connection(atomic_load(&entries[i]));
            if (id_plus_one)
                visit((int)(chunk * CHUNK_SIZE + i), id_plus_one - 1,
                      atomic_load(&connection_for(id_plus_one - 1, 0)->compartment),
                      ctx);
        }
    }
}

void bh_fd_forget_all(void)
{
    for (unsigned chunk = 0; chunk < CHUNK_COUNT; chunk++) {
        _Atomic uint32_t *entries = atomic_load(&fd_entries[chunk]);
        struct connection *pool = atomic_load(&connections[chunk]);
        if (entries)
            memset((void *)entries, 0, CHUNK_SIZE * sizeof *entries);
        if (pool)
            memset((void *)pool, 0, CHUNK_SIZE * sizeof *pool);
    }
}
