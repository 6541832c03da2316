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
 * dumpable) is neither: unreadable.c answers, as on_failure says. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
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

struct job {
    struct job *next;  /* in the queue */
    struct sv_state *state;
    const struct seccomp_notif *pending;  /* freed once answered (heir.c) */
    uint64_t id;
    pid_t tid;
    int fd;
    int rule;
    struct sockaddr_storage to;
    socklen_t length;
};

static int respond(int listener, uint64_t id, int64_t value, int error, uint32_t flags)
{
    struct seccomp_notif_resp response = { .id = id, .val = value, .error = error,
                                           .flags = flags };
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
}

void sv_continue(int listener, uint64_t id)
{
    respond(listener, id, 0, 0, SECCOMP_USER_NOTIF_FLAG_CONTINUE);
}

void sv_fail(int listener, uint64_t id, int err)
{
    respond(listener, id, -1, -err, 0);
}

int sv_still_valid(int listener, uint64_t id)
{
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

int sv_read_memory(pid_t tid, uint64_t at, void *into, size_t length)
{
    struct iovec here = { into, length };
    struct iovec there = { (void *)(uintptr_t)at, length };
    ssize_t got = process_vm_readv(tid, &here, 1, &there, 1, 0);
    if (got >= 0 && got < (ssize_t)length)
        errno = EFAULT;  /* a short read: the rest is not mapped */
    return got == (ssize_t)length ? 0 : -1;
}

/* A /proc file of pid, whole (NUL-terminated, up to size - 1 bytes). */
static ssize_t read_proc(pid_t pid, const char *what, char *text, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, what);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t length = read(fd, text, size - 1);
    close(fd);
    if (length >= 0)
        text[length] = '\0';
    return length;
}

/* A number after "Key:" in /proc/pid/status (the nth, from 0); -1. */
static long status_field(pid_t pid, const char *key, int nth)
{
    char text[4096];
    if (read_proc(pid, "status", text, sizeof text) < 0)
        return -1;
    const char *at = strstr(text, key);
    if (!at)
        return -1;
    char *end = (char *)at + strlen(key);
    long value = -1;
    for (int i = 0; i <= nth; i++)
        value = strtol(end, &end, 10);
    return value;
}

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
    if (read_proc(pid, "cmdline", text->cmdline, sizeof text->cmdline) > 0)
        identity->program = basename(text->cmdline);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t length = readlink(path, text->exe, sizeof text->exe - 1);
    if (length > 0) {
        text->exe[length] = '\0';
        identity->executed = basename(text->exe);
    }
    identity->uid = (uid_t)status_field(pid, "Uid:", 1);
    ssize_t size = read_proc(pid, "environ", text->environ, sizeof text->environ);
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

pid_t sv_process_of(pid_t tid)
{
    return (pid_t)status_field(tid, "Tgid:", 0);
}

int sv_copy_fd(pid_t tid, int fd, pid_t *pid)
{
    *pid = sv_process_of(tid);
    int pidfd = *pid > 0 ? (int)syscall(SYS_pidfd_open, *pid, 0) : -1;
    int copy = pidfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0) : -1;
    int saved_errno = errno;  /* EPERM: the program may not be read */
    if (pidfd >= 0)
        close(pidfd);
    errno = saved_errno;
    return copy;
}

/* ---- the connect itself ---- */

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
        struct bh_applicant applicant = { .pid = process->pid, .claimed = process->claimed };
        bh_admission_release(&state->admitter, &applicant, shared, admitted->taken);
        if (admitted->probe)
            bh_breaker_abandon(bh_breaker_fields(&state->ns, shared), admitted->probe);
        int rc = connect(sock, (struct sockaddr *)&job->to, job->length);
        *err = rc < 0 ? errno : 0;
        return rc;
    }
    if (counted)
        sv_wake(state);
    struct timespec before, after;
    clock_gettime(CLOCK_MONOTONIC, &before);
    int rc = connect(sock, (struct sockaddr *)&job->to, job->length);
    *err = rc < 0 ? errno : 0;
    clock_gettime(CLOCK_MONOTONIC, &after);
    int failed = rc < 0 && *err != EINPROGRESS && *err != EINTR && *err != EALREADY;
    if (!failed)
        sv_socket_connecting(state, inode, sock, (struct sockaddr *)&job->to);
    if (rc < 0 && (*err == EINPROGRESS || *err == EINTR)) {
        /* under way (non-blocking, or interrupted): its outcome comes later */
        struct sv_connecting connecting = { sock, (struct sockaddr *)&job->to, inode,
                                            process->pid, job->fd, shared, local,
                                            admitted->probe };
        if (sv_outcome_watch(state, &connecting))
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
 * does it), or the result of ours. */
struct answer {
    int proceed;
    int rc, err;
};

