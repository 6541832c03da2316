/* Counted sockets whose fds more than one process holds: what may be done
 * with them. Their records' layout is layout.h's; what the fields mean,
 * who writes them and what a death costs is at the top of
 * socket_records.c, the only code that writes them. */
#ifndef BH_SOCKET_RECORDS_H
#define BH_SOCKET_RECORDS_H

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

struct bh_namespace;

/* A record's name in a process's fd table: slot and generation; 0 none. */
typedef uint32_t bh_share;

/* Parks this process's `weight` permits of compartment `index`, held for
 * the connection on fd, in a new record with one reference (the caller's
 * connection). 0 when none could be made (the table is full): the permits
 * stay this process's, and the caller must not let a copy go uncounted. */
bh_share bh_socket_share(struct bh_namespace *ns, int fd, int index, int weight);
/* One more reference (a forked child's connection, a copy in flight over
 * SCM_RIGHTS). 0, or -1 when the record is gone. */
int bh_socket_ref(struct bh_namespace *ns, bh_share share);
/* One reference fewer; the last gives the parked permits back and
 * returns 1. Async-signal-safe. */
int bh_socket_unref(struct bh_namespace *ns, bh_share share);
/* The live record of the socket with this inode (a received fd), with its
 * compartment and weight; 0 when none (or it is unlisted). */
bh_share bh_socket_find(struct bh_namespace *ns, uint64_t inode, int *index,
                        int *weight);
/* Records of compartment `index` (-1: all) whose socket no process has
 * open any more, as the kernel says (sock_diag), give their permits back;
 * an unlisted record whose maker lives is left to it. Returns how many
 * permits came back. */
int bh_socket_reap(struct bh_namespace *ns, int index);
/* The same, waiting its turn (up to two seconds) where bh_socket_reap
 * skips it because another process reaped or reaps within the interval:
 * a last look that must happen (run's heir, once its tree is gone). */
int bh_socket_reap_surely(struct bh_namespace *ns, int index);
/* A TCP socket as sock_diag finds it: family (AF_INET, AF_INET6), ports
 * and addresses in network order (v4: the first word). */
struct bh_sock_id {
    uint16_t family;
    uint16_t local_port, remote_port;
    uint32_t local[4], remote[4];
};
/* Like bh_socket_share, for permits this process took for another (a
 * seccomp supervisor's, bh_permit_take_for_another: `taken`, by pool) for
 * the socket with this inode and id, whose connect has begun: parked in an unlisted record (bh_socket_find never
 * returns it) with one reference, the caller's, and out of the caller's
 * holder record. 0 when none could be made: the permits stay the
 * caller's. maker: the caller's pid, which the record names (passed in:
 * a getpid() per connect is measurable). */
struct bh_taken;
bh_share bh_socket_park_for_another(struct bh_namespace *ns, uint64_t inode,
                                    const struct bh_sock_id *id, int index,
                                    struct bh_taken taken, pid_t maker);
/* The kernel's answer on the TCP socket with this id, in any state, asked
 * on netlink socket fd (bh_sock_diag_socket) under its own sequence
 * number: 1 it has one (*found, its state and inode: 0 for an orphan
 * finishing its close), 0 it has none, -1 unknown. */
int bh_sock_diag_find(int fd, const struct bh_sock_id *id, uint32_t sequence,
                      struct inet_diag_msg *found);
/* The kernel's word: 1 the socket with this id is open in some process
 * (it shows this inode), 0 it is not (gone, or only an orphan finishing
 * its close: inode 0), -1 unknown. Unprivileged, as `ss` is; one netlink
 * socket, one request, one answer. */
int bh_sock_diag_open(const struct bh_sock_id *id, uint64_t inode);
/* The same on a netlink socket the caller keeps for a series of asks
 * (bh_sock_diag_socket: -1 when none), each with its own sequence
 * number: a socket and a close fewer per ask. */
int bh_sock_diag_socket(void);
int bh_sock_diag_open_on(int fd, const struct bh_sock_id *id, uint64_t inode,
                         uint32_t sequence);

/* Live records of compartment `index` and the permits they hold. */
int bh_socket_count(struct bh_namespace *ns, int index, int *permits);
/* How many unlisted records process `maker` made are live. */
int bh_socket_made_by(struct bh_namespace *ns, int32_t maker);

/* The whole table: records live, how many there can be, and shares
 * refused because every one was taken (their sockets' permits stayed
 * with the process that connected). */
struct bh_socket_table_view {
    int in_use;
    int capacity;
    uint64_t refused;
};
void bh_socket_table_read(struct bh_namespace *ns, struct bh_socket_table_view *view);

#endif
