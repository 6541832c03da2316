/* Socket option hooks: getsockopt(SO_ERROR) is where a non-blocking
 * connect's outcome reaches the program, so it reaches outcome.c there
 * too (and observe's records); setsockopt(SO_RCVTIMEO) on a connection with io_timeout_ms keeps
 * the shorter of the program's timeout and ours (deadline.c). */
#include <sys/socket.h>

#include "core/async_connect.h"
#include "core/deadline.h"
#include "core/observe.h"
#include "core/outcome.h"
#include "core/state.h"
#include "hooks/export.h"
#include "libc/libc.h"

static int bh_getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
    if (level == SOL_SOCKET && name == SO_ERROR && (bh_fd_watched(fd) & BH_WATCH_WAITING))
        return bh_async_so_error(fd, level, name, value, len);
    int rc = libc_getsockopt(fd, level, name, value, len);
    if (level != SOL_SOCKET || name != SO_ERROR || rc != 0 || !value || !len ||
        *len < sizeof(int))
        return rc;
    if (bh_fd_watched(fd) & BH_WATCH_CONNECTING)
        bh_outcome_so_error(fd, *(int *)value);
    bh_observe_so_error(fd, *(int *)value);
    return rc;
}

static __attribute__((noinline)) int set_receive_timeout(int fd, const void *value,
                                                         socklen_t len)
{
    int rc, place = bh_fd_lookup(fd).compartment;
    if (place < 0)
        return libc_setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, value, len);
    /* The program's choice replaces the lazy arming either way. */
    bh_fd_unwatch(fd, BH_WATCH_ARM_RECEIVE | BH_WATCH_RECEIVE_OURS);
    if (bh_deadline_set_receive(fd, bh_rules_of(place), value, len, &rc))
        bh_fd_rewatch(fd, BH_WATCH_RECEIVE_OURS);
    return rc;
}

/* Out of line, so that every other option is a test and a tail jump. */
static int bh_setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    if (__builtin_expect(level != SOL_SOCKET || name != SO_RCVTIMEO, 1) ||
        !(bh_fd_watched(fd) & BH_WATCH_IO_DEADLINE))
        return libc_setsockopt(fd, level, name, value, len);
    return set_receive_timeout(fd, value, len);
}

BH_EXPORT int getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
    return bh_getsockopt(fd, level, name, value, len);
}
BH_EXPORT int setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    return bh_setsockopt(fd, level, name, value, len);
}
