/* One trapped connect, decided with the shim's own admission
 * (shim/admission) on behalf of the process that made it.
 *
 * The destination is read from the program's memory; a destination no
 * rule matches (and anything but AF_INET/AF_INET6) is answered CONTINUE
 * at once, from the main thread, but for AF_UNSPEC on a counted socket
 * (disconnect_counted). A matched one is the supervisor's to
 * carry out, by a worker thread (admission may wait, and a blocking
 * connect blocks): the program's socket is copied here
 * (pidfd_getfd), permits taken for the process (per_process counts by its
 * pid, its reserve and bypass worked out from its /proc identity), and
 * the connect done on the copy with the address as read, so that what
 * was checked is what connects; its result is the program's, and its
 * outcome (later, for a non-blocking one) the breaker's (outcomes.c).
 * The copy shares the file description: O_NONBLOCK, SO_SNDTIMEO and the deadlines
 * set here are the program's own.
 *
 * CONTINUE is never the answer for a connect that counts. It is for an
 * unmatched destination, for one the admission lets pass uncounted (a
 * bypass, a removed namespace), and for a socket that cannot be copied
 * (a bad fd: the kernel answers EBADF) or recorded (out of memory): a
 * program that rewrites its own sockaddr between our read and the
 * kernel's could slip past then, which a cap (not a sandbox) accepts;
 * the address is read only while the notification is valid. A program
 * whose memory or fds the kernel will not let us read (EPERM: not
 * dumpable) is neither: unreadable.c answers, as on_failure says.
 *
 * A connect waits for its answer, and a signal may end that wait: before
 * Linux 5.19 (or without SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, filter.c)
 * any signal, and with SA_RESTART (timers, SIGCHLD, Go's SIGURG) the same
 * connect traps again at once, as a new notification. Its job goes on:
 * one admission per socket, however many restarts (see "jobs" below). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/net.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "breaker/breaker.h"
#include "core/deadline.h"
#include "log/log.h"
#include "policy/who.h"
#include "supervisor/supervisor.h"

/* A thread's connect: its fd and the address it asked for. */
struct call {
    pid_t tid;
    int fd;
    struct sockaddr_storage to;
    socklen_t length;
};

struct job {
    struct job *next;    /* in the queue */
    struct job *active;  /* in the list of jobs in progress */
    struct sv_state *state;
    uint64_t id;         /* the newest notification of its connect: jobs_lock */
    /* where that one was received (heir.c), freed once the job is over:
     * jobs_lock while the job is listed */
    const struct seccomp_notif *pending;
    struct call call;
    int rule;
    /* the program's socket as copied while its notification was valid
     * (-1, errno in copy_errno: it could not be), and its process */
    int sock, copy_errno;
    pid_t pid;
    int on_worker;       /* run by a worker thread, not the main one */
    /* tried by the main thread first (a non-blocking socket's connect
     * never waits): its admission may not wait, and is left to a worker
     * when it would (deferred) */
    int try_here;
    int full;            /* its admission found the compartment full: may have waited */
    /* jobs_lock: */
    pthread_t worker;
    int admitting;       /* in admission, on a worker: may be interrupted */
    int interrupted;     /* SIGRTMIN sent to its worker since its admission began */
    int dead_looks;      /* looks in a row that found its id dead */
    int superseded;      /* its thread made another call: dead for good */
};

/* ---- who the process is, for reserves and bypasses ---- */

struct identity_text {
    char cmdline[4096], exe[4096], environ[65536];
    char *env[512];
};

/* program= from argv[0] and the executed file, user= from the effective
 * uid, env= from the environment the process started with. */
static void identity_of(pid_t pid, struct identity_text *text, struct bh_identity *identity)
{
    memset(identity, 0, sizeof *identity);
    if (sv_read_proc(pid, "cmdline", text->cmdline, sizeof text->cmdline) > 0)
        identity->program = basename(text->cmdline);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t length = readlink(path, text->exe, sizeof text->exe - 1);
    if (length > 0) {
        text->exe[length] = '\0';
        identity->executed = basename(text->exe);
    }
    identity->uid = (uid_t)sv_status_field(pid, "Uid:", 1);
    ssize_t size = sv_read_proc(pid, "environ", text->environ, sizeof text->environ);
    int count = 0;
    for (char *at = text->environ; size > 0 && at < text->environ + size &&
         count < (int)(sizeof text->env / sizeof text->env[0]) - 1; at += strlen(at) + 1)
        text->env[count++] = at;
    text->env[count] = NULL;
    identity->env = text->env;
}

