/* The watchdog: io_timeout_ms for event loops.
 *
 * An event loop (node, haproxy, asyncio) waits in its own poll/epoll and
 * reads only when the kernel says there is something to read, so a
 * receive of ours never blocks and SO_RCVTIMEO (deadline.c) never fires;
 * TCP_USER_TIMEOUT fails only data left unacknowledged, and a silent
 * server acknowledges the request and answers nothing. So for
 * connections whose socket is non-blocking at their first send, in
 * compartments with io_timeout_ms, a thread of ours watches the clock.
 *
 * The clock. An exchange begins with a send or write that moves a byte
 * while no earlier exchange is unanswered (the connection's first send,
 * or the first after bytes came back), and ends with the first receive or
 * read that brings a byte. The deadline is io_timeout_ms after the
 * exchange's last send that moved bytes: a request sent in many writes
 * (an upload) is timed from its end, as a blocking receive after it
 * would be. The hooks flip the connection's ANSWERED bit at both ends and
 * count exchanges in its watch word, as turnaround does (outcome.h), and
 * a send within an exchange sets SENT if it is clear: no clock read on
 * the I/O path, and one atomic or per period at most. This thread scans
 * the fd table every period (io_timeout_ms / 8 of the shortest in the
 * rules, 10 to 250 ms), marks an unanswered exchange the first time it
 * sees it (and again, clearing SENT, whenever SENT is set), and fires
 * when it sees the same one unanswered and unsent to io_timeout_ms after
 * its mark (it sleeps less than a period when a mark falls due sooner):
 * so between io_timeout_ms and io_timeout_ms + one period after the last
 * send, plus the scheduler's delay.
 *
 * Firing shuts the socket's receiving side (shutdown SHUT_RD): the
 * program's poll says readable, its next read or recv gets -1 ETIMEDOUT
 * (outcome.c turns the EOF into it, and counts an io timeout there), its
 * later ones EOF; it closes the socket, and the permit goes back as at any
 * close. Its writes still go out (no SIGPIPE), and the peer sees the
 * connection end when the program closes it. Not covered: a stall after
 * the first byte of an answer, a server that must speak first, idle
 * connections, a socket made non-blocking after its first send, and a
 * connection after a dup2 onto one of its fds (retired: see below).
 *
 * Shared state, this process only: `state` (who started the thread) and
 * `idle` (a futex word: 1 while the thread may sleep with nothing to
 * time), and, in the fd table, each connection's watch word (the hooks
 * and this thread change bits by atomics), its guard (fd_table.c) and its
 * mark (bh_fd_mark: this thread's alone). The thread is started by the
 * first send that needs it (never in a process without such a connection;
 * never in a vfork child, whose memory is ours), with every signal
 * blocked so that no signal of the program runs on it, and uses no signal
 * itself. Starting it is not async-signal-safe (pthread_create): a send
 * from a signal handler that is a non-blocking connection's very first is
 * the one case. Everything else the hooks do here is an atomic exchange
 * and, when the thread sleeps, a futex wake.
 *
 * Identity: the thread acts on an fd number the program may close and
 * reuse at any moment. It acts only under a guard (bh_fd_guard), which
 * holds while the fd still carries that connection of that generation;
 * every close of that fd (close, fclose, close_range, closefrom, a uid
 * change's reset) waits for the guard to go, and dup2/dup3 onto it retire
 * the connection first: the shutdown can never reach another socket on
 * the same number. Closes the shim does not see (raw syscalls, the fds
 * fcloseall finds gone afterwards) are the exception, as everywhere.
 *
 * fork: the thread is not in the child. The connections the child keeps
 * (their sockets shared with the parent) go back to ARM_STALL there, so
 * the child's next send on one that goes out starts the child's own
 * watchdog (bh_stall_after_fork_child); both may then shut the one
 * socket, which is the same act twice. Connections a process adopts
 * across exec or receives over SCM_RIGHTS carry no watch bits, and are
 * not timed (nor do their receives get SO_RCVTIMEO). A process that dies
 * takes the thread and this state with it: nothing here is shared with
 * another process. */
#include "core/stall.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/outcome.h"
#include "core/state.h"
#include "fdtable/fd_table.h"
#include "libc/libc.h"
#include "log/log.h"
#include "libc/clock.h"

enum { NOT_STARTED = 0, STARTING = 1, RUNNING = 2, CANNOT_START = 3 };
enum { STACK_BYTES = 64 * 1024, PERIOD_MIN_MS = 10, PERIOD_MAX_MS = 250 };

static _Atomic int state;
static _Atomic uint32_t idle;

/* The scan period: an eighth of the shortest io_timeout_ms, bounded. */
static int period_ms(void)
{
    int shortest = 0;
    for (int i = 0; i < bh_shim.config.compartment_count; i++) {
        int ms = bh_shim.config.compartments[i].io_timeout_ms;
        if (ms > 0 && (shortest == 0 || ms < shortest))
            shortest = ms;
    }
    int period = shortest / 8;
    return period < PERIOD_MIN_MS ? PERIOD_MIN_MS
         : period > PERIOD_MAX_MS ? PERIOD_MAX_MS : period;
}

/* The exchange is still unanswered and still this one: its reading side
 * is shut, under a guard, so that the fd is still its socket. */
