/* Asynchronous admission of non-blocking connects.
 *
 * A non-blocking connect() to a full compartment whose wait bound (a
 * blocking socket's: wait_ms, hold_wait_ms; SO_SNDTIMEO aside) is above 0
 * returns -1 EINPROGRESS at once. Its fd is tracked in the fd table as a
 * connection with the WAITING watch bit (it holds no permit yet; its
 * attach time is the waiter's ticket, below) and hidden from the
 * program's readiness calls (shim/readiness). A thread of ours, one per
 * waiting connect, then takes the permits as any blocking connect does
 * (bh_admit, with the wait_ms that admission gives a blocking socket, in
 * the one SysV queue: counted by GETNCNT, by max_waiters, in arrival
 * order with every waiter of every process). Granted: under a guard on
 * one of the connection's fds, the real connect is made on the program's
 * socket and the record is given its watch bits and time, which clears
 * WAITING: from then it holds the permits, given back at its last close
 * as any connection's. Not granted: the refusal line is logged as today,
 * the record keeps WAITING (it holds nothing), and the fds get the
 * compartment's errno as their verdict. Either way each fd of the
 * connection is shown again (bh_waiting_show). Until then the fd behaves
 * as a socket still connecting: connect() again EALREADY, sends and
 * receives EAGAIN (the watched I/O path, through the WAITING bit),
 * SO_ERROR 0; then the verdict once.
 *
 * Shared state, this process only: the waiter records (`waiters`), each
 * one waiting connect's. A record's phase word packs its ticket and its
 * phase; the gate claims a free record (0 -> WAITING), its thread alone
 * moves WAITING -> DECIDED (it took its permits or was refused), and the
 * connection's end (bh_async_ended, from the close paths through
 * outcome.c) alone moves WAITING -> GONE: one compare-and-swap decides who
 * owns the outcome, so a grant and a close racing give the permits back
 * exactly once. Only the thread frees its record, after a GONE's closer
 * said it is done with it (cancel_sent). The fd table's record is
 * touched only under a guard (bh_fd_guard: the fd still carries the
 * connection of that generation, and no close of it completes meanwhile),
 * so the thread never acts on a number the program closed and reused.
 *
 * Leaving the queue. A thread asleep in semtimedop leaves it only on a
 * grant, a time-out or a signal. Ours is one real-time signal, the
 * highest whose disposition is the default when the first wait starts,
 * given a handler that does nothing (SA_RESTART, so that it changes no
 * answer of bh_signals_all_restart). Only our waiter threads unblock it
 * (they block every other signal), and only a timer of the waiter's own
 * (SIGEV_THREAD_ID) sends it: the closer arms it (timer_settime: safe in
 * a signal handler) to fire at once and every 2 ms after, so a close
 * that lands just before the thread enters semtimedop still ends the
 * wait. The wait's restart callback asks whether the phase is still
 * WAITING; after GONE it ends, nothing taken (BH_TAKE_INTERRUPTED), and
 * the thread leaves: its place in the queue goes with it, and no one
 * else's order changes. No program handler runs on our threads. If the
 * program installs a handler of its own on our signal, closes no longer
 * signal (their waiter stays queued to its grant, which it hands straight
 * back, or its time-out); a handler installed in the instant between a
 * closer's look and its timer_settime could run once on our thread.
 * With no free signal, every cancel is of that late kind.
 *
 * Safe from a signal handler: bh_async_ended (atomics, sigaction,
 * timer_settime), bh_async_fd_closing (the readiness layer's forget).
 * Not: the start of a wait (pthread_create), as the io watchdog's. The
 * guard is held across the real connect and the show of the verdict,
 * which takes the readiness lock: a close of a waiting fd from a signal
 * handler that interrupted its own thread inside the readiness layer's
 * locked path (an epoll_ctl on a waiting fd) would wait for that thread.
 *
 * dup: both fds carry the one connection; the copy is hidden too, the
 * wait ends only when every fd of it is closed, and the verdict is shown
 * on each fd that carries it then. fork: the waiter is the parent's; a
 * child's copy of a waiting connection takes permits of its own, as a
 * copy of a connected one does (copies.c: counted twice rather than not
 * at all), and sees its socket as the kernel shows it (unconnected until
 * the parent's wait connects it). exec: our threads die with the image,
 * and their places in the queue with them; a waiting fd that survives is
 * handed to the new image untracked and left unconnected; a grant taken
 * in the instant before exec is held until the process exits (SEM_UNDO).
 * A vfork child never starts a waiter: its connect is refused at once.
 * Death, SIGKILL included: the threads and the queue places go with the
 * process, and a permit taken is returned by the kernel's undo. */
