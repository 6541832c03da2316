/* Waking the threads of this process that sit in poll/select.
 *
 * Why a pool of eventfds and not one: a shared fd has to be drained by
 * someone, and the kernel's poll looks at its fds again after any wake-up;
 * a thread woken by a write that another thread drains before it looks
 * goes back to sleep with the wake lost. So each poll/select call in
 * progress holds a waker of its own: only it drains that fd.
 *
 * Shared: per waker its state (claimed and released by the calling
 * thread, read by bh_wake_all) and its fd (made by the first thread that
 * claims the waker, then kept for the next claimer; read by bh_wake_all
 * once armed).
 * The order that loses no wake: a caller arms, and before each look at
 * the table drains; the table's writer changes it, then writes to every
 * armed waker (all sequentially consistent). A write that a drain
 * swallowed came from a change the look after it sees; a change after
 * the look finds the waker armed, and its write ends the sleep. A write
 * that lands after the call (or a stale one) costs the next claimer one
 * extra look at most, never a busy loop: each look drains.
 * Signal handlers: every function here is async-signal-safe (atomics,
 * eventfd, read, write, fstat); a handler's poll claims a waker of its own.
 * Death mid-operation: the process is gone with its fds; nothing shared
 * outlives it.
 * The fds live in the program's fd table at the lowest free numbers
 * (below FD_SETSIZE while the program has fewer than 1024 open, so that
 * select can wait on them). A program that closes fds it did not open
 * (closefrom in a running loop) may close them: before each write the
 * fd is checked to be still of the anonymous inode remembered. Every
 * eventfd shares that inode: a number the program reused for an eventfd
 * of its own gets a spurious wake-up; for a socket, pipe or file the
 * write is skipped. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include "libc/libc.h"
#include "readiness/wake.h"

enum { WAKERS = 64 };
enum { FREE = 0, CLAIMED = 1, ARMED = 2 };

struct waker {
    _Atomic int state;
    _Atomic int fd;     /* -1 until made */
    ino_t inode;        /* of fd, when made */
};

static struct waker wakers[WAKERS];
/* fd + 1 is stored, so that the zeroed table reads "not made yet". */
static int fd_of(struct waker *waker) { return atomic_load(&waker->fd) - 1; }

static int make_fd(struct waker *waker)
{
    int fd = libc_eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct stat made;
    if (fd < 0)
        return -1;
    if (fstat(fd, &made) != 0) {
        libc_close(fd);
        return -1;
    }
    waker->inode = made.st_ino;
    atomic_store(&waker->fd, fd + 1);
    return 0;
}

int bh_wake_claim(void)
{
    for (int i = 0; i < WAKERS; i++) {
        int expected = FREE;
        if (!atomic_compare_exchange_strong(&wakers[i].state, &expected, CLAIMED))
            continue;
        if (fd_of(&wakers[i]) < 0 && make_fd(&wakers[i]) != 0) {
            atomic_store(&wakers[i].state, FREE);
            return BH_WAKE_NONE;
        }
        atomic_store(&wakers[i].state, ARMED);
        bh_wake_drain(i);
        return i;
    }
    return BH_WAKE_NONE;
}

int bh_wake_fd(int waker) { return fd_of(&wakers[waker]); }

void bh_wake_drain(int waker)
{
    uint64_t count;
    (void)!libc_read(fd_of(&wakers[waker]), &count, sizeof count);
}

void bh_wake_release(int waker)
{
    atomic_store(&wakers[waker].state, FREE);
}

/* Still the eventfd made for this waker: the program may have closed it
 * and been given its number for something else. */
static int still_ours(const struct waker *waker, int fd)
{
    struct stat now;
    return fstat(fd, &now) == 0 && now.st_ino == waker->inode;
}

void bh_wake_all(void)
{
    int saved = errno;
    for (int i = 0; i < WAKERS; i++) {
        int fd = fd_of(&wakers[i]);
        if (atomic_load(&wakers[i].state) != ARMED || fd < 0 || !still_ours(&wakers[i], fd))
            continue;
        uint64_t one = 1;
        (void)!libc_write(fd, &one, sizeof one);
    }
    errno = saved;
}

void bh_wake_reset(void)
{
    for (int i = 0; i < WAKERS; i++) {
        int fd = fd_of(&wakers[i]);
        if (fd >= 0 && still_ours(&wakers[i], fd))
            libc_close(fd);
        atomic_store(&wakers[i].fd, 0);
        atomic_store(&wakers[i].state, FREE);
    }
}
