/* The watchdog: io_timeout_ms for connections whose program waits in its
 * own event loop (non-blocking sockets), where no receive of ours blocks
 * and SO_RCVTIMEO cannot fire. See stall.c. */
#ifndef BH_STALL_H
#define BH_STALL_H

/* A connection's exchanges are now to be timed (its STALL bit is set):
 * starts the watchdog on first need, wakes it if it sleeps. 1 when a
 * watchdog runs or is starting, 0 when none can (the caller clears the
 * bit). Not async-signal-safe the first time: it may start a thread. */
int bh_stall_watch(void);

/* Threads the watchdog adds to this process: 0 or 1. */
int bh_stall_threads(void);

/* In a forked child (pthread_atfork): the parent's watchdog is not here;
 * the next connection that needs one starts it. */
void bh_stall_after_fork_child(void);

#endif