/* The process's membership in the rule's compartment; the others are
 * never read for this connect. */
static void membership_for(struct sv_state *state, pid_t pid, int local,
                           struct bh_membership *membership)
{
    const struct bh_compartment *compartment = &state->config.compartments[local];
    membership[local] = (struct bh_membership) { -1, 0 };
    if (!compartment->reserve_count && !compartment->bypass_count)
        return;
    struct identity_text *text = malloc(sizeof *text);
    if (!text)
        return;
    struct bh_identity identity;
    identity_of(pid, text, &identity);
    membership[local] = bh_membership_of(&state->config, &state->ns,
                                         local, state->shared_index[local], &identity);
    free(text);
}

/* ---- jobs in progress, by the thread that trapped them ----
 *
 * A thread makes one system call at a time: a connect trapped again by
 * the same thread, on the same fd to the same address, is the restart of
 * the one in progress, and its notification is handed to that job (the
 * answer goes to the newest); another call of that thread means the old
 * one is over (superseded).
 *
 * A notification that died for good (the program told EINTR, its process
 * killed) would leave its job waiting for a permit: the main thread looks
 * at the ids of the jobs in admission every LOOK_MS and interrupts the
 * wait of one found dead twice in a row (SIGRTMIN, whose handler does
 * nothing: the semaphore wait ends with EINTR, having taken nothing). A
 * job that finds its notification dead waits up to GRACE_MS for a
 * restart to hand it a new one; none coming, it stops there: before its
 * admission it takes nothing, after it it gives its permits back without
 * connecting. An answer whose notification died before the restart came
 * in is kept (KEPT_MS at most) for that thread's next connect: the same
 * fd and address get it instead of a second admission, as a restarted
 * blocking connect in the kernel goes on with the connection under way.
 *
 * jobs_lock guards the list, the kept answers and the jobs' fields so
 * marked; it is never held across a wait, a connect or an answer. */
enum { LOOK_MS = 20, DEAD_LOOKS = 2, GRACE_MS = 50, KEPT_MS = 60000 };

struct kept {
    struct kept *next;
    struct call call;
    int rc, err;
    int64_t at_ms;
};

static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t handed_over;  /* CLOCK_MONOTONIC: jobs_start */
static struct job *jobs;
static struct kept *kept_answers;
static _Atomic int listed;  /* jobs in the list: looks are due (the main
                              thread counts them in, so it polls no longer
                              than LOOK_MS once one may wait) */
static int64_t next_look_ms;

static int64_t monotonic_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static int same_call(const struct call *one, const struct call *other)
{
    return one->tid == other->tid && one->fd == other->fd && one->length == other->length &&
           memcmp(&one->to, &other->to, one->length) == 0;
}

static void interrupted(int signal_number)
{
    (void)signal_number;  /* only to end a semaphore wait with EINTR */
}

/* The job's worker, in admission, stops waiting. jobs_lock held. */
static void interrupt(struct job *job)
{
    job->interrupted = 1;
    pthread_kill(job->worker, SIGRTMIN);
}

/* Once, from the main thread: the interruption's handler (no SA_RESTART),
 * the signal blocked here (the main thread is never interrupted) and
 * unblocked in the workers once, at their start, so that their admissions
 * cost no signal-mask calls (admit_interruptibly). */
static void jobs_start(void)
{
    struct sigaction action = { .sa_handler = interrupted };
    sigemptyset(&action.sa_mask);
    sigaction(SIGRTMIN, &action, NULL);
    sigset_t rtmin;
    sigemptyset(&rtmin);
    sigaddset(&rtmin, SIGRTMIN);
    pthread_sigmask(SIG_BLOCK, &rtmin, NULL);
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&handed_over, &attributes);
    pthread_condattr_destroy(&attributes);
}

