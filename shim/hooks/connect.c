/* Hooks that open a connection: connect(), and sendto()/sendmsg()/
 * sendmmsg() with MSG_FASTOPEN, which connect without calling connect().
 * Without it, they are sends like those in io.c. */
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/copies.h"
#include "core/gate.h"
#include "core/outcome.h"
#include "hooks/export.h"
#include "libc/libc.h"

/* A connect not passed through as it is: counted, or refused. */
static int connect_entered(int fd, const struct sockaddr *to, socklen_t length, int entered)
{
    if (entered == BH_GATE_REFUSED)
        return -1;
    int rc = libc_connect(fd, to, length);
    bh_gate_leave(fd, entered, rc < 0);
    return rc;
}

/* Passed through, the real connect is a tail call. */
static int bh_connect(int fd, const struct sockaddr *to, socklen_t length)
{
    int entered = bh_gate_enter(fd, to, length);
    if (entered == BH_GATE_PASS)
        return libc_connect(fd, to, length);
    return connect_entered(fd, to, length, entered);
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

/* sendmmsg's connect is its first message's: the rest follow it on the
 * connected socket, as sendmmsg itself sends them one by one. */
static __attribute__((noinline)) int
sendmmsg_fastopen(int fd, struct mmsghdr *vec, unsigned int n, int flags)
{
    const struct msghdr *first = &vec[0].msg_hdr;
    if (bh_gate_fastopen_declined(fd, first->msg_name, first->msg_namelen))
        return -1;
    int entered = bh_gate_enter(fd, first->msg_name, first->msg_namelen);
    if (entered == BH_GATE_REFUSED)
        return -1;
    int sent = libc_sendmmsg(fd, vec, n, flags);
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

BH_IO_FUNCTIONS(plain_sendmmsg, sendmmsg, 0, flags,
                (int fd, struct mmsghdr *vec, unsigned int n, int flags), (fd, vec, n, flags))

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

/* Whether any of the messages passes fds. */
static int passes_fds(const struct mmsghdr *vec, unsigned int n)
{
    for (unsigned int i = 0; i < n; i++) {
        struct msghdr *msg = (struct msghdr *)&vec[i].msg_hdr;
        if (!msg->msg_control || !msg->msg_controllen)
            continue;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                return 1;
    }
    return 0;
}

/* Messages that pass fds go one by one, each as sendmsg's do (the kernel's
 * sendmmsg sends them one by one too): each copy gets its reference, and
 * a message never sent drops its own. */
static __attribute__((noinline)) int sendmmsg_each(int fd, struct mmsghdr *vec,
                                                   unsigned int n, int flags)
{
    unsigned int sent = 0;
    for (; sent < n && sent < UIO_MAXIOV; sent++) {
        ssize_t bytes = bh_sendmsg(fd, &vec[sent].msg_hdr, flags);
        if (bytes < 0)
            return sent ? (int)sent : -1;
        vec[sent].msg_len = (unsigned int)bytes;
    }
    return (int)sent;
}

static int bh_sendmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags)
{
    if (__builtin_expect(!vec || !n, 0))
        return libc_sendmmsg(fd, vec, n, flags);
    if (__builtin_expect(flags & MSG_FASTOPEN, 0))
        return sendmmsg_fastopen(fd, vec, n, flags);
    if (__builtin_expect(passes_fds(vec, n), 0))
        return sendmmsg_each(fd, vec, n, flags);
    return (int)plain_sendmmsg(fd, vec, n, flags);
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

BH_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags)
{
    return bh_sendmmsg(fd, vec, n, flags);
}