static void fire(int fd, uint32_t connection, uint32_t generation, uint32_t watch)
{
    _Atomic uint32_t *word = bh_fd_connection_watch(connection);
    if (!bh_fd_guard(fd, connection, generation))
        return;
    uint32_t stalled = (watch & ~(uint32_t)BH_WATCH_STALL) | BH_WATCH_STALLED;
    if (atomic_compare_exchange_strong(word, &watch, stalled))
        shutdown(fd, SHUT_RD);
    bh_fd_unguard(connection);
}

struct scan {
    int64_t now_ns;
    int timing;         /* connections with exchanges to time */
    int64_t sleep_ns;   /* until the next scan: a period, or less when a
                           marked exchange falls due sooner */
};

static void visit(int fd, uint32_t connection, int compartment, void *ctx)
{
    struct scan *scan = ctx;
    uint32_t watch = atomic_load(bh_fd_connection_watch(connection));
    if (!(watch & BH_WATCH_STALL))
        return;
    scan->timing++;
    struct bh_fd_mark *mark = bh_fd_mark(connection);
    if (watch & BH_WATCH_ANSWERED) {
        mark->since_ns = 0;
        return;
    }
    uint32_t generation = bh_fd_generation(connection);
    uint32_t exchange = watch >> BH_WATCH_EXCHANGE_SHIFT;
    int unmarked = !mark->since_ns || mark->generation != generation ||
                   mark->exchange != exchange;
    if (watch & BH_WATCH_SENT) {  /* cleared before the mark: a later send sets it again */
        atomic_fetch_and(bh_fd_connection_watch(connection), ~(uint32_t)BH_WATCH_SENT);
        unmarked = 1;
    }
    if (unmarked) {
        *mark = (struct bh_fd_mark){ generation, exchange, scan->now_ns };
        return;
    }
    int64_t due_in_ns = mark->since_ns +
                        (int64_t)bh_rules_of(compartment)->io_timeout_ms * 1000000 -
                        scan->now_ns;
    if (due_in_ns <= 0)
        fire(fd, connection, generation, watch);
    else if (due_in_ns < scan->sleep_ns)
        scan->sleep_ns = due_in_ns;
}

static void sleep_ns(int64_t ns)
{
    struct timespec period = { ns / 1000000000, ns % 1000000000 };
    while (nanosleep(&period, &period) < 0 && errno == EINTR)
        ;
}

/* idle is 1 before each scan: a connection that starts being timed
 * during or after it finds 1 and wakes us (bh_stall_watch). */
static void *watch_exchanges(void *unused)
{
    (void)unused;
    int64_t period_ns = (int64_t)period_ms() * 1000000;
    for (;;) {
        atomic_store(&idle, 1);
        struct scan scan = { bh_clock_ns(CLOCK_MONOTONIC), 0, period_ns };
        bh_fd_for_each(visit, &scan);
        if (scan.timing == 0) {
            libc_syscall(SYS_futex, (long)&idle, FUTEX_WAIT_PRIVATE, 1, 0, 0, 0);
            continue;
        }
        atomic_store(&idle, 0);
        sleep_ns(scan.sleep_ns);
    }
    return NULL;
}

static int start_thread(void)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, was;
    int saved_errno = errno;
    sigfillset(&all);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, STACK_BYTES);
    pthread_sigmask(SIG_SETMASK, &all, &was);  /* the thread inherits it */
    int rc = pthread_create(&thread, &attr, watch_exchanges, NULL);
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    pthread_attr_destroy(&attr);
    if (rc == 0)
        pthread_setname_np(thread, "bulkhead-io");
    else
        bh_log(BH_LOG_ERROR, "io_timeout_ms: cannot start the thread that times "
               "non-blocking connections (pthread_create: %s); their exchanges "
               "go untimed", strerror(rc));
    errno = saved_errno;
    return rc == 0;
}

int bh_stall_watch(void)
{
    int now = atomic_load(&state);
    if (now == NOT_STARTED && bh_fd_table_owned_here() &&
        atomic_compare_exchange_strong(&state, &now, STARTING)) {
        now = start_thread() ? RUNNING : CANNOT_START;
        atomic_store(&state, now);
    }
    if (now == CANNOT_START || now == NOT_STARTED)
        return 0;
    if (atomic_exchange(&idle, 0) == 1) {
        int saved_errno = errno;
        libc_syscall(SYS_futex, (long)&idle, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
        errno = saved_errno;
    }
    return 1;
}

int bh_stall_threads(void)
{
    int now = atomic_load(&state);
    return now == STARTING || now == RUNNING;
}

/* A connection the child keeps (its socket shared with the parent, whose
 * watchdog still times it) is timed here too from the child's next send
 * that goes out, which starts the child's own watchdog. */
static void rearm_in_child(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)fd;
    (void)compartment;
    (void)ctx;
    _Atomic uint32_t *word = bh_fd_connection_watch(connection);
    if (atomic_fetch_and(word, ~(uint32_t)BH_WATCH_STALL) & BH_WATCH_STALL)
        atomic_fetch_or(word, BH_WATCH_ARM_STALL);
}

void bh_stall_after_fork_child(void)
{
    atomic_store(&state, NOT_STARTED);
    atomic_store(&idle, 0);
    bh_fd_for_each(rearm_in_child, NULL);
}
