/* The fd table: fd -> connection, connection -> refcount and compartment.
 *
 * Shared state (this process only): two chunked arrays, allocated with mmap
 * on first use and never freed, but for their first chunks (fds and
 * connection ids below 4096), which are static. fd_entries[fd] packs the
 * fd's kind (2 bits) and its connection id + 1 (0 = none).
 * bh_fd_connections[id] holds a refcount equal to the number of fd entries
 * naming it, and the compartment.
 *
 * Locks: none. Entries change by atomic exchange or compare-and-swap; a
 * connection's refcount by atomic add. Invariant: take the reference before
 * publishing an entry, remove the entry before dropping the reference. A
 * reference is only ever added to a live connection (refcount > 0), so a
 * dup racing the last close cannot revive a connection that already ended.
 * The close path is an exchange, a getpid() and a decrement: all
 * async-signal-safe, so a signal handler may close.
 *
 * Owner: the memory is shared with vfork children (Python's subprocess,
 * posix_spawn), which are other processes holding none of our permits. So
 * every change to a tracked entry first checks that getpid() is the
 * owner's; in any other process the table is read-only and nothing ends.
 * The syscall is paid only when a tracked entry is about to change. The one
 * write a non-owner can make is a kind hint on an entry that tracks
 * nothing (socket() in a vfork child, which POSIX does not allow anyway).
 *
 * A process that dies mid-operation takes the table with it: it is private
 * memory; its permits go back through SEM_UNDO (see permits.c).
 *
 * Guards (bh_fd_guard): a connection's guard word counts the guards
 * held on it (HELD) by the threads that act on fds behind the program's
 * back (core/stall.c's watchdog, core/async_connect.c's waiters: at most
 * one each per connection), and has RETIRED, set by dup2/dup3 before
 * they replace one of its fds. Guard and close are Dekker's pair: the guard sets HELD and
 * then reads the fd's entry; a close exchanges the entry and then reads
 * HELD (all sequentially consistent), so either the guard sees the fd
 * gone or the close sees HELD and spins until it clears, before the real
 * close: the number cannot be handed to another socket while a guard is
 * held on it. A close reads HELD only once guards_taken says some guard
 * was ever taken, which the guard sets before HELD (the same pair, one
 * level up). HELD is held across a few syscalls (a shutdown; a connect,
 * and the readiness layer's show of its verdict) by a thread that blocks
 * every signal of the program, so a close in a signal handler spins
 * briefly (the show takes the readiness lock: see core/async_connect.c). dup2 onto an fd needs no entry change
 * first: it sets RETIRED by an atomic or on the same word, so one of the
 * two sees the other. A generation, bumped at each attach before the
 * entry is published and kept across a reset, tells a guard that a slot
 * was reused by another connection. Threads do not survive fork: the
 * child clears HELD (keep_shared).
 *
 * Connection ids: the connect()ing fd's own number is tried first, so the
 * usual allocation is a single compare-and-swap. */
#include "fdtable/fd_table.h"
#include "libc/inlined.h"

#include <stdatomic.h>
#include <stddef.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum {
    CHUNK_BITS = BH_FD_CHUNK_BITS,
    CHUNK_SIZE = 1 << CHUNK_BITS,   /* entries per chunk */
    /* Every fd number Linux can hand out (fs.nr_open tops out just under
     * 2^31), and as many again so that bh_fd_entry() can index with a
     * negative fd taken as unsigned instead of testing it: that half is
     * never mapped. Zero pages until a chunk is used. */
    FD_CHUNKS = (uint32_t)((1ull << 32) / CHUNK_SIZE),
    KIND_BITS = BH_FD_KIND_BITS,
    KIND_MASK = (1 << KIND_BITS) - 1,
    /* Connection ids fit the bits an entry has beside the kind. */
    CONNECTION_CHUNKS = (1u << (32 - KIND_BITS)) / CHUNK_SIZE,
};
/* id + 1 shifted past the kind must fit 32 bits. */
#define MAX_CONNECTIONS ((1u << (32 - KIND_BITS)) - 1)
_Static_assert(sizeof(struct bh_fd_connection) == 1u << BH_FD_KIND_BITS,
               "an entry past its kind is its connection's offset (fd_table.h)");

