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
 *     connection takes that reference over.
 *   - exec: the hand-off names each connection's record (handoff.c).
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
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "core/outcome.h"
#include "core/state.h"
#include "fdtable/fd_table.h"

/* fd's connection's record, made now if it has none; 0 when the fd
 * carries no counted connection or no record could be made. */
static bh_share shared(int fd)
{
    uint32_t pinned = bh_fd_pin(fd);
    if (!pinned)
        return 0;
    struct bh_fd_state state = bh_fd_lookup(fd);
    bh_share share = state.share;
    if (!share && state.compartment >= 0) {
        share = bh_socket_share(&bh_shim.ns, fd, state.compartment, state.weight);
        if (share)
            bh_fd_set_share(pinned, share);
    }
    /* A reference for the copy before the pin goes: the pin may be the
     * connection's last fd now. */
    if (share && bh_socket_ref(&bh_shim.ns, share) < 0)
        share = 0;
    bh_give_back(bh_fd_unpin(pinned));
    return share;
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

/* The child's own permits for its copy of a connection with no record
 * (the table was full): counted twice rather than not at all. */
static int own_copy(int compartment, int weight)
{
    return compartment >= 0 && weight > 0
        ? bh_permit_take_for_copy(&bh_shim.ns, compartment, weight) : -1;
}

void bh_copies_after_fork_child(void)
{
    bh_fd_table_keep_shared(own_copy);
    bh_fd_for_each(leave_outcome_to_parent, NULL);
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
    bh_share shares[MAX_PASSED];
    int count;
    int unrecorded;     /* counted fds that got no record */
};

static void send_copy(int fd, void *ctx)
{
    struct in_flight *flight = ctx;
    if (!bh_fd_has_connection(fd))
        return;
    bh_share share = flight->count < MAX_PASSED ? shared(fd) : 0;
    if (share)
        flight->shares[flight->count++] = share;
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
        bh_socket_unref(&bh_shim.ns, flight.shares[i]);  /* nothing left */
    errno = saved_errno;
    return sent;
}

void bh_copies_received(int fd)
{
    struct stat received;
    int index, weight;
    if (atomic_load(&bh_shim.status) != BH_SHIM_ACTIVE || fstat(fd, &received) < 0 ||
        !S_ISSOCK(received.st_mode))
        return;
    bh_share share = bh_socket_find(&bh_shim.ns, received.st_ino, &index, &weight);
    if (share && bh_fd_attach_shared(fd, index, weight, share) < 0)
        bh_socket_unref(&bh_shim.ns, share);  /* untracked here: not held */
}
