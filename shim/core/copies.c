/* The permit follows the socket: copies in other processes.
 *
 * An ordinary connection is the connecting process's alone: its permit is
 * held by that process's SEM_UNDO record and goes back at its last close
 * (fd_table.c counts its fds), with no shared state touched. Only when a
 * copy can leave the process does the connection get a record
 * (permits/socket_records.c), which takes its permits over (parks them)
 * and counts references, one per process's connection plus copies in
 * flight:
 *   - fork: before it (the prepare handler, in the parent), each counted
 *     connection gets its record and one reference for the child, so that
 *     a close in the parent the instant fork returns cannot end it; the
 *     child keeps those connections in its fd table (its close, exec or
 *     exit drops the reference). A failed fork leaves one reference too
 *     many: the reaper gives the permits back once the socket is gone.
 *   - sendmsg with SCM_RIGHTS: one reference per counted fd passed, before
 *     the send; a failed send drops it (sendmmsg sends messages that pass
 *     fds one sendmsg at a time: hooks/connect.c). The receiver's recvmsg
 *     or recvmmsg finds the record by the socket's inode and its
 *     connection takes that reference over; a MSG_PEEK receive installs
 *     a copy while the message stays queued, so its copy takes a
 *     reference of its own.
 *   - exec: the hand-off names each connection's record (handoff.c).
 *   - vfork and posix_spawn: the child runs on our memory and its exec'd
 *     program has no hand-off (glibc's posix_spawn execs inside libc), so
 *     before it starts, each counted connection gets its record and one
 *     reference for the child, listed in the calling thread's own memory
 *     (a vfork child runs on its parent's thread). The child drops the
 *     references of connections none of whose fds survives its exec (a
 *     vfork child at its exec hook; for posix_spawn the parent, after,
 *     from close-on-exec), and every one if it exits instead; a surviving
 *     fd's reference is the program's, and the reaper settles the record
 *     by the kernel's word once the socket is closed everywhere.
 * Every end of a connection with a record drops its reference instead of
 * giving the permit back; the last one gives it back (bh_connection_ended).
 *
 * A connection that gets no record (every one is taken) is counted twice
 * rather than not at all: a forked child takes permits of its own for its
 * copy (SEM_UNDO, owed when none is free: never a wait in the atfork
 * handler) and gives them back at its close or exit, while the parent
 * keeps its own; a send that would pass it fails with ETOOMANYREFS before
 * anything is sent, as the kernel's own limit on fds in flight does.
 *
 * Each record is made while the connection is pinned (a reference in the
 * fd table), so a close racing a fork or a send in another thread either
 * ends the connection before it is parked (an ordinary release) or after
 * its share is set (the record's reference is dropped): never both. */
#include "core/copies.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/outcome.h"
#include "core/state.h"
#include "fdtable/fd_table.h"
#include "libc/libc.h"

/* A record's name, in the namespace that keeps it: the one its
 * connection's place names (joined.h). */
struct copy {
    bh_share share;
    struct bh_namespace *ns;
};

/* fd's connection's record, made now if it has none, with a reference
 * for a copy; share 0 when the fd carries no counted connection or no
 * record could be made. */
static struct copy shared(int fd)
{
    struct copy copy = { 0, NULL };
    uint32_t pinned = bh_fd_pin(fd);
    if (!pinned)
        return copy;
    struct bh_fd_state state = bh_fd_lookup(fd);
    copy.share = state.share;
    copy.ns = state.compartment >= 0 ? bh_ns_of(state.compartment) : NULL;
    /* a waiting connection holds no permits to put in a record */
    if (!copy.share && copy.ns && !(state.watch & BH_WATCH_WAITING)) {
        copy.share = bh_socket_share(copy.ns, fd, bh_index_of(state.compartment),
                                     state.weight);
        if (copy.share)
            bh_fd_set_share(pinned, copy.share);
    }
    /* A reference for the copy before the pin goes: the pin may be the
     * connection's last fd now. */
    if (copy.share && bh_socket_ref(copy.ns, copy.share) < 0)
        copy.share = 0;
    bh_give_back(bh_fd_unpin(pinned));
    return copy;
}

static void share_with_child(int fd, void *ctx)
{
    (void)ctx;
    shared(fd);
}

void bh_copies_before_fork(void)
{
    if (atomic_load(&bh_shim.status) == BH_SHIM_ACTIVE)
        bh_fd_for_each_connection(share_with_child, NULL);
}

/* The parent tells the breaker what becomes of the connection (the child
 * would tell it twice), and the probe slot is the parent's (SEM_UNDO). */
static void leave_outcome_to_parent(int fd, uint32_t connection, int compartment,
                                    void *ctx)
{
    (void)connection;
    (void)compartment;
    (void)ctx;
    bh_fd_unwatch(fd, BH_WATCH_CONNECTING | BH_WATCH_FIRST_BYTE | BH_WATCH_MAY_FAIL |
                      BH_WATCH_PROBE);
}

/* The references a spawned child holds: this thread's alone. */
enum { MAX_SPAWNED = 256 };
struct spawned {
    pid_t parent;   /* the process that listed them; 0: none */
    int count;
    struct copy copies[MAX_SPAWNED];
};
static __thread struct spawned spawned;

/* The child's own permits for its copy of a connection with no record
 * (the table was full): counted twice rather than not at all. */
static int own_copy(int place, int weight)
{
    return place >= 0 && weight > 0 ? bh_permit_take_for_copy(BH_AT(place), weight) : -1;
}

void bh_copies_after_fork_child(void)
{
    spawned.parent = 0;  /* the parent's spawned children are not ours */
    bh_fd_table_keep_shared(own_copy);
    bh_fd_for_each(leave_outcome_to_parent, NULL);
}

