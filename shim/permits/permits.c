/* Permits shared across processes: System V semaphores with SEM_UNDO.
 *
 * Why SysV: a permit must come back when its holder dies, without anyone
 * running a command. With SEM_UNDO the kernel records, per process, what it
 * took and gives it back at exit, SIGKILL included. POSIX named semaphores
 * leak a dead holder's permit forever; futex slots in shared memory need a
 * rescan and give no FIFO order; OFD locks are slow. SysV also hands a freed
 * permit straight to the longest waiter (FIFO) and semtimedop() bounds the
 * wait. Measured here: ~0.7 us per acquire+release, 0.2 ms from a holder's
 * death to a waiter's wake-up.
 *
 * What is shared, per user and namespace, under one key:
 *   - a semaphore set: sem 0 is the namespace lock (free at 0; taken by
 *     "wait for 0, add 1" with SEM_UNDO, so a fresh set is born unlocked
 *     and a process dying inside the lock cannot wedge the namespace);
 *     compartment i owns sem 1+2i (permits free now) and 2+2i (debt:
 *     permits to retire as they are given back, after `bulkhead set`
 *     lowered the limit while they were in use).
 *   - a shared memory segment: the compartment table and counters
 *     (struct bh_shared_state). Counters are atomics, written without locks.
 *
 * Who writes what: any process of the user that runs the shim or the
 * command. The lock serialises making the table, adding a compartment and
 * changing a limit; acquire and release never take it. Nothing here takes
 * a process-local lock, so bh_permit_release() is async-signal-safe: it is
 * atomics plus one semop().
 *
 * A process that dies mid-operation: inside the lock, the kernel gives the
 * lock back, and what it half did is redone by the next one (the table is
 * (re)written when it is not this set's; a compartment's semaphores are
 * set with SETVAL before compartment_count names it). Holding permits, the
 * kernel gives them back (SEM_UNDO). Between its holders hint and its
 * semop, the hint is off by one until its row is reaped; PEAK never trusts
 * the hint alone.
 *
 * Creation is idempotent: semget/shmget with IPC_CREAT (no EXCL), then the
 * lock, then the table if it is missing. Nobody ever removes a set that
 * another process may have just made, except a set that has permits in
 * flight and no table (memory removed by hand), which cannot be mended.
 *
 * Another user can create an object under our key first (the key is a
 * hash anyone can compute). Every attach checks that both objects were
 * created by and belong to our effective uid with mode 0600; a foreign one
 * is never used (see bh_namespace_open).
 *
 * Traps avoided (each bit someone before us):
 *   - The key is a hash of a versioned name, never ftok() (collides).
 *   - SETVAL clears every process's undo entries for that semaphore: it is
 *     used only on a compartment nobody can hold yet.
 *   - semtimedop() returns EINTR even under SA_RESTART: the namespace lock
 *     retries; a permit wait ends, as a blocking connect() would.
 *   - Undo records are not inherited by fork: a child owns no permits.
 *   - IPC_RMID (bulkhead reset) wakes waiters with EIDRM: let them through.
 *   - Mode bits are not umasked: create with 0600 explicitly. */
#include "permits/permits.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <time.h>
#include <unistd.h>

#include "libc/libc.h"

enum { LOCK_TIMEOUT_MS = 2000, SEM_VALUE_MAX = 32767 };

/* This process's row in the holders table; reset in a forked child. */
static _Atomic(struct bh_process_slot *) my_slot;

key_t bh_namespace_key(uid_t uid, const char *namespace_name)
{
    char versioned[128];
    snprintf(versioned, sizeof versioned, "bulkhead/%d/%u/%s",
             BH_LAYOUT_VERSION, (unsigned)uid, namespace_name);
    uint32_t hash = 2166136261u;                  /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)versioned; *p; p++)
        hash = (hash ^ *p) * 16777619u;
    return (key_t)(hash ? hash : 1);              /* 0 is IPC_PRIVATE */
}

static int sem_op(int semid, unsigned short num, short delta, short flags)
{
    struct sembuf op = { .sem_num = num, .sem_op = delta, .sem_flg = flags };
    return semop(semid, &op, 1);
}

static int64_t ms_to_ns(int ms) { return (int64_t)ms * 1000000; }

static int64_t monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* A permit of compartment `index`, but only while no debt is owed: a
 * permit a dead holder's SEM_UNDO put back while `set` had lowered the
 * limit must pay the debt, not go to the next caller. Both conditions are
 * checked by the kernel in one atomic semop. */
static void take_permit_ops(struct sembuf ops[2], int index, short flags)
{
    ops[0] = (struct sembuf){ .sem_num = BH_SEM_FREE(index), .sem_op = -1,
                              .sem_flg = (short)(SEM_UNDO | flags) };
    ops[1] = (struct sembuf){ .sem_num = BH_SEM_DEBT(index), .sem_op = 0,
                              .sem_flg = flags };
}

/* The lock is free at 0: taking it waits for zero and adds one, with
 * SEM_UNDO, in one atomic semop. A fresh set is therefore born unlocked,
 * and a holder that dies gives the lock back through the kernel: no
 * creator can wedge the namespace by dying between semget and its first
 * semop. */
