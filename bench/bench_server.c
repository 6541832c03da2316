/* bench_server: the loopback peer of the benchmark. Never run under the shim.
 *
 *     bench_server READY_FILE HOLD_MS [LIFETIME_S]
 *
 * Listens on five ephemeral ports of 127.0.0.1 and writes them, once all
 * listen, to READY_FILE (tmp + rename) as one line
 * "sink echo hold control watch":
 *
 *   sink     accept, close at once (a thread of its own, blocking accept):
 *            the peer of connect+close loops.
 *   echo     echoes whatever it reads; closes on EOF or reset: the peer of
 *            round trips and of requests.
 *   hold     holds each connection HOLD_MS after accept (whatever the client
 *            sends meanwhile is read and dropped), then writes one byte and
 *            waits for the client to close. A connection counts as "in
 *            service" from accept until that byte is written, and the byte
 *            is written after the count goes down, so a client that reacts
 *            to it can never be counted twice: the maximum is exact, never
 *            inflated by the server's own lag.
 *   control  one connection per question: 'S' answers
 *            "max=N accepted=M current=K late_us=L gap_us=G\n" for the hold
 *            port; 'R' answers the same, then resets max to the current
 *            count and the rest to 0. late_us: mean lateness of the answers
 *            (after the hold); gap_us: mean time from an answer to the next
 *            accept, answers and accepts paired in order: with a queue of
 *            clients, the time a permit spends passing from one connection
 *            to the next. A permit's cycle is hold + late + gap.
 *            'T' answers "seq=N lead_ns=L open=O ok=K\n" for the last
 *            trial the watch port finished (seq=0: none yet).
 *   watch    the observer of the hand-off at a holder's end, one trial at a
 *            time (a thread of its own): the first connection of a trial is
 *            the holder (it sends 'H', then dies or exits without closing),
 *            the second the waiter the shim let through once the holder's
 *            permit came back. A thread blocked in recv() on the holder
 *            stamps its EOF/RST, the thread blocked in accept() stamps the
 *            waiter's arrival (CLOCK_MONOTONIC, right as each call returns);
 *            lead_ns = waiter's accept - holder's EOF: negative when the
 *            new connection arrived while the old one was still open. open=1
 *            when, at the waiter's accept, the kernel still had the holder's
 *            connection ESTABLISHED (its FIN/RST not yet received): an
 *            overlap seen in kernel state, free of wake-up order. ok=0: the
 *            trial was malformed (no 'H', or no EOF within 10 s).
 *
 * The echo, hold and control ports share one epoll thread, so the control
 * answer is consistent with the hold counts. Hold deadlines are FIFO (one
 * hold time for all), kept in a ring and served by one absolute timerfd.
 *
 * Exits on SIGTERM/SIGINT, or after LIFETIME_S (default 900) so that a
 * forgotten server never outlives a run by long. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum kind { K_FREE = 0, K_ECHO, K_HELD, K_ANSWERED, K_LISTEN_ECHO,
            K_LISTEN_HOLD, K_LISTEN_CONTROL, K_TIMER };

#define MAX_FDS 65536
#define RING 65536

static unsigned char fd_kind[MAX_FDS];
static uint32_t fd_gen[MAX_FDS];

struct held { int fd; uint32_t gen; int64_t deadline; };
static struct held ring[RING];
static unsigned ring_head, ring_tail;   /* head: oldest */

static int epfd, timer_fd, hold_ms;
static int current, maximum;
static unsigned long long accepted;

/* Where a permit's cycle goes beyond the hold: the server's own lateness
 * in answering (answer - deadline), and the turnaround from an answer to
 * the next accept (client wakes, closes, the permit passes on, the next
 * client connects, we accept). Answers and accepts are paired in order. */
