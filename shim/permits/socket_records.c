/* Permits of sockets that more than one process holds.
 *
 * A permit is taken with SEM_UNDO, so it belongs to the process that
 * connected, and the kernel gives it back when that process exits. A
 * socket can outlive it: a forked child inherits the fd, an fd passed over
 * SCM_RIGHTS lands in another process. So when a copy of a counted socket
 * is about to leave its process (fork, sendmsg with SCM_RIGHTS), its
 * permits are parked: one semop per pool, +n with SEM_UNDO and -n without
 * (as pools.c's pay_one does), so the semaphores still count them in use
 * but no process's undo record names them any more. From then on the
 * socket's record holds them, and gives them back exactly once: when the
 * last reference goes, or when the kernel says no process has the socket
 * open any more.
 *
 * `bulkhead run`'s seccomp supervisor parks the permits it took for each
 * socket of its tree the same way, once the socket's connect has begun
 * (bh_socket_park_for_another), so that they outlive the supervisor too:
 * killed, it gives back nothing the tree still has open. Such a record is
 * unlisted: its one reference is the supervisor's, which drops it when the
 * kernel says the socket is gone; no other process finds it (a program of
 * the tree that receives the socket over SCM_RIGHTS took no reference in
 * flight to take over), and once the supervisor is dead the reapers
 * settle it by the kernel's word like any other; while it lives they
 * leave it to the supervisor (maker: its pid; a pid the kernel has given
 * to another process since only delays that until the other exits).
 *
 * Shared (the namespace's memory, struct bh_socket_records):
 *   - state: one word, changed only by compare-and-swap:
 *       references (low 32 bits): connections in fd tables naming the
 *         record, one per process that holds the socket through the shim,
 *         plus copies in flight (forked but not yet running, sent but not
 *         yet received);
 *       generation (16 bits): bumped each time the slot is claimed, part
 *         of the name processes keep (bh_share), so a stale name never
 *         touches a later socket's record;
 *       LIVE: the record holds parked permits;
 *       BUSY: being filled, or its permits are going back (one process).
 *   - the other fields (unlisted, maker): written by the process that
 *     claimed the slot (BUSY) before LIVE is stored, read-only while LIVE.
 *   - live: how many slots are LIVE or BUSY-filling; 0 spares every scan.
 *   - used, free_hint: slots are claimed lowest first, so that scans stop
 *     at `used` (raised by claims, never lowered) and only the pages of
 *     as many records as were ever live at once are touched; free_hint,
 *     lowered by every free and raised by claims, is where a claim starts
 *     looking (a hint: a claim that finds nothing above it looks below).
 *   - full_said, refused: a share that found every slot taken counts
 *     itself, and the first one logs it (once per namespace). Its caller
 *     then counts the copy another way (core/copies.c): a forked child
 *     takes permits of its own, a send is refused.
 *   - reap_after_ns: no reap starts before it. A reaper moves it a second
 *     ahead by compare-and-swap (so one process reaps at a time; a reaper
 *     killed mid-way delays the next by that second), then, done, to its
 *     end plus ten times what it took, at least REAP_EVERY_MS and at most
 *     that second: reaping costs about a tenth of one CPU per namespace at
 *     most, however many refused connects ask for it.
 * Writers: whoever holds a reference (fork, sendmsg, recvmsg, close, exec
 * hand-off in any process of the user running the shim), and any reaper
 * (a connect that found its compartment full, `bulkhead stat`).
 *
 * Signal handlers: unref (the close path) is compare-and-swap, semop and
 * atomics: no lock, nothing a handler could deadlock on. share, ref and
 * find are the same plus fstat/getsockname/getpeername/stat (and a share
 * that finds the table full reaps and logs once). The reaper opens a
 * netlink socket and maps memory; it runs from connect, share and stat.
 *
 * What a death costs, at each point:
 *   - while claiming (BUSY, not LIVE): the process still holds its permits
 *     by SEM_UNDO, given back by the kernel; the slot is lost (one of
 *     BH_SOCKET_RECORDS) until `bulkhead reset`.
 *   - while reaping: reap_after_ns stays a second ahead, so the next reap
 *     waits that long; a record it had moved to BUSY is as below.
 *   - after the parking semop, before LIVE is stored (the semop's return
 *     and one store): the permits are parked and no record names them: a
 *     leak of `weight` permits until `bulkhead reset` or `set`. This is the
 *     one window where a SIGKILL costs a permit; the order is chosen so
 *     that it can never give one back twice. (The holder record is
 *     lowered before the semop, and raised again if it fails: a death
 *     between leaves the holders hint high by `weight` until a reaper.)
 *   - holding a reference, by any signal: the reference is never dropped;
 *     the reaper gives the permits back once the kernel has closed the
 *     socket (every holder closed it or died).
 *   - after the last unref's compare-and-swap, before its semop: a leak of
 *     `weight` permits, as above; after the semop, before freeing the
 *     slot: the slot is lost, nothing else.
 * No path gives permits back twice: only the process whose compare-and-
 * swap moved LIVE to BUSY gives them back, and LIVE is never set again on
 * that generation. */
