/* Asynchronous admission: a non-blocking connect() to a full compartment
 * returns -1 EINPROGRESS at once and a thread of ours waits for its
 * permit in the common arrival order. See async_connect.c. */
#ifndef BH_ASYNC_CONNECT_H
#define BH_ASYNC_CONNECT_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "config/config.h"
#include "core/joined.h"
#include "core/outcome.h"
#include "fdtable/fd_table.h"
#include "readiness/waiting.h"

/* The gate found the compartment full for fd, a non-blocking socket that
 * may wait, in the namespace `joined`: the wait starts there (fd hidden
 * from the program's readiness, tracked as waiting, a waiter thread
 * queued for its permits). 0, or -1 when it cannot start, with why in
 * words for the refusal line. */
int bh_async_connect(struct bh_joined *joined, int fd, const struct bh_rule *rule,
                     const struct sockaddr *to, socklen_t length, char *why, size_t whylen);

/* The applicant's wait_elsewhere (admission.h): nonzero in the process
 * that owns the fd table, 0 in a vfork child. */
int bh_async_can_wait(void);

/* Threads of ours in this process (the waiters, the io watchdog): left
 * out when hold_wait_ms asks whether the program is single-threaded. */
int bh_async_own_threads(void);

/* connect() again on a fd whose connection waits or was refused: 1 with
 * errno set (EALREADY while it waits, the verdict once), 0 when the
 * verdict was read: the fd is no longer tracked and is admitted afresh. */
int bh_async_again(int fd);

/* getsockopt(SO_ERROR) on such a fd: the verdict, once (0 while it
 * waits); the real call once it was read. */
int bh_async_so_error(int fd, int level, int name, void *value, socklen_t *len);

/* A send or receive on such a fd: 1 with errno set (EAGAIN while it
 * waits, the verdict once), 0: the real call goes ahead. */
int bh_async_io_held(int fd);

/* A connection that waited ended (its last fd closed, dup2 onto it...)
 * with `ticket`, its attach time while it waits: its waiter leaves the
 * queue. Async-signal-safe. */
void bh_async_ended(int64_t ticket);

/* fd, about to be closed or replaced, carries a waiting connection: its
 * readiness entry goes. */
void bh_async_fd_closing(int fd);
/* The same for a close path of a counted connection: one load while no
 * fd of the process waits (forgetting a fd that does not wait is
 * harmless, and rare: something else waits meanwhile). */
static inline void bh_async_closing(int fd)
{
    if (__builtin_expect(atomic_load_explicit(&bh_waiting_active, memory_order_relaxed), 0))
        bh_async_fd_closing(fd);
}

/* newfd is a copy (dup) of a fd whose connection waits: hidden too. */
void bh_async_copied(int oldfd, int newfd);

/* In a forked child: the parent's waiters are not here; the child's
 * copies of waiting connections hold permits of its own (copies.c took
 * them) and are left to the kernel's view of their socket. */
void bh_async_after_fork_child(void);

#endif
