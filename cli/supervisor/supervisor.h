/* `bulkhead run`'s seccomp supervisor: caps the connects the shim cannot
 * see (Go programs, static programs, raw system calls).
 *
 * Lives in cli/ because it is part of the command: it is `run` itself,
 * staying as the tree's parent; it links what the command links (the
 * admission, permits and rules code of shim/, which never calls up into
 * it) and pthreads, which the shim must not bring into its host programs.
 *
 *   filter.c     the seccomp filter, installed in the child before exec
 *   notif.c      answers, the program's memory, /proc and fds, fd passing,
 *                the main thread's wake-up: calls no other file here
 *   supervise.c  the parent's loop: notifications, signals, exits, timers
 *   connects.c   one trapped connect: admission, then the connect itself
 *   programs.c   which programs are Go (their non-blocking connects may
 *                wait as long as blocking ones), told by the executable
 *   fastopen.c   one trapped MSG_FASTOPEN send: EOPNOTSUPP to a matched
 *                destination (as with client Fast Open off), so that the
 *                program falls back to connect()
 *   sockets.c    counted sockets by inode; the kernel's word on which are
 *                gone (sock_diag), and their permits given back once
 *   outcomes.c   what a connect turned out to be, for the breaker and the
 *                counters; a non-blocking one's, watched until it shows
 *   names.c      hostname rules: their addresses, resolved here
 *   unreadable.c programs whose memory the kernel will not let us read
 *                (not dumpable): on_failure decides, and one line says so
 *   heir.c       the process that answers the tree's calls once the
 *                supervisor is dead, and the calls in flight it must know */
#ifndef BH_SUPERVISOR_H
#define BH_SUPERVISOR_H

#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "admission/admission.h"
#include "config/config.h"
#include "permits/destinations.h"
#include "permits/permits.h"
#include "rules/rule_index.h"

/* ---- filter.c ---- */

/* In the child, before exec: no_new_privs (unless it keeps privileges),
 * then the filter; returns the listener fd, or -1 with errno (the kernel
 * lacks user notification, or a filter of the tree has a listener). */
int sv_filter_install(void);
/* The filter's instructions, for the unit test that runs them. */
struct sock_filter;
const struct sock_filter *sv_filter_program(unsigned short *length);
/* Whether this build knows the machine's system call numbers and the
 * kernel has user notification; 0 with errno when not. Installs nothing. */
int sv_filter_supported(void);
/* Whether the filter goes in without no_new_privs (CAP_SYS_ADMIN). */
int sv_filter_keeps_privileges(void);
/* What a trapped call is, whatever its ABI. */
enum sv_call { SV_CALL_CONNECT, SV_CALL_CLOSE, SV_CALL_SEND };
struct seccomp_data;
enum sv_call sv_filter_call(const struct seccomp_data *data);
/* Whether it is the 32-bit ABI's (i386 on x86_64): its pointers and
 * structures are 32-bit, and socketcall's arguments are in memory. */
int sv_filter_compat(const struct seccomp_data *data);
/* Whether it is socketcall(): the call in args[0], its arguments in the
 * program's memory at args[1] (sv_call_args). */
int sv_filter_socketcall(const struct seccomp_data *data);

/* ---- the supervisor's state, shared by its threads ---- */

struct sv_state {
    struct bh_config config;
    struct bh_rule_index *rules;
    struct bh_namespace ns;
    int shared_index[BH_MAX_COMPARTMENTS];
    struct bh_admitter admitter;
    int listener;
    pid_t pid;            /* the supervisor's */
    int names;            /* hostname rules to resolve */
    _Atomic int rescan;   /* a counted socket may be gone: scan soon */
    int wake;             /* eventfd: a worker tells the main thread that
                             what it polls for has changed */
    struct bh_destinations *destinations;  /* observe = yes; NULL: off */
};


/* ---- notif.c ---- */

struct seccomp_notif;
/* Answers a notification with value, or -1 with error (> 0), or with
 * flags (SECCOMP_USER_NOTIF_FLAG_CONTINUE); the ioctl's result. */
int sv_respond(int listener, uint64_t id, int64_t value, int error, uint32_t flags);
/* Answers a notification: the call proceeds as the program made it. */
void sv_continue(int listener, uint64_t id);
/* Answers a notification: the call fails with err, and is not made. */
void sv_fail(int listener, uint64_t id, int err);
/* Whether the notification is still its call's, waiting: what was read
 * from the program's memory since was that call's. */
int sv_still_valid(int listener, uint64_t id);
/* length bytes at `at` in thread tid's memory; 0, or -1 with errno (EPERM:
 * the kernel will not let us read it, unreadable.c). */
