/* Which fds of this process are hidden from the program's readiness calls
 * while their connect waits for a permit, their deferred epoll
 * registrations, and their verdicts not read yet (waiting.c says how it
 * is shared and what is safe where). The engine (core/) drives it; the
 * readiness calls (readiness.h) consult it. */
#ifndef BH_READINESS_WAITING_H
#define BH_READINESS_WAITING_H

/* Nonzero while any fd of this process is hidden (waiting) or has a
 * verdict the program has not read yet: the readiness hooks' one load. */
extern _Atomic int bh_waiting_active __attribute__((visibility("hidden")));  /* hidden: no GOT */

/* fd starts waiting: from now on poll/ppoll/select/pselect never report
 * it, and it is taken out of every epoll set of this process that holds
 * it (each registration, events and data, remembered; found through
 * /proc/self/fdinfo of the process's epoll fds, a rare path), and
 * epoll_ctl ADD/MOD/DEL on it are remembered, not passed on.
 * 0, or -1 with errno when it cannot be hidden (table full): the caller
 * then refuses at once, as a fail-fast compartment would. */
int bh_waiting_hide(int fd);

/* The verdict. error 0: the real connect has been made on the socket
 * (kernel said EINPROGRESS or 0). error > 0: not admitted; the program's
 * next getsockopt(SO_ERROR) (or connect() again) gets error once, and
 * poll/select report the fd with POLLERR (POLLOUT|POLLERR|POLLHUP) until
 * then. Either way the fd's remembered epoll registrations are put back
 * (epoll_ctl ADD with the last events and data the program gave), and
 * every thread in a poll/select of this process wakes and looks again.
 * Safe to call from any thread. */
void bh_waiting_show(int fd, int error);

/* The program closed fd (close, dup2/dup3 onto it, close_range,
 * closefrom): its entry and any unread verdict go. */
void bh_waiting_forget(int fd);

/* BH_WAITING_NONE: not ours; BH_WAITING_HIDDEN: still waiting;
 * > 0: the unread verdict's errno (consume: and it is read now). */
enum { BH_WAITING_NONE = 0, BH_WAITING_HIDDEN = -1 };
int bh_waiting_verdict(int fd, int consume);

/* After fork: the child's table is emptied (its copies of waiting fds
 * were the parent's waits); see h-engine for what the child sees. */
void bh_waiting_reset(void);

#endif
