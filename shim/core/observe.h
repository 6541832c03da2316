/* `[global] observe = yes`: every outbound TCP connect of this process,
 * matched by a rule or not, recorded in the namespace's destinations
 * table (permits/destinations.h) with the name it was resolved by, how
 * it turned out, and how long it was held. Off, each entry point below is
 * one compare of bh_observing and a branch. */
#ifndef BH_OBSERVE_H
#define BH_OBSERVE_H

#include <stdint.h>
#include <sys/socket.h>

/* Nonzero once start-up attached the table; written once, before any
 * hook can see the shim active. */
extern int bh_observing __attribute__((visibility("hidden")));  /* one compare */

/* At start-up, with observe on: attaches uid's table of the namespace. */
void bh_observe_start(uid_t uid, const char *namespace_name);
/* In a forked child: the connections it inherited are its parent's. */
void bh_observe_after_fork_child(void);

/* The resolver gave address (AF_INET or AF_INET6) for name. */
void bh_observe_resolved_here(const char *name, int family, const void *address);
static inline void bh_observe_resolved(const char *name, int family, const void *address)
{
    if (__builtin_expect(bh_observing, 0))
        bh_observe_resolved_here(name, family, address);
}

/* fd's connect to `to` begins (the gate checked it is a TCP socket);
 * then one of: refused by a compartment, or left with the call's result
 * (errno EINPROGRESS: under way, which counts as open until SO_ERROR
 * says it failed). Called by the gate with observe on only. */
void bh_observe_connect(int fd, const struct sockaddr *to);
void bh_observe_refused(int fd);
void bh_observe_left(int fd, int call_failed);

/* getsockopt(SO_ERROR) told the program how fd's non-blocking connect
 * went: err 0 connected, else failed (it was counted open meanwhile). */
void bh_observe_connect_result(int fd, int err);
static inline void bh_observe_so_error(int fd, int err)
{
    if (__builtin_expect(bh_observing, 0))
        bh_observe_connect_result(fd, err);
}

/* fd is about to be closed (close(), whose hook checks bh_observing):
 * its connection's hold ends. */
void bh_observe_ended(int fd);

#endif