int sv_read_memory(pid_t tid, uint64_t at, void *into, size_t length);
/* The process thread tid belongs to; -1 when it is gone. */
pid_t sv_process_of(pid_t tid);
/* The program's fd (thread tid's) copied here (pidfd_getfd), its process
 * id in *pid; -1 with errno when it cannot be. The caller closes the copy. */
int sv_copy_fd(pid_t tid, int fd, pid_t *pid);
/* Whether a socket is SOCK_STREAM. */
int sv_is_stream(int sock);
/* Whether a socket's file is O_NONBLOCK. */
int sv_is_nonblocking(int sock);
/* The trapped call's arguments where the native call has them (a
 * socketcall's read from the program's memory); 0, or -1. */
int sv_call_args(const struct seccomp_notif *notif, uint64_t args[6]);
/* A /proc file of pid, whole (NUL-terminated, up to size - 1 bytes). */
ssize_t sv_read_proc(pid_t pid, const char *what, char *text, size_t size);
/* A number after "Key:" in /proc/pid/status (the nth, from 0); -1. */
long sv_status_field(pid_t pid, const char *key, int nth);
/* Over a unix socket: fd (none: -1) and an errno, for sv_receive_fd. */
void sv_send_fd(int channel, int fd, int error);
/* The fd sent, or -1 with errno the one sent with none (EIO: nothing
 * came). */
int sv_receive_fd(int channel);
/* From a worker: a socket was counted (its process's exit is now worth
 * watching, and the backstop's timer running), or may be gone (rescan). */
void sv_wake(struct sv_state *state);

/* ---- pidfds.c ---- */

/* sv_copy_fd, with the pidfd of a thread that leads its process kept for
 * its next connects. */
int sv_copy_fd_kept(pid_t tid, int fd, pid_t *pid);

/* ---- sockets.c ---- */

/* One process of the tree's per_process counts, by namespace index. */
struct sv_process {
    pid_t pid;
    int counted;          /* sockets counted for it */
    int pidfd;            /* its exit, watched by the main thread; -1 not yet */
    int exited;
    _Atomic uint32_t claimed[BH_MAX_COMPARTMENTS];
};

/* The counts of pid, made on first use; kept while it has sockets
 * counted (sv_process_put). NULL: out of memory. */
struct sv_process *sv_process_get(pid_t pid);
void sv_process_put(struct sv_process *process);

/* Main thread: the pidfds of the processes with counted sockets that have
 * not exited, to poll (malloc'd, in *fds; how many). Pidfds are opened
 * and closed here only, so none is closed while polled. */
int sv_processes_watch(struct pollfd **fds);
/* Main thread: those of fds that fired have exited; how many. */
int sv_processes_exited(const struct pollfd *fds, int count);

/* The socket with this inode is counted: its permits, by the pool they
 * came from (bh_admitted.taken), for process. 1 when the main thread
 * should know (sv_wake), 0, or -1 out of memory (nothing counted). */
int sv_socket_count(uint64_t inode, int shared, struct bh_taken taken,
                    struct sv_process *process);
/* Its connect began: the addresses the kernel finds it by (sv_socket_id),
 * and its permits parked in a socket record, to outlive the supervisor. */
void sv_socket_connecting(struct sv_state *state, uint64_t inode,
                          const struct bh_sock_id *id);
/* The addresses sock_diag finds sock by, once its connect began: 0, or
 * -1 (not bound, or another family than to). */
int sv_socket_id(int sock, const struct sockaddr *to, struct bh_sock_id *id);
/* Whether a socket is counted. */
int sv_socket_counted(uint64_t inode);
/* Gives back, once, the permits of the counted socket with this inode. */
void sv_socket_release(struct sv_state *state, uint64_t inode);
/* Asks the kernel which counted sockets are still open anywhere; gives
 * back those that are not (how many in *released, if not NULL). How many
 * counted remain; -1 when the kernel could not be asked (nothing is given
 * back then). Any thread. */
int sv_sockets_scan(struct sv_state *state, int *released);
/* The same for admission (bh_applicant.reap): nonzero when trying again
 * may succeed. */
int sv_sockets_reap(void *state);
int sv_sockets_live(void);

/* ---- connects.c ---- */

/* A trapped connect: answered here (not ours: CONTINUE; or a counted
 * socket's connect(AF_UNSPEC), carried out) or by a thread of its own
 * (admission may wait; a blocking connect blocks). */
