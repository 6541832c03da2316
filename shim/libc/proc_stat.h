/* One field of /proc/PID/stat, read through the real libc (never our own
 * hooks): for the start time that tells a live pid from a reused one, and
 * for the thread count. */
#ifndef BH_PROC_STAT_H
#define BH_PROC_STAT_H

#include <stdint.h>
#include <sys/types.h>

/* Field `field` (numbered as in proc(5): 3 is the state, 20 the threads,
 * 22 the start time) of process pid's stat, 0 for this process; 0 when
 * it cannot be read. */
uint64_t bh_proc_stat_field(pid_t pid, int field);
/* Process pid's state (field 3: 'R', 'S', 'Z' for a zombie...); 0 when
 * it cannot be read. */
char bh_proc_stat_state(pid_t pid);

#endif
