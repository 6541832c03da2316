/* The hiding paths of the readiness calls, taken while some fd of the
 * process waits or has an unread refusal (bh_waiting_active).
 *
 * poll and select run on a copy of the caller's fds, in which a waiting
 * fd is absent and a refused one is answered at once, plus the call's own
 * waker (wake.c): when only the waker fired, the table changed, so the
 * call looks again with the time left. The caller's arrays get the
 * results back and never see the waker. The copy is on the stack up to
 * POLL_COPY entries, above that in pages of its own (mmap: no malloc,
 * which a hook may not call). No shared state of its own: waiting.c and
 * wake.c say theirs. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "libc/clock.h"
#include "readiness/deferred.h"
#include "readiness/readiness.h"
#include "readiness/wake.h"

enum { POLL_COPY = 256 };
/* Without a waker (the pool used up, or select with the waker's number
 * at FD_SETSIZE or above), a call looks again this often. */
#define SLICE_NS 10000000LL

/* A deadline on CLOCK_MONOTONIC; -1: none, 0: now (a zero timeout,
 * common in event loops, reads no clock). */
static int64_t deadline_of(const struct timespec *timeout)
{
    if (!timeout)
        return -1;
    if (timeout->tv_sec == 0 && timeout->tv_nsec == 0)
        return 0;
    return bh_clock_ns(CLOCK_MONOTONIC) + (int64_t)timeout->tv_sec * 1000000000 +
           timeout->tv_nsec;
}

/* What is left until the deadline, and at most `most` ns (-1: no bound);
 * NULL: wait for ever. */
static struct timespec *time_left(int64_t deadline, int64_t most, struct timespec *left)
{
    int64_t ns = most;
    if (deadline == 0)
        ns = 0;
    else if (deadline > 0) {
        int64_t until = deadline - bh_clock_ns(CLOCK_MONOTONIC);
        if (until < 0)
            until = 0;
        if (ns < 0 || until < ns)
            ns = until;
    }
    if (ns < 0)
        return NULL;
    left->tv_sec = ns / 1000000000;
    left->tv_nsec = ns % 1000000000;
    return left;
}

static int deadline_passed(int64_t deadline)
{
    return deadline == 0 || (deadline > 0 && bh_clock_ns(CLOCK_MONOTONIC) >= deadline);
}

/* ---- poll ------------------------------------------------------------- */

/* The copy, with waiting and refused entries negative (revents 0); the
 * number of refused ones, which make the call return at once. */
static int hide_entries(const struct pollfd *fds, struct pollfd *copy, nfds_t count)
{
    int refused = 0;
    for (nfds_t i = 0; i < count; i++) {
        int verdict = bh_waiting_verdict(fds[i].fd, 0);
        copy[i] = fds[i];
        if (verdict != BH_WAITING_NONE)
            copy[i].fd = -1;
        refused += verdict > 0;
    }
    return refused;
}

/* The results back into the caller's array; a refused fd as the kernel
 * reports a refused connect. The count the caller expects. */
static int fill_back(struct pollfd *fds, const struct pollfd *copy, nfds_t count)
{
    int found = 0;
    for (nfds_t i = 0; i < count; i++) {
        short revents = copy[i].revents;
        if (copy[i].fd != fds[i].fd && bh_waiting_verdict(fds[i].fd, 0) > 0)
            revents = (short)((fds[i].events & (POLLOUT | POLLWRNORM)) | POLLERR | POLLHUP);
        fds[i].revents = revents;
        found += revents != 0;
    }
    return found;
}

/* One real ppoll over the copy and the waker; -1, or the count found. */
static int poll_round(struct pollfd *fds, struct pollfd *copy, nfds_t count, int waker,
                      int64_t deadline, const sigset_t *mask, int *woken)
{
    struct timespec left;
    nfds_t polled = count;
    int refused = hide_entries(fds, copy, count);
    int wake_fd = waker == BH_WAKE_NONE ? -1 : bh_wake_fd(waker);
    if (wake_fd >= 0)
        copy[polled++] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
    int64_t most = refused ? 0 : wake_fd < 0 ? SLICE_NS : -1;
    if (libc_ppoll(copy, polled, time_left(deadline, most, &left), mask) < 0)
        return -1;
    int fired = wake_fd >= 0 && copy[count].revents;
    *woken = wake_fd < 0 || fired;
    if (fired)
        bh_wake_drain(waker);  /* POLLNVAL too: the program closed it */
    return fill_back(fds, copy, count);
}

/* The caller's errno is its call's, whatever giving the waker back did. */
static void release_waker(int waker)
{
    if (waker == BH_WAKE_NONE)
        return;
    int saved = errno;
    bh_wake_release(waker);
    errno = saved;
}

static int poll_with(struct pollfd *fds, struct pollfd *copy, nfds_t count,
                     int64_t deadline, const sigset_t *mask)
{
    int waker = bh_wake_claim(), found, woken;
    do {
        woken = 0;
        found = poll_round(fds, copy, count, waker, deadline, mask, &woken);
    } while (found == 0 && woken && !deadline_passed(deadline));
    release_waker(waker);
    return found;
}