/* Named for the inline bh_fd_watched() in fd_table.h, which reads them.
 * The first chunk, fds 0 to 4095 (nearly every program's all), is static:
 * the hooks reach it without a pointer to load and test. It is chunk 0
 * once anything there is tracked. */
_Atomic uint32_t bh_fd_first[CHUNK_SIZE];
_Atomic(_Atomic uint32_t *) bh_fd_entries[FD_CHUNKS];
_Atomic(struct bh_fd_connection *) bh_fd_connections[CONNECTION_CHUNKS];
#define fd_entries bh_fd_entries
/* The same for connections: ids 0 to 4095 (those of fds below 4096 but
 * after a scan) are here, reached without a pointer to load and test.
 * The first attach names it as chunk 0, for the scans (reset, fork),
 * which touch none of its pages before. */
struct bh_fd_connection bh_fd_connection_slots[CHUNK_SIZE + 1];
#define first_connections (bh_fd_connection_slots + 1)

static _Atomic unsigned fd_chunks_in_use;  /* scans stop here */
static _Atomic pid_t owner;  /* 0 until start-up: nothing is tracked yet */

/* Called only when a tracked entry is about to change. */
static int owned_here(void)
{
    pid_t owning = atomic_load_explicit(&owner, memory_order_relaxed);
    return owning == 0 || owning == getpid();
}

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
static inline __attribute__((always_inline)) void *
chunk_for(void *_Atomic *chunks, unsigned index, size_t item_size, int create)
{
    void *_Atomic *slot = &chunks[index >> CHUNK_BITS];
    void *chunk = atomic_load_explicit(slot, memory_order_acquire);
    if (__builtin_expect(chunk != NULL, 1) || !create)
        return chunk;
    return map_chunk(slot, item_size);
}

/* The first entry of an fd chunk: map it (chunk 0 is bh_fd_first), and
 * let scans reach it. */
__attribute__((noinline))
static _Atomic uint32_t *map_fd_chunk(unsigned fd)
{
    _Atomic uint32_t *chunk = NULL;
    if (fd >> CHUNK_BITS == 0 &&
        !atomic_compare_exchange_strong(&fd_entries[0], &chunk, bh_fd_first))
        return chunk;  /* set already */
    if (fd >> CHUNK_BITS == 0)
        chunk = bh_fd_first;
    else
        chunk = map_chunk((void *_Atomic *)&fd_entries[fd >> CHUNK_BITS], sizeof *chunk);
    unsigned in_use = atomic_load(&fd_chunks_in_use);
    unsigned needed = (fd >> CHUNK_BITS) + 1;
    while (chunk && in_use < needed &&
           !atomic_compare_exchange_weak(&fd_chunks_in_use, &in_use, needed))
        ;
    return chunk;
}

/* Above the first chunk, out of line. */
__attribute__((noinline))
static _Atomic uint32_t *entry_above_first(int fd, int create)
{
    if (fd < 0)
        return NULL;
    _Atomic uint32_t *chunk = chunk_for((void *_Atomic *)fd_entries, (unsigned)fd,
                                        sizeof *chunk, 0);
    if (!chunk && create)
        chunk = map_fd_chunk((unsigned)fd);
    return chunk ? &chunk[fd & (CHUNK_SIZE - 1)] : NULL;
}

/* fd's entry. The first chunk's are bh_fd_first's, which hold zeros
 * until the chunk is in use (scans reach it once fd_entries[0] names it):
 * a reader needs no test, a writer one load. */
static inline __attribute__((always_inline)) _Atomic uint32_t *entry_for(int fd, int create)
{
    if (__builtin_expect((unsigned)fd < CHUNK_SIZE, 1)) {
        if (create && !atomic_load_explicit(&fd_entries[0], memory_order_relaxed))
            map_fd_chunk((unsigned)fd);
        return &bh_fd_first[fd];
    }
    return entry_above_first(fd, create);
}

