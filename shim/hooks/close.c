/* Hooks that end fds: close, close_range, closefrom, fclose, fcloseall,
 * and syscall() when it is SYS_close or SYS_close_range.
 *
 * Untrack before the real close (another thread may be handed the number
 * the moment the kernel frees it), give the permit back after it (the
 * socket is gone by then), and give it back even if close failed: on Linux
 * the fd is released whatever close() returns; close_range and closefrom
 * do the same for each counted socket in their range. No locks: close()
 * may run in a signal handler. */
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/async_connect.h"
#include "core/observe.h"
#include "core/outcome.h"
#include "core/shim.h"
#include "fdtable/fd_table.h"
#include "hooks/export.h"
#include "libc/libc.h"
#include "libc/proc_stat.h"

static __attribute__((noinline)) int close_connection(int fd)
{
    uint32_t detached = bh_fd_detach(fd);
    bh_async_closing(fd);
    int rc = libc_close(fd);
    struct bh_fd_ended ended = bh_fd_release(detached);  /* not copied again */
    if (ended.compartment >= 0)
        bh_connection_ended(&ended);
    return rc;
}

/* observe = yes: the hold ends, then the close as ever. */
static __attribute__((noinline)) int close_observed(int fd)
{
    bh_observe_ended(fd);
    return bh_fd_has_connection(fd) ? close_connection(fd) : libc_close(fd);
}

/* Most closes end no counted connection: an inline look and a jump. */
static int bh_close(int fd)
{
    if (__builtin_expect(bh_observing, 0))
        return close_observed(fd);
    if (__builtin_expect(!bh_fd_has_connection(fd), 1))
        return libc_close(fd);
    return close_connection(fd);
}

/* A range's counted sockets are closed one by one, each before its permit
 * goes back, as by close(); the real call then closes the rest. */
static void close_detached(int fd, uint32_t detached, void *ctx)
{
    (void)ctx;
    bh_async_closing(fd);
    libc_close(fd);
    bh_give_back(bh_fd_release(detached));
}

/* CLOSE_RANGE_UNSHARE first gives the calling thread its own copy of the
 * fd table: with other threads, the sockets stay open in theirs. */
static int closes_for_the_process(int flags)
{
    return !(flags & CLOSE_RANGE_UNSHARE) || bh_proc_stat_field(0, 20) == 1;
}

static int bh_close_range(unsigned first, unsigned last, int flags)
{
    int closes = !(flags & CLOSE_RANGE_CLOEXEC);
    int valid = first <= last &&
                !(flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE));
    if (closes && valid && closes_for_the_process(flags))
        bh_fd_closing_range(first, last, close_detached, NULL);
    return libc_close_range(first, last, flags);
}

static void bh_closefrom(int lowfd)
{
    if (lowfd >= 0)
        bh_fd_closing_range((unsigned)lowfd, ~0u, close_detached, NULL);
    libc_closefrom(lowfd);
}

/* glibc's fclose closes through an internal alias we cannot hook. */
static int bh_fclose(FILE *stream)
{
    uint32_t detached = stream ? bh_fd_detach(fileno(stream)) : 0;
    bh_async_closing(stream ? fileno(stream) : -1);
    int rc = libc_fclose(stream);
    bh_give_back(bh_fd_release(detached));
    return rc;
}

static void forget_if_closed(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)connection;
    (void)compartment;
    (void)ctx;
    if (libc_fcntl(fd, F_GETFD, NULL) < 0 && errno == EBADF) {
        uint32_t detached = bh_fd_detach(fd);
        bh_async_closing(fd);
        bh_give_back(bh_fd_release(detached));
    }
}

/* We cannot list the streams; after they are gone, see which fds went. */
static int bh_fcloseall(void)
{
    int rc = libc_fcloseall();
    int saved_errno = errno;
    bh_fd_for_each(forget_if_closed, NULL);
    errno = saved_errno;
    return rc;
}

/* libuv (node) closes its sockets with syscall(SYS_close), to keep clear
 * of glibc's cancellation point: unseen, a closed connection's permit
 * would come back only once its number is handed out again. Every other
 * call goes straight on, with the six arguments glibc's own passes. */
static long bh_syscall(long number, long a, long b, long c, long d, long e, long f)
{
    if (number == SYS_close)
        return bh_close((int)a);
    if (number == SYS_close_range)
        return bh_close_range((unsigned)a, (unsigned)b, (int)c);
    return libc_syscall(number, a, b, c, d, e, f);
}

BH_EXPORT int close(int fd) { return bh_close(fd); }
BH_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    return bh_close_range(first, last, flags);
}
BH_EXPORT void closefrom(int lowfd) { bh_closefrom(lowfd); }
BH_EXPORT int fclose(FILE *stream) { return bh_fclose(stream); }
BH_EXPORT int fcloseall(void) { return bh_fcloseall(); }
BH_EXPORT long syscall(long number, ...)
{
    va_list args;
    va_start(args, number);
    long a = va_arg(args, long), b = va_arg(args, long), c = va_arg(args, long);
    long d = va_arg(args, long), e = va_arg(args, long), f = va_arg(args, long);
    va_end(args);
    return bh_syscall(number, a, b, c, d, e, f);
}
