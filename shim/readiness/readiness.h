/* The readiness calls behind the hooks (hooks/readiness.c): while no fd
 * of the process waits (bh_waiting_active is 0) each is one load, a
 * branch and a jump to libc; otherwise the hiding path in readiness.c. */
#ifndef BH_READINESS_READINESS_H
#define BH_READINESS_READINESS_H

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

#include "libc/libc.h"
#include "readiness/waiting.h"

int bh_poll_hiding(struct pollfd *fds, nfds_t count, const struct timespec *timeout,
                   const sigset_t *mask);
int bh_select_hiding(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
                     const struct timespec *timeout, const sigset_t *mask);
int bh_epoll_ctl_hiding(int epfd, int op, int fd, struct epoll_event *event);
int bh_epoll_wait_marking(int epfd, struct epoll_event *events, int found);

#define BH_WAITING_NOW() __builtin_expect(                                      \
    __atomic_load_n((int *)&bh_waiting_active, __ATOMIC_RELAXED) != 0, 0)

int bh_poll(struct pollfd *fds, nfds_t count, int timeout_ms);
int bh_ppoll(struct pollfd *fds, nfds_t count, const struct timespec *timeout,
             const sigset_t *mask);
int bh_select(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
              struct timeval *timeout);
int bh_pselect(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
               const struct timespec *timeout, const sigset_t *mask);
int bh_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event);
int bh_epoll_wait(int epfd, struct epoll_event *events, int most, int timeout_ms);
int bh_epoll_pwait(int epfd, struct epoll_event *events, int most, int timeout_ms,
                   const sigset_t *mask);
int bh_epoll_pwait2(int epfd, struct epoll_event *events, int most,
                    const struct timespec *timeout, const sigset_t *mask);

#endif
