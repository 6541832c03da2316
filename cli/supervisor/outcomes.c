/* What a supervised connect turned out to be, told to the breaker and
 * counted as the shim counts it (shim/core/outcome.c): connect_failures,
 * connect_timeouts, the connect-time histogram (blocking connects: a
 * non-blocking one's time is known only to the grain of the looks below),
 * the breaker's failures and its probe.
 *
 * A blocking connect's outcome is its result (sv_outcome_tell). A
 * non-blocking one (Go's always are) returns EINPROGRESS, and its
 * outcome comes later: its socket is watched here until it shows one.
 * The watch takes no reference to the program's socket (a copy held
 * would keep a socket the program closed connecting): the kernel is
 * asked its TCP state through sock_diag by its addresses, at 2 ms after
 * the connect, then at twice the last wait, up to 200 ms, and at
 * connect_timeout_ms itself:
 *   ESTABLISHED, or any state past it (FIN_WAIT, CLOSE_WAIT, TIME_WAIT..)
 *     the breaker's success;
 *   SYN_SENT (or SYN_RECV)   still pending, past connect_timeout_ms too:
 *     the kernel fails it at its next SYN retransmission (TCP_USER_TIMEOUT,
 *     core/deadline.c), and a SYN-ACK before that connects it, so only the
 *     kernel's verdict is counted, as the shim counts what the program is
 *     told;
 *   not found: failed (a failed connect leaves the kernel's tables) or
 *     closed. The program's fd tells which: copied for a moment
 *     (pidfd_getfd), the same inode, TCP_INFO (which, unlike SO_ERROR,
 *     consumes nothing the program has yet to read) in CLOSE with nothing
 *     ever acknowledged is a failure; gone, the outcome is unknown and a
 *     probe gives its slot back, as the shim's does at a close.
 * A program that learns of a failure closes its socket at once (Go does,
 * within microseconds of the RST): the trapped close is the moment, before
 * it is answered, when the fd still shows the failed socket
 * (sv_outcome_closing). Failed is a timeout when it came connect_timeout_ms
 * or more after the connect (3 s without one: the kernel's earliest SYN
 * timeout), otherwise refused or unreachable (the kernel keeps which to
 * itself: reading SO_ERROR would take it from the program).
 *
 * Shared state: the table of watched sockets, under `lock`. Workers add
 * to it (sv_outcome_watch); the main thread alone takes entries out to
 * look at them and puts back those still pending, so each outcome is told
 * once: an entry leaves the table under the lock before it is told (a
 * disconnect, sv_outcome_forget, is the main thread's too). The lock is
 * never held across a look. Memory: one entry per counted
 * socket still connecting, so no more than the compartments' limits; a
 * look is one netlink round trip (one socket, kept by the main thread),
 * at most LOOKS_PER_ROUND per pass of the main loop, so a flood of
 * connects never holds up the notifications. Nothing here is in a signal
 * handler. If the supervisor dies, its watches die with it: a probe it
 * held names its pid, and the next connect after it takes the slot over
 * (breaker.c). */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "breaker/breaker.h"
#include "log/log.h"
#include "supervisor/supervisor.h"
#include "libc/clock.h"

enum {
    FIRST_LOOK_MS = 2,
    LONGEST_WAIT_MS = 200,
    LOOKS_PER_ROUND = 64,
    KERNEL_SYN_TIMEOUT_MS = 3000,  /* tcp_syn_retries 1: 1 s + 2 s */
};

/* The kernel's TCP states, as sock_diag and TCP_INFO number them. */
enum { STATE_SYN_SENT = 2, STATE_SYN_RECV = 3, STATE_CLOSE = 7, STATE_LISTEN = 10 };