#include "core/async_connect.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "admission/admission.h"
#include "breaker/breaker.h"
#include "core/deadline.h"
#include "core/outcome.h"
#include "core/stall.h"
#include "core/state.h"
#include "libc/clock.h"
#include "libc/libc.h"
#include "readiness/waiting.h"

enum { MAX_WAITERS = 1024, STACK_BYTES = 128 * 1024, REPEAT_NS = 2000000 };
enum { FREE = 0, WAITING = 1, DECIDED = 2, GONE = 3, PHASE_BITS = 2 };

/* One waiting connect. The ticket (its slot in its low bits) is the
 * fd table record's attach time while it waits. */
struct waiter {
    _Atomic uint64_t phase;      /* ticket << PHASE_BITS | phase; 0: free */
    _Atomic int timer_ready;     /* its thread made the timer */
    _Atomic int cancel_sent;     /* GONE's closer is done with the record */
    timer_t timer;
    int64_t ticket;
    int fd;
    uint32_t connection, generation;
    struct bh_joined *joined;    /* where it waits: the connect's namespace */
    struct bh_rule rule;
    struct sockaddr_storage to;
    socklen_t length;
};

static struct waiter waiters[MAX_WAITERS];
static _Atomic uint64_t tickets;
static _Atomic int threads_running;
static _Atomic int cancel_signal;  /* 0: none chosen, -1: none free */
static __thread struct waiter *waiting_here;

static uint64_t phase_of(const struct waiter *w, int phase)
{
    return (uint64_t)w->ticket << PHASE_BITS | (uint64_t)phase;
}

static void on_cancel(int sig) { (void)sig; }

/* The highest real-time signal nobody handles, given our handler. */
static int choose_signal(void)
{
    for (int sig = SIGRTMAX; sig > SIGRTMIN; sig--) {
        struct sigaction now, ours;
        if (sigaction(sig, NULL, &now) < 0 || (now.sa_flags & SA_SIGINFO) ||
            now.sa_handler != SIG_DFL)
            continue;
        memset(&ours, 0, sizeof ours);
        ours.sa_handler = on_cancel;
        ours.sa_flags = SA_RESTART;
        sigfillset(&ours.sa_mask);
        if (sigaction(sig, &ours, NULL) == 0)
            return sig;
    }
    return -1;
}

