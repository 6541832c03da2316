/* holders.c's common paths, inline so that the take (take.c) pays no
 * call for them: this process's counts per compartment, and its holder
 * record's. What they mean and who writes them is at the top of
 * holders.c; only shim/permits includes this. */
#ifndef BH_PERMITS_HOLDERS_H
#define BH_PERMITS_HOLDERS_H

#include <stdatomic.h>
#include <stdint.h>

#include "permits/layout.h"

/* This process's counts of one compartment: written by its threads (and
 * a signal handler's close) with atomics. */
struct bh_holding {
    _Atomic uint32_t claimed;   /* held + being taken: the per_process count */
    _Atomic uint32_t common;
    _Atomic uint32_t reserved;
    _Atomic int32_t reserve;    /* meaningful while reserved > 0 */
    _Atomic(struct bh_holder *) record;
};
/* This process's counts of one namespace (ns->mine), per compartment. */
struct bh_holdings {
    _Atomic int used;  /* compartments below it may be nonzero */
    struct bh_holding at[BH_MAX_COMPARTMENTS];
};

static inline void bh_holding_note_used(struct bh_holdings *mine, int index)
{
    int used = atomic_load_explicit(&mine->used, memory_order_relaxed);
    while (index >= used && !atomic_compare_exchange_weak(&mine->used, &used, index + 1))
        ;
}

/* Counts weight against per_process (0: none) before anything is taken:
 * 0, or -1 (nothing counted) when it would pass the cap. */
static inline int bh_holding_claim(struct bh_holdings *mine, int index, uint32_t weight,
                                   int per_process)
{
    _Atomic uint32_t *claimed = &mine->at[index].claimed;
    bh_holding_note_used(mine, index);
    uint32_t before = atomic_fetch_add(claimed, weight);
    if (per_process > 0 && before + weight > (uint32_t)per_process) {
        atomic_fetch_sub(claimed, weight);
        return -1;
    }
    return 0;
}

/* The first take of a compartment (the record is claimed then) or one
 * from a reserve. */
void bh_holding_add_slowly(struct bh_namespace *ns, int index, struct bh_taken taken);

/* Permits just taken are this process's: its counts and its record. */
static inline void bh_holding_add(struct bh_namespace *ns, int index, struct bh_taken taken)
{
    struct bh_holding *holding = &ns->mine->at[index];
    struct bh_holder *record = atomic_load_explicit(&holding->record, memory_order_acquire);
    if (__builtin_expect(!record || taken.reserved, 0)) {
        bh_holding_add_slowly(ns, index, taken);
        return;
    }
    atomic_fetch_add(&holding->common, taken.common);
    atomic_fetch_add(&record->common, taken.common);
}

/* Up to `wanted` out of a count, never below 0; how many. */
static inline uint32_t bh_take_from(_Atomic uint32_t *count, uint32_t wanted)
{
    uint32_t have = atomic_load(count);
    for (;;) {
        uint32_t taken = have < wanted ? have : wanted;
        if (taken == 0 || atomic_compare_exchange_weak(count, &have, have - taken))
            return taken;
    }
}

/* Which pools `weight` permits go back to: the common pool's first, so
 * a member keeps its reserve and others get the common pool back. Takes
 * them out of this process's counts and record, and the claim too. */
static inline struct bh_taken bh_holding_remove_from(struct bh_holding *holding, int weight)
{
    struct bh_taken taken = { .reserve = atomic_load(&holding->reserve) };
    taken.common = bh_take_from(&holding->common, (uint32_t)weight);
    if (taken.common < (uint32_t)weight)
        taken.reserved = bh_take_from(&holding->reserved, (uint32_t)weight - taken.common);
    bh_take_from(&holding->claimed, (uint32_t)weight);
    struct bh_holder *record = atomic_load_explicit(&holding->record, memory_order_relaxed);
    if (record) {
        bh_take_from(&record->common, taken.common);
        if (taken.reserved)
            bh_take_from(&record->reserved, taken.reserved);
    }
    return taken;
}

static inline struct bh_taken bh_holding_remove(struct bh_namespace *ns, int index, int weight)
{
    return bh_holding_remove_from(&ns->mine->at[index], weight);
}

/* Permits taken for another process (a supervisor's applicant): counted
 * in this process's holder record only, never in its own counts (the top
 * of holders.c says why); taken out again when they are given back. */
void bh_holding_add_for_another(struct bh_namespace *ns, int index, struct bh_taken taken);
void bh_holding_remove_for_another(struct bh_namespace *ns, int index, struct bh_taken taken);

/* The reserve this process holds permits of in compartment index (one
 * at a time: a new program image may be a member of another), or -1. */
int bh_holding_reserve(struct bh_namespace *ns, int index);
/* Records of processes found dead are freed, their permits taken out of
 * the holders hint. */
void bh_holders_reap(struct bh_namespace *ns);

#endif