#include "permits/permits_internal.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "libc/clock.h"
#include "libc/libc.h"
#include "log/log.h"

enum { SLOT_BITS = 16, GENERATION_BITS = 16 };
#define REFERENCES 0xffffffffull
#define LIVE (1ull << 62)
#define BUSY (1ull << 63)
_Static_assert(BH_SOCKET_RECORDS == 1 << SLOT_BITS, "a share names a slot in SLOT_BITS");

static uint32_t generation_of(uint64_t state)
{
    return (uint32_t)(state >> 32) & ((1u << GENERATION_BITS) - 1);
}

static uint64_t with_generation(uint32_t generation)
{
    return (uint64_t)generation << 32;
}

static struct bh_socket_records *table_of(struct bh_namespace *ns)
{
    return ns->state ? &ns->state->sockets : NULL;
}

/* The record a share names, and the generation it names. */
static struct bh_socket_record *named(struct bh_namespace *ns, bh_share share,
                                      uint32_t *generation)
{
    struct bh_socket_records *table = table_of(ns);
    *generation = share >> SLOT_BITS;
    return table && share ? &table->records[share & (BH_SOCKET_RECORDS - 1)] : NULL;
}

static uint64_t net_namespace(void)
{
    struct stat self;
    return stat("/proc/self/ns/net", &self) == 0 ? (uint64_t)self.st_ino : 0;
}

/* The socket's addresses, for the kernel's word on it later (sock_diag).
 * SO_PEERNAME, unlike getpeername, names the peer of a connect still
 * under way (SYN_SENT): a socket shared then is settled the same way. It
 * wants the address's exact length, the local one's. */
static void note_addresses(struct bh_socket_record *record, int fd)
{
    struct sockaddr_storage local, remote;
    socklen_t local_length = sizeof local;
    record->family = 0;
    if (getsockname(fd, (struct sockaddr *)&local, &local_length) < 0)
        return;
    socklen_t remote_length = local_length;
    if (libc_getsockopt(fd, SOL_SOCKET, SO_PEERNAME, &remote, &remote_length) < 0 ||
        local.ss_family != remote.ss_family)
        return;  /* never connected: the references alone decide */
    if (local.ss_family == AF_INET) {
        const struct sockaddr_in *l = (void *)&local, *r = (void *)&remote;
        memset(record->local, 0, sizeof record->local);
        memset(record->remote, 0, sizeof record->remote);
        record->local[0] = l->sin_addr.s_addr;
        record->remote[0] = r->sin_addr.s_addr;
        record->local_port = l->sin_port;
        record->remote_port = r->sin_port;
    } else if (local.ss_family == AF_INET6) {
        const struct sockaddr_in6 *l = (void *)&local, *r = (void *)&remote;
        memcpy(record->local, &l->sin6_addr, sizeof record->local);
        memcpy(record->remote, &r->sin6_addr, sizeof record->remote);
        record->local_port = l->sin6_port;
        record->remote_port = r->sin6_port;
    } else {
        return;
    }
    record->family = local.ss_family;
}

