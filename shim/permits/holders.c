/* What each process holds, per compartment and pool.
 *
 * Two copies, each with one writer:
 *   - this process's own counts of the namespace (ns->mine, process-local
 *     atomics; the common paths on them are inline, in holders.h): what
 *     bh_permit_release gives back and to which pool, and what the
 *     per_process cap is checked against. Threads of the process update
 *     them with atomics; a signal handler's close may too.
 *   - a holder record in the namespace per (process, compartment), so that
 *     `stat` can name holders and a new program image (exec keeps SEM_UNDO
 *     records, and so the permits) learns what the old one held. Written
 *     by its process; freed by it at exit when empty, or by whoever finds
 *     the process dead (CAS of pid to -1, so one reaper wins).
 * A process that counts in several namespaces (it changed its uid) has
 * counts of its own for each: bh_namespace_open points ns->mine at the
 * process's first counts, and bh_permits_own_counts gives a namespace
 * joined later counts of their own, which live as long as the process.
 *
 * Permits taken for another process (`bulkhead run`'s seccomp supervisor
 * takes them for every program of its tree, each with its own per_process
 * count and reserve) are this process's in the kernel's eyes: its undo
 * record holds them. So its holder record counts them: `stat` names the
 * supervisor as their holder, and a reaper that finds it killed takes
 * them out of the holders hint as the kernel gives them back. Its own
 * counts never do: they are one process's single share per compartment,
 * with one reserve, given back common pool first, which is the right
 * guess for a process's own connections only. Mixed into them, a
 * program's reserved permit could go back to the common pool while
 * another's common one went to the reserve. Instead its caller keeps, per
 * socket, which pools each take came from (bh_take_taken) and gives back
 * exactly those (bh_permit_give), so that every semop's SEM_UNDO
 * adjustment matches what this process still holds of that very pool.
 * Such a record's `reserved` may add up several reserves' permits; its
 * `slot` names none (-1): only a new program image of its own process
 * would read it, and a supervisor does not exec.
 *
 * Records live in the main segment first (BH_HOLDERS_FIRST of them), then
 * in pages: private segments made under the namespace lock when those run
 * out, named in page_shmids, and marked for removal at once. A page thus
 * lives exactly as long as some process has it attached: a holder keeps
 * the pages of its records attached until it exits, so a page that died
 * held only dead processes' records and its slot can take a new page. Nothing
 * here caps the number of holders but the kernel's own shm limits.
 *
 * This file calls nothing of shim/permits but primitives.c: the take
 * (take.c) tells it what was taken and given back.
 *
 * A process that dies mid-operation: its permits come back through
 * SEM_UNDO whatever its record says; the record is freed by the next
 * reaper (pid gone, or reused: the start time differs). A record half
 * claimed (pid -1 forever) is lost, one record out of thousands. */
#include "permits/permits_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "libc/libc.h"
#include "libc/proc_stat.h"


int bh_permits_own_counts(struct bh_namespace *ns)
{
    void *counts = mmap(NULL, sizeof(struct bh_holdings), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (counts == MAP_FAILED)
        return -1;
    ns->mine = counts;
    return 0;
}

int bh_permit_claim(struct bh_namespace *ns, const struct bh_permit_ask *ask, int per_process)
{
    return bh_holding_claim(ns->mine, ask->index, (uint32_t)ask->weight, per_process);
}

void bh_permit_unclaim(struct bh_namespace *ns, const struct bh_permit_ask *ask)
{
    atomic_fetch_sub(&ns->mine->at[ask->index].claimed, (uint32_t)ask->weight);
}

int bh_permit_held(struct bh_namespace *ns, int index)
{
    struct bh_holding *holding = &ns->mine->at[index];
    return (int)(atomic_load(&holding->common) + atomic_load(&holding->reserved));
}

void bh_permit_note_waiting(struct bh_namespace *ns, int index, int delta)
{
    struct bh_holder *record = atomic_load(&ns->mine->at[index].record);
    if (record)
        atomic_fetch_add(&record->waiting, (uint32_t)delta);
}

int bh_holding_reserve(struct bh_namespace *ns, int index)
{
    struct bh_holding *holding = &ns->mine->at[index];
    return atomic_load(&holding->reserved) ? atomic_load(&holding->reserve) : -1;
}

/* /proc/<pid>/stat field 22: tells a live pid from a reused one. */
static uint64_t process_start_time(pid_t pid)
{
    return bh_proc_stat_field(pid, 22);
}

/* A start time of 0 is unknown (the holder could not open /proc, at its
 * fd limit): then only the pid's absence says it is gone. A zombie is
 * gone too: the kernel undid its semaphores before it became one, and
 * its parent may take its time to wait for it (stat right after a daemon
 * exited listed it as a holder). A leader that ended with pthread_exit()
 * shows as a zombie too while its threads run: those count (field 20). */
static int holder_is_dead(const struct bh_holder *holder, pid_t pid)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 1;
    char state = bh_proc_stat_state(pid);
    if ((state == 'Z' || state == 'X') && bh_proc_stat_field(pid, 20) <= 1)
        return 1;
    uint64_t start = process_start_time(pid);
    return holder->start_time != 0 && start != 0 && start != holder->start_time;
}

