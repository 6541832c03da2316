/* Which fds of this process carry a counted connection.
 *
 * A connection is refcounted, not the fd: dup() and friends add fds to the
 * same connection, and its permit goes back when the last of them closes.
 * This is a leaf: it knows nothing of permits. Every call that can end a
 * connection returns the compartment of the one that ended (or
 * BH_FD_NOTHING_ENDED), and the caller gives that permit back.
 * Lock-free and allocation-free on the close path, so close() may run in a
 * signal handler (it may spin while another thread's guard, held across
 * one syscall, ends: see bh_fd_guard). See fd_table.c. */
#ifndef BH_FD_TABLE_H
#define BH_FD_TABLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum { BH_FD_NOTHING_ENDED = -1 };

/* What ended with a connection's last fd: its compartment (or
 * BH_FD_NOTHING_ENDED), the watch bits still set and when it was attached.
 * The table stores watch bits and time for its callers and reads neither. */
struct bh_fd_ended {
    int compartment;
    int weight;         /* permits the connection holds */
    uint32_t watch;
    uint32_t share;     /* the caller's name for a record of copies; 0: none */
    int64_t since_ns;
};

/* What the shim knows of an fd without asking the kernel. */
enum bh_fd_kind {
    BH_FD_UNKNOWN = 0,      /* not created through a hook: ask getsockopt */
    BH_FD_INET_STREAM = 1,  /* socket(AF_INET/AF_INET6, SOCK_STREAM) */
    BH_FD_OTHER = 2,        /* any other socket */
};

/* One lookup: the fd's kind and its connection's compartment (-1: none). */
struct bh_fd_state {
    enum bh_fd_kind kind;
    int compartment;
    int weight;
    int64_t since_ns;   /* the connection's attach time, as the caller gave it */
    uint32_t share;
    uint32_t watch;     /* its watch bits */
};
struct bh_fd_state bh_fd_lookup(int fd);

/* Empties the table and makes the calling process its owner: at start-up
 * and in a forked child. Only the owner changes tracked entries; a vfork
 * child (same memory, another process) changes nothing. */
void bh_fd_table_reset(void);

/* Nonzero in the process that owns the table (costs a getpid()). */
int bh_fd_table_owned_here(void);

/* A call handed back a new fd: whatever was tracked on that number was
 * closed behind our back (raw syscall, glibc-internal close). */
struct bh_fd_ended bh_fd_new(int fd, enum bh_fd_kind kind);
/* The fd is about to be closed: untrack it first, so a thread that gets the
 * number back the instant close() returns finds it clean. Returns what was
 * tracked, for bh_fd_release() once the real close is done (the permit
 * goes back after the socket is gone, and even if close failed). */
uint32_t bh_fd_detach(int fd);
struct bh_fd_ended bh_fd_release(uint32_t detached);
/* Both at once, for paths with no real close of their own to wait for. */
struct bh_fd_ended bh_fd_closing(int fd);
/* Every tracked fd in [first, last], untracked as by bh_fd_detach:
 * closing(fd, detached, ctx) closes it and hands `detached` to
 * bh_fd_release() after, as close() does. */
void bh_fd_closing_range(unsigned first, unsigned last,
                         void (*closing)(int fd, uint32_t detached, void *ctx),
                         void *ctx);
/* newfd now refers to what oldfd refers to (dup, dup2, dup3, F_DUPFD);
 * returns what newfd's old connection ended, if anything. */
struct bh_fd_ended bh_fd_duplicated(int oldfd, int newfd);

/* Records a new connection on fd holding `weight` permits of compartment,
 * with the caller's watch bits and time. Returns 0, or -1 when the fd
 * already has one (another thread won: the caller gives its permits back). */
int bh_fd_attach(int fd, int compartment, int weight, uint32_t watch, int64_t since_ns);

/* The same for a connection whose permits a record of copies holds (see
 * core/copies.c); the table keeps `share` for its callers. */
int bh_fd_attach_shared(int fd, int compartment, int weight, uint32_t share);

/* A reference to fd's connection that keeps it from ending while the
 * caller works on it (0: none, or not the owner); bh_fd_unpin drops it and
 * returns what ended if the fds closed meanwhile. */
