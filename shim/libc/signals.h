/* What the program's signal dispositions say about a blocking call a
 * signal interrupted, read through the real libc: for a permit wait that
 * a signal ended (semtimedop fails with EINTR even under SA_RESTART,
 * where the kernel's connect() is restarted). */
#ifndef BH_SIGNALS_H
#define BH_SIGNALS_H

/* Nonzero when no handler without SA_RESTART can have run in the calling
 * thread: every signal it does not block (but a fault's, which a thread
 * asleep in a system call never gets) is ignored, left to its default
 * action or handled with SA_RESTART. glibc's own (SIGSETXID, which
 * setuid() and its kin send every thread, and SIGCANCEL) are installed
 * with SA_RESTART and cannot be asked about; they count as such. Up to
 * 64 sigactions: for the rare path only. */
int bh_signals_all_restart(void);

#endif
