/* The namespaces a process left at uid changes: kept, with its counts of
 * them and its connections in them, so that a close gives a permit back
 * where it was taken, and a process that comes back finds them again. */
#ifndef BH_LEFT_NAMESPACES_H
#define BH_LEFT_NAMESPACES_H

#include <sys/types.h>

#include "fdtable/fd_table.h"

/* The euid changed to `now`: bh_shim.ns is set aside (unless keep is 0:
 * it is not the namespace of its uid, which a failed join leaves), with
 * this process's counts of it, and its connections move with it. Returns
 * 1 when `now`'s namespace was left before and is bh_shim.ns again (its
 * counts and connections back with it), 0 when the caller opens it. Only
 * the thread changing the uid calls it. */
int bh_left_namespaces_switch(uid_t now, int keep);

/* A connection that ended in a namespace left behind (its compartment,
 * as the fd table hands it back, is below BH_FD_NOTHING_ENDED): its
 * permits go back there, if this process can still reach it.
 * Async-signal-safe. */
void bh_left_namespace_ended(const struct bh_fd_ended *ended);

#endif