/* The kept answer of call's thread leaves the list (as do the expired);
 * returned when it is call's own, else freed. jobs_lock held. */
static struct kept *kept_for(const struct call *call)
{
    struct kept *found = NULL;
    int64_t now = monotonic_ms();
    for (struct kept **at = &kept_answers; *at;) {
        struct kept *kept = *at;
        if (kept->call.tid != call->tid && now - kept->at_ms <= KEPT_MS) {
            at = &kept->next;
            continue;
        }
        *at = kept->next;
        if (kept->call.tid == call->tid && same_call(&kept->call, call))
            found = kept;
        else
            free(kept);
    }
    return found;
}

enum restart {
    RESTART_NONE,      /* a connect of its own, for a job */
    RESTART_HANDED,    /* handed to the job in progress, with its pending slot */
    RESTART_ANSWERED,  /* answered now, as kept */
};

/* Main thread: whether a matched connect restarts one in progress (its
 * job answers it, and the slot of the notification it replaces is free)
 * or one answered too late. */
static enum restart restarted(struct sv_state *state, const struct seccomp_notif *notif,
                              const struct call *call)
{
    int handed = 0;
    pthread_mutex_lock(&jobs_lock);
    for (struct job *job = jobs; job; job = job->active) {
        if (job->call.tid != call->tid || job->superseded)
            continue;
        if (same_call(&job->call, call)) {
            job->id = notif->id;
            job->dead_looks = 0;
            if (!handed++) {  /* one job per thread's connect: the first has its slot */
                sv_pending_done(job->pending);  /* its notification died */
                job->pending = notif;
            }
        } else {
            job->superseded = 1;
            if (job->admitting)
                interrupt(job);
        }
    }
    pthread_cond_broadcast(&handed_over);
    struct kept *kept = kept_for(call);
    pthread_mutex_unlock(&jobs_lock);
    enum restart restart = handed ? RESTART_HANDED : kept ? RESTART_ANSWERED : RESTART_NONE;
    if (restart == RESTART_ANSWERED)
        sv_respond(state->listener, notif->id, kept->rc, kept->rc < 0 ? -kept->err : 0, 0);
    free(kept);
    return restart;
}

/* Whether the program still waits for the job's answer: its notification
 * is valid, or a restart hands over a new one within GRACE_MS. */
static int still_wanted(struct job *job)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += GRACE_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    int wanted = 0;
    pthread_mutex_lock(&jobs_lock);
    while (!job->superseded) {
        uint64_t id = job->id;
        pthread_mutex_unlock(&jobs_lock);
        wanted = sv_still_valid(job->state->listener, id);
        pthread_mutex_lock(&jobs_lock);
        if (wanted || job->superseded)
            break;
        if (job->id == id &&
            pthread_cond_timedwait(&handed_over, &jobs_lock, &until) == ETIMEDOUT &&
            job->id == id)
            break;
    }
    pthread_mutex_unlock(&jobs_lock);
    return wanted;
}

int sv_connects_due_ms(void)
{
    if (atomic_load(&listed) == 0)
        return -1;
    int64_t wait = next_look_ms - monotonic_ms();
    return wait < 0 ? 0 : wait > LOOK_MS ? LOOK_MS : (int)wait;
}

void sv_connects_look(struct sv_state *state)
{
    int64_t now = monotonic_ms();
    if (now < next_look_ms)
        return;
    next_look_ms = now + LOOK_MS;
    pthread_mutex_lock(&jobs_lock);
    for (struct job *job = jobs; job; job = job->active) {
        if (!job->admitting || sv_still_valid(state->listener, job->id))
            job->dead_looks = 0;
        else if (++job->dead_looks >= DEAD_LOOKS)
            interrupt(job);
    }
    pthread_mutex_unlock(&jobs_lock);
}

/* The job leaves the list. jobs_lock held. */
static void unlist(struct job *job)
{
    struct job **at = &jobs;
    while (*at != job)
        at = &(*at)->active;
    *at = job->active;
    atomic_fetch_sub(&listed, 1);
}

enum delivery { DELIVERED, UNDELIVERED, ONCE_MORE };

