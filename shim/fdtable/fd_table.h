/* Which fds of this process carry a counted connection.
 *
 * A connection is refcounted, not the fd: dup() and friends add fds to the
 * same connection, and its permit goes back when the last of them closes.
 * Everything here is lock-free and allocation-free on the close path, so
 * close() may run in a signal handler. See fd_table.c. */
#ifndef BH_FD_TABLE_H
#define BH_FD_TABLE_H

#include <stdint.h>

/* What the shim knows of an fd without asking the kernel. */
enum bh_fd_kind {
    BH_FD_UNKNOWN = 0,      /* not created through a hook: ask getsockopt */
    BH_FD_INET_STREAM = 1,  /* socket(AF_INET/AF_INET6, SOCK_STREAM) */
    BH_FD_OTHER = 2,        /* any other socket */
};

/* Called when a connection's last fd goes, with its compartment. Defined by
 * the shim core; must be async-signal-safe. */
void bh_connection_ended(int compartment);

enum bh_fd_kind bh_fd_kind(int fd);
/* Compartment of the connection on fd, or -1. */
int bh_fd_compartment(int fd);

/* A call handed back a new fd: whatever was tracked on that number was
 * closed behind our back (raw syscall, glibc-internal close). */
void bh_fd_new(int fd, enum bh_fd_kind kind);
/* The fd is about to be closed: untrack it first, so a thread that gets the
 * number back the instant close() returns finds it clean. Returns what was
 * tracked, to pass to bh_fd_release() once the real close is done (the
 * permit goes back after the socket is gone, and even if close failed). */
uint32_t bh_fd_detach(int fd);
void bh_fd_release(uint32_t detached);
/* Both at once, for paths with no real close of their own to wait for. */
void bh_fd_closing(int fd);
void bh_fd_closing_range(unsigned first, unsigned last);
/* newfd now refers to what oldfd refers to (dup, dup2, dup3, F_DUPFD). */
void bh_fd_duplicated(int oldfd, int newfd);

/* Records a new connection on fd. Returns 0, or -1 when the fd already has
 * one (another thread won: the caller gives its permit back). */
int bh_fd_attach(int fd, int compartment);

/* Calls visit(fd, connection_id, compartment) for every tracked fd. */
void bh_fd_for_each(void (*visit)(int fd, uint32_t connection, int compartment,
                                  void *ctx), void *ctx);
/* In a forked child: nothing here is the child's. */
void bh_fd_forget_all(void);

#endif
