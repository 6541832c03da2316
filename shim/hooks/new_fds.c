/* Hooks that hand back new fd numbers.
 *
 * A number the kernel hands out is free, so whatever we tracked on it was
 * closed behind our back (raw syscall, a glibc-internal close) and must be
 * forgotten now, or a new file would inherit an old connection's permit.
 * socket() also records whether the fd is an inet stream socket, so the
 * connect path never has to ask the kernel. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/copies.h"
#include "core/outcome.h"
#include "core/shim.h"
#include "fdtable/fd_table.h"
#include "hooks/export.h"
#include "libc/libc.h"

static int fresh(int fd)
{
    if (fd >= 0)
        bh_give_back(bh_fd_new(fd, BH_FD_UNKNOWN));
    return fd;
}

static int fresh_pair(int rc, const int fds[2])
{
    if (rc == 0) {
        fresh(fds[0]);
        fresh(fds[1]);
    }
    return rc;
}

static FILE *fresh_stream(FILE *stream)
{
    if (stream)
        fresh(fileno(stream));
    return stream;
}

/* Out of line: a socket() whose entry takes its kind on the fast path
 * pays no frame for this. */
static __attribute__((noinline)) void new_socket(int fd, enum bh_fd_kind kind)
{
    bh_give_back(bh_fd_new(fd, kind));
}

static int bh_socket(int domain, int type, int protocol)
{
    int inet = domain == AF_INET || domain == AF_INET6;
    int stream = (type & 0xf) == SOCK_STREAM; /* strip SOCK_NONBLOCK/CLOEXEC */
    enum bh_fd_kind kind = inet && stream ? BH_FD_INET_STREAM : BH_FD_OTHER;
    int fd = libc_socket(domain, type, protocol);
    if (fd >= 0 && !bh_fd_new_socket(fd, kind))
        new_socket(fd, kind);
    return fd;
}

/* fds passed over a unix socket: whatever was tracked on their numbers
 * is gone, and a counted socket's copy in flight is now this process's
 * (core/copies.c); a peek installs copies while the message stays queued. */
static __attribute__((noinline)) ssize_t forget_passed_fds(ssize_t received,
                                                          struct msghdr *msg, int flags)
{
    if (received < 0 || msg->msg_controllen == 0)
        return received;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (int i = 0; i < count; i++) {
            int passed;
            memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
            fresh(passed);
            bh_copies_received(passed, flags & MSG_PEEK);
        }
    }
    return received;
}

BH_IO_FUNCTIONS(receive_message, recvmsg, 1, flags,
                (int fd, struct msghdr *msg, int flags), (fd, msg, flags))

/* Out of line, so that the common case below needs no stack frame. */
static __attribute__((noinline)) ssize_t receive_with_control(int fd, struct msghdr *msg,
                                                              int flags)
{
    return forget_passed_fds(receive_message(fd, msg, flags), msg, flags);
}

/* Without a control buffer no fd can come in: a lookup and a jump. */
static ssize_t bh_recvmsg(int fd, struct msghdr *msg, int flags)
{
    if (__builtin_expect(!msg || !msg->msg_control || !msg->msg_controllen, 1))
        return receive_message(fd, msg, flags);
    return receive_with_control(fd, msg, flags);
}

BH_IO_FUNCTIONS(receive_messages, recvmmsg, 1, flags,
                (int fd, struct mmsghdr *vec, unsigned int n, int flags,
                 struct timespec *timeout),
                (fd, vec, n, flags, timeout))

static __attribute__((noinline)) int receive_many_with_control(int fd, struct mmsghdr *vec,
                                                               unsigned int n, int flags,
                                                               struct timespec *timeout)
{
    int received = (int)receive_messages(fd, vec, n, flags, timeout);
    for (int i = 0; i < received; i++)
        forget_passed_fds(vec[i].msg_len, &vec[i].msg_hdr, flags);
    return received;
}

/* As recvmsg: only a message with a control buffer can bring fds in. */
static int bh_recvmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags,
                       struct timespec *timeout)
{
    for (unsigned int i = 0; vec && i < n; i++)
        if (vec[i].msg_hdr.msg_control && vec[i].msg_hdr.msg_controllen)
            return receive_many_with_control(fd, vec, n, flags, timeout);
    return (int)receive_messages(fd, vec, n, flags, timeout);
}

/* open's mode is only there with O_CREAT or O_TMPFILE. */
#define OPEN_MODE(flags) ({ mode_t mode = 0;                                  \
        if ((flags) & (O_CREAT | __O_TMPFILE)) { va_list args;                 \
            va_start(args, flags); mode = va_arg(args, mode_t); va_end(args); } \
        mode; })

BH_EXPORT int socket(int domain, int type, int protocol)
{
    return bh_socket(domain, type, protocol);
}
BH_EXPORT int socketpair(int domain, int type, int protocol, int fds[2])
{
    return fresh_pair(libc_socketpair(domain, type, protocol, fds), fds);
}
BH_EXPORT int accept(int fd, struct sockaddr *from, socklen_t *len)
{
    return fresh(libc_accept(fd, from, len));
}
BH_EXPORT int accept4(int fd, struct sockaddr *from, socklen_t *len, int flags)
{
    return fresh(libc_accept4(fd, from, len, flags));
}
BH_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    return bh_recvmsg(fd, msg, flags);
}
BH_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags,
                       struct timespec *timeout)
{
    return bh_recvmmsg(fd, vec, n, flags, timeout);
}
BH_EXPORT int open(const char *path, int flags, ...)
{
    return fresh(libc_open(path, flags, OPEN_MODE(flags)));
}
BH_EXPORT int open64(const char *path, int flags, ...)
{
    return fresh(libc_open64(path, flags, OPEN_MODE(flags)));
}
BH_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    return fresh(libc_openat(dirfd, path, flags, OPEN_MODE(flags)));
}
BH_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    return fresh(libc_openat64(dirfd, path, flags, OPEN_MODE(flags)));
}
BH_EXPORT int creat(const char *path, mode_t mode) { return fresh(libc_creat(path, mode)); }
BH_EXPORT FILE *fopen(const char *path, const char *mode)
{
    return fresh_stream(libc_fopen(path, mode));
}
BH_EXPORT FILE *fopen64(const char *path, const char *mode)
{
    return fresh_stream(libc_fopen64(path, mode));
}
BH_EXPORT int pipe(int fds[2]) { return fresh_pair(libc_pipe(fds), fds); }
BH_EXPORT int pipe2(int fds[2], int flags) { return fresh_pair(libc_pipe2(fds, flags), fds); }
BH_EXPORT int eventfd(unsigned value, int flags) { return fresh(libc_eventfd(value, flags)); }
BH_EXPORT int epoll_create(int size) { return fresh(libc_epoll_create(size)); }
BH_EXPORT int epoll_create1(int flags) { return fresh(libc_epoll_create1(flags)); }
BH_EXPORT int signalfd(int fd, const sigset_t *mask, int flags)
{
    return fresh(libc_signalfd(fd, mask, flags));
}
BH_EXPORT int timerfd_create(int clock, int flags)
{
    return fresh(libc_timerfd_create(clock, flags));
}
BH_EXPORT int inotify_init1(int flags) { return fresh(libc_inotify_init1(flags)); }
BH_EXPORT int memfd_create(const char *name, unsigned flags)
{
    return fresh(libc_memfd_create(name, flags));
}