struct seccomp_notif;
/* 1 when a worker answers it (and then frees its pending slot: heir.c). */
int sv_connect_trapped(struct sv_state *state, const struct seccomp_notif *notif);
/* Main thread: ms until the jobs waiting in admission are due for a look
 * (whether their notifications died); -1 none. */
int sv_connects_due_ms(void);
/* Main thread: interrupts the wait of jobs whose notifications died. */
void sv_connects_look(struct sv_state *state);

/* ---- programs.c ---- */

/* Whether process pid runs a Go program (its executable read once per
 * file); 0 when it cannot be told. Any thread. */
int sv_program_is_go(pid_t pid);

/* ---- fastopen.c ---- */

/* A trapped sendto/sendmsg/sendmmsg with MSG_FASTOPEN, answered here. */
void sv_fastopen_trapped(struct sv_state *state, const struct seccomp_notif *notif);

/* ---- outcomes.c ---- */

/* A connect's outcome, known now: err 0 connected (in connect_ns, or -1
 * not timed), a downstream failure (ECONNREFUSED, ETIMEDOUT...), or
 * anything else (no outcome: a probe gives its slot back). Counted and
 * told to the breaker as the shim does. Any thread. */
void sv_outcome_tell(struct sv_state *state, int shared, int local, int64_t probe,
                     int err, int64_t connect_ns);

/* A counted socket whose connect is under way (EINPROGRESS). */
struct sv_connecting {
    const struct bh_sock_id *id;  /* its addresses (sv_socket_id); NULL: unknown */
    uint64_t inode;
    pid_t pid;                  /* the program's process, and its fd */
    int fd;
    int shared, local;          /* the compartment, in the namespace and here */
    int64_t probe;              /* the breaker's probe slot it holds; 0 */
};
/* Watched until its outcome shows (told then, once; the probe slot is the
 * watch's now). 1 when the main thread should know (a worker's sv_wake):
 * it is due before anything else watched. */
int sv_outcome_watch(struct sv_state *state, const struct sv_connecting *connecting);
/* Main thread: ms until a watched socket is due for a look; -1 none. */
int sv_outcomes_due_ms(void);
/* Main thread: looks at the watched sockets that are due. */
void sv_outcomes_poll(struct sv_state *state);
/* Main thread, at a trapped close(fd), before it is answered: a watched
 * socket the fd still shows failed or connected is told now. */
void sv_outcome_closing(struct sv_state *state, int fd);
/* Main thread: the socket with this inode is disconnected (AF_UNSPEC)
 * before its outcome showed: it has none (a probe gives its slot back). */
void sv_outcome_forget(struct sv_state *state, uint64_t inode);

/* ---- unreadable.c ---- */

/* A trapped call of thread tid, whose memory or fd the kernel would not
 * let us read (EPERM): the errno to fail it with, or 0 to let it through;
 * the first time for its process, one line says which and why. */
int sv_unreadable(struct sv_state *state, pid_t tid);
/* A trapped connect whose address could not be read so: answered. */
void sv_answer_unreadable(struct sv_state *state, const struct seccomp_notif *notif);

/* ---- heir.c ---- */

/* The size of a notification, as this kernel writes it. */
size_t sv_notif_size(void);
/* Main thread: a slot of the pending table to receive a notification
 * into, kept until sv_pending_done; NULL when none is free. */
struct seccomp_notif *sv_pending_take(void);
/* Any thread, once the notification is answered (one not in the table
 * is let be). */
void sv_pending_done(const struct seccomp_notif *notif);
/* Before the tree: starts the heir (one line if it cannot); the channel
 * to it, or -1. */
int sv_heir_start(struct sv_state *state);
/* Hands it the listener (none: -1, it will exit). */
void sv_heir_hand(int channel, int listener);
/* run's normal end: the heir exits (waited for, briefly). */
void sv_heir_release(int channel);

/* ---- names.c ---- */

enum { SV_NAMES_EVERY_MS = 30000 };  /* hostname rules resolved again */

/* Resolves the hostname rules' names again when `every_ms` passed since
 * the last time; how many ms until the next. */
int sv_names_refresh(struct sv_state *state, int every_ms);

/* For a program the supervisor caps: one line on stderr for its hostname
 * rules (they catch every name on their addresses) and one for its suffix
 * rules (they match nothing), when it has any. */
void sv_names_say(const struct sv_state *state, const char *program);

/* ---- supervise.c ---- */

/* Runs argv supervised and returns its exit status; -1 when supervision
 * could not start (said in one line): run then goes on as without it.
 * why: what keeps the shim from the program, for the line that says it
 * is capped, or not, after all; "" when nothing does: no line. */
int sv_run(const char *rules, char **argv, const char *why);

#endif
