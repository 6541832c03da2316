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
 *     compartment i owns BH_SEM_FREE(i) (its common pool's permits free
 *     now), BH_SEM_DEBT(i) (permits to retire as they are given back,
 *     after `bulkhead set` lowered the limit while they were in use); the
 *     breaker's probe slot is a word of shared memory (breaker.c says
 *     why not a semaphore); each reserve owns three
 *     more from a namespace-wide pool of slots (pools.c says what they
 *     mean).
 *   - a shared memory segment: the compartment table and counters
 *     (struct bh_shared_state), the first holder records (holders.c) and
 *     the records of sockets several processes hold (socket_records.c).
 *     Counters are atomics, written without locks.
 *
 * This file is the namespace: it makes, attaches, registers, reads (the
 * views `stat` shows, the counters `reset` zeroes, the fleet figures the
 * agent sets) and removes. take.c decides an admission's take and its
 * give-back. Below both, never calling back up: pools.c moves permits
 * between the semaphores (and changes limits and reserves for `set`),
 * holders.c keeps what each process holds, socket_records.c parks the
 * permits of shared sockets, window.c counts the last minute,
 * primitives.c has the semop, the clock and the lock. The layout is
 * layout.h.
 *
 * Who writes what: any process of the user that runs the shim or the
 * command. The lock serialises making the table, adding a compartment
 * and changing a limit or a reserve; a take and a give-back never take
 * it. The counters here are atomics; what is safe from a signal handler
 * is the counting (bh_count_*: atomics), not opening or removing.
 *
 * A process that dies mid-operation: inside the lock, the kernel gives the
 * lock back, and what it half did is redone by the next one (the table is
 * (re)written when it is not this set's; a compartment's semaphores are
 * set with SETVAL before compartment_count names it). Holding permits, the
 * kernel gives them back (SEM_UNDO). Between its holders hint and its
 * semop, the hint is off by one until its record is reaped; PEAK never
 * trusts the hint alone.
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
#include "permits/permits_internal.h"

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
#include "libc/clock.h"

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
    return bh_owned_by(&info.sem_perm, ns->uid) ? 0 : foreign(ns, &info.sem_perm, "semaphores");
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
    if (!bh_owned_by(&info.shm_perm, ns->uid) || info.shm_segsz != sizeof *ns->state)
        return foreign(ns, &info.shm_perm, "shared memory");
    void *address = shmat(ns->shmid, NULL, 0);
    if (address == (void *)-1)
        return -1;
    ns->state = address;
    ns->breakers = ns->state->breakers;
    ns->adaptives = ns->state->adaptives;
    ns->windows = ns->state->windows;
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
    /* A fresh segment is zero already, and clearing it would make every
     * page of it resident; only a table left by a creator that died half
     * way (magic unset, semid of another set) needs clearing. */
    if (state->magic != 0 || state->semid != 0 || state->compartment_count != 0)
        memset(state, 0, sizeof *state);
    state->layout_version = BH_LAYOUT_VERSION;
    state->owner_uid = ns->uid;
    state->semid = ns->semid;
    snprintf(state->namespace_name, BH_NAME_MAX, "%s", name);
    __atomic_store_n(&state->magic, BH_STATE_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

/* What an operator can do about a kernel limit reached: the tunable and
 * the command that shows what is using it up. */
static const char *remedy(const char *what, int error)
{
    int semaphores = strcmp(what, "semaphores") == 0;
    if (error == ENOSPC)
        return semaphores
            ? " (the machine's semaphore sets or semaphores are used up: kernel.sem "
              "SEMMNI/SEMMNS; ipcs -u counts them, ipcs -s -c names their owners)"
            : " (the machine's shared memory segments are used up: kernel.shmmni; "
              "ipcs -u counts them, ipcs -m -c names their owners)";
    if (error == ENOMEM && !semaphores)
        return " (kernel.shmall reached, or out of memory)";
    return "";
}

static int fail(char *err, size_t errlen, const char *what, const char *name)
{
    int saved = errno;
    snprintf(err, errlen, "namespace \"%s\": %s: %s%s", name, what, strerror(saved),
             remedy(what, saved));
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
    static struct bh_holdings first_counts;  /* this process's first (holders.c) */
    memset(ns, 0, sizeof *ns);
    ns->mine = &first_counts;
    ns->semid = ns->shmid = -1;
    ns->uid = uid;
    ns->key = bh_namespace_key(uid, name);
    if (open_semaphores(ns, create) < 0)
        return errno == EPERM || errno == EEXIST ? fail_foreign(ns, err, errlen, name)
                                                 : fail(err, errlen, "semaphores", name);
    if (bh_lock_namespace(ns) < 0)
        return fail(err, errlen, "waiting for the namespace lock", name);
    int rc = attach_memory(ns, create);
    if (rc == 0 && initialise_if_needed(ns, name) < 0) {
        if (errno == EEXIST) {
            bh_unlock_namespace(ns);
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
    bh_unlock_namespace(ns);
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
    for (int number = 0; number < BH_MAX_HOLDER_PAGES; number++) {
        struct bh_holder_page *page = atomic_exchange(&ns->pages[number], NULL);
        if (page)
            shmdt(page);
    }
    if (ns->state)
        shmdt(ns->state);
    ns->state = NULL;
    ns->breakers = NULL;
    ns->adaptives = NULL;
    ns->windows = NULL;
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

/* The compartment's reserves, carved out of `limit` in file order, as
 * far as it and the namespace's reserve slots go. Under the lock; SETVAL
 * is safe for the same reason as in add_compartment. */
static int add_reserves(struct bh_namespace *ns, struct bh_shared_compartment *shared,
                        const struct bh_compartment *rules, int limit)
{
    int reserved = 0, count = 0;
    for (int r = 0; r < rules->reserve_count; r++) {
        int permits = rules->reserves[r].permits;
        uint32_t slot = atomic_load(&ns->state->reserve_slots_used);
        if (reserved + permits > limit || slot >= BH_MAX_RESERVE_SLOTS)
            break;
        struct bh_reserve_shared *reserve = &shared->reserves[count];
        memcpy(reserve->who, rules->reserves[r].who.text, BH_WHO_MAX);
        if (semctl(ns->semid, BH_SEM_RFREE(slot), SETVAL, permits) < 0 ||
            semctl(ns->semid, BH_SEM_RDEBT(slot), SETVAL, 0) < 0 ||
            semctl(ns->semid, BH_SEM_ROWED(slot), SETVAL, 0) < 0 ||
            semctl(ns->semid, BH_SEM_RWAIT(slot), SETVAL, 0) < 0)
            return -1;
        atomic_store(&reserve->permits, permits);
        atomic_store(&reserve->slot, (int32_t)slot);
        atomic_store(&ns->state->reserve_slots_used, slot + 1);
        reserved += permits;
        count++;
    }
    atomic_store(&shared->reserve_count, count);
    atomic_store(&shared->reserved, reserved);
    return reserved;
}

/* The controller's settings, and where it starts: the rules' limit (a
 * fleet compartment's live limit starts at 0, its controller does not). */
static void init_adaptive(struct bh_adaptive_shared *adaptive,
                          const struct bh_compartment *rules, int limit)
{
    atomic_store(&adaptive->mode, (int32_t)rules->adaptive);
    atomic_store(&adaptive->min_limit, rules->min_limit);
    atomic_store(&adaptive->max_limit, rules->max_limit);
    atomic_store(&adaptive->latency_ms, rules->adaptive_latency_ms);
    atomic_store(&adaptive->estimate_milli, (int64_t)rules->limit * 1000);
    atomic_store(&adaptive->applied, limit);
}

static int add_compartment(struct bh_namespace *ns, const struct bh_compartment *rules,
                           int limit)
{
    uint32_t index = atomic_load(&ns->state->compartment_count);
    if (index >= BH_MAX_COMPARTMENTS || limit > BH_SEM_VALUE_MAX) {
        errno = index >= BH_MAX_COMPARTMENTS ? ENOSPC : ERANGE;
        return -1;
    }
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    memset(shared, 0, sizeof *shared);
    memset(&ns->state->breakers[index], 0, sizeof ns->state->breakers[index]);
    memset(&ns->state->adaptives[index], 0, sizeof ns->state->adaptives[index]);
    snprintf(shared->name, BH_NAME_MAX, "%s", rules->name);
    atomic_store(&shared->limit, limit);
    init_adaptive(&ns->state->adaptives[index], rules, limit);
    /* SETVAL clears every process's undo entry for that semaphore, so it
     * is safe only here: nobody can have taken from a compartment before
     * compartment_count names it. It is idempotent, so a registrant killed
     * half way leaves nothing the next one cannot redo. */
    int reserved = add_reserves(ns, shared, rules, limit);
    int headroom = rules->mode == BH_MODE_SHADOW ? bh_shadow_headroom(limit) : 0;
    atomic_store(&shared->headroom, headroom);
    if (reserved < 0 ||
        semctl(ns->semid, BH_SEM_FREE(index), SETVAL, limit - reserved + headroom) < 0 ||
        semctl(ns->semid, BH_SEM_DEBT(index), SETVAL, 0) < 0)
        return -1;
    atomic_store(&shared->registered, 1);
    atomic_store(&ns->state->compartment_count, index + 1);
    return (int)index;
}

/* Under the lock: the compartment's index, found (where `hint` says
 * first: processes of one rules file register in its order) or added;
 * -1 with errno. */
static int find_or_add(struct bh_namespace *ns, const struct bh_compartment *compartment,
                       int limit, int hint, int *live_limit)
{
    uint32_t count = atomic_load(&ns->state->compartment_count);
    int index = hint >= 0 && (uint32_t)hint < count &&
                strcmp(ns->state->compartments[hint].name, compartment->name) == 0
                    ? hint : bh_compartment_find(ns, compartment->name);
    if (index < 0)
        index = add_compartment(ns, compartment, limit);
    if (index >= 0)
        *live_limit = atomic_load(&ns->state->compartments[index].limit);
    return index;
}

int bh_compartment_register(struct bh_namespace *ns,
                            const struct bh_compartment *compartment,
                            int limit, int *live_limit)
{
    if (bh_lock_namespace(ns) < 0)
        return -1;
    int index = find_or_add(ns, compartment, limit, -1, live_limit);
    int saved = errno;
    bh_unlock_namespace(ns);
    errno = saved;
    return index;
}

int bh_compartments_register(struct bh_namespace *ns,
                             const struct bh_compartment *compartments,
                             const int *limits, int count, int *indexes,
                             int *live_limits)
{
    if (bh_lock_namespace(ns) < 0)
        return -1;
    for (int i = 0; i < count; i++) {
        live_limits[i] = limits[i];
        indexes[i] = find_or_add(ns, &compartments[i], limits[i], i, &live_limits[i]);
        if (indexes[i] < 0)
            indexes[i] = -errno;
    }
    bh_unlock_namespace(ns);
    return 0;
}

int bh_reserve_find(const struct bh_namespace *ns, int index, const char *who)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    for (int r = 0; r < atomic_load(&shared->reserve_count); r++)
        if (strncmp(shared->reserves[r].who, who, BH_WHO_MAX) == 0)
            return r;
    return -1;
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

uint32_t bh_compartment_count(const struct bh_namespace *ns)
{
    uint32_t count = atomic_load(&ns->state->compartment_count);
    return count < BH_MAX_COMPARTMENTS ? count : BH_MAX_COMPARTMENTS;
}

const char *bh_compartment_name(const struct bh_namespace *ns, int index)
{
    return ns->state->compartments[index].name;
}

int bh_compartment_limit(const struct bh_namespace *ns, int index)
{
    return atomic_load(&ns->state->compartments[index].limit);
}

int bh_compartment_shadow(const struct bh_namespace *ns, int index)
{
    return atomic_load(&ns->state->compartments[index].headroom) > 0;
}

uint64_t bh_compartment_full_count(const struct bh_namespace *ns, int index)
{
    const struct bh_shared_compartment *shared = &ns->state->compartments[index];
    return atomic_load_explicit(&shared->rejected, memory_order_relaxed) +
           atomic_load_explicit(&shared->timed_out, memory_order_relaxed) +
           atomic_load_explicit(&shared->waits, memory_order_relaxed);
}

int64_t bh_compartment_holders_hint(const struct bh_namespace *ns, int index)
{
    return atomic_load_explicit(&ns->state->compartments[index].holders_hint,
                                memory_order_relaxed);
}

void bh_fleet_read(const struct bh_namespace *ns, int index, struct bh_fleet_view *fleet)
{
    const struct bh_fleet_shared *shared = &ns->state->compartments[index].fleet;
    *fleet = (struct bh_fleet_view){
        .limit = atomic_load(&shared->limit),
        .grant = atomic_load(&shared->grant),
        .in_use = atomic_load(&shared->in_use),
        .hosts = atomic_load(&shared->hosts),
        .state = (enum bh_fleet_state)atomic_load(&shared->state),
        .updated_ns = atomic_load(&shared->updated_ns),
        .lease_until_ns = atomic_load(&shared->lease_until_ns),
    };
}

void bh_count_connect_time(struct bh_namespace *ns, int index, int64_t elapsed_ns)
{
    bh_histogram_record(&ns->state->compartments[index].connect_time, elapsed_ns);
}

void bh_count_connect_failure(struct bh_namespace *ns, int index, int timed_out)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    atomic_fetch_add_explicit(&shared->connect_failures, 1, memory_order_relaxed);
    if (timed_out)
        atomic_fetch_add_explicit(&shared->connect_timeouts, 1, memory_order_relaxed);
}

void bh_count_io_timeout(struct bh_namespace *ns, int index)
{
    atomic_fetch_add_explicit(&ns->state->compartments[index].io_timeouts, 1,
                              memory_order_relaxed);
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

/* The agent renews the lease while it runs; 0 is one a connect lapsed. */
static int fleet_lease_over(int64_t until_ns)
{
    return until_ns == 0 || bh_clock_ns(CLOCK_MONOTONIC) > until_ns;
}

int bh_compartment_read(struct bh_namespace *ns, int index,
                        struct bh_compartment_view *view)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    int in_use = bh_in_use_now(ns, index);
    int waiting = bh_waiters(ns, index);
    int common_free, common_owes;
    if (in_use < 0 || waiting < 0 || bh_common_read(ns, index, &common_free, &common_owes) < 0)
        return -1;
    memset(view, 0, sizeof *view);
    int headroom = atomic_load(&shared->headroom);
    view->common_free = common_free > headroom ? common_free - headroom : 0;
    view->shadow = headroom > 0;
    view->common_owes = common_owes;
    snprintf(view->name, BH_NAME_MAX, "%s", shared->name);
    view->limit = atomic_load(&shared->limit);
    view->in_use = in_use;
    view->reserve_count = atomic_load(&shared->reserve_count);
    view->reserved = atomic_load(&shared->reserved);
    view->waiting = waiting;
    view->per_process_refused = atomic_load(&shared->per_process_refused);
    view->bypassed = atomic_load(&shared->bypassed);
    view->shadow_refused = atomic_load(&shared->shadow_refused);
    view->shadow_waited = atomic_load(&shared->shadow_waited);
    view->shared = bh_socket_count(ns, index, &view->shared_permits);
    view->peak = atomic_load(&shared->peak_in_use);
    view->acquired = atomic_load(&shared->acquired);
    view->rejected = atomic_load(&shared->rejected);
    view->timed_out = atomic_load(&shared->timed_out);
    view->waits = atomic_load(&shared->waits);
    view->wait_ns_max = atomic_load(&shared->wait_ns_max);
    view->connect_failures = atomic_load(&shared->connect_failures);
    view->connect_timeouts = atomic_load(&shared->connect_timeouts);
    view->io_timeouts = atomic_load(&shared->io_timeouts);
    bh_fleet_read(ns, index, &view->fleet);
    if (view->fleet.limit > 0 && fleet_lease_over(view->fleet.lease_until_ns))
        view->fleet.state = BH_FLEET_LAPSED;
    read_histogram(&shared->connect_time, &view->connect_time);
    read_histogram(&shared->hold_time, &view->hold_time);
    read_histogram(&shared->wait_time, &view->wait_time);
    return 0;
}

void bh_compartment_reset_counters(struct bh_namespace *ns, int index, int in_use)
{
    struct bh_shared_compartment *shared = &ns->state->compartments[index];
    atomic_store(&shared->acquired, 0);
    atomic_store(&shared->rejected, 0);
    atomic_store(&shared->timed_out, 0);
    atomic_store(&shared->waits, 0);
    atomic_store(&shared->wait_ns_max, 0);
    atomic_store(&shared->peak_in_use, in_use);
    atomic_store(&shared->connect_failures, 0);
    atomic_store(&shared->connect_timeouts, 0);
    atomic_store(&shared->io_timeouts, 0);
    atomic_store(&shared->per_process_refused, 0);
    atomic_store(&shared->bypassed, 0);
    atomic_store(&shared->shadow_refused, 0);
    atomic_store(&shared->shadow_waited, 0);
    memset((void *)&shared->connect_time, 0, sizeof shared->connect_time);
    memset((void *)&shared->hold_time, 0, sizeof shared->hold_time);
    memset((void *)&shared->wait_time, 0, sizeof shared->wait_time);
    bh_window_clear(bh_window_of(ns, index));
}

int bh_namespace_remove(struct bh_namespace *ns)
{
    int rc = semctl(ns->semid, 0, IPC_RMID);
    if (shmctl(ns->shmid, IPC_RMID, NULL) < 0)
        rc = -1;
    bh_namespace_close(ns);
    return rc;
}

/* The semaphores that hold free permits: each compartment's common pool
 * and each reserve. Returns how many were written to nums. */
static int pool_semaphores(struct bh_namespace *ns, unsigned short nums[BH_SEM_COUNT])
{
    int n = 0;
    uint32_t count = atomic_load(&ns->state->compartment_count);
    uint32_t slots = atomic_load(&ns->state->reserve_slots_used);
    for (uint32_t i = 0; i < count && i < BH_MAX_COMPARTMENTS; i++)
        nums[n++] = BH_SEM_FREE(i);
    for (uint32_t s = 0; s < slots && s < BH_MAX_RESERVE_SLOTS; s++)
        nums[n++] = BH_SEM_RFREE(s);
    return n;
}

/* Takes every free permit out (with SEM_UNDO, so a reset killed here gives
 * them back), in semops of at most SEMOPM (500) operations: under the
 * lock, a permit taken meanwhile from a pool not drained yet only shows
 * up as in use. Fills taken[] by semaphore number. */
static int drain_free(struct bh_namespace *ns, short taken[BH_SEM_COUNT])
{
    enum { BATCH = 250 };
    static unsigned short values[BH_SEM_COUNT], nums[BH_SEM_COUNT];
    int count = pool_semaphores(ns, nums);
    for (int first = 0; first < count; first += BATCH) {
        int attempt = 0;
        for (;; attempt++) {
            if (attempt == 100) {
                errno = EBUSY;
                return -1;
            }
            if (semctl(ns->semid, 0, GETALL, values) < 0)
                return -1;
            struct sembuf ops[BATCH];
            int n = 0;
            for (int i = first; i < count && i < first + BATCH; i++)
                if (values[nums[i]] > 0)
                    ops[n++] = (struct sembuf){ nums[i], (short)-values[nums[i]],
                                                IPC_NOWAIT | SEM_UNDO };
            if (n == 0 || semop(ns->semid, ops, n) == 0) {
                for (int k = 0; k < n; k++)  /* only what really was taken */
                    taken[ops[k].sem_num] = (short)-ops[k].sem_op;
                break;
            }
            if (errno != EAGAIN)
                return -1;
        }
    }
    return 0;
}

static void undrain(struct bh_namespace *ns, const short taken[BH_SEM_COUNT])
{
    for (int num = 0; num < BH_SEM_COUNT; num++)
        if (taken[num] > 0)
            bh_sem_op(ns->semid, (unsigned short)num, taken[num], SEM_UNDO);
}

/* With every free permit drained by us: does anyone else hold or wait? */
static int anyone_in(struct bh_namespace *ns, const short taken[BH_SEM_COUNT])
{
    uint32_t count = atomic_load(&ns->state->compartment_count);
    for (uint32_t i = 0; i < count && i < BH_MAX_COMPARTMENTS; i++) {
        struct bh_shared_compartment *shared = &ns->state->compartments[i];
        int ours = taken[BH_SEM_FREE(i)];
        for (int r = 0; r < atomic_load(&shared->reserve_count); r++)
            ours += taken[BH_SEM_RFREE(atomic_load(&shared->reserves[r].slot))];
        if (bh_in_use_now(ns, (int)i) != ours || bh_waiters(ns, (int)i) != 0)
            return 1;
    }
    return 0;
}

int bh_namespace_remove_unused(struct bh_namespace *ns)
{
    static short taken[BH_SEM_COUNT];
    if (bh_lock_namespace(ns) < 0)
        return -1;
    memset(taken, 0, sizeof taken);
    if (drain_free(ns, taken) < 0) {
        int saved = errno;
        undrain(ns, taken);
        bh_unlock_namespace(ns);
        errno = saved;
        return -1;
    }
    /* Nobody can take a permit now: whoever holds or waits is visible. */
    if (anyone_in(ns, taken)) {
        undrain(ns, taken);
        bh_unlock_namespace(ns);
        return 1;
    }
    return bh_namespace_remove(ns);  /* the lock goes with the set */
}