/* Permits this process holds by SEM_UNDO, `taken` of them, become the
 * record's: +n with SEM_UNDO, -n without, per pool, in one semop. */
static int park(struct bh_namespace *ns, struct bh_socket_record *record, int index,
                struct bh_taken taken)
{
    struct sembuf ops[4];
    int n = 0;
    if (taken.common) {
        ops[n++] = (struct sembuf){ BH_SEM_FREE(index), (short)taken.common, SEM_UNDO };
        ops[n++] = (struct sembuf){ BH_SEM_FREE(index), (short)-taken.common, 0 };
    }
    if (taken.reserved) {
        unsigned short slot = (unsigned short)atomic_load(
            &ns->state->compartments[index].reserves[taken.reserve].slot);
        ops[n++] = (struct sembuf){ BH_SEM_RFREE(slot), (short)taken.reserved, SEM_UNDO };
        ops[n++] = (struct sembuf){ BH_SEM_RFREE(slot), (short)-taken.reserved, 0 };
    }
    if (semop(ns->semid, ops, n) < 0)
        return -1;
    record->common = taken.common;
    record->reserved = taken.reserved;
    record->reserve = taken.reserve;
    return 0;
}

/* Raises a shared count to at least `value`. */
static void raise_to(_Atomic uint32_t *count, uint32_t value)
{
    uint32_t now = atomic_load(count);
    while (now < value && !atomic_compare_exchange_weak(count, &now, value))
        ;
}

/* Lowers a shared count to at most `value`. Async-signal-safe. */
static void lower_to(_Atomic uint32_t *count, uint32_t value)
{
    uint32_t now = atomic_load(count);
    while (now > value && !atomic_compare_exchange_weak(count, &now, value))
        ;
}

/* Slot `slot`, made BUSY under a new generation if it is free. */
static struct bh_socket_record *claim_slot(struct bh_socket_records *table, uint32_t slot,
                                           uint32_t *generation)
{
    struct bh_socket_record *record = &table->records[slot];
    uint64_t state = atomic_load(&record->state);
    if (state & (LIVE | BUSY))
        return NULL;
    *generation = (generation_of(state) + 1) & ((1u << GENERATION_BITS) - 1);
    if (!*generation)
        *generation = 1;
    if (!atomic_compare_exchange_strong(&record->state, &state,
                                        BUSY | with_generation(*generation)))
        return NULL;
    raise_to(&table->used, slot + 1);
    return record;
}

/* The lowest free slot, from the hint up, then below it; NULL when all
 * are taken. */
static struct bh_socket_record *claim(struct bh_socket_records *table,
                                      uint32_t *generation, int *slot)
{
    uint32_t hint = atomic_load(&table->free_hint);
    if (atomic_load(&table->live) >= BH_SOCKET_RECORDS)
        return NULL;
    for (uint32_t i = 0; i < BH_SOCKET_RECORDS; i++) {
        uint32_t at = (hint + i) % BH_SOCKET_RECORDS;
        struct bh_socket_record *record = claim_slot(table, at, generation);
        if (record) {
            *slot = (int)at;
            atomic_compare_exchange_strong(&table->free_hint, &hint, at + 1);
            return record;
        }
    }
    return NULL;
}

/* A free slot, or NULL after reaping once more and logging (once per
 * namespace) that the table is full. */
static struct bh_socket_record *claim_or_say_full(struct bh_namespace *ns,
                                                  uint32_t *generation, int *slot)
{
    struct bh_socket_records *table = &ns->state->sockets;
    struct bh_socket_record *record = claim(table, generation, slot);
    if (record || (bh_socket_reap(ns, -1) > 0 && (record = claim(table, generation, slot))))
        return record;
    atomic_fetch_add(&table->refused, 1);
    if (atomic_exchange(&table->full_said, 1) == 0)
        bh_log(BH_LOG_WARN, "namespace \"%s\": all %d shared-socket records are in use: "
               "a forked child now takes a permit of its own for each counted socket "
               "it inherits, and passing one over SCM_RIGHTS fails with ETOOMANYREFS "
               "(bulkhead stat counts these refusals)",
               ns->state->namespace_name, BH_SOCKET_RECORDS);
    return NULL;
}