static int signal_still_ours(int sig)
{
    struct sigaction now;
    return sigaction(sig, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
           now.sa_handler == on_cancel;
}

int bh_async_can_wait(void)
{
    return bh_fd_table_owned_here();
}

int bh_async_own_threads(void)
{
    return atomic_load(&threads_running) + bh_stall_threads();
}

/* The restart callback's question, on a waiter thread. */
static int still_wanted(void)
{
    struct waiter *w = waiting_here;
    return w && atomic_load(&w->phase) == phase_of(w, WAITING);
}

/* fd -1: the wait is a non-blocking socket's (no SO_SNDTIMEO), read from
 * no fd, and waited here, in place, in the namespace of the connect. */
static enum bh_nonblocking_wait parked_here(pid_t pid)
{
    (void)pid;
    return BH_NONBLOCKING_PARKED;
}

static const struct bh_applicant waiter_applicant = {
    0, NULL, NULL, NULL, NULL, NULL, bh_async_own_threads, still_wanted,
    NULL, NULL, parked_here,
};

static struct waiter *claim_record(void)
{
    static _Atomic unsigned cursor;
    for (int tries = 0; tries < MAX_WAITERS; tries++) {
        unsigned slot = atomic_fetch_add(&cursor, 1) % MAX_WAITERS;
        struct waiter *w = &waiters[slot];
        uint64_t free_phase = FREE;
        int64_t ticket = (int64_t)((atomic_fetch_add(&tickets, 1) + 1) * MAX_WAITERS + slot);
        if (atomic_load(&w->phase) != FREE)
            continue;
        atomic_store(&w->timer_ready, 0);
        atomic_store(&w->cancel_sent, 0);
        if (atomic_compare_exchange_strong(&w->phase, &free_phase,
                                           (uint64_t)ticket << PHASE_BITS | WAITING)) {
            w->ticket = ticket;
            return w;
        }
    }
    return NULL;
}

/* Freed by its thread, or by the gate when no thread started: a closer
 * that won GONE is let finish first. */
static void free_record(struct waiter *w)
{
    if (atomic_load(&w->phase) == phase_of(w, GONE))
        while (!atomic_load(&w->cancel_sent))
            sched_yield();
    if (atomic_load(&w->timer_ready))
        timer_delete(w->timer);
    atomic_store(&w->phase, FREE);
}

void bh_async_ended(int64_t ticket)
{
    if (ticket <= 0)
        return;
    struct waiter *w = &waiters[ticket % MAX_WAITERS];
    uint64_t waiting = (uint64_t)ticket << PHASE_BITS | WAITING;
    if (!atomic_compare_exchange_strong(&w->phase, &waiting,
                                        (uint64_t)ticket << PHASE_BITS | GONE))
        return;
    int saved_errno = errno;
    int sig = atomic_load(&cancel_signal);
    if (atomic_load(&w->timer_ready) && sig > 0 && signal_still_ours(sig)) {
        const struct itimerspec now_and_again = { { 0, REPEAT_NS }, { 0, 1 } };
        timer_settime(w->timer, 0, &now_and_again, NULL);
    }
    atomic_store(&w->cancel_sent, 1);
    errno = saved_errno;
}

/* The thread's own timer, which a closer arms to end its wait. */
static void arm_cancel(struct waiter *w)
{
    int sig = atomic_load(&cancel_signal);
    if (sig <= 0)
        return;
    sigset_t ours;
    sigemptyset(&ours);
    sigaddset(&ours, sig);
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = sig;
    event._sigev_un._tid = (pid_t)syscall(SYS_gettid);  /* sigev_notify_thread_id */
    if (timer_create(CLOCK_MONOTONIC, &event, &w->timer) == 0) {
        pthread_sigmask(SIG_UNBLOCK, &ours, NULL);
        atomic_store(&w->timer_ready, 1);
    }
}

/* One fd that still carries the connection, guarded; -1: none left. */
struct guarding {
    const struct waiter *w;
    int fd;
};

static void guard_one(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)compartment;
    struct guarding *guarding = ctx;
    if (guarding->fd < 0 && connection == guarding->w->connection &&
        bh_fd_guard(fd, connection, guarding->w->generation))
        guarding->fd = fd;
}

static int guard_some_fd(const struct waiter *w)
{
    if (bh_fd_guard(w->fd, w->connection, w->generation))
        return w->fd;
    struct guarding guarding = { w, -1 };
    bh_fd_for_each(guard_one, &guarding);
    return guarding.fd;
}

struct showing {
    const struct waiter *w;
    int error;
};

static void show_one(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)compartment;
    const struct showing *showing = ctx;
    if (connection != showing->w->connection ||
        !bh_fd_guard(fd, connection, showing->w->generation))
        return;
    bh_waiting_show(fd, showing->error);
    bh_fd_unguard(connection);
}

/* The verdict, on every fd that carries the connection now. */
static void show_each(const struct waiter *w, int error)
{
    struct showing showing = { w, error };
    bh_fd_for_each(show_one, &showing);
}

static void give_back(const struct waiter *w, const struct bh_admitted *admitted)
{
    struct bh_namespace *ns = &w->joined->ns;
    if (admitted->probe)
        bh_breaker_abandon(bh_breaker_fields(ns, admitted->ask.index), admitted->probe);
    bh_permit_release(ns, admitted->ask.index, admitted->ask.weight);
}

static int decided(struct waiter *w)
{
    uint64_t waiting = phase_of(w, WAITING);
    return atomic_compare_exchange_strong(&w->phase, &waiting, phase_of(w, DECIDED));
}

/* Admitted: the real connect, on the program's socket, under a guard;
 * the record holds the permits from then. A connect that fails at once
 * gives them back, as the gate does, and its errno is the verdict. */
