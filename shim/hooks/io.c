/* Hooks that send and receive: they learn how counted connections turn
 * out (outcome.c) and keep io_timeout_ms (deadline.c).
 *
 * Every fd passes through them, so the common case is an inline lookup in
 * the fd table and a jump to libc: an fd that carries no counted
 * connection, or a connection with no watch bits left, costs only that.
 * sendto, sendmsg (connect.c) and recvmsg (new_fds.c) do the same. */
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/outcome.h"
#include "hooks/export.h"
#include "libc/libc.h"

enum { SENDS = 0, RECEIVES = 1 };

/* glibc declares these only in its fortify headers. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *from, socklen_t *len);

BH_IO_HOOK(read, RECEIVES, 0, (int fd, void *buf, size_t n), (fd, buf, n))
BH_IO_HOOK(write, SENDS, 0, (int fd, const void *buf, size_t n), (fd, buf, n))
BH_IO_HOOK(readv, RECEIVES, 0, (int fd, const struct iovec *iov, int count),
           (fd, iov, count))
BH_IO_HOOK(writev, SENDS, 0, (int fd, const struct iovec *iov, int count),
           (fd, iov, count))
BH_IO_HOOK(recv, RECEIVES, flags, (int fd, void *buf, size_t n, int flags),
           (fd, buf, n, flags))
BH_IO_HOOK(send, SENDS, flags, (int fd, const void *buf, size_t n, int flags),
           (fd, buf, n, flags))
BH_IO_HOOK(recvfrom, RECEIVES, flags,
           (int fd, void *buf, size_t n, int flags, struct sockaddr *from,
            socklen_t *len),
           (fd, buf, n, flags, from, len))
/* _FORTIFY_SOURCE builds call these instead; libc's own checks stay. */
BH_IO_HOOK(__read_chk, RECEIVES, 0, (int fd, void *buf, size_t n, size_t buflen),
           (fd, buf, n, buflen))
BH_IO_HOOK(__recv_chk, RECEIVES, flags,
           (int fd, void *buf, size_t n, size_t buflen, int flags),
           (fd, buf, n, buflen, flags))
BH_IO_HOOK(__recvfrom_chk, RECEIVES, flags,
           (int fd, void *buf, size_t n, size_t buflen, int flags,
            struct sockaddr *from, socklen_t *len),
           (fd, buf, n, buflen, flags, from, len))

BH_EXPORT ssize_t read(int fd, void *buf, size_t n) { return bh_read(fd, buf, n); }
BH_EXPORT ssize_t write(int fd, const void *buf, size_t n) { return bh_write(fd, buf, n); }
BH_EXPORT ssize_t readv(int fd, const struct iovec *iov, int count)
{
    return bh_readv(fd, iov, count);
}
BH_EXPORT ssize_t writev(int fd, const struct iovec *iov, int count)
{
    return bh_writev(fd, iov, count);
}
BH_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    return bh_recv(fd, buf, n, flags);
}
BH_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    return bh_send(fd, buf, n, flags);
}
BH_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags,
                           struct sockaddr *from, socklen_t *len)
{
    return bh_recvfrom(fd, buf, n, flags, from, len);
}
BH_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    return bh___read_chk(fd, buf, n, buflen);
}
BH_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    return bh___recv_chk(fd, buf, n, buflen, flags);
}
BH_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen,
                                 int flags, struct sockaddr *from, socklen_t *len)
{
    return bh___recvfrom_chk(fd, buf, n, buflen, flags, from, len);
}
