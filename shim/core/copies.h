/* Counted connections whose fds other processes hold: fork, SCM_RIGHTS
 * and exec. The permit follows the socket, not the process that
 * connected: see copies.c. */
#ifndef BH_COPIES_H
#define BH_COPIES_H

#include <sys/socket.h>
#include <sys/types.h>

/* pthread_atfork handlers: before fork, every counted connection gets a
 * record counting the child in; in the child, those are kept. */
void bh_copies_before_fork(void);
void bh_copies_after_fork_child(void);

/* sendmsg with a control buffer: counted fds passed with SCM_RIGHTS get a
 * record counting the copy in flight before `send` runs; a failed send
 * takes it back. */
ssize_t bh_copies_sendmsg(int fd, const struct msghdr *msg, int flags,
                          ssize_t (*send)(int, const struct msghdr *, int));
/* An fd just received with SCM_RIGHTS: if it is a counted socket, this
 * process holds the copy that was in flight; `peeked` (MSG_PEEK), a copy of
 * its own, the message and its copy in flight staying queued. */
void bh_copies_received(int fd, int peeked);

#endif