static void granted(struct waiter *w, const struct bh_admitted *admitted)
{
    int fd = decided(w) ? guard_some_fd(w) : -1;
    if (fd < 0) {  /* every fd of it closed meanwhile */
        give_back(w, admitted);
        return;
    }
    const struct bh_compartment *compartment = &bh_shim.config.compartments[w->rule.compartment];
    bh_deadline_before_connect(fd, compartment);
    int rc = libc_connect(fd, (const struct sockaddr *)&w->to, w->length);
    int error = rc < 0 && errno != EINPROGRESS ? errno : 0;
    if (error) {
        give_back(w, admitted);
        bh_count_connect_failure(&w->joined->ns, admitted->ask.index, error == ETIMEDOUT);
        atomic_store(bh_fd_connection_watch(w->connection), BH_WATCH_WAITING);
    } else if (admitted->probe) {
        bh_fd_connection_start(w->connection, bh_outcome_watch(compartment, 1),
                               admitted->probe);
    } else {
        bh_fd_connection_start(w->connection, bh_shim.watch[w->rule.compartment],
                               bh_clock_ns(CLOCK_MONOTONIC));
    }
    bh_fd_unguard(w->connection);
    show_each(w, error);
}

/* Let through uncounted (the namespace was removed, or is out of reach
 * with on_failure = open): connected, and counted in no compartment. */
static void passed(struct waiter *w)
{
    int fd = decided(w) ? guard_some_fd(w) : -1;
    if (fd < 0)
        return;
    int rc = libc_connect(fd, (const struct sockaddr *)&w->to, w->length);
    int error = rc < 0 && errno != EINPROGRESS ? errno : 0;
    bh_fd_move(fd, BH_FD_NOTHING_ENDED);
    bh_fd_unguard(w->connection);
    show_each(w, error);
}

/* Refused (the line is logged): the record keeps WAITING and holds
 * nothing; its other watch bits go, so that no outcome is learned from
 * a socket that never connected. A wait a close ended says nothing. */
static void refused(struct waiter *w, int error)
{
    if (!decided(w))
        return;
    int fd = guard_some_fd(w);
    if (fd < 0)
        return;
    atomic_store(bh_fd_connection_watch(w->connection), BH_WATCH_WAITING);
    bh_fd_unguard(w->connection);
    show_each(w, error);
}

static void *wait_for_permits(void *arg)
{
    struct waiter *w = arg;
    waiting_here = w;
    arm_cancel(w);
    struct bh_admitted admitted;
    int shared = BH_GATE_REFUSED, error = EINTR;
    if (still_wanted()) {
        shared = bh_admit(&w->joined->admitter, &waiter_applicant, -1, &w->rule,
                          (const struct sockaddr *)&w->to, &admitted);
        error = errno;
    }
    if (shared >= 0)
        granted(w, &admitted);
    else if (shared == BH_GATE_PASS)
        passed(w);
    else
        refused(w, error);
    free_record(w);
    atomic_fetch_sub(&threads_running, 1);
    return NULL;
}

static int start_thread(struct waiter *w)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, was;
    sigfillset(&all);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, STACK_BYTES);
    atomic_fetch_add(&threads_running, 1);
    pthread_sigmask(SIG_SETMASK, &all, &was);  /* the thread inherits it */
    int rc = pthread_create(&thread, &attr, wait_for_permits, w);
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        atomic_fetch_sub(&threads_running, 1);
    return rc;
}

/* The gate's undo when the wait cannot start: the fd is untracked (which
 * ends the record, GONE) and shown again. */
static void not_started(struct waiter *w, int fd, int hidden)
{
    if (hidden)
        bh_waiting_forget(fd);
    bh_fd_new(fd, BH_FD_INET_STREAM);  /* holds nothing: nothing to give back */
    bh_async_ended(w->ticket);
    free_record(w);
}