static int64_t answered_at[RING];
static unsigned answers_head, answers_tail;
static int64_t late_sum, gap_sum;
static long late_n, gap_n;

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int listen_on(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    if (listen(fd, 4096) < 0)
        die("listen");
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

static void watch(int fd, int kind, uint32_t events)
{
    fd_kind[fd] = (unsigned char)kind;
    struct epoll_event ev = { .events = events, .data.u64 = (uint64_t)fd };
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl");
}

static void forget(int fd)
{
    if (fd_kind[fd] == K_HELD)
        current--;
    fd_kind[fd] = K_FREE;
    fd_gen[fd]++;
    close(fd);  /* also leaves the epoll set */
}

/* ---- watch: one hand-off trial at a time -------------------------------- */

static pthread_mutex_t trial_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { long seq; int64_t lead_ns; int open, ok; } last_trial;

struct holder_watch { int fd; int saw_hello; int64_t eof_at; };

static void *holder_eof_thread(void *arg)
{
    struct holder_watch *h = arg;
    char buf[64];
    for (;;) {
        ssize_t n = recv(h->fd, buf, sizeof buf, 0);
        if (n > 0) {
            if (buf[0] == 'H')
                h->saw_hello = 1;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return NULL;  /* SO_RCVTIMEO: no EOF in time, eof_at stays 0 */
        h->eof_at = now_ns();  /* EOF (FIN) or reset (RST) */
        return NULL;
    }
}

static int still_established(int fd)
{
    struct tcp_info info;
    socklen_t len = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) < 0)
        return 0;
    return info.tcpi_state == TCP_ESTABLISHED;
}

static void *watch_thread(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    long seq = 0;
    for (;;) {
        int holder = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (holder < 0)
            continue;
        struct timeval tv = { 10, 0 };
        setsockopt(holder, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        struct holder_watch h = { holder, 0, 0 };
        pthread_t tid;
        if (pthread_create(&tid, NULL, holder_eof_thread, &h) != 0) {
            close(holder);
            continue;
        }
        int waiter = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        int64_t arrived = now_ns();
        int open = waiter >= 0 && still_established(holder);
        pthread_join(tid, NULL);
        int ok = waiter >= 0 && h.saw_hello && h.eof_at != 0;
        pthread_mutex_lock(&trial_lock);
        last_trial.seq = ++seq;
        last_trial.lead_ns = ok ? arrived - h.eof_at : 0;
        last_trial.open = open;
        last_trial.ok = ok;
        pthread_mutex_unlock(&trial_lock);
        close(holder);
        if (waiter >= 0)
            close(waiter);
    }
    return NULL;
}

static void *sink_thread(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            close(fd);
        else if (errno != EINTR && errno != ECONNABORTED && errno != EMFILE &&
                 errno != ENFILE)
            die("accept (sink)");
    }
    return NULL;
}

static void arm_timer(void)
{
    struct itimerspec its = { 0 };
    if (ring_head != ring_tail) {
        int64_t d = ring[ring_head % RING].deadline;
        its.it_value.tv_sec = d / 1000000000;
        its.it_value.tv_nsec = d % 1000000000;
    }
    timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void answer_due(void)
{
    uint64_t expirations;
    if (read(timer_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
        die("read timerfd");
    int64_t now = now_ns();
    while (ring_head != ring_tail && ring[ring_head % RING].deadline <= now) {
        struct held h = ring[ring_head % RING];
        ring_head++;
        if (fd_kind[h.fd] != K_HELD || fd_gen[h.fd] != h.gen)
            continue;  /* the client went first */
        current--;     /* uncount before the client can react */
        fd_kind[h.fd] = K_ANSWERED;
        late_sum += now - h.deadline;
        late_n++;
        if (answers_tail - answers_head < RING)
            answered_at[answers_tail++ % RING] = now;
        if (send(h.fd, "x", 1, MSG_NOSIGNAL) < 0)
            forget(h.fd);
    }
    arm_timer();
}

static void accept_all(int lfd, int kind)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            die("accept");
        }
        if (fd >= MAX_FDS) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (kind == K_HELD) {
            if (ring_tail - ring_head >= RING) {
                close(fd);
                continue;
            }
            accepted++;
            if (++current > maximum)
                maximum = current;
            int64_t now = now_ns();
            if (answers_head != answers_tail) {
                gap_sum += now - answered_at[answers_head++ % RING];
                gap_n++;
            }
            int was_empty = ring_head == ring_tail;
            ring[ring_tail % RING] = (struct held){
                fd, fd_gen[fd], now + (int64_t)hold_ms * 1000000 };
            ring_tail++;
            watch(fd, K_HELD, EPOLLIN | EPOLLRDHUP);
            if (was_empty)
                arm_timer();
        } else {
            watch(fd, kind, EPOLLIN | EPOLLRDHUP);
        }
    }
}

static void serve_echo(int fd)
{
    char buf[16384];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0) {
            ssize_t off = 0;
            while (off < n) {
                ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
                if (w < 0) {
                    if (errno == EAGAIN) {  /* tiny payloads: rare; spin */
                        continue;
                    }
                    forget(fd);
                    return;
                }
                off += w;
            }
            if ((size_t)n < sizeof buf)
                return;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        forget(fd);  /* EOF or reset */
        return;
    }
}

