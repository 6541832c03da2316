/* Hooks of the readiness calls: a waiting connect's fd stays out of the
 * program's poll, select and epoll until its verdict (readiness/).
 * While nothing waits, each is one load, a branch and a jump to libc. */
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "hooks/export.h"
#include "readiness/readiness.h"

/* glibc declares these only in its fortify headers. */
int __poll_chk(struct pollfd *fds, nfds_t count, int timeout_ms, size_t length);
int __ppoll_chk(struct pollfd *fds, nfds_t count, const struct timespec *timeout,
                const sigset_t *mask, size_t length);

BH_EXPORT int poll(struct pollfd *fds, nfds_t count, int timeout_ms)
{
    return bh_poll(fds, count, timeout_ms);
}
BH_EXPORT int ppoll(struct pollfd *fds, nfds_t count, const struct timespec *timeout,
                    const sigset_t *mask)
{
    return bh_ppoll(fds, count, timeout, mask);
}
BH_EXPORT int __poll_chk(struct pollfd *fds, nfds_t count, int timeout_ms, size_t length)
{
    return bh___poll_chk(fds, count, timeout_ms, length);
}
BH_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t count, const struct timespec *timeout,
                          const sigset_t *mask, size_t length)
{
    return bh___ppoll_chk(fds, count, timeout, mask, length);
}
BH_EXPORT int select(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
                     struct timeval *timeout)
{
    return bh_select(count, readable, writable, exceptional, timeout);
}
BH_EXPORT int pselect(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
                      const struct timespec *timeout, const sigset_t *mask)
{
    return bh_pselect(count, readable, writable, exceptional, timeout, mask);
}
BH_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    return bh_epoll_ctl(epfd, op, fd, event);
}
BH_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int most, int timeout_ms)
{
    return bh_epoll_wait(epfd, events, most, timeout_ms);
}
BH_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int most, int timeout_ms,
                          const sigset_t *mask)
{
    return bh_epoll_pwait(epfd, events, most, timeout_ms, mask);
}
BH_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int most,
                           const struct timespec *timeout, const sigset_t *mask)
{
    return bh_epoll_pwait2(epfd, events, most, timeout, mask);
}