int bh_async_connect(struct bh_joined *joined, int fd, const struct bh_rule *rule,
                     const struct sockaddr *to, socklen_t length, char *why, size_t whylen)
{
    int saved_errno = errno;
    int expected = 0;
    if (atomic_load(&cancel_signal) == 0 &&
        atomic_compare_exchange_strong(&cancel_signal, &expected, -2))
        atomic_store(&cancel_signal, choose_signal());
    struct waiter *w = claim_record();
    if (!w) {
        snprintf(why, whylen, "at once: full; %d connects of this process already "
                 "wait", MAX_WAITERS);
        return -1;
    }
    int shared = joined->shared_index[rule->compartment];
    uint32_t watch = bh_shim.watch[rule->compartment] | BH_WATCH_WAITING;
    if (bh_fd_attach(fd, bh_place(joined, shared), rule->weight, watch, w->ticket) < 0) {
        free_record(w);
        snprintf(why, whylen, "at once: full; another thread connects this socket");
        return -1;
    }
    w->fd = fd;
    w->connection = (bh_fd_entry(fd) >> BH_FD_KIND_BITS) - 1;
    w->generation = bh_fd_generation(w->connection);
    w->joined = joined;
    w->rule = *rule;
    w->length = length < sizeof w->to ? length : sizeof w->to;
    memcpy(&w->to, to, w->length);
    if (bh_waiting_hide(fd) < 0) {
        not_started(w, fd, 0);
        snprintf(why, whylen, "at once: full; the socket cannot be hidden while it "
                 "waits (%s)", strerror(errno));
        return -1;
    }
    int rc = start_thread(w);
    if (rc != 0) {
        not_started(w, fd, 1);
        snprintf(why, whylen, "at once: full; no thread to wait in (pthread_create: "
                 "%s)", strerror(rc));
        return -1;
    }
    errno = saved_errno;
    return 0;
}

int bh_async_again(int fd)
{
    int verdict = bh_waiting_verdict(fd, 1);
    if (verdict == BH_WAITING_HIDDEN) {
        errno = EALREADY;
        return 1;
    }
    if (verdict > 0) {
        errno = verdict;
        return 1;
    }
    /* refused, and the program read it: a new connect, admitted afresh */
    int saved_errno = errno;
    bh_fd_new(fd, BH_FD_INET_STREAM);  /* holds nothing: nothing to give back */
    errno = saved_errno;
    return 0;
}

int bh_async_so_error(int fd, int level, int name, void *value, socklen_t *len)
{
    int verdict = bh_waiting_verdict(fd, 1);
    if (verdict == BH_WAITING_NONE || !value || !len || *len < sizeof(int))
        return libc_getsockopt(fd, level, name, value, len);
    *(int *)value = verdict == BH_WAITING_HIDDEN ? 0 : verdict;
    *len = sizeof(int);
    return 0;
}

/* Out of line: only a connect that waits in the background comes here,
 * and inlined into the send and receive hooks it cost each of their
 * watched calls a register move. */
__attribute__((noinline)) int bh_async_io_held(int fd)
{
    int verdict = bh_waiting_verdict(fd, 1);
    if (verdict == BH_WAITING_NONE)
        return 0;
    errno = verdict == BH_WAITING_HIDDEN ? EAGAIN : verdict;
    return 1;
}

void bh_async_fd_closing(int fd)
{
    int saved_errno = errno;
    bh_waiting_forget(fd);
    errno = saved_errno;
}

/* The copy waits with the original; if the verdict came while it was
 * being hidden, it is shown the same. */
void bh_async_copied(int oldfd, int newfd)
{
    int saved_errno = errno;
    if (bh_waiting_verdict(oldfd, 0) == BH_WAITING_HIDDEN && bh_waiting_hide(newfd) == 0) {
        int verdict = bh_waiting_verdict(oldfd, 0);
        if (verdict != BH_WAITING_HIDDEN)
            bh_waiting_show(newfd, verdict > 0 ? verdict : 0);
    }
    errno = saved_errno;
}

static void copy_holds_its_own(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)fd;
    (void)compartment;
    uint32_t watch = atomic_load(bh_fd_connection_watch(connection));
    if (watch & BH_WATCH_WAITING)
        bh_fd_connection_start(connection, watch & ~(uint32_t)BH_WATCH_WAITING,
                               *(const int64_t *)ctx);
}

void bh_async_after_fork_child(void)
{
    memset(waiters, 0, sizeof waiters);
    atomic_store(&threads_running, 0);
    bh_waiting_reset();
    int64_t now = bh_clock_ns(CLOCK_MONOTONIC);
    bh_fd_for_each(copy_holds_its_own, &now);
}