static inline __attribute__((always_inline)) struct bh_fd_connection *
connection_for(uint32_t id, int create)
{
    if (__builtin_expect(id < CHUNK_SIZE, 1))
        return &first_connections[id];
    struct bh_fd_connection *chunk = chunk_for((void *_Atomic *)bh_fd_connections, id,
                                         sizeof *chunk, create);
    return chunk ? &chunk[id & (CHUNK_SIZE - 1)] : NULL;
}

static uint32_t entry_connection(uint32_t entry) { return entry >> KIND_BITS; }

static const struct bh_fd_ended nothing_ended = { BH_FD_NOTHING_ENDED, 0, 0, 0, 0 };

/* Returns the connection this ended, if it did. */
static inline __attribute__((always_inline)) struct bh_fd_ended drop_reference(uint32_t entry)
{
    uint32_t id_plus_one = entry_connection(entry);
    if (!id_plus_one)
        return nothing_ended;
    struct bh_fd_connection *connection = connection_for(id_plus_one - 1, 0);
    /* Read before the decrement: once it reaches 0 the slot may be reused.
     * The watch bits are read last: a bit cleared by another fd of the
     * same connection before our decrement is seen cleared. */
    struct bh_fd_ended ended = {
        .compartment = atomic_load(&connection->compartment),
        .weight = atomic_load(&connection->weight),
        .since_ns = atomic_load(&connection->since_ns),
        .watch = atomic_load(&connection->watch),
        .share = atomic_load(&connection->share),
    };
    if (atomic_fetch_sub(&connection->refs, 1) == 1)
        return ended;
    return nothing_ended;
}

/* A reference to a connection that is still live; 0 if it already ended
 * (its last fd closed while we were copying one of them). */
static int take_live_reference(struct bh_fd_connection *connection)
{
    uint32_t refs = atomic_load(&connection->refs);
    do {
        if (refs == 0)
            return 0;
    } while (!atomic_compare_exchange_weak(&connection->refs, &refs, refs + 1));
    return 1;
}

int bh_fd_table_owned_here(void)
{
    return owned_here();
}

struct bh_fd_state bh_fd_lookup(int fd)
{
    _Atomic uint32_t *entry = entry_for(fd, 0);
    uint32_t value = entry ? atomic_load(entry) : 0;
    uint32_t id_plus_one = entry_connection(value);
    struct bh_fd_state state = { (enum bh_fd_kind)(value & KIND_MASK), -1, 0, 0, 0, 0 };
    if (id_plus_one) {
        struct bh_fd_connection *connection = connection_for(id_plus_one - 1, 0);
        state.compartment = atomic_load(&connection->compartment);
        state.weight = atomic_load(&connection->weight);
        state.since_ns = atomic_load(&connection->since_ns);
        state.share = atomic_load(&connection->share);
        state.watch = atomic_load(&connection->watch);
    }
    return state;
}

struct bh_fd_ended bh_fd_new(int fd, enum bh_fd_kind kind)
{
    _Atomic uint32_t *entry = entry_for(fd, kind != BH_FD_UNKNOWN);
    if (!entry)
        return nothing_ended;
    uint32_t current = atomic_load(entry);
    if (current == (uint32_t)kind)
        return nothing_ended;
    if (!entry_connection(current) &&
        atomic_compare_exchange_strong(entry, &current, (uint32_t)kind))
        return nothing_ended;  /* only a kind hint changed */
    if (entry_connection(current) && !owned_here())
        return nothing_ended;
    return drop_reference(atomic_exchange(entry, (uint32_t)kind));
}

/* The guard word: RETIRED, and how many guards are held, in units of
 * GUARD_HELD (the watchdog and a connect's waiter may both hold one). */
enum { GUARD_RETIRED = 1, GUARD_HELD = 2 };
#define GUARDS_HELD (~(uint32_t)GUARD_RETIRED)

/* Set before the first guard: until then no close looks at guards (one
 * load of this, instead of the connection's, in processes without one). */
static _Atomic int guards_taken;