/* The job's answer, to the newest notification of its connect. One that
 * found it dead is kept for the restart (a CONTINUE is not: the restart
 * is decided afresh, as is one after a job that gave up); a notification
 * handed over after the answer went out is a connect of its own, on the
 * same fd to the same address (ONCE_MORE: the job does it again).
 * Otherwise the job leaves the list. */
static enum delivery deliver(struct job *job, int proceed, int rc, int err)
{
    pthread_mutex_lock(&jobs_lock);
    for (;;) {
        uint64_t id = job->id;
        pthread_mutex_unlock(&jobs_lock);
        int sent = sv_respond(job->state->listener, id, proceed ? 0 : rc,
                           proceed || rc == 0 ? 0 : -err,
                           proceed ? SECCOMP_USER_NOTIF_FLAG_CONTINUE : 0) == 0;
        pthread_mutex_lock(&jobs_lock);
        if (job->id != id && sent) {
            pthread_mutex_unlock(&jobs_lock);
            return ONCE_MORE;
        }
        if (job->id != id)
            continue;  /* the restart came in meanwhile: it gets the answer */
        struct kept *kept = !sent && !proceed && !job->superseded ? malloc(sizeof *kept) : NULL;
        if (kept) {
            *kept = (struct kept) { kept_answers, job->call, rc, err, monotonic_ms() };
            kept_answers = kept;
        }
        unlist(job);
        pthread_mutex_unlock(&jobs_lock);
        return sent ? DELIVERED : UNDELIVERED;
    }
}

/* The job stops without an answer: its notification is dead. */
static void forsake(struct job *job)
{
    pthread_mutex_lock(&jobs_lock);
    unlist(job);
    pthread_mutex_unlock(&jobs_lock);
}

/* bh_admit, which the main thread may interrupt while the job is marked
 * admitting (a worker's only: the main thread never interrupts itself).
 * A signal sent is pending once the lock is ours again (pthread_kill
 * marks it before the sender lets go of the lock); one not delivered yet
 * would end the worker's next wait (its connect) with EINTR, so a system
 * call that does not wait takes it first. */
static int admit_interruptibly(struct job *job, const struct bh_applicant *applicant,
                               int sock, struct bh_admitted *admitted)
{
    struct sv_state *state = job->state;
    pthread_mutex_lock(&jobs_lock);
    job->worker = pthread_self();
    job->admitting = job->on_worker;
    pthread_mutex_unlock(&jobs_lock);
    int shared = bh_admit(&state->admitter, applicant, sock, &state->config.rules[job->rule],
                          (struct sockaddr *)&job->call.to, admitted);
    int saved_errno = errno;
    pthread_mutex_lock(&jobs_lock);
    job->admitting = 0;
    int drain = job->interrupted;
    job->interrupted = 0;
    pthread_mutex_unlock(&jobs_lock);
    if (drain)
        getppid();  /* its return runs the handler */
    errno = saved_errno;
    return shared;
}

/* ---- the connect itself ---- */

/* What admission took for process, given back uncounted. */
static void give_back(struct sv_state *state, struct sv_process *process, int shared,
                      const struct bh_admitted *admitted)
{
    struct bh_applicant applicant = { .pid = process->pid, .claimed = process->claimed };
    bh_admission_release(&state->admitter, &applicant, shared, admitted->taken);
    if (admitted->probe)
        bh_breaker_abandon(bh_breaker_fields(&state->ns, shared), admitted->probe);
}

/* observe = yes: the destination of a TCP connect the tree made, and how
 * it went, in the namespace's destinations table (no names: the program
 * resolved them itself, nor holds: see docs/seccomp.md). */
static int observed_slot(struct sv_state *state, const struct sockaddr *to)
{
    if (!state->destinations)
        return -1;
    int slot = bh_destination_slot(state->destinations, to);
    if (slot >= 0)
        bh_destination_connect(state->destinations, slot, NULL);
    return slot;
}

static void observed_result(struct sv_state *state, int slot, int refused, int failed)
{
    if (slot >= 0 && refused)
        bh_destination_refused(state->destinations, slot);
    else if (slot >= 0 && failed)
        bh_destination_failed(state->destinations, slot);
}

