/* What every file of shim/permits uses and that uses nothing of theirs:
 * one semop, the clock, the namespace lock, the ownership check and the
 * histograms' bounds. The bottom of the room: it calls only libc.
 *
 * Shared state: the lock is semaphore BH_SEM_LOCK of the namespace's set
 * (see permits.c); a histogram is a few atomics in the segment. Signal
 * safety: everything but the lock is async-signal-safe (a semop, atomics,
 * clock_gettime). A process that dies holding the lock: the kernel gives
 * it back (SEM_UNDO). */
#include "permits/permits_internal.h"
#include "libc/clock.h"

#include <errno.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <time.h>

enum { LOCK_TIMEOUT_MS = 2000 };

int bh_sem_op(int semid, unsigned short num, short delta, short flags)
{
    struct sembuf op = { .sem_num = num, .sem_op = delta, .sem_flg = flags };
    return semop(semid, &op, 1);
}

/* The lock is free at 0: taking it waits for zero and adds one, with
 * SEM_UNDO, in one atomic semop. A fresh set is therefore born unlocked,
 * and a holder that dies gives the lock back through the kernel: no
 * creator can wedge the namespace by dying between semget and its first
 * semop. */
int bh_lock_namespace(struct bh_namespace *ns)
{
    struct sembuf take[2] = {
        { .sem_num = BH_SEM_LOCK, .sem_op = 0, .sem_flg = 0 },
        { .sem_num = BH_SEM_LOCK, .sem_op = +1, .sem_flg = SEM_UNDO },
    };
    int64_t deadline = bh_clock_ns(CLOCK_MONOTONIC) + bh_ms_to_ns(LOCK_TIMEOUT_MS);
    for (;;) {
        int64_t left = deadline - bh_clock_ns(CLOCK_MONOTONIC);
        if (left <= 0) {
            errno = EAGAIN;
            return -1;
        }
        struct timespec wait = { left / 1000000000, left % 1000000000 };
        if (semtimedop(ns->semid, take, 2, &wait) == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

void bh_unlock_namespace(struct bh_namespace *ns)
{
    bh_sem_op(ns->semid, BH_SEM_LOCK, -1, SEM_UNDO);
}

/* Ours: created by and owned by this effective uid, mode 0600. Another
 * user can create an object under our key before we do (the key is no
 * secret), but cannot make its creator uid ours. */
int bh_owned_by(const struct ipc_perm *perm, uid_t uid)
{
    return perm->uid == uid && perm->cuid == uid && (perm->mode & 0777) == 0600;
}

const int64_t bh_histogram_bounds_us[BH_HISTOGRAM_BUCKETS] = {
    500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
};