/* After the fd's entry changed: a guard taken before it ends first. */
static void wait_unguarded(struct bh_fd_connection *connection)
{
    while (atomic_load(&connection->guard) & GUARDS_HELD)
        sched_yield();
}

BH_INLINED_ACROSS uint32_t bh_fd_detach(int fd)
{
    _Atomic uint32_t *entry = entry_for(fd, 0);
    if (!entry || entry_connection(atomic_load_explicit(entry, memory_order_relaxed)) == 0)
        return 0;
    if (!owned_here())
        return 0;
    uint32_t detached = atomic_exchange(entry, 0);
    if (atomic_load(&guards_taken) && entry_connection(detached))
        wait_unguarded(connection_for(entry_connection(detached) - 1, 0));
    return detached;
}

BH_INLINED_ACROSS struct bh_fd_ended bh_fd_release(uint32_t detached)
{
    return drop_reference(detached);
}

struct bh_fd_ended bh_fd_closing(int fd)
{
    return drop_reference(bh_fd_detach(fd));
}

void bh_fd_closing_range(unsigned first, unsigned last,
                         void (*closing)(int fd, uint32_t detached, void *ctx),
                         void *ctx)
{
    unsigned end = atomic_load(&fd_chunks_in_use) * CHUNK_SIZE;  /* past the last */
    if (end == 0 || first >= end)
        return;
    if (last >= end)
        last = end - 1;
    for (unsigned fd = first; fd <= last; fd++) {
        if (!atomic_load_explicit(&fd_entries[fd >> CHUNK_BITS], memory_order_acquire)) {
            fd |= CHUNK_SIZE - 1;   /* skip a chunk never used */
            continue;
        }
        uint32_t detached = bh_fd_detach((int)fd);
        if (detached)
            closing((int)fd, detached, ctx);
    }
}

struct bh_fd_ended bh_fd_duplicated(int oldfd, int newfd)
{
    if (oldfd == newfd)
        return nothing_ended;
    _Atomic uint32_t *source = entry_for(oldfd, 0);
    uint32_t copied = source ? atomic_load(source) : 0;
    _Atomic uint32_t *target = entry_for(newfd, copied != 0);
    if (!target)
        return nothing_ended;  /* nothing there, and no room to track */
    uint32_t replaced = atomic_load(target);
    if (!entry_connection(copied) && !entry_connection(replaced) &&
        atomic_compare_exchange_strong(target, &replaced, copied))
        return nothing_ended;  /* only a kind hint moved */
    if (!owned_here())
        return nothing_ended;
    uint32_t id_plus_one = entry_connection(copied);
    if (id_plus_one && !take_live_reference(connection_for(id_plus_one - 1, 0)))
        copied &= KIND_MASK;  /* its last fd closed meanwhile: copy untracked */
    return drop_reference(atomic_exchange(target, copied));
}

static inline __attribute__((always_inline)) void
fill_connection(struct bh_fd_connection *connection, int compartment, int weight,
                uint32_t watch, int64_t since_ns, uint32_t share)
{
    /* relaxed: the slot is ours alone (refs went 0 -> 1) until the entry
     * names it, and that compare-and-swap publishes these stores */
    atomic_store_explicit(&connection->compartment, compartment, memory_order_relaxed);
    atomic_store_explicit(&connection->weight, weight, memory_order_relaxed);
    atomic_store_explicit(&connection->watch, watch, memory_order_relaxed);
    atomic_store_explicit(&connection->since_ns, since_ns, memory_order_relaxed);
    atomic_store_explicit(&connection->share, share, memory_order_relaxed);
    atomic_store_explicit(&connection->sent_ns, 0, memory_order_relaxed);
    /* not retired; a guard that failed on the free slot still counts
     * itself, and takes itself off */
    atomic_fetch_and(&connection->guard, GUARDS_HELD);
    atomic_fetch_add(&connection->generation, 1);  /* before the entry */
}

