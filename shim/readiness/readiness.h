/* The readiness calls behind the hooks (hooks/readiness.c). While no fd
 * of the process waits (bh_waiting_active is 0) each is one load, a
 * branch and a jump to libc; otherwise the hiding path in readiness.c,
 * which hides waiting fds from the call and wakes when one is shown. */
#ifndef BH_READINESS_READINESS_H
#define BH_READINESS_READINESS_H

#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

#include "libc/libc.h"
#include "readiness/deferred.h"
#include "readiness/waiting.h"

int bh_poll_hiding(struct pollfd *fds, nfds_t count, const struct timespec *timeout,
                   const sigset_t *mask);
int bh_select_hiding(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
                     struct timeval *timeout);
int bh_pselect_hiding(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
                      const struct timespec *timeout, const sigset_t *mask);
/* After a real epoll_wait found `found` events: adds EPOLLERR to those of
 * refused fds whose verdict the program has not read. */
int bh_epoll_marking(int epfd, struct epoll_event *events, int found);

static inline int bh_waiting_now(void)
{
    return __builtin_expect(atomic_load_explicit(&bh_waiting_active,
                                                 memory_order_relaxed) != 0, 0);
}

static inline int bh_poll(struct pollfd *fds, nfds_t count, int timeout_ms)
{
    if (!bh_waiting_now())
        return libc_poll(fds, count, timeout_ms);
    struct timespec timeout = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
    return bh_poll_hiding(fds, count, timeout_ms < 0 ? NULL : &timeout, NULL);
}

static inline int bh_ppoll(struct pollfd *fds, nfds_t count, const struct timespec *timeout,
                           const sigset_t *mask)
{
    if (!bh_waiting_now())
        return libc_ppoll(fds, count, timeout, mask);
    return bh_poll_hiding(fds, count, timeout, mask);
}

/* _FORTIFY_SOURCE builds call this one; a short array still fails
 * libc's own check. */
static inline int bh___poll_chk(struct pollfd *fds, nfds_t count, int timeout_ms,
                                size_t length)
{
    if (!bh_waiting_now() || length / sizeof *fds < count)
        return libc___poll_chk(fds, count, timeout_ms, length);
    return bh_poll(fds, count, timeout_ms);
}

static inline int bh___ppoll_chk(struct pollfd *fds, nfds_t count,
                                 const struct timespec *timeout, const sigset_t *mask,
                                 size_t length)
{
    if (!bh_waiting_now() || length / sizeof *fds < count)
        return libc___ppoll_chk(fds, count, timeout, mask, length);
    return bh_poll_hiding(fds, count, timeout, mask);
}

static inline int bh_select(int count, fd_set *readable, fd_set *writable,
                            fd_set *exceptional, struct timeval *timeout)
{
    if (!bh_waiting_now())
        return libc_select(count, readable, writable, exceptional, timeout);
    return bh_select_hiding(count, readable, writable, exceptional, timeout);
}

static inline int bh_pselect(int count, fd_set *readable, fd_set *writable,
                             fd_set *exceptional, const struct timespec *timeout,
                             const sigset_t *mask)
{
    if (!bh_waiting_now())
        return libc_pselect(count, readable, writable, exceptional, timeout, mask);
    return bh_pselect_hiding(count, readable, writable, exceptional, timeout, mask);
}

static inline int bh_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    if (!bh_waiting_now())
        return libc_epoll_ctl(epfd, op, fd, event);
    return bh_waiting_epoll_ctl(epfd, op, fd, event);
}

/* epoll_wait needs nothing hidden (a waiting fd is in no set); only the
 * error mark of a refused fd. Looked at when the call starts, so that
 * nothing waiting costs a tail jump: a wait that began before any fd of
 * the process waited reports a refusal during it without the mark
 * (docs/limits.md). */
static inline int bh_epoll_wait(int epfd, struct epoll_event *events, int most,
                                int timeout_ms)
{
    if (!bh_waiting_now())
        return libc_epoll_wait(epfd, events, most, timeout_ms);
    return bh_epoll_marking(epfd, events, libc_epoll_wait(epfd, events, most, timeout_ms));
}

static inline int bh_epoll_pwait(int epfd, struct epoll_event *events, int most,
                                 int timeout_ms, const sigset_t *mask)
{
    if (!bh_waiting_now())
        return libc_epoll_pwait(epfd, events, most, timeout_ms, mask);
    return bh_epoll_marking(epfd, events,
                            libc_epoll_pwait(epfd, events, most, timeout_ms, mask));
}

static inline int bh_epoll_pwait2(int epfd, struct epoll_event *events, int most,
                                  const struct timespec *timeout, const sigset_t *mask)
{
    if (!bh_waiting_now())
        return libc_epoll_pwait2(epfd, events, most, timeout, mask);
    return bh_epoll_marking(epfd, events,
                            libc_epoll_pwait2(epfd, events, most, timeout, mask));
}

#endif
