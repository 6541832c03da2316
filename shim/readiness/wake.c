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
 * The order that loses no wake: a caller arms, looks at the table,
 * sleeps, and when its waker fired drains it before it looks again; the
 * table's writer changes it, then writes to every armed waker (all
 * sequentially consistent). A write that a drain swallowed came from a
 * change the look after it sees; a change after a look finds the waker
 * armed, and its write ends the sleep. A write that lands after a call
 * has released its waker costs the next claimer one extra look, never a
 * busy loop: each look after a wake-up drains. (Not draining at the claim
 * keeps the call at one system call.)
 * Signal handlers: every function here is async-signal-safe (atomics,
 * eventfd, read, write, fstat, fcntl); a handler's poll claims a waker of
 * its own.
 * Death mid-operation: the process is gone with its fds; nothing shared
 * outlives it.
 * The fds live in the program's fd table at the lowest free numbers
 * (below FD_SETSIZE while the program has fewer than 1024 open, so that
 * select can wait on them). A program that closes fds it did not open
 * (closefrom in a running loop) may close them and be given their numbers
 * again: so each is marked when made (F_SETOWN to this process, which
 * without O_ASYNC sends nothing) and checked before it is written, drained
 * or closed (its inode, which every eventfd shares, and that mark); one
 * found gone is left to the program and replaced. */
#include <errno.h>
#include <fcntl.h>
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
    _Atomic int fd;     /* fd + 1, so that the zeroed table reads "not made" */
    _Atomic ino_t inode;  /* of fd, when made */
    _Atomic pid_t owner;  /* its F_SETOWN mark */
};

static struct waker wakers[WAKERS];

static int fd_of(struct waker *waker) { return atomic_load(&waker->fd) - 1; }

static int make_fd(struct waker *waker)
{
    int fd = libc_eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct stat made;
    pid_t owner = getpid();
    if (fd < 0)
        return -1;
    if (fstat(fd, &made) != 0 ||
        libc_fcntl(fd, F_SETOWN, (void *)(intptr_t)owner) != 0) {
        libc_close(fd);
        return -1;
    }
    waker->inode = made.st_ino;
    waker->owner = owner;
    atomic_store(&waker->fd, fd + 1);
    return 0;
}

/* Still the eventfd made for this waker: the program may have closed it
 * and been given its number for something else. */
static int still_ours(const struct waker *waker, int fd)
{
    struct stat now;
    return fd >= 0 && fstat(fd, &now) == 0 && now.st_ino == waker->inode &&
           libc_fcntl(fd, F_GETOWN, NULL) == waker->owner;
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
        return i;
    }
    return BH_WAKE_NONE;
}

int bh_wake_fd(int waker) { return fd_of(&wakers[waker]); }

void bh_wake_drain(int waker)
{
    struct waker *ours = &wakers[waker];
    uint64_t count;
    if (still_ours(ours, fd_of(ours))) {
        (void)!libc_read(fd_of(ours), &count, sizeof count);
        return;
    }
    atomic_store(&ours->fd, 0);  /* the program's now: a new one */
    make_fd(ours);
}

void bh_wake_release(int waker)
{
    atomic_store(&wakers[waker].state, FREE);
}

void bh_wake_all(void)
{
    int saved = errno;
    for (int i = 0; i < WAKERS; i++) {
        int fd = fd_of(&wakers[i]);
        if (atomic_load(&wakers[i].state) != ARMED || !still_ours(&wakers[i], fd))
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
        if (still_ours(&wakers[i], fd))
            libc_close(fd);
        atomic_store(&wakers[i].fd, 0);
        atomic_store(&wakers[i].state, FREE);
    }
}