/* A new record for the socket with this inode, BUSY, its fields but the
 * addresses and the permits written; NULL when all are taken. */
static struct bh_socket_record *begin(struct bh_namespace *ns, uint64_t inode, int index,
                                      int weight, uint64_t netns, uint32_t *generation,
                                      int *slot)
{
    struct bh_socket_records *table = table_of(ns);
    struct bh_socket_record *record = table ? claim_or_say_full(ns, generation, slot) : NULL;
    if (!record)
        return NULL;
    atomic_fetch_add(&table->live, 1);
    atomic_store(&record->inode, inode);
    record->netns = netns;
    record->compartment = index;
    record->weight = weight;
    record->unlisted = 0;
    record->maker = 0;
    return record;
}

/* The permits could not be parked: the slot is free again. */
static void abandon(struct bh_namespace *ns, struct bh_socket_record *record,
                    uint32_t generation, int slot)
{
    atomic_store(&record->inode, 0);
    atomic_store(&record->state, with_generation(generation));
    lower_to(&ns->state->sockets.free_hint, (uint32_t)slot);
    atomic_fetch_sub(&ns->state->sockets.live, 1);
}

/* LIVE, with one reference: the maker's. */
static bh_share publish(struct bh_socket_record *record, uint32_t generation, int slot)
{
    atomic_store(&record->state, LIVE | with_generation(generation) | 1);
    return (generation << SLOT_BITS) | (uint32_t)slot;
}

bh_share bh_socket_share(struct bh_namespace *ns, int fd, int index, int weight)
{
    struct stat socket_stat;
    uint32_t generation;
    int slot;
    if (fstat(fd, &socket_stat) < 0)
        return 0;
    struct bh_socket_record *record = begin(ns, (uint64_t)socket_stat.st_ino, index, weight,
                                            net_namespace(), &generation, &slot);
    if (!record)
        return 0;
    note_addresses(record, fd);
    struct bh_taken taken = bh_holding_remove(ns, index, weight);
    taken.common = (uint32_t)weight - taken.reserved;
    if (park(ns, record, index, taken) < 0) {
        bh_holding_add(ns, index, taken);  /* still ours */
        abandon(ns, record, generation, slot);
        return 0;
    }
    return publish(record, generation, slot);
}

/* A supervisor's net namespace, asked once (a /proc lookup per connect
 * is measurable): it never leaves it. */
static _Atomic uint64_t supervisor_netns;

bh_share bh_socket_park_for_another(struct bh_namespace *ns, uint64_t inode,
                                    const struct bh_sock_id *id, int index,
                                    struct bh_taken taken, pid_t maker)
{
    uint32_t generation;
    int slot;
    uint64_t netns = atomic_load_explicit(&supervisor_netns, memory_order_relaxed);
    if (!netns) {
        netns = net_namespace();
        atomic_store_explicit(&supervisor_netns, netns, memory_order_relaxed);
    }
    struct bh_socket_record *record = begin(ns, inode, index,
                                            (int)(taken.common + taken.reserved), netns,
                                            &generation, &slot);
    if (!record)
        return 0;
    record->unlisted = 1;
    record->maker = (int32_t)maker;
    record->family = id->family;
    record->local_port = id->local_port;
    record->remote_port = id->remote_port;
    memcpy(record->local, id->local, sizeof record->local);
    memcpy(record->remote, id->remote, sizeof record->remote);
    bh_holding_remove_for_another(ns, index, taken);
    if (park(ns, record, index, taken) < 0) {
        bh_holding_add_for_another(ns, index, taken);  /* still the caller's */
        abandon(ns, record, generation, slot);
        return 0;
    }
    return publish(record, generation, slot);
}