struct pending {
    uint64_t inode;
    struct bh_sock_id id;
    pid_t pid;          /* the process that connected, and its fd */
    int fd;
    int shared, local;
    int64_t probe;      /* the breaker's probe slot it holds; 0 none */
    int64_t since_ns, next_ns;
    int wait_ms;        /* the last wait between looks */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending *table;
static int table_count, table_capacity;

static void log_change(struct sv_state *state, int local, enum bh_breaker_change change)
{
    const struct bh_compartment *compartment = &state->config.compartments[local];
    if (change == BH_BREAKER_OPENED)
        bh_log(BH_LOG_WARN, "[%s]: breaker open for %d ms after %d failed "
               "connections in a row (seccomp supervisor)", compartment->name,
               compartment->breaker_open_ms, compartment->breaker_failures);
    else if (change == BH_BREAKER_REOPENED)
        bh_log(BH_LOG_WARN, "[%s]: breaker open again: the probe failed (seccomp "
               "supervisor)", compartment->name);
    else if (change == BH_BREAKER_CLOSED)
        bh_log(BH_LOG_INFO, "[%s]: breaker closed: the probe succeeded (seccomp "
               "supervisor)", compartment->name);
}

void sv_outcome_tell(struct sv_state *state, int shared, int local, int64_t probe,
                     int err, int64_t connect_ns)
{
    const struct bh_compartment *compartment = &state->config.compartments[local];
    struct bh_breaker_shared *breaker = bh_breaker_fields(&state->ns, shared);
    struct bh_breaker_config config = { compartment->breaker_failures,
                                        compartment->breaker_open_ms,
                                        compartment->breaker_open_max_ms };
    if (err == 0) {
        if (connect_ns >= 0)
            bh_count_connect_time(&state->ns, shared, connect_ns);
        if (probe || bh_breaker_wants(breaker, 0))
            log_change(state, local, bh_breaker_success(breaker, probe));
    } else if (bh_downstream_failure(err)) {
        bh_count_connect_failure(&state->ns, shared, err == ETIMEDOUT);
        log_change(state, local, bh_breaker_failure(breaker, &config, probe, 0));
    } else if (probe) {
        bh_breaker_abandon(breaker, probe);
    }
}

/* ---- the table ---- */

/* Under the lock: room for one more entry. */
static int room_locked(void)
{
    if (table_count < table_capacity)
        return 0;
    int more = table_capacity ? 2 * table_capacity : 16;
    struct pending *grown = realloc(table, (size_t)more * sizeof *table);
    if (!grown)
        return -1;
    table = grown;
    table_capacity = more;
    return 0;
}

int sv_outcome_watch(struct sv_state *state, const struct sv_connecting *connecting)
{
    struct pending entry = { .inode = connecting->inode, .pid = connecting->pid,
                             .fd = connecting->fd, .shared = connecting->shared,
                             .local = connecting->local, .probe = connecting->probe,
                             .since_ns = bh_clock_ns(CLOCK_MONOTONIC), .wait_ms = FIRST_LOOK_MS };
    entry.next_ns = entry.since_ns + FIRST_LOOK_MS * 1000000;
    int wake = -1;
    if (connecting->id) {
        entry.id = *connecting->id;
        pthread_mutex_lock(&lock);
        if (room_locked() == 0) {
            /* the main thread sleeps until the first entry due: is this one? */
            wake = 1;
            for (int i = 0; i < table_count && wake; i++)
                wake = table[i].next_ns > entry.next_ns;
            table[table_count++] = entry;
        }
        pthread_mutex_unlock(&lock);
    }
    if (wake < 0)  /* not watched: nothing will tell its outcome */
        sv_outcome_tell(state, entry.shared, entry.local, entry.probe, EINPROGRESS, -1);
    return wake > 0;
}

int sv_outcomes_due_ms(void)
{
    pthread_mutex_lock(&lock);
    int64_t first = 0;
    for (int i = 0; i < table_count; i++)
        if (!first || table[i].next_ns < first)
            first = table[i].next_ns;
    pthread_mutex_unlock(&lock);
    if (!first)
        return -1;
    int64_t wait = (first - bh_clock_ns(CLOCK_MONOTONIC) + 999999) / 1000000;
    return wait < 0 ? 0 : (int)wait;
}

/* Under the lock: entry i leaves the table, into *out. */
static void take_locked(int i, struct pending *out)
{
    *out = table[i];
    table[i] = table[--table_count];
}

/* Back in the table, to be looked at again when next_ns says. */
static void put_back(struct sv_state *state, struct pending *entry)
{
    pthread_mutex_lock(&lock);
    if (room_locked() == 0) {
        table[table_count++] = *entry;
        entry = NULL;
    }
    pthread_mutex_unlock(&lock);
    if (entry)  /* out of memory: its outcome goes unknown */
        sv_outcome_tell(state, entry->shared, entry->local, entry->probe, EINPROGRESS, -1);
}

/* ---- the kernel's word ---- */

/* What a look found. */
enum verdict { PENDING, CONNECTED, FAILED, UNKNOWN };

static int connected_state(int tcp_state)
{
    return tcp_state != STATE_SYN_SENT && tcp_state != STATE_SYN_RECV &&
           tcp_state != STATE_CLOSE && tcp_state != STATE_LISTEN;
}

/* The main thread's netlink socket for sock_diag, opened once. */
static int diag_socket(void)
{
    static int fd = -1;
    if (fd < 0)
        fd = bh_sock_diag_socket();
    return fd;
}

/* The TCP state of the socket with this id if it is this inode (or its
 * orphan, inode 0); 0 not found (or another socket now); -1 unknown. */
static int diag_state(const struct pending *entry)
{
    static uint32_t sequence;
    struct inet_diag_msg found;
    int fd = diag_socket();
    /* each ask its own sequence: an answer to an earlier one is not this one's */
    int answer = fd < 0 ? -1 : bh_sock_diag_find(fd, &entry->id, ++sequence, &found);
    if (answer <= 0)
        return answer;
    if (found.idiag_inode && found.idiag_inode != entry->inode)
        return 0;
    return found.idiag_state;
}

/* Failed now: a timeout, or refused (or unreachable: the same to the
 * breaker and the counters but connect_timeouts). */
static int failure_of(struct sv_state *state, const struct pending *entry, int64_t now)
{
    int timeout_ms = state->config.compartments[entry->local].connect_timeout_ms;
    int64_t elapsed_ms = (now - entry->since_ns) / 1000000;
    return elapsed_ms >= (timeout_ms > 0 ? timeout_ms : KERNEL_SYN_TIMEOUT_MS)
               ? ETIMEDOUT : ECONNREFUSED;
}

/* The program's fd, if it is still the socket: its TCP_INFO. */
static enum verdict ask_fd(const struct pending *entry)
{
    pid_t pid;
    int sock = sv_copy_fd_kept(entry->pid, entry->fd, &pid);
    struct stat info;
    struct tcp_info tcp;
    socklen_t length = sizeof tcp;
    enum verdict verdict = UNKNOWN;
    if (sock >= 0 && fstat(sock, &info) == 0 && info.st_ino == entry->inode &&
        getsockopt(sock, IPPROTO_TCP, TCP_INFO, &tcp, &length) == 0) {
        if (connected_state(tcp.tcpi_state))
            verdict = CONNECTED;
        else if (tcp.tcpi_state == STATE_CLOSE)  /* the handshake acks the SYN: 1 */
            verdict = tcp.tcpi_bytes_acked ? CONNECTED : FAILED;
        else
            verdict = PENDING;
    }
    if (sock >= 0)
        close(sock);
    return verdict;
}

/* One look at a socket the main thread took out of the table. */
static enum verdict look(const struct pending *entry)
{
    int tcp_state = diag_state(entry);
    if (tcp_state > 0 && connected_state(tcp_state))
        return CONNECTED;
    if (tcp_state == STATE_SYN_SENT || tcp_state == STATE_SYN_RECV)
        return PENDING;  /* past connect_timeout_ms too: the kernel decides */
    /* not found, CLOSE, or sock_diag could not say: the fd will */
    return ask_fd(entry);
}

/* The next look: after twice the last wait, or at connect_timeout_ms if
 * that comes first. */
static void wait_longer(struct sv_state *state, struct pending *entry, int64_t now)
{
    int timeout_ms = state->config.compartments[entry->local].connect_timeout_ms;
    entry->wait_ms = entry->wait_ms * 2 < LONGEST_WAIT_MS ? entry->wait_ms * 2
                                                          : LONGEST_WAIT_MS;
    entry->next_ns = now + (int64_t)entry->wait_ms * 1000000;
    int64_t deadline = entry->since_ns + (int64_t)timeout_ms * 1000000;
    if (timeout_ms > 0 && entry->next_ns > deadline && deadline > now)
        entry->next_ns = deadline;
}

/* The verdict told, or the entry put back (PENDING). */
static void settle(struct sv_state *state, struct pending *entry, enum verdict verdict,
                   int64_t now)
{
    if (verdict == PENDING) {
        put_back(state, entry);
        return;
    }
    int err = verdict == CONNECTED ? 0
            : verdict == FAILED ? failure_of(state, entry, now) : EINPROGRESS;
    sv_outcome_tell(state, entry->shared, entry->local, entry->probe, err, -1);
}

void sv_outcomes_poll(struct sv_state *state)
{
    struct pending due[LOOKS_PER_ROUND];
    int count = 0;
    int64_t now = bh_clock_ns(CLOCK_MONOTONIC);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < table_count && count < LOOKS_PER_ROUND;)
        if (table[i].next_ns <= now)
            take_locked(i, &due[count++]);
        else
            i++;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < count; i++) {
        enum verdict verdict = look(&due[i]);
        if (verdict == PENDING)
            wait_longer(state, &due[i], now);
        settle(state, &due[i], verdict, now);
    }
}

void sv_outcome_closing(struct sv_state *state, int fd)
{
    struct pending closing[LOOKS_PER_ROUND];
    int count = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < table_count && count < LOOKS_PER_ROUND;)
        if (table[i].fd == fd)
            take_locked(i, &closing[count++]);
        else
            i++;
    pthread_mutex_unlock(&lock);
    int64_t now = bh_clock_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < count; i++) {
        /* Another process's fd of that number, or a socket still
         * connecting (a copy of it may live on): the usual looks decide. */
        enum verdict verdict = ask_fd(&closing[i]);
        settle(state, &closing[i], verdict == UNKNOWN ? PENDING : verdict, now);
    }
}

void sv_outcome_forget(struct sv_state *state, uint64_t inode)
{
    struct pending gone[LOOKS_PER_ROUND];
    int count = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < table_count && count < LOOKS_PER_ROUND;)
        if (table[i].inode == inode)
            take_locked(i, &gone[count++]);
        else
            i++;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < count; i++)
        sv_outcome_tell(state, gone[i].shared, gone[i].local, gone[i].probe, EINPROGRESS, -1);
}