/* ---- pages ---- */

static int page_is_ours(struct bh_namespace *ns, int shmid, const struct bh_holder_page *page)
{
    struct shmid_ds info;
    return shmctl(shmid, IPC_STAT, &info) == 0 && bh_owned_by(&info.shm_perm, ns->uid) &&
           info.shm_segsz == sizeof *page && page->magic == BH_PAGE_MAGIC &&
           page->semid == ns->semid;
}

/* Page `number` attached here, or NULL (none, or it died with its last
 * user). A mapping of a page since replaced is dropped first. */
static struct bh_holder_page *page_at(struct bh_namespace *ns, int number)
{
    int shmid = atomic_load(&ns->state->page_shmids[number]) - 1;
    struct bh_holder_page *page = atomic_load(&ns->pages[number]);
    if (shmid < 0)
        return NULL;
    if (page && page->shmid == shmid)
        return page;
    struct bh_holder_page *attached = shmat(shmid, NULL, 0);
    if (attached == (void *)-1)
        return NULL;
    if (!page_is_ours(ns, shmid, attached) || attached->shmid != shmid) {
        shmdt(attached);
        return NULL;
    }
    if (!atomic_compare_exchange_strong(&ns->pages[number], &page, attached)) {
        shmdt(attached);  /* another thread attached it first */
        return page;
    }
    if (page)
        shmdt(page);      /* the old page's mapping: it held only dead records */
    return attached;
}

/* Under the lock: a new page in the first free (or dead) slot. */
static int add_page(struct bh_namespace *ns)
{
    for (int number = 0; number < BH_MAX_HOLDER_PAGES; number++) {
        if (page_at(ns, number))
            continue;
        int shmid = shmget(IPC_PRIVATE, sizeof(struct bh_holder_page), IPC_CREAT | 0600);
        if (shmid < 0)
            return -1;
        struct bh_holder_page *page = shmat(shmid, NULL, 0);
        shmctl(shmid, IPC_RMID, NULL);  /* lives while attached, no longer */
        if (page == (void *)-1)
            return -1;
        page->magic = BH_PAGE_MAGIC;
        page->semid = ns->semid;
        page->shmid = shmid;
        struct bh_holder_page *old = atomic_exchange(&ns->pages[number], page);
        if (old)
            shmdt(old);
        atomic_store(&ns->state->page_shmids[number], shmid + 1);
        return 0;
    }
    errno = ENOSPC;
    return -1;
}

/* The records of the main segment (number -1) or of a page. */
static struct bh_holder *records(struct bh_namespace *ns, int number, int *count)
{
    if (number < 0) {
        *count = BH_HOLDERS_FIRST;
        return ns->state->holders;
    }
    struct bh_holder_page *page = page_at(ns, number);
    *count = page ? BH_HOLDERS_PER_PAGE : 0;
    return page ? page->holders : NULL;
}

/* ---- records ---- */

/* Ours, read once per process (a forked child reads its own). */
static _Atomic uint64_t my_start_time;

static uint64_t start_time_of_self(pid_t pid)
{
    uint64_t start = atomic_load_explicit(&my_start_time, memory_order_relaxed);
    if (!start) {
        start = process_start_time(pid);
        atomic_store_explicit(&my_start_time, start, memory_order_relaxed);
    }
    return start;
}