int bh_socket_ref(struct bh_namespace *ns, bh_share share)
{
    uint32_t generation;
    struct bh_socket_record *record = named(ns, share, &generation);
    uint64_t state = record ? atomic_load(&record->state) : 0;
    do {
        if (!(state & LIVE) || generation_of(state) != generation)
            return -1;
    } while (!atomic_compare_exchange_weak(&record->state, &state, state + 1));
    return 0;
}

/* The parked permits go back; the caller moved the record from LIVE to
 * BUSY, so nobody else does this for it. */
static void give_back(struct bh_namespace *ns, struct bh_socket_record *record,
                      uint32_t generation)
{
    struct bh_taken taken = { record->common, record->reserved, record->reserve };
    bh_permit_release_parked(ns, record->compartment, taken);
    atomic_store(&record->inode, 0);
    atomic_store(&record->state, with_generation(generation));
    lower_to(&ns->state->sockets.free_hint, (uint32_t)(record - ns->state->sockets.records));
    atomic_fetch_sub(&ns->state->sockets.live, 1);
}

int bh_socket_unref(struct bh_namespace *ns, bh_share share)
{
    uint32_t generation;
    struct bh_socket_record *record = named(ns, share, &generation);
    uint64_t state = record ? atomic_load(&record->state) : 0, next;
    do {
        if (!(state & LIVE) || generation_of(state) != generation ||
            !(state & REFERENCES))
            return 0;  /* already given back (the reaper), or a stale name */
        next = (state & REFERENCES) == 1 ? BUSY | with_generation(generation) : state - 1;
    } while (!atomic_compare_exchange_weak(&record->state, &state, next));
    if (!(next & BUSY))
        return 0;
    give_back(ns, record, generation);
    return 1;
}

bh_share bh_socket_find(struct bh_namespace *ns, uint64_t inode, int *index, int *weight)
{
    struct bh_socket_records *table = table_of(ns);
    if (!table || !atomic_load(&table->live))
        return 0;
    uint32_t used = atomic_load(&table->used);
    for (uint32_t slot = 0; slot < used; slot++) {
        struct bh_socket_record *record = &table->records[slot];
        uint64_t state = atomic_load(&record->state);
        if ((state & LIVE) && atomic_load(&record->inode) == inode && !record->unlisted) {
            *index = record->compartment;
            *weight = record->weight;
            return (generation_of(state) << SLOT_BITS) | slot;
        }
    }
    return 0;
}

/* A sock_diag request for the TCP socket with this id, in any state. */
struct sock_diag_ask {
    struct nlmsghdr header;
    struct inet_diag_req_v2 request;
};

static void sock_diag_ask(struct sock_diag_ask *ask, const struct bh_sock_id *id,
                          uint32_t sequence)
{
    *ask = (struct sock_diag_ask){
        .header = { .nlmsg_len = sizeof *ask, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                    .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = sequence },
        .request = { .sdiag_family = (uint8_t)id->family,
                     .sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0u,
                     .id = { .idiag_sport = id->local_port,
                             .idiag_dport = id->remote_port,
                             .idiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } } },
    };
    memcpy(ask->request.id.idiag_src, id->local, sizeof id->local);
    memcpy(ask->request.id.idiag_dst, id->remote, sizeof id->remote);
}

int bh_sock_diag_socket(void)
{
    return libc_socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
}

/* The kernel answers a single socket's request within the sendto: the
 * answer is queued once it returns. One left over from an earlier ask
 * whose recv failed carries another sequence number, and is skipped. */