/* An unmatched connect, answered CONTINUE: recorded if its socket is TCP. */
static void observe_unmatched(struct sv_state *state, const struct call *call)
{
    pid_t pid;
    int sock = state->destinations ? sv_copy_fd(call->tid, call->fd, &pid) : -1;
    if (sock < 0)
        return;
    if (sv_is_stream(sock))
        observed_slot(state, (const struct sockaddr *)&call->to);
    close(sock);
}

/* The supervisor's own connects go straight to the kernel: a bulkhead run
 * that has the shim preloaded (run inside another run's tree, or
 * /etc/ld.so.preload) would otherwise count each of them a second time. */
static int raw_connect(int sock, const struct sockaddr *to, socklen_t length)
{
    return (int)syscall(SYS_connect, sock, to, length);
}

/* Admitted: count the socket, connect, and give the permits back at once
 * if it failed outright. Returns the connect's result for the program. */
static int connect_counted(struct job *job, int sock, uint64_t inode, int shared,
                           const struct bh_admitted *admitted, struct sv_process *process,
                           int *err)
{
    struct sv_state *state = job->state;
    int local = state->config.rules[job->rule].compartment;
    bh_deadline_before_connect(sock, &state->config.compartments[local]);
    int counted = sv_socket_count(inode, shared, admitted->taken, process);
    if (counted < 0) {
        /* out of memory: it goes uncounted rather than held for good */
        give_back(state, process, shared, admitted);
        int rc = raw_connect(sock, (struct sockaddr *)&job->call.to, job->call.length);
        *err = rc < 0 ? errno : 0;
        return rc;
    }
    if (counted && job->on_worker)  /* the main thread polls anew after this */
        sv_wake(state);
    struct timespec before, after;
    clock_gettime(CLOCK_MONOTONIC, &before);
    int rc = raw_connect(sock, (struct sockaddr *)&job->call.to, job->call.length);
    *err = rc < 0 ? errno : 0;
    clock_gettime(CLOCK_MONOTONIC, &after);
    int failed = rc < 0 && *err != EINPROGRESS && *err != EINTR && *err != EALREADY;
    struct bh_sock_id id;
    /* not looked up when unknown: held until run exits (SEM_UNDO) */
    int known = !failed && sv_socket_id(sock, (struct sockaddr *)&job->call.to, &id) == 0;
    if (known)
        sv_socket_connecting(state, inode, &id);
    if (rc < 0 && (*err == EINPROGRESS || *err == EINTR)) {
        /* under way (non-blocking, or interrupted): its outcome comes later */
        struct sv_connecting connecting = { known ? &id : NULL, inode, process->pid,
                                            job->call.fd, shared, local, admitted->probe };
        if (sv_outcome_watch(state, &connecting) && job->on_worker)
            sv_wake(state);
    } else {
        int64_t connect_ns = (int64_t)(after.tv_sec - before.tv_sec) * 1000000000 +
                             (after.tv_nsec - before.tv_nsec);
        sv_outcome_tell(state, shared, local, admitted->probe, *err, connect_ns);
    }
    if (failed)
        sv_socket_release(state, inode);
    return rc;
}

/* What the program's connect returns: CONTINUE (not ours: the kernel
 * does it), or the result of ours; or nothing (forsaken: the program no
 * longer waits for it). */
struct answer {
    int proceed;
    int rc, err;
    int forsaken;
    int deferred;  /* tried here, it would wait: a worker's */
};

/* The program's short name, for a refusal line. */
static void name_of(pid_t pid, char *name, size_t size)
{
    name[0] = '\0';
    if (sv_read_proc(pid, "comm", name, size) > 0)
        name[strcspn(name, "\n")] = '\0';
}

/* How a non-blocking connect of process pid waits for a permit. We
 * cannot keep its socket out of the program's poll or epoll while it
 * waits (the shim can, in its own process), so an answer of EINPROGRESS
 * before the permit would show the program a never-connected socket as
 * ready: the wait is in the trapped connect. A Go program loses nothing
 * by it (its runtime parks the goroutine); any other program's loop
 * stalls, and must not wait for permits it holds itself. */
