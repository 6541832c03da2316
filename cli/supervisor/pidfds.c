/* Pidfds kept for the threads whose matched connects were trapped
 * lately, so that a connect's fd is copied with one system call
 * (pidfd_getfd) rather than three or more (pidfd_open, pidfd_getfd,
 * close; and /proc for a thread that does not lead its process).
 *
 * Each is kept under its thread's id, with its process's. A pidfd names
 * its task and no other for good: once that thread or process is gone a
 * kept one fails (ESRCH) and is opened afresh, even when the id was
 * reused. A thread that leads its process is opened as the process; any
 * other with PIDFD_THREAD (Linux 6.9), its process read from /proc once.
 * Where that flag is refused, another thread's connect goes the long way
 * each time (sv_copy_fd).
 *
 * Shared by the main thread and the workers under one mutex, held across
 * a pidfd_getfd (which never waits) so that no pidfd is closed under it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "supervisor/supervisor.h"

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

enum { KEPT = 32 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct kept { pid_t tid, pid; int pidfd; } kept[KEPT];
static unsigned next_out;  /* the slot a new one takes: each in turn */

static int getfd(int pidfd, int fd)
{
    return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
}

/* Under the lock: thread tid's pidfd, opened and kept in the oldest slot;
 * NULL when it cannot be (gone, or PIDFD_THREAD refused). */
static struct kept *keep(pid_t tid)
{
    pid_t pid = tid;
    int pidfd = (int)syscall(SYS_pidfd_open, tid, 0);
    if (pidfd < 0) {
        pidfd = (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD);
        pid = pidfd >= 0 ? sv_process_of(tid) : -1;
    }
    if (pidfd >= 0 && pid <= 0) {
        close(pidfd);
        pidfd = -1;
    }
    if (pidfd < 0)
        return NULL;
    struct kept *slot = &kept[next_out++ % KEPT];
    if (slot->tid > 0)
        close(slot->pidfd);
    *slot = (struct kept) { tid, pid, pidfd };
    return slot;
}

int sv_copy_fd_kept(pid_t tid, int fd, pid_t *pid)
{
    pthread_mutex_lock(&lock);
    struct kept *found = NULL;
    for (int i = 0; i < KEPT && !found; i++)
        if (kept[i].tid == tid)
            found = &kept[i];
    int copy = found ? getfd(found->pidfd, fd) : -1;
    if (found && copy < 0 && errno == ESRCH) {  /* its task is gone: tid is another's */
        close(found->pidfd);
        found->tid = 0;
        found = NULL;
    }
    if (!found && (found = keep(tid)) != NULL)
        copy = getfd(found->pidfd, fd);
    int saved_errno = errno;
    if (found)
        *pid = found->pid;
    pthread_mutex_unlock(&lock);
    errno = saved_errno;
    return found ? copy : sv_copy_fd(tid, fd, pid);
}