uint32_t bh_fd_pin(int fd);
void bh_fd_set_share(uint32_t pinned, uint32_t share);
struct bh_fd_ended bh_fd_unpin(uint32_t pinned);

/* Calls visit(fd, ctx) once per connection, with one of its fds; visits
 * nothing in a process that does not own the table. */
void bh_fd_for_each_connection(void (*visit)(int fd, void *ctx), void *ctx);

/* In a forked child: makes it the owner and keeps the connections with a
 * share (their records count the child in) and those for which
 * own_copy(compartment, weight) returns 0 (the child took permits of its
 * own for its copy); the rest are the parent's. */
void bh_fd_table_keep_shared(int (*own_copy)(int compartment, int weight));

/* fd's connection counts in `compartment` from now (a caller's number,
 * negative ones included: the table only hands it back), with no watch
 * bits and no share: those were about the compartment it leaves. */
void bh_fd_move(int fd, int compartment);

/* Clears `bits` on fd's connection; returns those of them that were set,
 * so of racing callers exactly one sees each bit. No owner check (it
 * would cost a getpid() per outcome): a caller about to act on a bit only
 * the owner may act on asks bh_fd_table_owned_here() first. */
uint32_t bh_fd_unwatch(int fd, uint32_t bits);
/* bh_fd_unwatch_lookup (inline, below), for an fd above 4095. */
uint32_t bh_fd_unwatch_lookup_above(int fd, uint32_t bits, struct bh_fd_state *state);
/* Sets `bits` on fd's connection, if it has one. */
void bh_fd_rewatch(int fd, uint32_t bits);

/* Turnaround: the time of the send being timed (the caller allows one at
 * a time), returning the connection's compartment (-1: none); that time,
 * taken (0: none), when its answer comes. */
int bh_fd_note_send(int fd, int64_t now_ns);
int64_t bh_fd_take_send(int fd, int *compartment);

/* Guards, for a thread that acts on a connection through an fd number it
 * did not get from the program (core/stall.c): between bh_fd_guard() that
 * returned 1 and bh_fd_unguard(), fd still refers to that connection's
 * socket, since every close of it (close, fclose, close_range,
 * closefrom) waits, after untracking and before the real close, for the
 * guard to go, and dup2/dup3 onto it retire the connection first (no
 * guard is given on it again). The waits spin on a guard held across a
 * few syscalls by a thread of ours (fd_table.c): safe in a signal handler
 * but for the case core/async_connect.c names.
 * bh_fd_guard: 1 when fd still carries `connection` (an id from
 * bh_fd_for_each) of that generation. */
int bh_fd_guard(int fd, uint32_t connection, uint32_t generation);
void bh_fd_unguard(uint32_t connection);
/* Before dup2/dup3 onto newfd: no guard on its connection from now. */
void bh_fd_retire(int newfd);

/* A connection slot's generation, new at each attach: (id, generation)
 * names one connection for the life of the process. */
uint32_t bh_fd_generation(uint32_t connection);
/* A connection that waited for its permits holds them from now (the
 * caller guards one of its fds): its watch bits and its attach time. */
void bh_fd_connection_start(uint32_t connection, uint32_t watch, int64_t since_ns);
/* The connection's watch word, by id. */
_Atomic uint32_t *bh_fd_connection_watch(uint32_t connection);
/* A record per connection slot for a single caller thread (core/stall.c),
 * which alone reads and writes it; the table only clears it with the
 * slot's memory (reset, fork), and never reads it. */
struct bh_fd_mark {
    uint32_t generation;
    uint32_t exchange;
    int64_t since_ns;
};
struct bh_fd_mark *bh_fd_mark(uint32_t connection);

/* Calls visit(fd, connection_id, compartment) for every tracked fd; visits
 * nothing in a process that does not own the table (a vfork child). */
void bh_fd_for_each(void (*visit)(int fd, uint32_t connection, int compartment,
                                  void *ctx), void *ctx);
/* The same in any process: a vfork child reads its parent's table (the
 * memory it runs on) to learn which fds it inherited, and changes nothing. */
void bh_fd_for_each_inherited(void (*visit)(int fd, uint32_t connection,
                                            int compartment, void *ctx), void *ctx);

