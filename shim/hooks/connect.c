/* Hooks that open a connection: connect(), and sendto()/sendmsg() with
 * MSG_FASTOPEN, which connect without calling connect(). Without it,
 * sendto and sendmsg are sends like those in io.c. */
#include <errno.h>
#include <sys/socket.h>

#include "core/copies.h"
#include "core/gate.h"
#include "core/outcome.h"
#include "hooks/export.h"
#include "libc/libc.h"

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

/* MSG_FASTOPEN connects: the gate, as for connect(). Under the seccomp
 * supervisor, which traps these sends and cannot tell ours from the
 * program's (all six of sendto's arguments are used: no room for a
 * mark), a matched one fails with EOPNOTSUPP instead, here, as the
 * supervisor would answer it; the program then connect()s, counted here.
 * Out of line, so that a plain send is a lookup and a jump. */
static __attribute__((noinline)) ssize_t
sendto_fastopen(int fd, const void *buf, size_t n, int flags,
                const struct sockaddr *to, socklen_t length)
{
    if (bh_gate_fastopen_declined(fd, to, length))
        return -1;
    int entered = bh_gate_enter(fd, to, length);
    if (entered == BH_GATE_REFUSED)
        return -1;
    ssize_t sent = libc_sendto(fd, buf, n, flags, to, length);
    if (entered != BH_GATE_PASS)
        bh_gate_leave(fd, entered, sent < 0);
    return sent;
}

static __attribute__((noinline)) ssize_t
sendmsg_fastopen(int fd, const struct msghdr *msg, int flags)
{
    if (bh_gate_fastopen_declined(fd, msg->msg_name, msg->msg_namelen))
        return -1;
    int entered = bh_gate_enter(fd, msg->msg_name, msg->msg_namelen);
    if (entered == BH_GATE_REFUSED)
        return -1;
    ssize_t sent = libc_sendmsg(fd, msg, flags);
    if (entered != BH_GATE_PASS)
        bh_gate_leave(fd, entered, sent < 0);
    return sent;
}

BH_IO_FUNCTIONS(plain_sendto, sendto, 0, flags,
                (int fd, const void *buf, size_t n, int flags,
                 const struct sockaddr *to, socklen_t length),
                (fd, buf, n, flags, to, length))
BH_IO_FUNCTIONS(plain_sendmsg, sendmsg, 0, flags,
                (int fd, const struct msghdr *msg, int flags), (fd, msg, flags))

static ssize_t bh_sendto(int fd, const void *buf, size_t n, int flags,
                         const struct sockaddr *to, socklen_t length)
{
    if (__builtin_expect(flags & MSG_FASTOPEN, 0))
        return sendto_fastopen(fd, buf, n, flags, to, length);
    return plain_sendto(fd, buf, n, flags, to, length);
}

/* A control buffer may pass fds (SCM_RIGHTS): see core/copies.c. */
static ssize_t bh_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (__builtin_expect((flags & MSG_FASTOPEN) && msg, 0))
        return sendmsg_fastopen(fd, msg, flags);
    if (__builtin_expect(msg && msg->msg_controllen, 0))
        return bh_copies_sendmsg(fd, msg, flags, plain_sendmsg);
    return plain_sendmsg(fd, msg, flags);
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