int bh_sock_diag_find(int fd, const struct bh_sock_id *id, uint32_t sequence,
                      struct inet_diag_msg *found)
{
    struct sock_diag_ask ask;
    sock_diag_ask(&ask, id, sequence);
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    long answer[512];
    struct nlmsghdr *header = (struct nlmsghdr *)answer;
    ssize_t length = -1;
    if (libc_sendto(fd, &ask, sizeof ask, 0, (struct sockaddr *)&kernel,
                    sizeof kernel) == (ssize_t)sizeof ask)
        do
            length = libc_recv(fd, answer, sizeof answer, MSG_DONTWAIT);
        while (length > 0 && NLMSG_OK(header, (size_t)length) &&
               header->nlmsg_seq != sequence);
    if (length <= 0 || !NLMSG_OK(header, (size_t)length))
        return -1;
    if (header->nlmsg_type == NLMSG_ERROR)
        return ((struct nlmsgerr *)NLMSG_DATA(header))->error == -ENOENT ? 0 : -1;
    if (header->nlmsg_type != SOCK_DIAG_BY_FAMILY)
        return -1;
    memcpy(found, NLMSG_DATA(header), sizeof *found);
    return 1;
}

int bh_sock_diag_open_on(int fd, const struct bh_sock_id *id, uint64_t inode,
                         uint32_t sequence)
{
    struct inet_diag_msg found;
    int answer = bh_sock_diag_find(fd, id, sequence, &found);
    return answer <= 0 ? answer : found.idiag_inode == inode;
}

int bh_sock_diag_open(const struct bh_sock_id *id, uint64_t inode)
{
    int fd = bh_sock_diag_socket();
    if (fd < 0)
        return -1;
    int open = bh_sock_diag_open_on(fd, id, inode, 0);
    libc_close(fd);
    return open;
}

/* The kernel's word on a record's socket (bh_sock_diag_open). */
static int socket_open(const struct bh_socket_record *record)
{
    struct bh_sock_id id = { record->family, record->local_port, record->remote_port,
                             { 0 }, { 0 } };
    memcpy(id.local, record->local, sizeof id.local);
    memcpy(id.remote, record->remote, sizeof id.remote);
    return bh_sock_diag_open(&id, atomic_load(&record->inode));
}

/* An unlisted record's maker asks the kernel about its sockets itself
 * while it lives: others need not, once per record, at every full take. */
static int maker_alive(const struct bh_socket_record *record)
{
    return record->unlisted && record->maker > 0 &&
           (kill(record->maker, 0) == 0 || errno == EPERM);
}

/* ---- reaping: one dump of the kernel's sockets, then the records it
 * no longer shows, each confirmed by its own question ---- */

enum {
    REAP_EVERY_MS = 5,      /* at most one reap per namespace this often */
    REAP_SHARE = 10,        /* ... and no more than 1/REAP_SHARE of the time */
    REAP_LEASE_MS = 1000,   /* how long a reaper keeps others out */
    DUMP_BUFFER = 32768,
    NEW_SYN_RECV = 12,      /* a request socket (the kernel's TCP_NEW_SYN_RECV) */
};

/* The sockets of the live records, each once, with `open` once a dump
 * shows it (a hash set), and the records to check (slot and the inode
 * it had): both in memory mapped for one reap. */
struct seen {
    uint64_t inode;
    uint64_t open;
};

struct pending {
    uint64_t inode;
    uint64_t slot;
};

struct reap {
    struct seen *set;
    uint32_t mask;          /* set size - 1, a power of two */
    uint32_t count;         /* records to check */
    struct pending *records;
    int families;           /* 1: AF_INET, 2: AF_INET6 */
    char *buffer;           /* DUMP_BUFFER bytes */
    size_t mapped;
};

/* The socket's place in the set: its own, or the empty one it would take. */
static struct seen *seen_of(const struct reap *reap, uint64_t inode)
{
    uint32_t at = (uint32_t)(inode * 0x9e3779b97f4a7c15ull >> 32) & reap->mask;
    while (reap->set[at].inode && reap->set[at].inode != inode)
        at = (at + 1) & reap->mask;
    return &reap->set[at];
}

/* The live records of this net namespace with a known address (the only
 * ones the kernel can be asked about) and no living maker to settle them,
 * in memory mapped for this reap;
 * 0, or -1 (no memory). */
