/* The shim's log: one line per event, to stderr, appended to a file, or
 * to syslog (see log.c for when stderr falls back to it).
 * Linked into `bulkhead` too, for its seccomp supervisor's lines. */
#ifndef BH_LOG_H
#define BH_LOG_H

#include "config/config.h"

/* At start-up, before anything is logged: which file fd 2 is now. */
void bh_log_remember_stderr(void);
/* path: NULL for stderr, "syslog", or a file; syslog_socket: NULL for
 * /dev/log. */
void bh_log_configure(enum bh_log_level level, const char *path,
                      const char *syslog_socket);
int bh_log_enabled(enum bh_log_level level);
void bh_log(enum bh_log_level level, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* A start-up problem (bad rules, no shared state): said once per process
 * tree, not once per process. A wrapper script starts dozens of processes
 * that would all say the same; the environment tells children it was said
 * (BULKHEAD_SAID, a hash of the line). Call only while single-threaded. */
void bh_log_startup_problem(const char *format, ...)
    __attribute__((format(printf, 1, 2)));
/* The same at any level, remembered in the environment variable given:
 * one line per process tree, not one per process (a wrapper script's
 * processes would each say "loaded"). */
void bh_log_once_per_tree(const char *variable, enum bh_log_level level,
                          const char *format, ...)
    __attribute__((format(printf, 3, 4)));
/* Before a uid change: the log file is opened now and kept, for a process
 * that will not be allowed to open it afterwards. */
void bh_log_hold_file(void);
/* A refusal of program[pid]'s connect, at warn, at most one line per
 * second per compartment in this process; the next line says how many were
 * left out. */
void bh_log_refusal(int compartment, const char *compartment_name,
                    const char *destination, const char *why,
                    const char *program, int pid);
/* In a forked child: the parent's unlogged refusals are not the child's. */
void bh_log_forget_after_fork(void);
/* At exit: how many refusals each compartment's rate limit left unlogged
 * since its last line. */
void bh_log_refusals_left_out(void);

#endif