static struct bh_holder *claim_in(struct bh_holder *holders, int count, pid_t pid,
                                  int index)
{
    int start = (int)(((unsigned)pid * 2654435761u) % (unsigned)count);
    for (int i = 0; i < count; i++) {
        struct bh_holder *holder = &holders[(start + i) % count];
        int32_t expected = 0;
        if (atomic_load_explicit(&holder->pid, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&holder->pid, &expected, -1)) {
            atomic_store(&holder->compartment, index);
            atomic_store(&holder->common, 0);
            atomic_store(&holder->reserved, 0);
            atomic_store(&holder->slot, -1);
            atomic_store(&holder->waiting, 0);
            holder->start_time = start_time_of_self(pid);
            atomic_store(&holder->pid, pid);
            return holder;
        }
    }
    return NULL;
}

static struct bh_holder *claim_anywhere(struct bh_namespace *ns, pid_t pid, int index)
{
    for (int number = -1; number < BH_MAX_HOLDER_PAGES; number++) {
        int count;
        struct bh_holder *holders = records(ns, number, &count);
        struct bh_holder *holder = holders ? claim_in(holders, count, pid, index) : NULL;
        if (holder)
            return holder;
    }
    return NULL;
}

/* A free record, after reaping the dead, after adding a page. */
static __attribute__((noinline, cold)) struct bh_holder *
claim_record(struct bh_namespace *ns, int index)
{
    pid_t pid = getpid();
    struct bh_holder *holder = claim_anywhere(ns, pid, index);
    if (holder)
        return holder;
    bh_holders_reap(ns);
    holder = claim_anywhere(ns, pid, index);
    if (holder || bh_lock_namespace(ns) < 0)
        return holder;
    holder = claim_anywhere(ns, pid, index);
    if (!holder && add_page(ns) == 0)
        holder = claim_anywhere(ns, pid, index);
    bh_unlock_namespace(ns);
    return holder;
}

/* This process's record for compartment index; two threads may look at
 * once: one record wins, the other is freed. */
static struct bh_holder *my_record(struct bh_namespace *ns, int index)
{
    _Atomic(struct bh_holder *) *mine = &ns->mine->at[index].record;
    struct bh_holder *record = atomic_load(mine);
    if (record)
        return record;
    int saved_errno = errno;  /* a grant keeps the caller's errno */
    struct bh_holder *found = claim_record(ns, index);
    errno = saved_errno;
    if (found && !atomic_compare_exchange_strong(mine, &record, found)) {
        atomic_store(&found->pid, 0);
        return record;
    }
    return found;  /* NULL: stat will not name us; permits still work */
}

void bh_holding_add_slowly(struct bh_namespace *ns, int index, struct bh_taken taken)
{
    struct bh_holding *holding = &ns->mine->at[index];
    struct bh_holder *record = my_record(ns, index);
    atomic_fetch_add(&holding->common, taken.common);
    if (record)
        atomic_fetch_add(&record->common, taken.common);
    if (!taken.reserved)
        return;
    atomic_store(&holding->reserve, taken.reserve);
    atomic_fetch_add(&holding->reserved, taken.reserved);
    if (record) {
        atomic_store(&record->slot, taken.reserve);
        atomic_fetch_add(&record->reserved, taken.reserved);
    }
}

void bh_holding_add_for_another(struct bh_namespace *ns, int index, struct bh_taken taken)
{
    bh_holding_note_used(ns->mine, index);  /* a forked child forgets the record */
    struct bh_holder *record = my_record(ns, index);
    if (!record)
        return;
    atomic_fetch_add(&record->common, taken.common);
    atomic_fetch_add(&record->reserved, taken.reserved);
}

void bh_holding_remove_for_another(struct bh_namespace *ns, int index, struct bh_taken taken)
{
    struct bh_holder *record = atomic_load_explicit(&ns->mine->at[index].record,
                                                    memory_order_relaxed);
    if (!record)
        return;
    bh_take_from(&record->common, taken.common);
    bh_take_from(&record->reserved, taken.reserved);
}

/* ---- reaping, reading, exit, fork and exec ---- */