static int gather(struct bh_socket_records *table, struct reap *reap)
{
    uint32_t used = atomic_load(&table->used), size = 64;
    while (size < 2 * used)
        size *= 2;
    reap->mask = size - 1;
    reap->mapped = size * sizeof *reap->set + used * sizeof *reap->records + DUMP_BUFFER;
    void *memory = mmap(NULL, reap->mapped, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED)
        return -1;
    reap->set = memory;
    reap->records = (struct pending *)(reap->set + size);
    reap->buffer = (char *)(reap->records + used);
    reap->count = 0;
    reap->families = 0;
    uint64_t here = net_namespace();
    for (uint32_t slot = 0; slot < used; slot++) {
        struct bh_socket_record *record = &table->records[slot];
        uint64_t inode = atomic_load(&record->inode);
        if (!(atomic_load(&record->state) & LIVE) || record->family == 0 ||
            record->netns != here || inode == 0 || maker_alive(record))
            continue;
        seen_of(reap, inode)->inode = inode;
        reap->records[reap->count++] = (struct pending){ inode, slot };
        reap->families |= record->family == AF_INET6 ? 2 : 1;
    }
    return 0;
}

/* Marks the candidates among one answer's sockets. 1 at the dump's end,
 * 0 for more, -1 on an error. */
static int mark(struct reap *reap, ssize_t length)
{
    for (struct nlmsghdr *header = (struct nlmsghdr *)reap->buffer;
         NLMSG_OK(header, (size_t)length); header = NLMSG_NEXT(header, length)) {
        if (header->nlmsg_type == NLMSG_DONE)
            return 1;
        if (header->nlmsg_type == NLMSG_ERROR)
            return -1;
        const struct inet_diag_msg *socket = NLMSG_DATA(header);
        if (header->nlmsg_type == SOCK_DIAG_BY_FAMILY && socket->idiag_inode) {
            struct seen *seen = seen_of(reap, socket->idiag_inode);
            seen->open = seen->inode != 0;
        }
    }
    return 0;
}

/* One dump of the family's TCP sockets that can have an inode (not
 * listening, not TIME_WAIT, not a request). 0, or -1. */
static int dump(struct reap *reap, int family)
{
    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } ask = {
        .header = { .nlmsg_len = sizeof ask, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                    .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
        .request = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
                     .idiag_states = ~((1u << TCP_LISTEN) | (1u << TCP_TIME_WAIT) |
                                       (1u << TCP_SYN_RECV) | (1u << NEW_SYN_RECV)) },
    };
    int fd = libc_socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return -1;
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    int done = libc_sendto(fd, &ask, sizeof ask, 0, (struct sockaddr *)&kernel,
                           sizeof kernel) == (ssize_t)sizeof ask ? 0 : -1;
    while (done == 0) {
        ssize_t length = libc_recv(fd, reap->buffer, DUMP_BUFFER, 0);
        done = length > 0 ? mark(reap, length) : -1;
    }
    libc_close(fd);
    return done == 1 ? 0 : -1;
}

/* Gives back the records no dump showed, once the kernel confirms each
 * (a dump can miss a socket that moved meanwhile). Permits of `index`
 * (-1: all) that came back. */
static int give_back_unseen(struct bh_namespace *ns, const struct reap *reap, int index)
{
    int given = 0;
    for (uint32_t i = 0; i < reap->count; i++) {
        const struct pending *pending = &reap->records[i];
        if (seen_of(reap, pending->inode)->open)
            continue;
        struct bh_socket_record *record = &ns->state->sockets.records[pending->slot];
        uint64_t state = atomic_load(&record->state);
        if (!(state & LIVE) || atomic_load(&record->inode) != pending->inode ||
            socket_open(record) != 0)
            continue;
        uint32_t generation = generation_of(state);
        int compartment = record->compartment, weight = record->weight;
        if (atomic_compare_exchange_strong(&record->state, &state,
                                           BUSY | with_generation(generation))) {
            give_back(ns, record, generation);
            given += index < 0 || compartment == index ? weight : 0;
        }
    }
    return given;
}

/* Whether this process reaps now: none has within the interval, and no
 * other is reaping. A time further ahead than any reaper sets is another
 * clock's (a time namespace's): not waited for. */