/* A free connection slot: the fd's own number first, then a scan. */
static inline __attribute__((always_inline)) uint32_t
allocate_connection(int fd, int compartment, int weight,
                                    uint32_t watch, int64_t since_ns, uint32_t share)
{
    for (uint32_t tries = 0; tries < MAX_CONNECTIONS; tries++) {
        uint32_t id = ((uint32_t)fd + tries) % MAX_CONNECTIONS;
        struct bh_fd_connection *connection = connection_for(id, 1);
        uint32_t expected = 0;
        if (connection && atomic_compare_exchange_strong(&connection->refs,
                                                         &expected, 1)) {
            fill_connection(connection, compartment, weight, watch, since_ns, share);
            return id + 1;
        }
    }
    return 0;
}

/* The entry names the connection from now, unless it has one already
 * (another thread won: the connection's slot goes back). */
static inline __attribute__((always_inline)) int
publish(_Atomic uint32_t *entry, uint32_t id_plus_one)
{
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

static __attribute__((noinline)) int
attach(int fd, int compartment, int weight, uint32_t watch, int64_t since_ns, uint32_t share)
{
    _Atomic uint32_t *entry = entry_for(fd, 1);
    if (!entry)
        return -1;
    if (!atomic_load(&bh_fd_connections[0]))  /* before any id below 4096 is taken */
        atomic_store(&bh_fd_connections[0], first_connections);
    uint32_t id_plus_one = allocate_connection(fd, compartment, weight, watch, since_ns,
                                               share);
    if (!id_plus_one)
        return -1;
    return publish(entry, id_plus_one);
}

BH_INLINED_ACROSS int bh_fd_attach(int fd, int compartment, int weight, uint32_t watch,
                                   int64_t since_ns)
{
    /* The usual case, without a call: an fd below 4096, both first chunks
     * in use, its own connection slot free. */
    if ((unsigned)fd < CHUNK_SIZE &&
        atomic_load_explicit(&fd_entries[0], memory_order_relaxed) &&
        atomic_load_explicit(&bh_fd_connections[0], memory_order_relaxed)) {
        struct bh_fd_connection *connection = &first_connections[fd];
        uint32_t expected = 0;
        if (atomic_compare_exchange_strong(&connection->refs, &expected, 1)) {
            fill_connection(connection, compartment, weight, watch, since_ns, 0);
            return publish(&bh_fd_first[fd], (uint32_t)fd + 1);
        }
    }
    return attach(fd, compartment, weight, watch, since_ns, 0);
}

int bh_fd_attach_shared(int fd, int compartment, int weight, uint32_t share)
{
    return attach(fd, compartment, weight, 0, 0, share);
}

/* fd's connection, or NULL. */
static struct bh_fd_connection *connection_of(int fd)
{
    _Atomic uint32_t *entry = entry_for(fd, 0);
    uint32_t id_plus_one = entry ? entry_connection(atomic_load(entry)) : 0;
    return id_plus_one ? connection_for(id_plus_one - 1, 0) : NULL;
}

void bh_fd_move(int fd, int compartment)
{
    struct bh_fd_connection *connection = connection_of(fd);
    if (!connection || !owned_here())
        return;
    atomic_store(&connection->watch, 0);
    atomic_store(&connection->share, 0);
    atomic_store(&connection->compartment, compartment);
}

uint32_t bh_fd_pin(int fd)
{
    _Atomic uint32_t *entry = entry_for(fd, 0);
    uint32_t id_plus_one = entry ? entry_connection(atomic_load(entry)) : 0;
    if (!id_plus_one || !owned_here() ||
        !take_live_reference(connection_for(id_plus_one - 1, 0)))
        return 0;
    return id_plus_one;
}

void bh_fd_set_share(uint32_t pinned, uint32_t share)
{
    atomic_store(&connection_for(pinned - 1, 0)->share, share);
}

struct bh_fd_ended bh_fd_unpin(uint32_t pinned)
{
    return drop_reference(pinned << KIND_BITS);
}

uint32_t bh_fd_unwatch(int fd, uint32_t bits)
{
    struct bh_fd_connection *connection = connection_of(fd);
    return connection ? atomic_fetch_and(&connection->watch, ~bits) & bits : 0;
}

uint32_t bh_fd_unwatch_lookup_above(int fd, uint32_t bits, struct bh_fd_state *state)
{
    _Atomic uint32_t *entry = entry_for(fd, 0);
    uint32_t value = entry ? atomic_load(entry) : 0;
    return bh_fd_unwatch_connection(value, bits, state);
}

int bh_fd_note_send(int fd, int64_t now_ns)
{
    struct bh_fd_connection *connection = connection_of(fd);
    if (!connection)
        return -1;
    atomic_store_explicit(&connection->sent_ns, now_ns, memory_order_relaxed);
    return atomic_load_explicit(&connection->compartment, memory_order_relaxed);
}

int64_t bh_fd_take_send(int fd, int *compartment)
{
    struct bh_fd_connection *connection = connection_of(fd);
    if (!connection || !atomic_load_explicit(&connection->sent_ns, memory_order_relaxed))
        return 0;
    *compartment = atomic_load_explicit(&connection->compartment, memory_order_relaxed);
    return atomic_exchange(&connection->sent_ns, 0);
}

int bh_fd_guard(int fd, uint32_t connection, uint32_t generation)
{
    struct bh_fd_connection *slot = connection_for(connection, 0);
    if (!atomic_load(&guards_taken))
        atomic_store(&guards_taken, 1);
    if (!slot || (atomic_fetch_add(&slot->guard, GUARD_HELD) & GUARD_RETIRED)) {
        if (slot)
            bh_fd_unguard(connection);
        return 0;
    }
    _Atomic uint32_t *entry = entry_for(fd, 0);
    if (entry && entry_connection(atomic_load(entry)) == connection + 1 &&
        atomic_load(&slot->generation) == generation && atomic_load(&slot->refs))
        return 1;
    bh_fd_unguard(connection);
    return 0;
}

/* Never below none: a reset that cleared the word under a guard that had
 * failed (the slot was free) leaves nothing to take off. */
void bh_fd_unguard(uint32_t connection)
{
    _Atomic uint32_t *guard = &connection_for(connection, 0)->guard;
    uint32_t now = atomic_load(guard);
    while ((now & GUARDS_HELD) &&
           !atomic_compare_exchange_weak(guard, &now, now - GUARD_HELD))
        ;
}

void bh_fd_retire(int newfd)
{
    struct bh_fd_connection *connection = connection_of(newfd);
    if (!connection)
        return;
    atomic_fetch_or(&connection->guard, GUARD_RETIRED);
    wait_unguarded(connection);
}

uint32_t bh_fd_generation(uint32_t connection)
{
    return atomic_load(&connection_for(connection, 0)->generation);
}

void bh_fd_connection_start(uint32_t connection, uint32_t watch, int64_t since_ns)
{
    struct bh_fd_connection *slot = connection_for(connection, 0);
    atomic_store(&slot->since_ns, since_ns);
    atomic_store(&slot->watch, watch);
}

_Atomic uint32_t *bh_fd_connection_watch(uint32_t connection)
{
    return &connection_for(connection, 0)->watch;
}

struct bh_fd_mark *bh_fd_mark(uint32_t connection)
{
    return &connection_for(connection, 0)->mark;
}

void bh_fd_rewatch(int fd, uint32_t bits)
{
    struct bh_fd_connection *connection = connection_of(fd);
    if (connection)
        atomic_fetch_or(&connection->watch, bits);
}

void bh_fd_for_each(void (*visit)(int fd, uint32_t connection, int compartment,
                                  void *ctx), void *ctx)
{
    if (owned_here())
        bh_fd_for_each_inherited(visit, ctx);
}

void bh_fd_for_each_inherited(void (*visit)(int fd, uint32_t connection,
                                            int compartment, void *ctx), void *ctx)
{
    unsigned chunks = atomic_load(&fd_chunks_in_use);
    for (unsigned chunk = 0; chunk < chunks; chunk++) {
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

/* What bh_fd_for_each_connection hands bh_fd_for_each: the round that marks
 * a connection visited, and the caller's own visitor. */
struct visit_once {
    uint32_t round;
    void (*visit)(int fd, void *ctx);
    void *ctx;
};

static void visit_connection_once(int fd, uint32_t connection, int compartment,
                                  void *ctx)
{
    struct visit_once *once = ctx;
    (void)compartment;
    if (atomic_exchange(&connection_for(connection, 0)->visited, once->round) !=
        once->round)
        once->visit(fd, once->ctx);
}

void bh_fd_for_each_connection(void (*visit)(int fd, void *ctx), void *ctx)
{
    static _Atomic uint32_t rounds;
    struct visit_once once = { atomic_fetch_add(&rounds, 1) + 1, visit, ctx };
    bh_fd_for_each(visit_connection_once, &once);
}

/* Entries of connections without a share are cleared, then those
 * connections; the others keep their fds and counts. */
/* Whether a forked child keeps this connection: its record counts the
 * child in, or the child took permits of its own for its copy. */
static int kept_by_child(struct bh_fd_connection *connection,
                         int (*own_copy)(int compartment, int weight))
{
    if (!atomic_load(&connection->refs))
        return 0;
    return atomic_load(&connection->share) ||
           own_copy(atomic_load(&connection->compartment),
                    atomic_load(&connection->weight)) == 0;
}

void bh_fd_table_keep_shared(int (*own_copy)(int compartment, int weight))
{
    atomic_store(&owner, getpid());
    unsigned chunks = atomic_load(&fd_chunks_in_use);
    for (unsigned chunk = 0; chunk < CONNECTION_CHUNKS; chunk++) {
        struct bh_fd_connection *pool = atomic_load(&bh_fd_connections[chunk]);
        if (!pool && chunk >= chunks)
            break;
        for (unsigned i = 0; pool && i < CHUNK_SIZE; i++) {
            if (!kept_by_child(&pool[i], own_copy))
                memset((void *)&pool[i], 0, sizeof pool[i]);
            /* the guarding thread was the parent's */
            atomic_fetch_and(&pool[i].guard, GUARD_RETIRED);
        }
    }
    for (unsigned chunk = 0; chunk < chunks; chunk++) {
        _Atomic uint32_t *entries = atomic_load(&fd_entries[chunk]);
        for (unsigned i = 0; entries && i < CHUNK_SIZE; i++) {
            uint32_t id_plus_one = entry_connection(atomic_load(&entries[i]));
            if (id_plus_one && !atomic_load(&connection_for(id_plus_one - 1, 0)->refs))
                atomic_store(&entries[i], 0);
        }
    }
}

/* A guard taken before the fds went ends first, and the generation
 * stays, so that no guard or mark of the thread that takes them
 * (core/stall.c, which keeps running) names a later connection. */
static void clear_slot(struct bh_fd_connection *connection)
{
    if (atomic_load(&guards_taken))
        wait_unguarded(connection);
    uint32_t generation = atomic_load(&connection->generation);
    memset((void *)connection, 0, sizeof *connection);
    atomic_store(&connection->generation, generation);
}

void bh_fd_table_reset(void)
{
    atomic_store(&owner, getpid());
    unsigned chunks = atomic_load(&fd_chunks_in_use);
    for (unsigned chunk = 0; chunk < chunks; chunk++) {
        _Atomic uint32_t *entries = atomic_load(&fd_entries[chunk]);
        if (entries)
            memset((void *)entries, 0, CHUNK_SIZE * sizeof *entries);
    }
    atomic_thread_fence(memory_order_seq_cst);  /* every fd untracked, as by close */
    /* Connection ids start at their fd's number, so the pools in use are
     * those below the fd chunks in use, and any a scan went past. */
    for (unsigned chunk = 0; chunk < CONNECTION_CHUNKS; chunk++) {
        struct bh_fd_connection *pool = atomic_load(&bh_fd_connections[chunk]);
        for (unsigned i = 0; pool && i < CHUNK_SIZE; i++)
            clear_slot(&pool[i]);
        if (!pool && chunk >= chunks)
            break;
    }
}
