/* Namespaces left behind at uid changes (left_namespaces.h).
 *
 * A root daemon that serves each request as its user (seteuid(user),
 * connect, seteuid(0), close: FTP, SMB, cron) takes the user's permit in
 * the user's namespace and closes as root, who can still reach that set.
 * So at each change the namespace left goes into a slot with this
 * process's counts of it (permits.h: bh_permits_swap_aside), and its
 * connections stay in the fd table under a compartment number that names
 * the slot: -2 - (slot * BH_MAX_COMPARTMENTS + index). Being negative,
 * every path that acts on a connection's compartment (outcomes, the
 * breaker, copies at fork, exec's hand-off) passes them by; only the end
 * of a connection looks, and gives the permits back in that slot's
 * namespace. A connection with a record of copies (copies.c) is
 * forgotten instead (FORGOTTEN): its record's reaper gives its permits
 * back once the socket is gone.
 *
 * Shared state: the slots, this process's only, written by the thread
 * changing the uid (a program changes its uid from one thread at a time;
 * two at once may mix up their slots, never the kernel's counts). A close
 * in any thread, a signal handler's included, reads a slot: no lock.
 * With more uids than slots the one left longest ago is forgotten: its
 * connections' permits go back when the process exits, its mapping is
 * dropped unless another slot or the current namespace shares it. */
#include "core/left_namespaces.h"

#include <sys/shm.h>

#include "core/outcome.h"
#include "core/state.h"

enum {
    TAG_BASE = BH_FD_NOTHING_ENDED - 1,
    FORGOTTEN = TAG_BASE - BH_PERMITS_ASIDE * BH_MAX_COMPARTMENTS,
};

struct left {
    int used;
    unsigned long left_at;  /* which change left it: the oldest goes first */
    struct bh_namespace ns;
};
static struct left slots[BH_PERMITS_ASIDE];
static unsigned long changes;

static int tag(int slot, int index)
{
    return TAG_BASE - (slot * BH_MAX_COMPARTMENTS + index);
}

/* The slot a tagged compartment names, -1: none. */
static int slot_of(int compartment)
{
    if (compartment > TAG_BASE || compartment <= FORGOTTEN)
        return -1;
    return (TAG_BASE - compartment) / BH_MAX_COMPARTMENTS;
}

static int index_of(int compartment)
{
    return (TAG_BASE - compartment) % BH_MAX_COMPARTMENTS;
}

static int slot_of_uid(uid_t uid)
{
    for (int slot = 0; slot < BH_PERMITS_ASIDE; slot++)
        if (slots[slot].used && slots[slot].ns.uid == uid)
            return slot;
    return -1;
}

/* A free slot, or the one left longest ago. */
static int slot_to_fill(void)
{
    int oldest = 0;
    for (int slot = 0; slot < BH_PERMITS_ASIDE; slot++) {
        if (!slots[slot].used)
            return slot;
        if (slots[slot].left_at < slots[oldest].left_at)
            oldest = slot;
    }
    return oldest;
}

struct move {
    int from_slot;    /* connections of bh_shim.ns go there (-1: forgotten) */
    int back_slot;    /* those of this slot come back (-1: none) */
    int forget_slot;  /* those of this slot are forgotten (-1: none) */
};

static void move_connection(int fd, void *ctx)
{
    const struct move *move = ctx;
    struct bh_fd_state state = bh_fd_lookup(fd);
    int slot = slot_of(state.compartment);
    /* a connect still waiting holds nothing: its waiter sees it moved */
    if (state.compartment >= 0)
        bh_fd_move(fd, state.share || move->from_slot < 0 || (state.watch & BH_WATCH_WAITING)
                           ? FORGOTTEN : tag(move->from_slot, state.compartment));
    else if (slot >= 0 && slot == move->back_slot)
        bh_fd_move(fd, index_of(state.compartment));
    else if (slot >= 0 && slot == move->forget_slot)
        bh_fd_move(fd, FORGOTTEN);
}

static int mapped_elsewhere(int slot)
{
    const struct bh_shared_state *state = slots[slot].ns.state;
    if (state == bh_shim.ns.state)
        return 1;
    for (int other = 0; other < BH_PERMITS_ASIDE; other++)
        if (other != slot && slots[other].used && slots[other].ns.state == state)
            return 1;
    return 0;
}

static void forget_slot(int slot)
{
    if (slots[slot].ns.state && !mapped_elsewhere(slot))
        bh_namespace_close(&slots[slot].ns);
    bh_permits_clear_aside(slot);
    slots[slot].used = 0;
}

int bh_left_namespaces_switch(uid_t now, int keep)
{
    int back = slot_of_uid(now);
    if (!keep && back < 0)
        return 0;
    int slot = back >= 0 ? back : slot_to_fill();
    int evicted = back < 0 && slots[slot].used;
    struct move move = { keep ? slot : -1, back, evicted ? slot : -1 };
    bh_fd_for_each_connection(move_connection, &move);
    if (evicted)
        forget_slot(slot);
    struct bh_namespace was = bh_shim.ns;
    if (back >= 0)
        bh_shim.ns = slots[slot].ns;
    bh_permits_swap_aside(slot);
    if (keep) {
        slots[slot] = (struct left){ 1, ++changes, was };
    } else {
        slots[slot].used = 0;
        bh_permits_clear_aside(slot);
    }
    return back >= 0;
}

void bh_left_namespace_ended(const struct bh_fd_ended *ended)
{
    int slot = slot_of(ended->compartment);
    if (slot >= 0 && slots[slot].used && slots[slot].ns.state)
        bh_permit_release_aside(&slots[slot].ns, slot, index_of(ended->compartment),
                                ended->weight);
}
