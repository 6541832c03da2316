/* What waiting.c offers the readiness calls beyond waiting.h: epoll
 * registrations of hidden fds, and the error mark of a refused one. */
#ifndef BH_READINESS_DEFERRED_H
#define BH_READINESS_DEFERRED_H

#include <stdint.h>
#include <sys/epoll.h>

/* epoll_ctl while something waits: remembered and answered as the kernel
 * would when fd is hidden, passed to libc otherwise (either way under the
 * table's lock, so that it cannot cross a bh_waiting_hide). */
int bh_waiting_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event);

/* EPOLLERR when epfd's registration with this data belongs to an fd whose
 * refusal the program has not read yet (the real socket, never connected,
 * reports only EPOLLHUP), else 0. */
uint32_t bh_waiting_epoll_error(int epfd, uint64_t data);

#endif