static void share_with_spawned(int fd, void *ctx)
{
    (void)ctx;
    struct copy copy = spawned.count < MAX_SPAWNED ? shared(fd) : (struct copy){ 0, NULL };
    if (copy.share)
        spawned.copies[spawned.count++] = copy;
}

static void before_spawn(void)
{
    int saved_errno = errno;
    spawned.count = 0;
    spawned.parent = getpid();
    if (atomic_load(&bh_shim.status) == BH_SHIM_ACTIVE)
        bh_fd_for_each_connection(share_with_spawned, NULL);
    errno = saved_errno;
}

/* Called from hooks/fork.c's vfork, written in assembly: `used` keeps it
 * for a caller link-time optimisation cannot see. */
__attribute__((used)) void *bh_copies_before_vfork(void)
{
    before_spawn();
    return bh_libc_vfork();
}

struct survivor {
    struct copy copy;
    int found;
};

/* An fd of the copy's connection open here without close-on-exec, whose
 * socket is still the record's. */
static void find_survivor(int fd, uint32_t connection, int place, void *ctx)
{
    struct survivor *survivor = ctx;
    struct stat socket_stat;
    int flags, index, weight;
    (void)connection;
    if (survivor->found || place < 0 || bh_ns_of(place) != survivor->copy.ns ||
        bh_fd_lookup(fd).share != survivor->copy.share)
        return;
    flags = libc_fcntl(fd, F_GETFD, NULL);
    survivor->found = flags >= 0 && !(flags & FD_CLOEXEC) && fstat(fd, &socket_stat) == 0 &&
                      bh_socket_find(survivor->copy.ns, socket_stat.st_ino, &index, &weight) ==
                          survivor->copy.share;
}

static int survives_exec(struct copy copy)
{
    struct survivor survivor = { copy, 0 };
    bh_fd_for_each_inherited(find_survivor, &survivor);
    return survivor.found;
}

/* The child's references: of connections whose fds exec closes, or all. */
static void drop_spawned(int all)
{
    for (int i = 0; i < spawned.count; i++) {
        struct copy *copy = &spawned.copies[i];
        if (copy->share && (all || !survives_exec(*copy))) {
            bh_socket_unref(copy->ns, copy->share);
            copy->share = 0;
        }
    }
}

static int in_spawned_child(void)
{
    return spawned.parent && spawned.parent != getpid();
}

void bh_copies_spawned_exec(void)
{
    int saved_errno = errno;
    if (in_spawned_child())
        drop_spawned(0);
    errno = saved_errno;
}

void bh_copies_spawned_exit(void)
{
    if (in_spawned_child())
        drop_spawned(1);
}

int bh_copies_spawn(int (*spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                                 const posix_spawnattr_t *, char *const[], char *const[]),
                    pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
                    const posix_spawnattr_t *attributes, char *const argv[],
                    char *const envp[])
{
    before_spawn();
    int rc = spawn(pid, path, actions, attributes, argv, envp);
    int saved_errno = errno;
    drop_spawned(rc != 0);
    spawned.parent = 0;
    errno = saved_errno;
    return rc;
}

enum { MAX_PASSED = 253 };  /* SCM_MAX_FD */

/* Calls each(fd, ctx) for every fd the message passes. */
static void each_passed(const struct msghdr *msg, void (*each)(int fd, void *ctx),
                        void *ctx)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c;
         c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            each(fd, ctx);
        }
    }
}

struct in_flight {
    struct copy copies[MAX_PASSED];
    int count;
    int unrecorded;     /* counted fds that got no record */
};

static void send_copy(int fd, void *ctx)
{
    struct in_flight *flight = ctx;
    if (!bh_fd_has_connection(fd))
        return;
    struct copy copy = flight->count < MAX_PASSED ? shared(fd) : (struct copy){ 0, NULL };
    if (copy.share)
        flight->copies[flight->count++] = copy;
    else
        flight->unrecorded++;
}

ssize_t bh_copies_sendmsg(int fd, const struct msghdr *msg, int flags,
                          ssize_t (*send)(int, const struct msghdr *, int))
{
    struct in_flight flight = { .count = 0, .unrecorded = 0 };
    if (atomic_load(&bh_shim.status) == BH_SHIM_ACTIVE && msg->msg_control)
        each_passed(msg, send_copy, &flight);
    /* A copy no record would count: refused, as the kernel refuses too
     * many fds in flight, rather than let its permit go with the sender. */
    ssize_t sent = flight.unrecorded ? (errno = ETOOMANYREFS, -1) : send(fd, msg, flags);
    int saved_errno = errno;
    for (int i = 0; sent < 0 && i < flight.count; i++)
        bh_socket_unref(flight.copies[i].ns, flight.copies[i].share);  /* nothing left */
    errno = saved_errno;
    return sent;
}

void bh_copies_received(int fd, int peeked)
{
    struct stat received;
    int index, weight;
    if (atomic_load(&bh_shim.status) != BH_SHIM_ACTIVE || fstat(fd, &received) < 0 ||
        !S_ISSOCK(received.st_mode))
        return;
    /* looked for in the namespace connects count in now */
    struct bh_joined *joined = bh_joined_now();
    bh_share share = bh_socket_find(&joined->ns, received.st_ino, &index, &weight);
    if (share && peeked && bh_socket_ref(&joined->ns, share) < 0)
        return;  /* given back meanwhile: the kernel had it closed everywhere */
    if (share && bh_fd_attach_shared(fd, bh_place(joined, index), weight, share) < 0)
        bh_socket_unref(&joined->ns, share);  /* untracked here: not held */
}