static enum bh_nonblocking_wait nonblocking_wait_of(pid_t pid)
{
    return sv_program_is_go(pid) ? BH_NONBLOCKING_PARKED : BH_NONBLOCKING_STALLS;
}

/* The compartment is full (admission asks before it would wait): the
 * job's notification may die meanwhile, so it is looked at afterwards. */
static int reap_when_full(void *job)
{
    ((struct job *)job)->full = 1;
    return sv_sockets_reap(((struct job *)job)->state);
}

/* The main thread's try of a non-blocking socket that would wait: the
 * admission returns BH_GATE_WAIT, having taken nothing. */
static int to_a_worker(void)
{
    return 1;
}

/* Admission for the process, then the connect. */
static struct answer admit_and_connect(struct job *job, pid_t pid, int sock, uint64_t inode)
{
    struct sv_state *state = job->state;
    const struct bh_rule *rule = &state->config.rules[job->rule];
    struct sv_process *process = sv_process_get(pid);
    if (!process)
        return (struct answer) { 1, 0, 0, 0, 0 };  /* out of memory: uncounted */
    static _Thread_local struct bh_membership membership[BH_MAX_COMPARTMENTS];
    membership_for(state, pid, rule->compartment, membership);
    struct bh_applicant applicant = { pid, name_of, membership, process->claimed,
                                      reap_when_full, job, NULL, NULL, NULL,
                                      job->try_here ? to_a_worker : NULL,
                                      nonblocking_wait_of };
    struct bh_admitted admitted;
    int shared, wanted = 1;
    do  /* interrupted: its notification died, or seemed to */
        shared = admit_interruptibly(job, &applicant, sock, &admitted);
    while (shared == BH_GATE_REFUSED && errno == EINTR && (wanted = still_wanted(job)));
    struct answer answer = { shared == BH_GATE_PASS, -1, errno, !wanted,
                             shared == BH_GATE_WAIT };
    if (answer.deferred) {
        sv_process_put(process);
        return answer;
    }
    int slot = observed_slot(state, (const struct sockaddr *)&job->call.to);
    /* full, it may have waited (never on the main thread's try) */
    if (shared >= 0 && job->full && !job->try_here && !still_wanted(job)) {
        give_back(state, process, shared, &admitted);  /* taken, and never connected */
        answer.forsaken = 1;
    } else if (shared >= 0) {
        answer.rc = connect_counted(job, sock, inode, shared, &admitted, process,
                                    &answer.err);
    }
    observed_result(state, slot, shared == BH_GATE_REFUSED && wanted,
                    answer.rc < 0 && answer.err != EINPROGRESS && answer.err != EINTR &&
                    answer.err != EALREADY && shared >= 0);
    sv_process_put(process);
    return answer;
}

/* sock: the program's socket, copied (-1 with errno: it could not be);
 * checked: while its notification was valid, so that it is that call's. */
static struct answer carry_out(struct job *job, pid_t pid, int sock, int checked)
{
    struct stat info;
    if (sock < 0 && errno == EPERM) {
        int err = sv_unreadable(job->state, job->call.tid);
        return (struct answer) { !err, -1, err, 0, 0 };
    }
    if (sock >= 0 && !checked && !still_wanted(job))
        return (struct answer) { 0, 0, 0, 1, 0 };  /* the fd may not be that call's any more */
    if (sock < 0 || !sv_is_stream(sock) || fstat(sock, &info) < 0)
        return (struct answer) { 1, 0, 0, 0, 0 };  /* a bad fd: the kernel says EBADF */
    if (!sv_socket_counted(info.st_ino))
        return admit_and_connect(job, pid, sock, info.st_ino);
    /* connect() again on a counted socket: polling its progress */
    int rc = raw_connect(sock, (struct sockaddr *)&job->call.to, job->call.length);
    return (struct answer) { 0, rc, rc < 0 ? errno : 0, 0, 0 };
}

/* Our copy of the socket is closed before the answer: once the program
 * runs on and closes its own, the kernel must see no other reference. The
 * first is the main thread's (sv_connect_trapped); a connect of its own
 * on the same fd to the same address (ONCE_MORE) copies it again. 0 once
 * answered; 1 when the main thread's try would wait: the job, its copy
 * kept, is then a worker's. */