static int lock_namespace(struct bh_namespace *ns)
{
    struct sembuf take[2] = {
        { .sem_num = BH_SEM_LOCK, .sem_op = 0, .sem_flg = 0 },
        { .sem_num = BH_SEM_LOCK, .sem_op = +1, .sem_flg = SEM_UNDO },
    };
    int64_t deadline = monotonic_ns() + ms_to_ns(LOCK_TIMEOUT_MS);
    for (;;) {
        int64_t left = deadline - monotonic_ns();
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

static void unlock_namespace(struct bh_namespace *ns)
{
    sem_op(ns->semid, BH_SEM_LOCK, -1, SEM_UNDO);
}

/* Ours: created by and owned by this effective uid, mode 0600. Another
 * user can create an object under our key before we do (the key is no
 * secret), but cannot make its creator uid ours. */
static int owned_by(const struct ipc_perm *perm, uid_t uid)
{
    return perm->uid == uid && perm->cuid == uid && (perm->mode & 0777) == 0600;
}

/* Something under our key that we must not use. errno EEXIST when it is
 * our own user's (another program, an older layout: a plain collision),
 * EPERM when another user made it, owns it, or may write it. */
static int foreign(struct bh_namespace *ns, const struct ipc_perm *perm,
                   const char *what)
{
    uid_t me = ns->uid;
    snprintf(ns->foreign_what, sizeof ns->foreign_what, "%s", what);
    if (perm && perm->cuid == me && perm->uid == me && (perm->mode & 0777) == 0600) {
        errno = EEXIST;
        return -1;
    }
    ns->squatter_uid = !perm ? (uid_t)-1 : perm->cuid != me ? perm->cuid : perm->uid;
    ns->squatter_mode = perm ? perm->mode & 0777 : 0;
    errno = EPERM;
    return -1;
}

static int open_semaphores(struct bh_namespace *ns, int create)
{
    struct semid_ds info;
    ns->semid = semget(ns->key, BH_SEM_COUNT, create ? IPC_CREAT | 0600 : 0);
    if (ns->semid < 0) {
        /* EINVAL: a set under our key with fewer semaphores (someone
         * else's, or an older layout's); EACCES: one we may not use. */
        if (errno != EINVAL && errno != EACCES)
            return -1;
        int other = semget(ns->key, 0, 0);
        int known = other >= 0 && semctl(other, 0, IPC_STAT, &info) == 0;
        return foreign(ns, known ? &info.sem_perm : NULL, "semaphores");
    }
    if (semctl(ns->semid, 0, IPC_STAT, &info) < 0)
        return -1;
    return owned_by(&info.sem_perm, ns->uid) ? 0 : foreign(ns, &info.sem_perm, "semaphores");
}

static int attach_memory(struct bh_namespace *ns, int create)
{
    struct shmid_ds info;
    ns->shmid = shmget(ns->key, sizeof *ns->state, create ? IPC_CREAT | 0600 : 0);
    if (ns->shmid < 0) {
        if (errno != EINVAL && errno != EACCES)
            return -1;
        int other = shmget(ns->key, 0, 0);
        int known = other >= 0 && shmctl(other, IPC_STAT, &info) == 0;
        return foreign(ns, known ? &info.shm_perm : NULL, "shared memory");
    }
    if (shmctl(ns->shmid, IPC_STAT, &info) < 0)
        return -1;
    if (!owned_by(&info.shm_perm, ns->uid) || info.shm_segsz != sizeof *ns->state)
        return foreign(ns, &info.shm_perm, "shared memory");
    void *address = shmat(ns->shmid, NULL, 0);
    if (address == (void *)-1)
        return -1;
    ns->state = address;
    return 0;
}

/* Nothing was ever taken from a set whose permit and debt semaphores are
 * all zero: a table can be (re)made for it. */
static int set_is_pristine(struct bh_namespace *ns)
{
    unsigned short values[BH_SEM_COUNT];
    if (semctl(ns->semid, 0, GETALL, values) < 0)
        return 0;
    for (int i = 1; i < BH_SEM_COUNT; i++)
        if (values[i] != 0)
            return 0;
    return 1;
}

/* Under the lock: a table that is not this set's (fresh memory, or a
 * creator that died half way) is written now, by whoever comes next.
 * Returns 0, or -1 with errno EEXIST (the key is another namespace's of
 * ours: a hash collision) or EIDRM (permits in flight with no table for
 * them, memory removed by hand: the namespace must start over). */
static int initialise_if_needed(struct bh_namespace *ns, const char *name)
{
    struct bh_shared_state *state = ns->state;
    if (state->magic == BH_STATE_MAGIC && state->semid == ns->semid) {
        errno = EEXIST;
        return strcmp(state->namespace_name, name) == 0 ? 0 : -1;
    }
    if (!set_is_pristine(ns)) {
        errno = EIDRM;
        return -1;
    }
    memset(state, 0, sizeof *state);
    state->layout_version = BH_LAYOUT_VERSION;
    state->owner_uid = ns->uid;
    state->semid = ns->semid;
    snprintf(state->namespace_name, BH_NAME_MAX, "%s", name);
    __atomic_store_n(&state->magic, BH_STATE_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

static int fail(char *err, size_t errlen, const char *what, const char *name)
{
    int saved = errno;
    snprintf(err, errlen, "namespace \"%s\": %s: %s", name, what, strerror(saved));
    errno = saved;
    return -1;
}

static int fail_foreign(const struct bh_namespace *ns, char *err, size_t errlen,
                        const char *name)
{
    if (errno == EEXIST) {
        snprintf(err, errlen, "namespace \"%s\": %s: key 0x%08x holds something "
                 "else of ours (another program's, or an older bulkhead's)",
                 name, ns->foreign_what, (unsigned)ns->key);
        errno = EEXIST;
        return -1;
    }
    if (ns->squatter_uid == ns->uid)
        snprintf(err, errlen, "namespace \"%s\": key 0x%08x holds %s of ours "
                 "with mode %04o: others may have written it", name,
                 (unsigned)ns->key, ns->foreign_what, ns->squatter_mode);
    else if (ns->squatter_uid == (uid_t)-1)
        snprintf(err, errlen, "namespace \"%s\": key 0x%08x holds %s we may "
                 "not use (another user's, or an older bulkhead's)", name,
                 (unsigned)ns->key, ns->foreign_what);
    else
        snprintf(err, errlen, "namespace \"%s\": key 0x%08x holds %s of uid "
                 "%u, not ours (uid %u, mode 0600)", name, (unsigned)ns->key,
                 ns->foreign_what, (unsigned)ns->squatter_uid, (unsigned)ns->uid);
    errno = EPERM;
    return -1;
}

static int open_once(uid_t uid, const char *name, int create,
                     struct bh_namespace *ns, char *err, size_t errlen)
{
    memset(ns, 0, sizeof *ns);
    ns->semid = ns->shmid = -1;
    ns->uid = uid;
    ns->key = bh_namespace_key(uid, name);
    if (open_semaphores(ns, create) < 0)
        return errno == EPERM || errno == EEXIST ? fail_foreign(ns, err, errlen, name)
                                                 : fail(err, errlen, "semaphores", name);
    if (lock_namespace(ns) < 0)
        return fail(err, errlen, "waiting for the namespace lock", name);
    int rc = attach_memory(ns, create);
    if (rc == 0 && initialise_if_needed(ns, name) < 0) {
        if (errno == EEXIST) {
            unlock_namespace(ns);
            bh_namespace_close(ns);
            errno = EEXIST;
            return fail(err, errlen, "key taken by another namespace", name);
        }
        semctl(ns->semid, 0, IPC_RMID);  /* wakes everyone: they start over */
        shmctl(ns->shmid, IPC_RMID, NULL);
        bh_namespace_close(ns);
        errno = EIDRM;
        return fail(err, errlen, "state was half removed; try again", name);
    }
    int saved = errno;
    unlock_namespace(ns);
    if (rc == 0)
        return 0;
    bh_namespace_close(ns);
    errno = saved;
    return errno == EPERM || errno == EEXIST ? fail_foreign(ns, err, errlen, name)
                                             : fail(err, errlen, "shared memory", name);
}

int bh_namespace_open_for(uid_t uid, const char *name, int create,
                          struct bh_namespace *ns, char *err, size_t errlen)
{
    /* Objects we made under another user's key would be ours, not theirs:
     * their processes would refuse them as a squatter's. */
    if (uid != geteuid())
        create = 0;
    int rc = open_once(uid, name, create, ns, err, errlen);
    if (rc < 0 && errno == EIDRM && create)
        rc = open_once(uid, name, create, ns, err, errlen);
    return rc;
}

int bh_namespace_open(const char *name, int create, struct bh_namespace *ns,
                      char *err, size_t errlen)
{
    return bh_namespace_open_for(geteuid(), name, create, ns, err, errlen);
}

int bh_namespace_remove_key(uid_t uid, const char *name)
{
    key_t key = bh_namespace_key(uid, name);
    int removed = 0, semid = semget(key, 0, 0), shmid = shmget(key, 0, 0);
    struct semid_ds sem_info;
    struct shmid_ds shm_info;
    if (semid >= 0 && semctl(semid, 0, IPC_STAT, &sem_info) == 0 &&
        sem_info.sem_perm.cuid == uid && semctl(semid, 0, IPC_RMID) == 0)
        removed++;
    if (shmid >= 0 && shmctl(shmid, IPC_STAT, &shm_info) == 0 &&
        shm_info.shm_perm.cuid == uid && shmctl(shmid, IPC_RMID, NULL) == 0)
        removed++;
    return removed;
}

void bh_namespace_close(struct bh_namespace *ns)
{
    if (ns->state)
        shmdt(ns->state);
    ns->state = NULL;
    ns->semid = ns->shmid = -1;
}

int bh_compartment_find(const struct bh_namespace *ns, const char *name)
{
    uint32_t count = atomic_load(&ns->state->compartment_count);
    for (uint32_t i = 0; i < count && i < BH_MAX_COMPARTMENTS; i++)
        if (strcmp(ns->state->compartments[i].name, name) == 0)
            return (int)i;
    return -1;
}

static int add_compartment(struct bh_namespace *ns, const char *name, int limit)
{
    uint32_t index = atomic_load(&ns->state->compartment_count);
    if (index >= BH_MAX_COMPARTMENTS || limit > SEM_VALUE_MAX) {
        errno = index >= BH_MAX_COMPARTMENTS ? ENOSPC : ERANGE;
        return -1;
    }
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    memset(shared, 0, sizeof *shared);
    snprintf(shared->name, BH_NAME_MAX, "%s", name);
    atomic_store(&shared->limit, limit);
    /* SETVAL clears every process's undo entry for that semaphore, so it
     * is safe only here: nobody can have taken from a compartment before
     * compartment_count names it. It is idempotent, so a registrant killed
     * half way leaves nothing the next one cannot redo. */
    if (semctl(ns->semid, BH_SEM_FREE(index), SETVAL, limit) < 0 ||
        semctl(ns->semid, BH_SEM_DEBT(index), SETVAL, 0) < 0 ||
        semctl(ns->semid, BH_SEM_PROBE(index), SETVAL, 1) < 0)
        return -1;
    atomic_store(&shared->registered, 1);
    atomic_store(&ns->state->compartment_count, index + 1);
    return (int)index;
}

int bh_compartment_register(struct bh_namespace *ns, const char *name,
                            int limit, int *live_limit)
{
    if (lock_namespace(ns) < 0)
        return -1;
    int index = bh_compartment_find(ns, name);
    if (index < 0)
        index = add_compartment(ns, name, limit);
    int saved = errno;
    if (index >= 0)
        *live_limit = atomic_load(&ns->state->compartments[index].limit);
    unlock_namespace(ns);
    errno = saved;
    return index;
}

/* /proc/self/stat field 22: tells a live pid from a reused one. */
static uint64_t process_start_time(pid_t pid)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = libc_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    ssize_t length = libc_read(fd, text, sizeof text - 1);
    libc_close(fd);
    if (length <= 0)
        return 0;
    text[length] = '\0';
    const char *field = strrchr(text, ')'); /* the name may hold spaces */
    unsigned long long start = 0;
    if (field)
        sscanf(field + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
                          "%*d %*d %*d %*d %*d %*d %llu", &start);
    return start;
}

/* A start time of 0 is unknown (the holder could not open /proc, at its
 * fd limit): then only the pid's absence says it is gone. */
static int slot_is_dead(const struct bh_process_slot *slot, pid_t pid)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 1;
    uint64_t start = process_start_time(pid);
    return slot->start_time != 0 && start != 0 && start != slot->start_time;
}

/* A dead process's permits came back through SEM_UNDO; take its share out
 * of the holders hint and free the row. */
static void reap_slot(struct bh_shared_state *state, struct bh_process_slot *slot,
                      int32_t pid)
{
    if (!atomic_compare_exchange_strong(&slot->pid, &pid, -1))
        return; /* someone else reaps it */
    for (int i = 0; i < BH_MAX_COMPARTMENTS; i++) {
        uint32_t held = atomic_exchange(&slot->held[i], 0);
        if (held)
            atomic_fetch_sub(&state->compartments[i].holders_hint, held);
    }
    atomic_store(&slot->pid, 0);
}

static void reap_dead_slots(struct bh_shared_state *state)
{
    for (int i = 0; i < BH_MAX_PROCESSES; i++) {
        struct bh_process_slot *slot = &state->processes[i];
        int32_t pid = atomic_load(&slot->pid);
        if (pid > 0 && slot_is_dead(slot, pid))
            reap_slot(state, slot, pid);
    }
}

static struct bh_process_slot *claim_free_slot(struct bh_shared_state *state,
                                               int32_t pid)
{
    for (int i = 0; i < BH_MAX_PROCESSES; i++) {
        struct bh_process_slot *slot = &state->processes[i];
        int32_t expected = 0;
        if (atomic_compare_exchange_strong(&slot->pid, &expected, -1)) {
            slot->start_time = process_start_time(pid);
            atomic_store(&slot->pid, pid);
            return slot;
        }
    }
    return NULL;
}

/* This pid's row from before an exec (its permits survive exec), else a
 * free row, else one freed by reaping the dead. */
static struct bh_process_slot *find_my_slot(struct bh_shared_state *state)
{
    int32_t pid = getpid();
    for (int i = 0; i < BH_MAX_PROCESSES; i++)
        if (atomic_load(&state->processes[i].pid) == pid)
            return &state->processes[i];
    struct bh_process_slot *slot = claim_free_slot(state, pid);
    if (!slot) {
        reap_dead_slots(state);
        slot = claim_free_slot(state, pid);
    }
    return slot; /* NULL: stat will not name this holder; permits still work */
}

/* Two threads may look at once: one row wins, the other is given back. */
static struct bh_process_slot *my_process_slot(struct bh_namespace *ns)
{
    struct bh_process_slot *slot = atomic_load(&my_slot);
    if (slot)
        return slot;
    struct bh_process_slot *found = find_my_slot(ns->state);
    if (found && !atomic_compare_exchange_strong(&my_slot, &slot, found)) {
        if (found != slot)
            atomic_store(&found->pid, 0);
        return slot;
    }
    return found;
}

static void raise_to(_Atomic int64_t *maximum, int64_t value)
{
    int64_t seen = atomic_load_explicit(maximum, memory_order_relaxed);
    while (value > seen &&
           !atomic_compare_exchange_weak_explicit(maximum, &seen, value,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* In use right now, from the semaphores themselves: exact. */
static int in_use_now(struct bh_namespace *ns, int index)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    int free_now = semctl(ns->semid, BH_SEM_FREE(index), GETVAL);
    int debt = atomic_load(&shared->debt_hint)
                   ? semctl(ns->semid, BH_SEM_DEBT(index), GETVAL) : 0;
    if (free_now < 0 || debt < 0)
        return -1;
    return atomic_load(&shared->limit) + debt - free_now;
}

/* The hint says this grant may be a new peak. The hint runs high while a
 * killed holder's row is not reaped yet, so a peak is only ever recorded
 * as the semaphores count it; a hint found high is mended by reaping. This
 * costs a semctl only when the hint passes the peak, which a correct hint
 * does only when a real new peak is reached. */
static void raise_peak(struct bh_namespace *ns, int index, int64_t hint)
{
    int exact = in_use_now(ns, index);
    if (exact < 0)
        return;
    raise_to(&ns->state->compartments[index].peak_in_use, exact);
    if (exact < hint)
        reap_dead_slots(ns->state);
}

static void count_granted(struct bh_namespace *ns, int index, int64_t waited_ns)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    atomic_fetch_add_explicit(&shared->acquired, 1, memory_order_relaxed);
    int64_t holders = atomic_fetch_add(&shared->holders_hint, 1) + 1;
    if (holders > atomic_load_explicit(&shared->peak_in_use, memory_order_relaxed))
        raise_peak(ns, index, holders);
    if (waited_ns >= 0) {
        atomic_fetch_add_explicit(&shared->waits, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&shared->wait_ns_total, waited_ns,
                                  memory_order_relaxed);
        raise_to(&shared->wait_ns_max, waited_ns);
    }
    struct bh_process_slot *slot = my_process_slot(ns);
    if (slot)
        atomic_fetch_add_explicit(&slot->held[index], 1, memory_order_relaxed);
}

/* Free permits that appeared while a debt is owed (a holder died after
 * `set` lowered the limit) pay the debt before anyone may take them. */
static void pay_debt_from_free(struct bh_namespace *ns, int index)
{
    struct sembuf pay[2] = {
        { .sem_num = BH_SEM_FREE(index), .sem_op = -1, .sem_flg = IPC_NOWAIT },
        { .sem_num = BH_SEM_DEBT(index), .sem_op = -1, .sem_flg = IPC_NOWAIT },
    };
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    while (atomic_load(&shared->debt_hint) > 0 && semop(ns->semid, pay, 2) == 0)
        atomic_fetch_sub(&shared->debt_hint, 1);
}

void bh_permit_count_rejected(struct bh_namespace *ns, int index)
{
    atomic_fetch_add_explicit(&ns->state->compartments[index].rejected, 1,
                              memory_order_relaxed);
}

enum bh_acquire_result bh_permit_try(struct bh_namespace *ns, int index)
{
    int saved_errno = errno;
    enum bh_acquire_result result = BH_ACQUIRED;
    /* Without a debt (the hint is raised before one is owed) the debt
     * semaphore is 0 and need not be checked: one simple semop. */
    int in_debt = atomic_load_explicit(&ns->state->compartments[index].debt_hint,
                                       memory_order_relaxed) != 0;
    if (in_debt)
        pay_debt_from_free(ns, index);
    struct sembuf take[2];
    take_permit_ops(take, index, IPC_NOWAIT);
    if (semop(ns->semid, take, in_debt ? 2 : 1) == 0)
        count_granted(ns, index, -1);
    else
        result = errno == EAGAIN ? BH_REJECTED
                                 : BH_BYPASS; /* removed, or no undo space */
    errno = saved_errno;
    return result;
}

/* Waits for a permit until `deadline`: 0, or -1 with errno (EAGAIN when
 * it passed, EINTR for a signal). While a debt is owed, a dead holder's
 * permit sits in the free semaphore and the take waits on the debt, so
 * the wait goes in slices, paying the debt from free permits between
 * them (arrival order is given up only then). */
static int take_within(struct bh_namespace *ns, int index, int64_t deadline)
{
    enum { DEBT_SLICE_NS = 50 * 1000000 };
    struct sembuf take[2];
    take_permit_ops(take, index, 0);
    _Atomic uint32_t *debt_hint = &ns->state->compartments[index].debt_hint;
    for (;;) {
        int64_t left = deadline - monotonic_ns();
        if (left <= 0) {
            errno = EAGAIN;
            return -1;
        }
        int in_debt = atomic_load(debt_hint) != 0;
        if (in_debt) {
            pay_debt_from_free(ns, index);
            if (left > DEBT_SLICE_NS)
                left = DEBT_SLICE_NS;
        }
        struct timespec wait = { left / 1000000000, left % 1000000000 };
        if (semtimedop(ns->semid, take, 2, &wait) == 0)
            return 0;
        if (errno != EAGAIN || !in_debt)
            return -1;
    }
}

enum bh_acquire_result bh_permit_wait(struct bh_namespace *ns, int index,
                                      int wait_ms, int max_waiters)
{
    int saved_errno = errno;
    enum bh_acquire_result result = BH_REJECTED;
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    int64_t started = monotonic_ns();
    /* GETNCNT is the kernel's own count of waiters: exact, though two
     * callers checking at once may both get in. */
    if (semctl(ns->semid, BH_SEM_FREE(index), GETNCNT) >= max_waiters)
        bh_permit_count_rejected(ns, index);
    else if (take_within(ns, index, started + ms_to_ns(wait_ms)) == 0) {
        result = BH_ACQUIRED;
        count_granted(ns, index, monotonic_ns() - started);
    } else if (errno == EAGAIN) {
        result = BH_TIMED_OUT;
        atomic_fetch_add_explicit(&shared->timed_out, 1, memory_order_relaxed);
    } else {
        /* EINTR: a signal ends the wait, as it ends a blocking connect();
         * EIDRM/EINVAL: the namespace was removed (reset). */
        result = errno == EINTR ? BH_INTERRUPTED : BH_BYPASS;
    }
    errno = saved_errno;
    return result;
}

/* Gives the permit back, or retires it when `set` lowered the limit while it
 * was in use: +1 with SEM_UNDO clears this process's undo record, -1
 * without takes the permit out of circulation, and the debt shrinks, all in
 * one atomic semop. */
static int retire_permit(struct bh_namespace *ns, int index)
{
    struct sembuf retire[3] = {
        { .sem_num = BH_SEM_FREE(index), .sem_op = +1, .sem_flg = SEM_UNDO },
        { .sem_num = BH_SEM_FREE(index), .sem_op = -1, .sem_flg = 0 },
        { .sem_num = BH_SEM_DEBT(index), .sem_op = -1, .sem_flg = IPC_NOWAIT },
    };
    if (semop(ns->semid, retire, 3) < 0)
        return -1;
    atomic_fetch_sub(&ns->state->compartments[index].debt_hint, 1);
    return 0;
}

void bh_permit_release(struct bh_namespace *ns, int index)
{
    int saved_errno = errno;
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    /* Before the semop: the waiter it wakes counts itself in at once. */
    atomic_fetch_sub_explicit(&shared->holders_hint, 1, memory_order_relaxed);
    if (atomic_load_explicit(&shared->debt_hint, memory_order_relaxed) == 0 ||
        retire_permit(ns, index) < 0)
        sem_op(ns->semid, BH_SEM_FREE(index), +1, SEM_UNDO);
    struct bh_process_slot *slot = atomic_load(&my_slot);
    if (slot) {
        /* Never below 0: a permit taken before this row was ours (slots
         * were full then) is not in it. */
        uint32_t held = atomic_load_explicit(&slot->held[index], memory_order_relaxed);
        while (held && !atomic_compare_exchange_weak(&slot->held[index], &held, held - 1))
            ;
    }
    errno = saved_errno;
}

void bh_permits_leave(void)
{
    struct bh_process_slot *slot = atomic_exchange(&my_slot, NULL);
    if (!slot)
        return;
    for (int i = 0; i < BH_MAX_COMPARTMENTS; i++)
        if (atomic_load(&slot->held[i]) != 0)
            return;  /* still holding: stat must keep naming us */
    atomic_store(&slot->pid, 0);
}

void bh_permits_forget_after_fork(void)
{
    atomic_store(&my_slot, NULL);
}

int bh_permits_rejoin_after_exec(struct bh_namespace *ns,
                                 uint32_t held[BH_MAX_COMPARTMENTS])
{
    struct bh_process_slot *slot = my_process_slot(ns);
    if (!slot)
        return -1;
    for (int i = 0; i < BH_MAX_COMPARTMENTS; i++)
        held[i] = atomic_load(&slot->held[i]);
    return 0;
}

void bh_compartment_set_fleet(struct bh_namespace *ns, int index,
                              const struct bh_fleet_view *fleet)
{
    struct bh_fleet_shared *shared = &ns->state->compartments[index].fleet;
    atomic_store(&shared->grant, fleet->grant);
    atomic_store(&shared->in_use, fleet->in_use);
    atomic_store(&shared->hosts, fleet->hosts);
    atomic_store(&shared->state, (int32_t)fleet->state);
    atomic_store(&shared->updated_ns, fleet->updated_ns);
    atomic_store(&shared->lease_until_ns, fleet->lease_until_ns);
    atomic_store(&shared->limit, fleet->limit);
}

int bh_fleet_lapse(struct bh_namespace *ns, int index, int64_t seen_until_ns)
{
    struct bh_fleet_shared *shared = &ns->state->compartments[index].fleet;
    if (!atomic_compare_exchange_strong(&shared->lease_until_ns, &seen_until_ns, 0))
        return 0;  /* renewed meanwhile, or another process lapsed it */
    atomic_store(&shared->grant, 0);
    return bh_compartment_set_limit(ns, index, 0) == 0;
}

int bh_probe_take(struct bh_namespace *ns, int index)
{
    int saved_errno = errno;
    int rc = sem_op(ns->semid, BH_SEM_PROBE(index), -1, SEM_UNDO | IPC_NOWAIT);
    errno = saved_errno;
    return rc;
}

void bh_probe_give(struct bh_namespace *ns, int index)
{
    int saved_errno = errno;
    sem_op(ns->semid, BH_SEM_PROBE(index), +1, SEM_UNDO);
    errno = saved_errno;
}

const int64_t bh_histogram_bounds_us[BH_HISTOGRAM_BUCKETS] = {
    500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
};

void bh_histogram_record(struct bh_histogram *histogram, int64_t ns)
{
    int bucket = 0;
    while (bucket < BH_HISTOGRAM_BUCKETS && ns > bh_histogram_bounds_us[bucket] * 1000)
        bucket++;
    atomic_fetch_add_explicit(&histogram->buckets[bucket], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&histogram->sum_ns, ns, memory_order_relaxed);
}

/* Not a snapshot: a sample counted meanwhile may be in the count and not
 * yet in the sum, or the reverse. */
static void read_histogram(struct bh_histogram *histogram,
                           struct bh_histogram_view *view)
{
    view->count = 0;
    for (int i = 0; i <= BH_HISTOGRAM_BUCKETS; i++) {
        view->buckets[i] = atomic_load(&histogram->buckets[i]);
        view->count += view->buckets[i];
    }
    view->sum_ns = atomic_load(&histogram->sum_ns);
}

int bh_compartment_read(struct bh_namespace *ns, int index,
                        struct bh_compartment_view *view)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    int free_now = semctl(ns->semid, BH_SEM_FREE(index), GETVAL);
    int debt = semctl(ns->semid, BH_SEM_DEBT(index), GETVAL);
    int waiting = semctl(ns->semid, BH_SEM_FREE(index), GETNCNT);
    if (free_now < 0 || debt < 0 || waiting < 0)
        return -1;
    memset(view, 0, sizeof *view);
    snprintf(view->name, BH_NAME_MAX, "%s", shared->name);
    view->limit = atomic_load(&shared->limit);
    view->in_use = view->limit + debt - free_now;
    view->waiting = waiting;
    view->peak = atomic_load(&shared->peak_in_use);
    view->acquired = atomic_load(&shared->acquired);
    view->rejected = atomic_load(&shared->rejected);
    view->timed_out = atomic_load(&shared->timed_out);
    view->waits = atomic_load(&shared->waits);
    view->wait_ns_total = atomic_load(&shared->wait_ns_total);
    view->wait_ns_max = atomic_load(&shared->wait_ns_max);
    view->connect_failures = atomic_load(&shared->connect_failures);
    view->connect_timeouts = atomic_load(&shared->connect_timeouts);
    view->io_timeouts = atomic_load(&shared->io_timeouts);
    view->fleet = (struct bh_fleet_view){
        .limit = atomic_load(&shared->fleet.limit),
        .grant = atomic_load(&shared->fleet.grant),
        .in_use = atomic_load(&shared->fleet.in_use),
        .hosts = atomic_load(&shared->fleet.hosts),
        .state = (enum bh_fleet_state)atomic_load(&shared->fleet.state),
        .updated_ns = atomic_load(&shared->fleet.updated_ns),
        .lease_until_ns = atomic_load(&shared->fleet.lease_until_ns),
    };
    read_histogram(&shared->connect_time, &view->connect_time);
    read_histogram(&shared->hold_time, &view->hold_time);
    return 0;
}

int bh_compartment_holders(struct bh_namespace *ns, int index,
                           pid_t *pids, uint32_t *counts, int max)
{
    reap_dead_slots(ns->state);
    int found = 0;
    for (int i = 0; i < BH_MAX_PROCESSES && found < max; i++) {
        struct bh_process_slot *slot = &ns->state->processes[i];
        int32_t pid = atomic_load(&slot->pid);
        uint32_t held = atomic_load(&slot->held[index]);
        if (pid > 0 && held > 0) {
            pids[found] = pid;
            counts[found++] = held;
        }
    }
    return found;
}

/* Moves `amount` between the free and debt semaphores without blocking:
 * the values can change under us, so read, try with IPC_NOWAIT, repeat. */
static int take_up_to(struct bh_namespace *ns, unsigned short num, int amount)
{
    for (;;) {
        int available = semctl(ns->semid, num, GETVAL);
        if (available < 0)
            return -1;
        int take = available < amount ? available : amount;
        if (take == 0 || sem_op(ns->semid, num, (short)-take, IPC_NOWAIT) == 0)
            return take;
        if (errno != EAGAIN)
            return -1;
    }
}

static int lower_limit(struct bh_namespace *ns, int index, int amount)
{
    int retired_now = take_up_to(ns, BH_SEM_FREE(index), amount);
    if (retired_now < 0)
        return -1;
    int owed = amount - retired_now;
    if (owed > 0) {
        /* The hint first: a taker that sees no hint must see no debt. */
        _Atomic uint32_t *hint = &ns->state->compartments[index].debt_hint;
        atomic_fetch_add(hint, owed);
        if (sem_op(ns->semid, BH_SEM_DEBT(index), (short)owed, 0) < 0) {
            atomic_fetch_sub(hint, owed);
            return -1;
        }
    }
    return 0;
}

static int raise_limit(struct bh_namespace *ns, int index, int amount)
{
    int forgiven = take_up_to(ns, BH_SEM_DEBT(index), amount);
    if (forgiven < 0)
        return -1;
    atomic_fetch_sub(&ns->state->compartments[index].debt_hint, forgiven);
    int added = amount - forgiven;
    return added > 0 ? sem_op(ns->semid, BH_SEM_FREE(index), (short)added, 0) : 0;
}

int bh_compartment_set_limit(struct bh_namespace *ns, int index, int limit)
{
    if (limit < 0 || limit > SEM_VALUE_MAX) {
        errno = ERANGE;
        return -1;
    }
    if (lock_namespace(ns) < 0)
        return -1;
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    int old_limit = atomic_load(&shared->limit);
    int rc = 0;
    if (limit < old_limit)
        rc = lower_limit(ns, index, old_limit - limit);
    else if (limit > old_limit)
        rc = raise_limit(ns, index, limit - old_limit);
    if (rc == 0)
        atomic_store(&shared->limit, limit);
    int saved = errno;
    unlock_namespace(ns);
    errno = saved;
    return rc;
}

void bh_compartment_reset_counters(struct bh_namespace *ns, int index, int in_use)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    atomic_store(&shared->acquired, 0);
    atomic_store(&shared->rejected, 0);
    atomic_store(&shared->timed_out, 0);
    atomic_store(&shared->waits, 0);
    atomic_store(&shared->wait_ns_total, 0);
    atomic_store(&shared->wait_ns_max, 0);
    atomic_store(&shared->peak_in_use, in_use);
    atomic_store(&shared->connect_failures, 0);
    atomic_store(&shared->connect_timeouts, 0);
    atomic_store(&shared->io_timeouts, 0);
    memset((void *)&shared->connect_time, 0, sizeof shared->connect_time);
    memset((void *)&shared->hold_time, 0, sizeof shared->hold_time);
}

int bh_namespace_remove(struct bh_namespace *ns)
{
    int rc = semctl(ns->semid, 0, IPC_RMID);
    if (shmctl(ns->shmid, IPC_RMID, NULL) < 0)
        rc = -1;
    bh_namespace_close(ns);
    return rc;
}

/* Takes every free permit out (with SEM_UNDO, so a reset killed here gives
 * them back), in one semop over all compartments. Fills taken[]. */
static int drain_free(struct bh_namespace *ns, int count, short taken[])
{
    unsigned short values[BH_SEM_COUNT];
    struct sembuf ops[BH_MAX_COMPARTMENTS];
    for (int attempt = 0; attempt < 100; attempt++) {
        if (semctl(ns->semid, 0, GETALL, values) < 0)
            return -1;
        int n = 0;
        for (int i = 0; i < count; i++) {
            taken[i] = (short)values[BH_SEM_FREE(i)];
            if (taken[i] > 0)
                ops[n++] = (struct sembuf){ BH_SEM_FREE(i), (short)-taken[i],
                                            IPC_NOWAIT | SEM_UNDO };
        }
        if (n == 0 || semop(ns->semid, ops, n) == 0)
            return 0;
        if (errno != EAGAIN)
            return -1;
    }
    errno = EBUSY;
    return -1;
}

static void undrain(struct bh_namespace *ns, int count, const short taken[])
{
    for (int i = 0; i < count; i++)
        if (taken[i] > 0)
            sem_op(ns->semid, BH_SEM_FREE(i), taken[i], SEM_UNDO);
}

int bh_namespace_remove_unused(struct bh_namespace *ns)
{
    if (lock_namespace(ns) < 0)
        return -1;
    int count = (int)atomic_load(&ns->state->compartment_count);
    short taken[BH_MAX_COMPARTMENTS];
    if (drain_free(ns, count, taken) < 0) {
        int saved = errno;
        unlock_namespace(ns);
        errno = saved;
        return -1;
    }
    /* Nobody can take a permit now: whoever holds or waits is visible. */
    int in_use = 0;
    for (int i = 0; i < count && !in_use; i++) {
        int left = in_use_now(ns, i);
        in_use = left != taken[i] ||  /* limit + debt - free, with ours out */
                 semctl(ns->semid, BH_SEM_FREE(i), GETNCNT) > 0;
    }
    if (in_use) {
        undrain(ns, count, taken);
        unlock_namespace(ns);
        return 1;
    }
    return bh_namespace_remove(ns);  /* the lock goes with the set */
}
