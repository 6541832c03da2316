/* The namespaces this process counts in (joined.h).
 *
 * A root daemon that serves each request as its user (seteuid(user),
 * connect, seteuid(0), close: FTP, SMB, cron) takes the user's permit in
 * the user's namespace and closes as root, who can still reach it; a
 * worker that drops root keeps connections counted in root's. So each
 * namespace the process joins stays: its mapping, its index tables and
 * this process's counts of it (permits: ns->mine). A connection's place
 * (joined.h) names the namespace it took its permits in, and every path
 * that acts on a connection (its end, outcomes, copies at fork) acts in
 * that namespace; a process that comes back to a uid finds its namespace
 * and counts again.
 *
 * Shared state: process-local. An object is filled in by the thread that
 * makes it (start-up, or the thread changing the uid), published with a
 * release store in bh_joined_all and then in bh_joined_now_ptr, and then
 * never moved or freed, and written only in its owed counts (atomics):
 * any thread, a signal handler's close included, may use one it loaded,
 * at any time, with no lock, whatever uid change runs meanwhile. A
 * connect that loaded the one a change then leaves takes and attaches
 * there, consistently. Two threads changing the uid at once may each make
 * an object for one uid; both stay valid.
 *
 * A close that its namespace refuses (the process runs as a uid that
 * cannot reach it: a root daemon's worker thread inside seteuid(user)
 * closing one of root's connections) leaves the permits the process's
 * own, owed there (bh_joined_owe); the next uid call gives back what the
 * euid then reaches (bh_joined_settle), so a daemon that goes back to
 * root gives them back then rather than at its exit.
 *
 * Cost: every namespace joined stays attached until the process exits,
 * up to BH_JOINED_MAX of them (about 25 KB of memory each, plus its
 * counts, touched as used); a process past that counts its next uid's
 * connects as on_failure says (shim.c). A process that dies: all of it is
 * process-local, and the kernel's SEM_UNDO gives its permits back. */
#include "core/joined.h"

#include <stddef.h>
#include <sys/mman.h>

struct bh_joined *_Atomic bh_joined_now_ptr;
struct bh_joined *_Atomic bh_joined_all[BH_JOINED_MAX];

static _Atomic int next_id;
static struct bh_joined first;
static _Atomic int anything_owed;

struct bh_joined *bh_joined_new(void)
{
    int id = atomic_fetch_add(&next_id, 1);
    if (id == 0)
        return &first;
    if (id >= BH_JOINED_MAX)
        return NULL;
    struct bh_joined *joined = mmap(NULL, sizeof *joined, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (joined == MAP_FAILED)
        return NULL;
    joined->id = id;
    return joined;
}

void bh_joined_add(struct bh_joined *joined)
{
    atomic_store_explicit(&bh_joined_all[joined->id], joined, memory_order_release);
}

struct bh_joined *bh_joined_find(uid_t uid)
{
    for (int id = 0; id < BH_JOINED_MAX && id < atomic_load(&next_id); id++) {
        struct bh_joined *joined = atomic_load(&bh_joined_all[id]);
        if (joined && joined->ns.state && joined->ns.uid == uid)
            return joined;
    }
    return NULL;
}

void bh_joined_switch(struct bh_joined *joined)
{
    atomic_store_explicit(&bh_joined_now_ptr, joined, memory_order_release);
}

void bh_joined_each(void (*each)(struct bh_namespace *ns))
{
    for (int id = 0; id < BH_JOINED_MAX && id < atomic_load(&next_id); id++) {
        struct bh_joined *joined = atomic_load(&bh_joined_all[id]);
        if (joined && joined->ns.state)
            each(&joined->ns);
    }
}

void bh_joined_owe(struct bh_namespace *ns, int index, int weight)
{
    struct bh_joined *joined = (struct bh_joined *)((char *)ns - offsetof(struct bh_joined, ns));
    atomic_fetch_add(&joined->owed[index], (uint32_t)weight);
    atomic_store(&joined->owes, 1);
    atomic_store(&anything_owed, 1);
}

static void settle(struct bh_joined *joined)
{
    if (!joined || !atomic_exchange(&joined->owes, 0))
        return;
    for (int index = 0; index < BH_MAX_COMPARTMENTS; index++) {
        uint32_t weight = atomic_exchange(&joined->owed[index], 0);
        if (weight)  /* refused again: owed again, through ns.refused */
            bh_permit_release(&joined->ns, index, (int)weight);
    }
}

void bh_joined_settle(void)
{
    if (!atomic_exchange(&anything_owed, 0))
        return;
    for (int id = 0; id < BH_JOINED_MAX && id < atomic_load(&next_id); id++)
        settle(atomic_load(&bh_joined_all[id]));
}

/* Written only where set: a fork copies no page it need not. */
static void forget_owed(struct bh_joined *joined)
{
    if (atomic_load(&joined->owes))
        atomic_store(&joined->owes, 0);
    int count = (int)bh_compartment_count(&joined->ns);
    for (int index = 0; index < count && index < BH_MAX_COMPARTMENTS; index++)
        if (atomic_load_explicit(&joined->owed[index], memory_order_relaxed))
            atomic_store(&joined->owed[index], 0);
}

void bh_joined_after_fork_child(void)
{
    if (atomic_load(&anything_owed))
        atomic_store(&anything_owed, 0);
    for (int id = 0; id < BH_JOINED_MAX && id < atomic_load(&next_id); id++) {
        struct bh_joined *joined = atomic_load(&bh_joined_all[id]);
        if (joined && joined->ns.state) {
            forget_owed(joined);
            bh_permits_forget_after_fork(&joined->ns);
        }
    }
}