/* The send and receive hooks' fast path, inline: fd's watch bits, 0 when
 * it carries no connection. One load for an fd below 4096 without a
 * connection, two more for one with. The layout below is here only for
 * these functions and socket()'s; fd_table.c alone writes it, but for the
 * watch word, whose bits are the caller's and which the hooks change in
 * place, and socket()'s kind hint. */
/* An entry's kind takes 2 bits, and the connection id + 1 starts at bit
 * 6: the entry with its kind masked off is then the connection's offset
 * in bh_fd_connection_slots (64 bytes each), one instruction fewer on
 * every send and receive of a counted connection. */
enum { BH_FD_CHUNK_BITS = 12, BH_FD_KIND_BITS = 6 };
struct bh_fd_connection {
    _Atomic uint32_t watch;     /* the caller's bits (outcome.h); first, so
                                   the hooks' pointer to it is the slot's */
    _Atomic uint32_t refs;
    _Atomic int32_t compartment;
    _Atomic int32_t weight;
    _Atomic int64_t since_ns;   /* the caller's clock, at attach */
    _Atomic uint32_t share;     /* the caller's, for copies in other processes */
    _Atomic uint32_t visited;   /* bh_fd_for_each_connection's round */
    _Atomic int64_t sent_ns;    /* the caller's clock at the send being
                                   timed; 0: none (turnaround) */
    _Atomic uint32_t generation; /* bumped at each attach */
    _Atomic uint32_t guard;     /* GUARD_HELD, GUARD_RETIRED (fd_table.c) */
    struct bh_fd_mark mark;     /* the guard-taking thread's own record */
};
/* Hidden (the shim's are): the hooks address them directly, not through
 * the GOT. */
extern _Atomic uint32_t bh_fd_first[] __attribute__((visibility("hidden")));
extern _Atomic(_Atomic uint32_t *) bh_fd_entries[] __attribute__((visibility("hidden")));
extern _Atomic(struct bh_fd_connection *) bh_fd_connections[] __attribute__((visibility("hidden")));
/* Ids below 4096, at id + 1: slot 0 is never used, so that an entry's
 * bits above its kind index it as they are. */
extern struct bh_fd_connection bh_fd_connection_slots[] __attribute__((visibility("hidden")));
/* fd's entry: its kind and its connection id + 1 above BH_FD_KIND_BITS. */
static inline uint32_t bh_fd_entry(int fd)
{
    enum { MASK = (1u << BH_FD_CHUNK_BITS) - 1 };
    if (__builtin_expect((unsigned)fd <= MASK, 1))
        return atomic_load_explicit(&bh_fd_first[fd], memory_order_relaxed);
    /* A negative fd lands in the upper half of the chunk table, which is
     * never mapped: no test needed. */
    _Atomic uint32_t *chunk = atomic_load_explicit(
        &bh_fd_entries[(unsigned)fd >> BH_FD_CHUNK_BITS], memory_order_acquire);
    return chunk ? atomic_load_explicit(&chunk[(unsigned)fd & MASK], memory_order_relaxed)
                 : 0;
}

/* What an entry says: the fd's kind, and whether it carries a counted
 * connection. */
static inline enum bh_fd_kind bh_fd_entry_kind(uint32_t entry)
{
    return (enum bh_fd_kind)(entry & 3u);
}
static inline int bh_fd_entry_connected(uint32_t entry)
{
    return entry >= 1u << BH_FD_KIND_BITS;
}

/* Nonzero when fd carries a counted connection: close's fast path. */
static inline int bh_fd_has_connection(int fd)
{
    return bh_fd_entry_connected(bh_fd_entry(fd));
}

/* An entry without its kind: its connection's slot, which
 * bh_fd_entry_connection takes as it takes the entry; for a connection in
 * the static slots (bh_fd_slot_static, true of the slot and of the entry
 * it came from alike), its offset there. */
static inline size_t bh_fd_entry_slot(uint32_t entry)
{
    return entry & ~((1u << BH_FD_KIND_BITS) - 1);
}
static inline int bh_fd_slot_static(size_t slot)
{
    return slot < ((1u << BH_FD_CHUNK_BITS) + 1) << BH_FD_KIND_BITS;  /* id + 1 <= 4096 */
}
/* The watch word of the connection in a static slot, and its bits: one
 * load from the offset, no pointer made (the send and receive hooks'
 * test). */