static int may_reap(struct bh_socket_records *table, int64_t now)
{
    int64_t after = atomic_load(&table->reap_after_ns);
    return (now >= after || after - now > bh_ms_to_ns(REAP_LEASE_MS)) &&
           atomic_compare_exchange_strong(&table->reap_after_ns, &after,
                                          now + bh_ms_to_ns(REAP_LEASE_MS));
}

/* One reap, this process's turn taken at `start`. */
static int reap_now(struct bh_namespace *ns, struct bh_socket_records *table, int index,
                    int64_t start)
{
    int saved_errno = errno, given = 0;
    struct reap reap;
    if (gather(table, &reap) == 0) {
        if ((!(reap.families & 1) || dump(&reap, AF_INET) == 0) &&
            (!(reap.families & 2) || dump(&reap, AF_INET6) == 0))
            given = give_back_unseen(ns, &reap, index);
        munmap(reap.set, reap.mapped);
    }
    int64_t end = bh_clock_ns(CLOCK_MONOTONIC), pause = REAP_SHARE * (end - start);
    if (pause < bh_ms_to_ns(REAP_EVERY_MS))
        pause = bh_ms_to_ns(REAP_EVERY_MS);
    if (pause > bh_ms_to_ns(REAP_LEASE_MS))
        pause = bh_ms_to_ns(REAP_LEASE_MS);
    atomic_store(&table->reap_after_ns, end + pause);
    errno = saved_errno;
    return given;
}

int bh_socket_reap(struct bh_namespace *ns, int index)
{
    struct bh_socket_records *table = table_of(ns);
    if (!table || !atomic_load(&table->live))
        return 0;
    int64_t start = bh_clock_ns(CLOCK_MONOTONIC);
    return may_reap(table, start) ? reap_now(ns, table, index, start) : 0;
}

int bh_socket_reap_surely(struct bh_namespace *ns, int index)
{
    struct bh_socket_records *table = table_of(ns);
    if (!table)
        return 0;
    int64_t start = bh_clock_ns(CLOCK_MONOTONIC);
    int64_t until = start + 2 * bh_ms_to_ns(REAP_LEASE_MS);  /* a dead reaper's lease, past */
    int turn = 0;
    while (!turn && start < until && atomic_load(&table->live)) {
        turn = may_reap(table, start);
        if (!turn) {
            struct timespec pause = { 0, 1000000 };
            nanosleep(&pause, NULL);
            start = bh_clock_ns(CLOCK_MONOTONIC);
        }
    }
    return turn ? reap_now(ns, table, index, start) : 0;
}

int bh_socket_count(struct bh_namespace *ns, int index, int *permits)
{
    struct bh_socket_records *table = table_of(ns);
    int count = 0;
    *permits = 0;
    uint32_t used = table && atomic_load(&table->live) ? atomic_load(&table->used) : 0;
    for (uint32_t slot = 0; slot < used; slot++) {
        struct bh_socket_record *record = &table->records[slot];
        if ((atomic_load(&record->state) & LIVE) && record->compartment == index) {
            count++;
            *permits += record->weight;
        }
    }
    return count;
}

int bh_socket_made_by(struct bh_namespace *ns, int32_t maker)
{
    struct bh_socket_records *table = table_of(ns);
    int count = 0;
    uint32_t used = table && atomic_load(&table->live) ? atomic_load(&table->used) : 0;
    for (uint32_t slot = 0; slot < used; slot++) {
        struct bh_socket_record *record = &table->records[slot];
        count += (atomic_load(&record->state) & LIVE) && record->unlisted &&
                 record->maker == maker;
    }
    return count;
}

void bh_socket_table_read(struct bh_namespace *ns, struct bh_socket_table_view *view)
{
    struct bh_socket_records *table = table_of(ns);
    *view = (struct bh_socket_table_view){ .capacity = BH_SOCKET_RECORDS };
    if (!table)
        return;
    view->in_use = (int)atomic_load(&table->live);
    view->refused = atomic_load(&table->refused);
}
