/* Hooks that copy fds: the copy shares the original's connection, which
 * keeps its permit until the last copy closes. dup2/dup3 onto a tracked fd
 * closes that fd's connection, even when the source is untracked. */
#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>

#include "core/async_connect.h"
#include "core/outcome.h"
#include "core/shim.h"
#include "fdtable/fd_table.h"
#include "hooks/export.h"
#include "libc/libc.h"

static int copied(int oldfd, int newfd)
{
    if (newfd >= 0)
        bh_give_back(bh_fd_duplicated(oldfd, newfd));
    if (newfd >= 0 && __builtin_expect(bh_fd_watched(newfd) & BH_WATCH_WAITING, 0))
        bh_async_copied(oldfd, newfd);
    return newfd;
}

static int bh_dup(int fd) { return copied(fd, libc_dup(fd)); }
/* newfd's socket is about to be replaced: a guard on its connection
 * (fd_table.h) ends first, and none is given on it again. */
static int replacing(int oldfd, int newfd)
{
    if (oldfd != newfd && bh_fd_has_connection(newfd)) {
        bh_fd_retire(newfd);
        if (bh_fd_watched(newfd) & BH_WATCH_WAITING)
            bh_async_fd_closing(newfd);
    }
    return oldfd;
}

static int bh_dup2(int oldfd, int newfd)
{
    return copied(oldfd, libc_dup2(replacing(oldfd, newfd), newfd));
}
static int bh_dup3(int oldfd, int newfd, int flags)
{
    return copied(oldfd, libc_dup3(replacing(oldfd, newfd), newfd, flags));
}

static int is_dup_command(int cmd) { return cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC; }

static int bh_fcntl(int fd, int cmd, void *arg)
{
    int rc = libc_fcntl(fd, cmd, arg);
    return is_dup_command(cmd) ? copied(fd, rc) : rc;
}

static int bh_fcntl64(int fd, int cmd, void *arg)
{
    int rc = libc_fcntl64(fd, cmd, arg);
    return is_dup_command(cmd) ? copied(fd, rc) : rc;
}

/* fcntl's third argument is an int or a pointer; both travel in one
 * register on every ABI glibc supports, so pass it on as a pointer. */
#define FCNTL_ARG(last) ({ va_list args; va_start(args, last);              \
                           void *arg = va_arg(args, void *); va_end(args); arg; })

BH_EXPORT int dup(int fd) { return bh_dup(fd); }
BH_EXPORT int dup2(int oldfd, int newfd) { return bh_dup2(oldfd, newfd); }
BH_EXPORT int dup3(int oldfd, int newfd, int flags) { return bh_dup3(oldfd, newfd, flags); }
BH_EXPORT int fcntl(int fd, int cmd, ...) { return bh_fcntl(fd, cmd, FCNTL_ARG(cmd)); }
BH_EXPORT int fcntl64(int fd, int cmd, ...) { return bh_fcntl64(fd, cmd, FCNTL_ARG(cmd)); }