static void drain_or_close(int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        forget(fd);
        return;
    }
}

static void serve_control(int lfd)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct timeval tv = { 2, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char cmd = 0;
    if (recv(fd, &cmd, 1, 0) == 1 && cmd == 'T') {
        char line[160];
        pthread_mutex_lock(&trial_lock);
        int n = snprintf(line, sizeof line, "seq=%ld lead_ns=%lld open=%d ok=%d\n",
                         last_trial.seq, (long long)last_trial.lead_ns,
                         last_trial.open, last_trial.ok);
        pthread_mutex_unlock(&trial_lock);
        if (send(fd, line, (size_t)n, MSG_NOSIGNAL) < 0) {
            /* the asker went away: nothing to do */
        }
    } else if (cmd) {
        char line[160];
        int n = snprintf(line, sizeof line,
                         "max=%d accepted=%llu current=%d late_us=%.1f gap_us=%.1f\n",
                         maximum, accepted, current,
                         late_n ? late_sum / 1e3 / late_n : 0.0,
                         gap_n ? gap_sum / 1e3 / gap_n : 0.0);
        if (cmd == 'R') {
            maximum = current;
            accepted = 0;
            late_sum = gap_sum = 0;
            late_n = gap_n = 0;
            answers_head = answers_tail;
        }
        if (send(fd, line, (size_t)n, MSG_NOSIGNAL) < 0) {
            /* the asker went away: nothing to do */
        }
    }
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_server READY_FILE HOLD_MS [LIFETIME_S]\n");
        return 2;
    }
    hold_ms = atoi(argv[2]);
    alarm(argc > 3 ? (unsigned)atoi(argv[3]) : 900);
    signal(SIGPIPE, SIG_IGN);
    /* The server stands in for another machine: it should not add its own
     * lateness to the holds. Exact timers; a better nice value if allowed. */
    prctl(PR_SET_TIMERSLACK, 1UL);
    if (setpriority(PRIO_PROCESS, 0, -10) < 0) {
        /* not permitted: run at the default priority */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max < MAX_FDS ? rl.rlim_max : MAX_FDS;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    uint16_t sink_port, echo_port, hold_port, control_port, watch_port;
    int sink = listen_on(&sink_port);
    int echo = listen_on(&echo_port);
    int hold = listen_on(&hold_port);
    int control = listen_on(&control_port);
    int watch_fd = listen_on(&watch_port);
    fcntl(echo, F_SETFL, O_NONBLOCK);
    fcntl(hold, F_SETFL, O_NONBLOCK);

    epfd = epoll_create1(EPOLL_CLOEXEC);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (epfd < 0 || timer_fd < 0)
        die("epoll/timerfd");
    watch(echo, K_LISTEN_ECHO, EPOLLIN);
    watch(hold, K_LISTEN_HOLD, EPOLLIN);
    watch(control, K_LISTEN_CONTROL, EPOLLIN);
    watch(timer_fd, K_TIMER, EPOLLIN);

    pthread_t tid;
    if (pthread_create(&tid, NULL, sink_thread, (void *)(intptr_t)sink) != 0)
        die("pthread_create");
    if (pthread_create(&tid, NULL, watch_thread, (void *)(intptr_t)watch_fd) != 0)
        die("pthread_create");

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    if (!f)
        die("ready file");
    fprintf(f, "%u %u %u %u %u\n", sink_port, echo_port, hold_port, control_port,
            watch_port);
    fclose(f);
    if (rename(tmp, argv[1]) < 0)
        die("rename ready file");

    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(epfd, events, 256, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        /* Timers first: an answer due now must not wait behind accepts. */
        for (int i = 0; i < n; i++)
            if (fd_kind[events[i].data.u64] == K_TIMER)
                answer_due();
        for (int i = 0; i < n; i++) {
            int fd = (int)events[i].data.u64;
            switch (fd_kind[fd]) {
            case K_LISTEN_ECHO: accept_all(fd, K_ECHO); break;
            case K_LISTEN_HOLD: accept_all(fd, K_HELD); break;
            case K_LISTEN_CONTROL: serve_control(fd); break;
            case K_ECHO: serve_echo(fd); break;
            case K_HELD:
            case K_ANSWERED: drain_or_close(fd); break;
            default: break;
            }
        }
    }
}