static int handle(struct job *job)
{
    enum delivery delivery = ONCE_MORE;
    for (int round = 0; delivery == ONCE_MORE; round++) {
        pid_t pid = job->pid;
        int sock = job->sock;
        errno = job->copy_errno;
        if (round > 0)
            sock = sv_copy_fd_kept(job->call.tid, job->call.fd, &pid);
        struct answer answer = carry_out(job, pid, sock, round == 0);
        if (answer.deferred) {  /* its copy, checked, is the worker's */
            job->sock = sock;
            job->pid = pid;
            job->try_here = 0;
            return 1;
        }
        if (sock >= 0)
            close(sock);
        if (answer.forsaken) {
            forsake(job);
            delivery = DELIVERED;  /* nothing to deliver */
            break;
        }
        delivery = deliver(job, answer.proceed, answer.rc, answer.err);
    }
    if (delivery == UNDELIVERED) {
        atomic_store(&job->state->rescan, 1);  /* the program is gone: so may its socket be */
        sv_wake(job->state);
    }
    sv_pending_done(job->pending);
    return 0;
}

/* ---- workers ----
 *
 * One thread per matched connect in progress (each may wait for a permit,
 * and a blocking connect blocks), kept once started: a worker that is done
 * waits for the next job rather than exiting, so a busy program costs no
 * thread creation per connect. There are never more workers than connects
 * that were once in progress at the same time. */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_ready = PTHREAD_COND_INITIALIZER;
static struct job *queue_head, *queue_tail;
static int queued, idle, workers;

static void *worker(void *unused)
{
    (void)unused;
    sigset_t rtmin;
    sigemptyset(&rtmin);
    sigaddset(&rtmin, SIGRTMIN);
    pthread_sigmask(SIG_UNBLOCK, &rtmin, NULL);  /* see admit_interruptibly */
    pthread_mutex_lock(&queue_lock);
    for (;;) {
        while (!queue_head) {
            idle++;
            pthread_cond_wait(&queue_ready, &queue_lock);
            idle--;
        }
        struct job *job = queue_head;
        queue_head = job->next;
        if (!queue_head)
            queue_tail = NULL;
        queued--;
        pthread_mutex_unlock(&queue_lock);
        job->on_worker = 1;
        handle(job);
        free(job);
        pthread_mutex_lock(&queue_lock);
    }
    return NULL;
}

/* Queued for a worker: an idle one, or a new one when all are busy. */
static void dispatch(struct job *job)
{
    pthread_mutex_lock(&queue_lock);
    job->next = NULL;
    if (queue_tail)
        queue_tail->next = job;
    else
        queue_head = job;
    queue_tail = job;
    int more = ++queued > idle;
    pthread_mutex_unlock(&queue_lock);
    /* after the unlock: a worker woken on this CPU would else run only
     * to wait for the lock we hold */
    pthread_cond_signal(&queue_ready);
    if (!more)
        return;
    pthread_attr_t attributes;
    pthread_t thread;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    int started = pthread_create(&thread, &attributes, worker, NULL) == 0;
    pthread_attr_destroy(&attributes);
    pthread_mutex_lock(&queue_lock);
    workers += started;
    /* No thread to be had and none to wait for: this one does the work. */
    struct job *mine = !started && workers == 0 ? queue_head : NULL;
    if (mine) {
        queue_head = mine->next;
        if (!queue_head)
            queue_tail = NULL;
        queued--;
    }
    pthread_mutex_unlock(&queue_lock);
    if (mine) {
        handle(mine);
        free(mine);
    }
}

/* connect(AF_UNSPEC) dissolves a connection: on a counted socket it is
 * done here, on the copy, and the permits go back once it succeeded (as
 * the shim gives them back). From the main thread: a disconnect never
 * waits, and so no look at the socket's outcome (outcomes.c) runs
 * meanwhile. 0: not a counted socket (the caller answers CONTINUE). */
