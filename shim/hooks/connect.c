/* Hooks that open a connection: connect(), and sendto()/sendmsg() with
 * MSG_FASTOPEN, which connect without calling connect(). Without it,
 * sendto and sendmsg are sends like those in io.c. */
#include <errno.h>
#include <sys/socket.h>

#include "core/gate.h"
#include "core/outcome.h"
#include "libc/libc.h"
#include "core/shim.h"

static int bh_connect(int fd, const struct sockaddr *to, socklen_t length)
{
    int entered = bh_gate_enter(fd, to, length);
    if (entered == BH_GATE_REFUSED)
        return -1;
    int rc = libc_connect(fd, to, length);
    if (entered != BH_GATE_PASS)
        bh_gate_leave(fd, entered, rc < 0);
    return rc;
}

static ssize_t bh_sendto(int fd, const void *buf, size_t n, int flags,
                         const struct sockaddr *to, socklen_t length)
{
    if (!(flags & MSG_FASTOPEN))
        return BH_IO(fd, 0, flags, libc_sendto(fd, buf, n, flags, to, length));
    int entered = bh_gate_enter(fd, to, length);
    if (entered == BH_GATE_REFUSED)
        return -1;
    ssize_t sent = libc_sendto(fd, buf, n, flags, to, length);
    if (entered != BH_GATE_PASS)
        bh_gate_leave(fd, entered, sent < 0);
    return sent;
}

static ssize_t bh_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (!(flags & MSG_FASTOPEN) || !msg)
        return BH_IO(fd, 0, flags, libc_sendmsg(fd, msg, flags));
    int entered = bh_gate_enter(fd, msg->msg_name, msg->msg_namelen);
    if (entered == BH_GATE_REFUSED)
        return -1;
    ssize_t sent = libc_sendmsg(fd, msg, flags);
    if (entered != BH_GATE_PASS)
        bh_gate_leave(fd, entered, sent < 0);
    return sent;
}

BH_EXPORT int connect(int fd, const struct sockaddr *to, socklen_t length)
{
    return bh_connect(fd, to, length);
}

BH_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
                         const struct sockaddr *to, socklen_t length)
{
    return bh_sendto(fd, buf, n, flags, to, length);
}

BH_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    return bh_sendmsg(fd, msg, flags);
}
