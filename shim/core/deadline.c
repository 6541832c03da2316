/* Deadlines, kept by the kernel so that no thread of ours has to watch.
 *
 * connect_timeout_ms is TCP_USER_TIMEOUT set before the connect: the
 * kernel fails a connect whose SYNs go unanswered with ETIMEDOUT, blocking
 * or not, and a non-blocking caller's poll wakes with SO_ERROR set. Linux
 * checks it only when it retransmits a SYN, the first time 1 s after the
 * first SYN: hence the 1000 ms floor the rules enforce.
 *
 * io_timeout_ms is two things. Once established, TCP_USER_TIMEOUT =
 * io_timeout_ms: data sent and left unacknowledged (or a peer's zero
 * window) fails the connection, blocking or not. And SO_RCVTIMEO =
 * io_timeout_ms, set at the first receive on a blocking socket
 * (connections that never receive, and event loops, whose sockets are
 * non-blocking and whose waits are their own, never pay for it): a
 * blocking receive with no data for that long returns EAGAIN, which the
 * hooks turn into ETIMEDOUT so the program says "Connection timed out".
 * A program's own shorter SO_RCVTIMEO is left in place, EAGAIN and all.
 *
 * Nothing here is shared between processes; every call is a plain
 * setsockopt/getsockopt/fcntl, async-signal-safe. errno is kept. */
#include "core/deadline.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/time.h>

#include "libc/libc.h"

void bh_deadline_set_user_timeout(int fd, int ms)
{
    unsigned value = (unsigned)ms;
    int saved_errno = errno;
    libc_setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &value, sizeof value);
    errno = saved_errno;
}

static long long timeval_ms(const struct timeval *value)
{
    return (long long)value->tv_sec * 1000 + (value->tv_usec + 999) / 1000;
}

/* The program's own timeout is kept when it is set and not longer. */
static int own_is_shorter(const struct timeval *own, int io_timeout_ms)
{
    long long ms = timeval_ms(own);
    return (own->tv_sec || own->tv_usec) && ms <= io_timeout_ms;
}

static int set_receive_timeout(int fd, int ms)
{
    struct timeval value = { ms / 1000, (ms % 1000) * 1000 };
    return libc_setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, sizeof value);
}

int bh_deadline_arm_receive(int fd, const struct bh_compartment *compartment)
{
    int saved_errno = errno;
    struct timeval own = { 0, 0 };
    socklen_t length = sizeof own;
    int ours = bh_deadline_call_blocks(fd, 0) &&
               libc_getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &own, &length) == 0 &&
               !own_is_shorter(&own, compartment->io_timeout_ms) &&
               set_receive_timeout(fd, compartment->io_timeout_ms) == 0;
    errno = saved_errno;
    return ours;
}

int bh_deadline_set_receive(int fd, const struct bh_compartment *compartment,
                            const void *value, socklen_t length, int *rc)
{
    if (!value || length < sizeof(struct timeval) ||
        own_is_shorter(value, compartment->io_timeout_ms)) {
        *rc = libc_setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, value, length);
        return 0;
    }
    *rc = set_receive_timeout(fd, compartment->io_timeout_ms);
    return *rc == 0;
}

int bh_deadline_call_blocks(int fd, int flags)
{
    if (flags & MSG_DONTWAIT)
        return 0;
    int saved_errno = errno;
    int status = libc_fcntl(fd, F_GETFL, NULL);
    errno = saved_errno;
    return status >= 0 && !(status & O_NONBLOCK);
}
