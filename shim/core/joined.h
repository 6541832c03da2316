/* The namespaces this process counts in: its euid's, and each one it
 * counted in before a uid change (joined.c). A connection's place names
 * its namespace and its compartment index there, so that its permits go
 * back where they were taken, whatever uid changes came in between. */
#ifndef BH_JOINED_H
#define BH_JOINED_H

#include <stdatomic.h>
#include <sys/types.h>

#include "admission/admission.h"
#include "config/config.h"
#include "permits/permits.h"

enum {
    BH_JOINED_MAX = 1024,   /* namespaces per process; then on_failure */
    BH_PLACE_SHIFT = 10,    /* BH_MAX_COMPARTMENTS indexes below it */
};
_Static_assert(BH_MAX_COMPARTMENTS == 1 << BH_PLACE_SHIFT, "a place's index bits");

struct bh_joined {
    int id;                  /* its number in places */
    struct bh_namespace ns;  /* state NULL: out of reach (on_failure) */
    /* config compartment i -> its index in ns: -1 unregistered, or
     * BH_SHARED_UNREACHABLE when ns is out of reach and on_failure is
     * closed */
    int shared_index[BH_MAX_COMPARTMENTS];
    /* ns index -> config compartment i, -1 when not in our rules */
    int local_index[BH_MAX_COMPARTMENTS];
    /* config compartment i: what this program image is in it there */
    struct bh_membership membership[BH_MAX_COMPARTMENTS];
    /* The shim's admission there: the config, ns and the two above. */
    struct bh_admitter admitter;
    /* Permits of connections that ended while the euid could not reach
     * ns (EACCES), by index: still this process's, given back at a later
     * uid change (bh_joined_settle). Atomics: any thread, a signal
     * handler's close included, adds; the thread changing the uid takes. */
    _Atomic uint32_t owed[BH_MAX_COMPARTMENTS];
    _Atomic int owes;
};

/* Hidden, as the whole shim is: read straight, not through the GOT. */
extern struct bh_joined *_Atomic bh_joined_now_ptr __attribute__((visibility("hidden")));
extern struct bh_joined *_Atomic bh_joined_all[BH_JOINED_MAX]
    __attribute__((visibility("hidden")));

/* The namespace connects count in now (its euid's). */
static inline struct bh_joined *bh_joined_now(void)
{
    return atomic_load_explicit(&bh_joined_now_ptr, memory_order_acquire);
}

/* A connection's place: what the fd table keeps as its compartment. */
static inline int bh_place(const struct bh_joined *joined, int index)
{
    return joined->id << BH_PLACE_SHIFT | index;
}

static inline struct bh_joined *bh_joined_of(int place)
{
    return atomic_load_explicit(&bh_joined_all[place >> BH_PLACE_SHIFT],
                                memory_order_acquire);
}

static inline struct bh_namespace *bh_ns_of(int place)
{
    return &bh_joined_of(place)->ns;
}

static inline int bh_index_of(int place)
{
    return place & ((1 << BH_PLACE_SHIFT) - 1);
}

/* A place as the two arguments of permits' calls: namespace, index. */
#define BH_AT(place) bh_ns_of(place), bh_index_of(place)

/* An empty one for the caller to fill in (the first at start-up, then
 * new memory); NULL past BH_JOINED_MAX, or with no memory for it. */
struct bh_joined *bh_joined_new(void);
/* Filled in (its ns open, or out of reach), it is published. */
void bh_joined_add(struct bh_joined *joined);
/* The reachable namespace of uid joined before, or NULL. */
struct bh_joined *bh_joined_find(uid_t uid);
/* From now, connects count in `joined`. */
void bh_joined_switch(struct bh_joined *joined);

/* Calls each(ns) for every namespace joined and reachable. */
void bh_joined_each(void (*each)(struct bh_namespace *ns));

/* Permits its namespace refused at a connection's end: owed there (the
 * namespace's `refused`, set by whoever opens one for a joined object).
 * Async-signal-safe. */
void bh_joined_owe(struct bh_namespace *ns, int index, int weight);
/* After a uid call: every permit owed goes back where the euid can now
 * reach it; the rest stays owed (until the process exits, when the
 * kernel gives back what its undo records hold). */
void bh_joined_settle(void);
/* In a forked child: it holds no permits of its own, in any namespace,
 * and owes none (its parent's undo records hold them). */
void bh_joined_after_fork_child(void);

#endif