static inline _Atomic uint32_t *bh_fd_static_word(size_t slot)
{
    return &((struct bh_fd_connection *)((char *)bh_fd_connection_slots + slot))->watch;
}
static inline uint32_t bh_fd_static_watch(size_t slot)
{
    return atomic_load_explicit(bh_fd_static_word(slot), memory_order_relaxed);
}

/* The connection an entry names (it must name one). */
static inline struct bh_fd_connection *bh_fd_entry_connection(uint32_t entry)
{
    enum { MASK = (1u << BH_FD_CHUNK_BITS) - 1 };
    size_t slot = bh_fd_entry_slot(entry);  /* (id + 1) x 64 */
    if (__builtin_expect(bh_fd_slot_static(slot), 1))
        return (struct bh_fd_connection *)((char *)bh_fd_connection_slots + slot);
    uint32_t id = (entry >> BH_FD_KIND_BITS) - 1;
    struct bh_fd_connection *connections = atomic_load_explicit(
        &bh_fd_connections[id >> BH_FD_CHUNK_BITS], memory_order_acquire);
    return &connections[id & MASK];
}

/* fd's connection's watch word, NULL when it carries none. The word is
 * the caller's: the hooks' watched path reads it once and changes its own
 * bits there with atomics, without a second lookup. */
static inline _Atomic uint32_t *bh_fd_watch_word(int fd)
{
    uint32_t entry = bh_fd_entry(fd);
    if (!bh_fd_entry_connected(entry))
        return NULL;
    return &bh_fd_entry_connection(entry)->watch;
}

/* What bh_fd_unwatch_lookup does with the fd's entry. */
static inline uint32_t bh_fd_unwatch_connection(uint32_t entry, uint32_t bits,
                                                struct bh_fd_state *state)
{
    if (!bh_fd_entry_connected(entry))
        return 0;
    struct bh_fd_connection *connection = bh_fd_entry_connection(entry);
    uint32_t before = atomic_fetch_and(&connection->watch, ~bits);
    if (!(before & bits))
        return 0;
    *state = (struct bh_fd_state){
        .kind = bh_fd_entry_kind(entry),
        .compartment = atomic_load(&connection->compartment),
        .weight = atomic_load(&connection->weight),
        .since_ns = atomic_load(&connection->since_ns),
        .share = atomic_load(&connection->share),
        .watch = before & ~bits,
    };
    return before & bits;
}

/* bh_fd_unwatch, and when any of the bits was set, *state as bh_fd_lookup
 * would give it, from the same look (its watch: the bits left). Inline:
 * the watch word is the caller's to change (above). */
static inline uint32_t bh_fd_unwatch_lookup(int fd, uint32_t bits,
                                            struct bh_fd_state *state)
{
    if (__builtin_expect((unsigned)fd >= (1u << BH_FD_CHUNK_BITS), 0))
        return bh_fd_unwatch_lookup_above(fd, bits, state);
    return bh_fd_unwatch_connection(atomic_load_explicit(&bh_fd_first[fd],
                                                         memory_order_relaxed),
                                    bits, state);
}

/* socket()'s fast path, for an fd below 4096: an entry that holds nothing
 * (a counted connection's last close cleared it) takes its kind in one
 * compare-and-swap, the one write to an entry made outside fd_table.c (a
 * kind hint, which any process may write, see fd_table.c); one that
 * already holds this kind and no connection (an uncounted socket's close
 * leaves its kind) stays as it is. 0: anything else, which is bh_fd_new's. */
static inline int bh_fd_new_socket(int fd, enum bh_fd_kind kind)
{
    if ((unsigned)fd >= (1u << BH_FD_CHUNK_BITS) ||
        !atomic_load_explicit(&bh_fd_entries[0], memory_order_relaxed))
        return 0;
    /* seen stays 0 when the swap is made, and is kept when it was kind */
    uint32_t seen = 0;
    atomic_compare_exchange_strong(&bh_fd_first[fd], &seen, (uint32_t)kind);
    return (seen & ~(uint32_t)kind) == 0;
}

static inline uint32_t bh_fd_watched(int fd)
{
    _Atomic uint32_t *word = bh_fd_watch_word(fd);
    return word ? atomic_load_explicit(word, memory_order_relaxed) : 0;
}

#endif