static int disconnect_counted(struct sv_state *state, const struct seccomp_notif *notif, int fd)
{
    if (sv_sockets_live() == 0)
        return 0;
    pid_t pid;
    int sock = sv_copy_fd((pid_t)notif->pid, fd, &pid);
    struct stat info;
    int counted = sock >= 0 && fstat(sock, &info) == 0 &&
                  sv_still_valid(state->listener, notif->id) && sv_socket_counted(info.st_ino);
    if (counted) {
        struct sockaddr unspec = { .sa_family = AF_UNSPEC };
        sv_outcome_forget(state, info.st_ino);
        int rc = raw_connect(sock, &unspec, sizeof unspec), err = rc < 0 ? errno : 0;
        if (rc == 0)
            sv_socket_release(state, info.st_ino);
        close(sock);  /* before the answer, as handle() does */
        sock = -1;
        sv_respond(state->listener, notif->id, rc, rc < 0 ? -err : 0, 0);
    }
    if (sock >= 0)
        close(sock);
    return counted;
}

/* The connect's fd and destination as read from the program's memory,
 * not yet known to be its call's (sv_connect_trapped checks before it
 * acts on a match); -1 with errno: unreadable (EPERM: the kernel will not
 * let us, unreadable.c answers; otherwise answered CONTINUE: the kernel
 * says what is wrong). */
static int read_call(const struct seccomp_notif *notif, struct call *call)
{
    uint64_t args[6];
    if (sv_call_args(notif, args) < 0)
        return -1;
    *call = (struct call) { (pid_t)notif->pid, (int)args[0], { 0 }, (socklen_t)args[2] };
    if (call->length < sizeof(sa_family_t) || call->length > sizeof call->to) {
        errno = EINVAL;
        return -1;
    }
    return sv_read_memory(call->tid, args[1], &call->to, call->length);
}

int sv_connect_trapped(struct sv_state *state, const struct seccomp_notif *notif)
{
    static pthread_once_t started = PTHREAD_ONCE_INIT;
    struct call call;
    int readable = read_call(notif, &call) == 0;
    if (!readable && errno == EPERM) {
        sv_answer_unreadable(state, notif);
        return 0;
    }
    if (readable && call.to.ss_family == AF_UNSPEC &&
        disconnect_counted(state, notif, call.fd))
        return 0;  /* answered */
    int rule = -1;
    if (readable && (call.to.ss_family == AF_INET || call.to.ss_family == AF_INET6))
        rule = bh_rule_index_match(state->rules, (struct sockaddr *)&call.to, call.length);
    /* What was read is that call's only if it still waits. An unmatched
     * one is not asked: CONTINUE to a call that is gone changes nothing,
     * and saves every unmatched connect an ioctl. */
    pid_t pid = 0;
    int sock = rule >= 0 ? sv_copy_fd_kept(call.tid, call.fd, &pid) : -1;
    int copy_errno = errno;
    if (rule >= 0 && !sv_still_valid(state->listener, notif->id))
        rule = -1;
    struct job *job = rule >= 0 ? calloc(1, sizeof *job) : NULL;
    if (!job && sock >= 0)
        close(sock);
    if (!job) {
        if (readable && rule < 0 && (call.to.ss_family == AF_INET ||
                                     call.to.ss_family == AF_INET6))
            observe_unmatched(state, &call);
        sv_continue(state->listener, notif->id);
        return 0;
    }
    pthread_once(&started, jobs_start);
    enum restart restart = restarted(state, notif, &call);
    if (restart != RESTART_NONE) {
        if (sock >= 0)
            close(sock);
        free(job);
        return restart == RESTART_HANDED;
    }
    *job = (struct job) { .state = state, .id = notif->id, .pending = notif, .call = call,
                          .rule = rule, .sock = sock, .copy_errno = copy_errno,
                          .pid = pid };
    pthread_mutex_lock(&jobs_lock);
    job->active = jobs;
    jobs = job;
    atomic_fetch_add(&listed, 1);
    pthread_mutex_unlock(&jobs_lock);
    /* A non-blocking connect is done here unless it would wait: the hand-off
     * to a worker costs more than all the rest. */
    job->try_here = sock >= 0 && sv_is_nonblocking(sock);
    if (job->try_here && !handle(job))
        free(job);
    else
        dispatch(job);
    return 1;
}