int bh_poll_hiding(struct pollfd *fds, nfds_t count, const struct timespec *timeout,
                   const sigset_t *mask)
{
    int64_t deadline = deadline_of(timeout);
    if (count < POLL_COPY) {
        struct pollfd copy[POLL_COPY];
        return poll_with(fds, copy, count, deadline, mask);
    }
    size_t size = (count + 1) * sizeof(struct pollfd);
    struct pollfd *copy = mmap(NULL, size, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) {
        errno = ENOMEM;
        return -1;
    }
    int found = poll_with(fds, copy, count, deadline, mask);
    int saved = errno;
    munmap(copy, size);
    errno = saved;
    return found;
}

/* ---- select ----------------------------------------------------------- */

/* The caller's three sets (any may be NULL) and what select gives back. */
struct sets {
    fd_set *caller[3];
    fd_set asked[3];
};

static int count_set(int count, fd_set *sets[3])
{
    int found = 0;
    for (int s = 0; s < 3; s++)
        for (int fd = 0; sets[s] && fd < count; fd++)
            found += FD_ISSET(fd, sets[s]) != 0;
    return found;
}

/* One real pselect over the asked sets less waiting and refused fds,
 * plus the waker; -1, or the count found. */
static int select_round(struct sets *sets, int count, int waker, int64_t deadline,
                        const sigset_t *mask, int *woken)
{
    fd_set work[3];
    fd_set *use[3];
    int refused = 0, polled = count, wake_fd = -1;
    struct timespec left;
    for (int s = 0; s < 3; s++) {
        work[s] = sets->asked[s];
        use[s] = sets->caller[s] ? &work[s] : NULL;
    }
    for (int fd = 0; fd < count; fd++) {
        int verdict = bh_waiting_verdict(fd, 0);
        if (verdict == BH_WAITING_NONE)
            continue;
        for (int s = 0; s < 3; s++)
            FD_CLR(fd, &work[s]);
        refused += verdict > 0;
    }
    if (waker != BH_WAKE_NONE && (wake_fd = bh_wake_fd(waker)) >= 0 &&
        wake_fd < FD_SETSIZE) {
        if (!use[0]) {
            FD_ZERO(&work[0]);
            use[0] = &work[0];
        }
        FD_SET(wake_fd, use[0]);
        polled = wake_fd >= count ? wake_fd + 1 : count;
    } else
        wake_fd = -1;
    int64_t most = refused ? 0 : wake_fd < 0 ? SLICE_NS : -1;
    if (libc_pselect(polled, use[0], use[1], use[2], time_left(deadline, most, &left),
                     mask) < 0)
        return -1;
    *woken = wake_fd < 0 || FD_ISSET(wake_fd, use[0]);
    if (wake_fd >= 0 && FD_ISSET(wake_fd, use[0])) {
        bh_wake_drain(waker);
        FD_CLR(wake_fd, use[0]);
    }
    for (int fd = 0; fd < count && refused; fd++)
        if (bh_waiting_verdict(fd, 0) > 0)
            for (int s = 0; s < 2; s++)  /* readable and writable, no exception */
                if (sets->caller[s] && FD_ISSET(fd, &sets->asked[s]))
                    FD_SET(fd, &work[s]);
    for (int s = 0; s < 3; s++)
        if (sets->caller[s])
            *sets->caller[s] = work[s];
    return count_set(count, sets->caller);
}

static int select_rounds(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
                         int64_t deadline, const sigset_t *mask)
{
    struct sets sets = {.caller = {readable, writable, exceptional}};
    for (int s = 0; s < 3; s++)
        if (sets.caller[s])
            sets.asked[s] = *sets.caller[s];
        else
            FD_ZERO(&sets.asked[s]);
    int waker = bh_wake_claim(), found, woken;
    do {
        woken = 0;
        found = select_round(&sets, count, waker, deadline, mask, &woken);
    } while (found == 0 && woken && !deadline_passed(deadline));
    release_waker(waker);
    return found;
}

/* Linux's select writes back the time left; so does this. Above
 * FD_SETSIZE the sets are the caller's own size, which a copy cannot
 * hold: such a call goes through unchanged (docs/limits.md). */
int bh_select_hiding(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
                     struct timeval *timeout)
{
    if (count < 0 || count > FD_SETSIZE)
        return libc_select(count, readable, writable, exceptional, timeout);
    struct timespec wait;
    if (timeout) {
        if (timeout->tv_sec < 0 || timeout->tv_usec < 0) {
            errno = EINVAL;
            return -1;
        }
        wait = (struct timespec){timeout->tv_sec + timeout->tv_usec / 1000000,
                                 (timeout->tv_usec % 1000000) * 1000};
    }
    int64_t deadline = deadline_of(timeout ? &wait : NULL);
    int found = select_rounds(count, readable, writable, exceptional, deadline, NULL);
    if (timeout) {
        struct timespec left;
        time_left(deadline, -1, &left);
        *timeout = (struct timeval){left.tv_sec, left.tv_nsec / 1000};
    }
    return found;
}

int bh_pselect_hiding(int count, fd_set *readable, fd_set *writable, fd_set *exceptional,
                      const struct timespec *timeout, const sigset_t *mask)
{
    if (count < 0 || count > FD_SETSIZE)
        return libc_pselect(count, readable, writable, exceptional, timeout, mask);
    return select_rounds(count, readable, writable, exceptional, deadline_of(timeout), mask);
}

/* ---- epoll ------------------------------------------------------------ */

int bh_epoll_marking(int epfd, struct epoll_event *events, int found)
{
    for (int i = 0; i < found; i++)
        if (events[i].events & EPOLLHUP)
            events[i].events |= bh_waiting_epoll_error(epfd, events[i].data.u64);
    return found;
}