/* Admission for the process, then the connect. */
static struct answer admit_and_connect(struct job *job, pid_t pid, int sock, uint64_t inode)
{
    struct sv_state *state = job->state;
    const struct bh_rule *rule = &state->config.rules[job->rule];
    struct sv_process *process = sv_process_get(pid);
    if (!process)
        return (struct answer) { 1, 0, 0 };  /* out of memory: uncounted, as today */
    static _Thread_local struct bh_membership membership[BH_MAX_COMPARTMENTS];
    membership_for(state, pid, rule->compartment, membership);
    char name[64] = "";
    if (read_proc(pid, "comm", name, sizeof name) > 0)
        name[strcspn(name, "\n")] = '\0';
    struct bh_applicant applicant = { pid, name, membership, process->claimed,
                                      sv_sockets_reap, state, NULL };
    struct bh_admitted admitted;
    int shared = bh_admit(&state->admitter, &applicant, sock, rule,
                          (struct sockaddr *)&job->to, &admitted);
    struct answer answer = { shared == BH_GATE_PASS, -1, errno };
    if (shared >= 0)
        answer.rc = connect_counted(job, sock, inode, shared, &admitted, process,
                                    &answer.err);
    sv_process_put(process);
    return answer;
}

int sv_is_stream(int sock)
{
    int type = 0;
    socklen_t length = sizeof type;
    return getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &length) == 0 &&
           type == SOCK_STREAM;
}

static struct answer carry_out(struct job *job, pid_t pid, int sock)
{
    struct stat info;
    if (sock < 0 && errno == EPERM) {
        int err = sv_unreadable(job->state, job->tid);
        return (struct answer) { !err, -1, err };
    }
    if (sock < 0 || !sv_still_valid(job->state->listener, job->id) || !sv_is_stream(sock) ||
        fstat(sock, &info) < 0)
        return (struct answer) { 1, 0, 0 };  /* a bad fd: the kernel says EBADF */
    if (!sv_socket_counted(info.st_ino))
        return admit_and_connect(job, pid, sock, info.st_ino);
    /* connect() again on a counted socket: polling its progress */
    int rc = connect(sock, (struct sockaddr *)&job->to, job->length);
    return (struct answer) { 0, rc, rc < 0 ? errno : 0 };
}

/* Our copy of the socket is closed before the answer: once the program
 * runs on and closes its own, the kernel must see no other reference. */
static void handle(struct job *job)
{
    int listener = job->state->listener;
    pid_t pid;
    int sock = sv_copy_fd(job->tid, job->fd, &pid);
    struct answer answer = carry_out(job, pid, sock);
    if (sock >= 0)
        close(sock);
    if (answer.proceed)
        sv_continue(listener, job->id);
    else if (respond(listener, job->id, answer.rc, answer.rc < 0 ? -answer.err : 0, 0) < 0)
    {
        atomic_store(&job->state->rescan, 1);  /* the program is gone: so may its socket be */
        sv_wake(job->state);
    }
    sv_pending_done(job->pending);
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
    pthread_cond_signal(&queue_ready);
    pthread_mutex_unlock(&queue_lock);
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
static int disconnect_counted(struct sv_state *state, const struct seccomp_notif *notif)
{
    if (sv_sockets_live() == 0)
        return 0;
    pid_t pid;
    int sock = sv_copy_fd((pid_t)notif->pid, (int)notif->data.args[0], &pid);
    struct stat info;
    int counted = sock >= 0 && fstat(sock, &info) == 0 &&
                  sv_still_valid(state->listener, notif->id) && sv_socket_counted(info.st_ino);
    if (counted) {
        struct sockaddr unspec = { .sa_family = AF_UNSPEC };
        sv_outcome_forget(state, info.st_ino);
        int rc = connect(sock, &unspec, sizeof unspec), err = rc < 0 ? errno : 0;
        if (rc == 0)
            sv_socket_release(state, info.st_ino);
        close(sock);  /* before the answer, as handle() does */
        sock = -1;
        respond(state->listener, notif->id, rc, rc < 0 ? -err : 0, 0);
    }
    if (sock >= 0)
        close(sock);
    return counted;
}

int sv_connect_trapped(struct sv_state *state, const struct seccomp_notif *notif)
{
    struct job *job = calloc(1, sizeof *job);
    socklen_t length = (socklen_t)notif->data.args[2];
    int sized = job && length >= sizeof(sa_family_t) && length <= sizeof job->to;
    int read = sized ? sv_read_memory(notif->pid, notif->data.args[1], &job->to, length) : -1;
    if (sized && read < 0 && errno == EPERM) {
        free(job);
        sv_answer_unreadable(state, notif);
        return 0;
    }
    int readable = read == 0 && sv_still_valid(state->listener, notif->id);
    if (readable && job->to.ss_family == AF_UNSPEC && disconnect_counted(state, notif)) {
        free(job);
        return 0;  /* answered */
    }
    if (!readable || (job->to.ss_family != AF_INET && job->to.ss_family != AF_INET6) ||
        (job->rule = bh_rule_index_match(state->rules, (struct sockaddr *)&job->to,
                                         length)) < 0) {
        free(job);
        sv_continue(state->listener, notif->id);
        return 0;
    }
    *job = (struct job) { NULL, state, notif, notif->id, (pid_t)notif->pid,
                          (int)notif->data.args[0], job->rule, job->to, length };
    dispatch(job);
    return 1;
}