static void reap_record(struct bh_namespace *ns, struct bh_holder *holder, int32_t pid)
{
    if (!atomic_compare_exchange_strong(&holder->pid, &pid, -1))
        return;  /* someone else reaps it */
    uint32_t permits = atomic_exchange(&holder->common, 0) +
                       atomic_exchange(&holder->reserved, 0);
    int index = atomic_load(&holder->compartment);
    if (permits && index >= 0 && index < BH_MAX_COMPARTMENTS)  /* out of the hint */
        atomic_fetch_sub(&ns->state->compartments[index].holders_hint, permits);
    atomic_store(&holder->pid, 0);
}

void bh_holders_reap(struct bh_namespace *ns)
{
    for (int number = -1; number < BH_MAX_HOLDER_PAGES; number++) {
        int count;
        struct bh_holder *holders = records(ns, number, &count);
        for (int i = 0; i < count; i++) {
            int32_t pid = atomic_load(&holders[i].pid);
            if (pid > 0 && holder_is_dead(&holders[i], pid))
                reap_record(ns, &holders[i], pid);
        }
    }
}

void bh_holders_visit(struct bh_namespace *ns,
                      void (*visit)(pid_t pid, int index, uint32_t permits,
                                    uint32_t waiting, void *ctx),
                      void *ctx)
{
    bh_holders_reap(ns);
    for (int number = -1; number < BH_MAX_HOLDER_PAGES; number++) {
        int count;
        struct bh_holder *holders = records(ns, number, &count);
        for (int i = 0; i < count; i++) {
            int32_t pid = atomic_load(&holders[i].pid);
            uint32_t permits = atomic_load(&holders[i].common) +
                               atomic_load(&holders[i].reserved);
            int index = atomic_load(&holders[i].compartment);
            if (pid > 0 && permits > 0 && index >= 0 && index < BH_MAX_COMPARTMENTS)
                visit(pid, index, permits, atomic_load(&holders[i].waiting), ctx);
        }
    }
}

void bh_permits_leave(struct bh_namespace *ns)
{
    uint32_t count = ns->state ? atomic_load(&ns->state->compartment_count) : 0;
    for (uint32_t i = 0; i < count && i < BH_MAX_COMPARTMENTS; i++) {
        struct bh_holder *record = atomic_exchange(&ns->mine->at[i].record, NULL);
        if (record && atomic_load(&record->common) + atomic_load(&record->reserved) == 0)
            atomic_store(&record->pid, 0);  /* still holding: stat must keep naming us */
    }
}

uint32_t bh_permits_held_total(struct bh_namespace *ns)
{
    uint32_t total = 0;
    for (int i = 0; i < atomic_load(&ns->mine->used); i++)
        total += atomic_load(&ns->mine->at[i].common) + atomic_load(&ns->mine->at[i].reserved);
    return total;
}

void bh_permits_forget_after_fork(struct bh_namespace *ns)
{
    /* The child holds nothing of its own; only the entries ever used are
     * cleared, so a fork touches few pages. */
    memset(ns->mine->at, 0, (size_t)atomic_load(&ns->mine->used) * sizeof ns->mine->at[0]);
    atomic_store(&my_start_time, 0);
}

int bh_permits_rejoin_after_exec(struct bh_namespace *ns,
                                 uint32_t held[BH_MAX_COMPARTMENTS])
{
    pid_t pid = getpid();
    int found = 0;
    memset(held, 0, BH_MAX_COMPARTMENTS * sizeof *held);
    for (int number = -1; number < BH_MAX_HOLDER_PAGES; number++) {
        int count;
        struct bh_holder *holders = records(ns, number, &count);
        for (int i = 0; i < count; i++) {
            int index = atomic_load(&holders[i].compartment);
            if (atomic_load(&holders[i].pid) != pid || index < 0 ||
                index >= BH_MAX_COMPARTMENTS || ns->mine->at[index].record)
                continue;
            struct bh_holding *holding = &ns->mine->at[index];
            bh_holding_note_used(ns->mine, index);
            atomic_store(&holding->record, &holders[i]);
            atomic_store(&holding->common, atomic_load(&holders[i].common));
            atomic_store(&holding->reserved, atomic_load(&holders[i].reserved));
            atomic_store(&holding->reserve, atomic_load(&holders[i].slot));
            atomic_store(&holders[i].waiting, 0);  /* exec ended every wait */
            held[index] = holding->common + holding->reserved;
            atomic_store(&holding->claimed, held[index]);
            found = 1;
        }
    }
    return found ? 0 : -1;
}
