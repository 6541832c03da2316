/* bench_client: the load the benchmark puts through the shim (or not).
 *
 *   connect_close HOST PORT N [between|inside|nonblocking]
 *                                    socket, SO_LINGER {1,0}, connect, close;
 *                                    with between or inside, the timed loop
 *                                    moves the bench's fixed clock
 *                                    (fixed_clock.c, preloaded) to its next
 *                                    second before each connect or between
 *                                    each connect and its close;
 *                                    nonblocking: the socket is, and poll
 *                                    and SO_ERROR wait for the connect, as
 *                                    an event loop's (Go's) do
 *   pingpong HOST PORT N [send|msg|rw]
 *                                    64-byte round trips on one connection,
 *                                    with send/recv, sendmsg/recvmsg or
 *                                    write/read
 *   request HOST PORT N              connect, 64 bytes out, 64 back, close
 *   socketpair N [send|rw]           1-byte round trips inside one process over
 *                                    an AF_UNIX socketpair (no connection the
 *                                    shim counts, no peer): write then read,
 *                                    or send then recv
 *   readiness N poll|epoll           poll() or epoll_wait() with timeout 0 on
 *                                    one end of a socketpair, which is
 *                                    writable: the readiness hooks' cost
 *   contend HOST PORT procs|threads W DURATION_MS
 *                                    W workers loop for DURATION_MS: connect,
 *                                    read the hold server's one byte, close
 *   capacity HOST PORT W DURATION_MS PACE_MS
 *                                    W threads loop for DURATION_MS against
 *                                    the capacity server: connect, a line
 *                                    out, read the answer to EOF, close;
 *                                    PACE_MS 0: at once again (closed loop),
 *                                    else each starts one every PACE_MS. A
 *                                    refused connect waits about BACKOFF_MS
 *                                    and tries again. Prints start_ns=T (the
 *                                    CLOCK_MONOTONIC start), one line per
 *                                    answer: r END_US LATENCY_US (END from
 *                                    the start; latency from connect() to
 *                                    EOF), then done=N refused=R errors=E
 *   window HOST PORT N kill|exit|_exit CONTROL_PORT
 *                                    N hand-off trials against the server's
 *                                    watch port (limit 1): a holder connects,
 *                                    a waiter blocks in connect() for the
 *                                    permit, the holder is SIGKILLed, calls
 *                                    exit() or _exit() without closing; one
 *                                    line per trial from the server's view:
 *                                    trial=I lead_ns=L open=O
 *   alternate HOST PORT DEAD_PORT    forever, until killed: a request to
 *                                    PORT, the hold port (connect, a 1-byte
 *                                    request, its 1-byte answer, close),
 *                                    then a connect to
 *                                    DEAD_PORT with no deadline of its own;
 *                                    after each of them one line:
 *                                    healthy=H dead_refused=R dead_timed_out=T
 *   getpid N                         N getpid() calls (the close path's
 *                                    owner check), timed: ns_per_op=F
 *   fastopen HOST PORT N             one connection, then 1-byte sendto()s
 *                                    with MSG_FASTOPEN to the same address
 *                                    on it: each fails (EISCONN, or
 *                                    EOPNOTSUPP where Fast Open is off or
 *                                    refused), sending nothing; what is
 *                                    timed is the call (trapped by `run`)
 *   shared_refusal HOST PORT N K     K connections (the compartment's limit),
 *                                    a forked child that keeps copies of
 *                                    them all (so each gets a shared-socket
 *                                    record), then N connects, each refused
 *                                    at once, timed one by one, and the
 *                                    CPU time of them all (this thread's:
 *                                    the machine's other load left out):
 *                                    ns_per_op=F cpu_ns_per_op=C p50_ns=P
 *                                    p99_ns=Q max_ns=M
 *
 * The single-connection modes run WARMUP iterations untimed, then N timed
 * with CLOCK_MONOTONIC around the loop alone, and print one line:
 *   ns_per_op=F ops=N
 * WARMUP does not depend on N, so under callgrind or strace the difference
 * of two run lengths is exactly the cost of the extra iterations. The timed
 * loops are functions of their own, named measured_*: the cost section's
 * callgrind counts inside them alone (--toggle-collect), so that what
 * varies from run to run at start-up (a pid's digits, the printed
 * figures) stays out.
 *
 * Every close is an abortive close (SO_LINGER {1,0}: RST), so no TIME_WAIT
 * piles up on the client side and long loops cannot run out of ports.
 * HOST is numeric. Exit 0, or 1 with a message on the first failure. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


enum { WARMUP = 200, PAYLOAD = 64 };

static struct sockaddr_storage dest;
static socklen_t dest_len;

static void fail(const char *what)
{
    fprintf(stderr, "bench_client: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void parse_dest(const char *host, const char *port)
{
    memset(&dest, 0, sizeof dest);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&dest;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&dest;
    int p = atoi(port);
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        dest_len = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        dest_len = sizeof *v6;
    } else {
        fprintf(stderr, "bench_client: %s is not a numeric address\n", host);
        exit(2);
    }
}

static int open_connection(void)
{
    int fd = socket(dest.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct linger lg = { 1, 0 };
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    if (connect(fd, (struct sockaddr *)&dest, dest_len) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

static void report(int64_t elapsed, long n)
{
    printf("ns_per_op=%.2f ops=%ld\n", (double)elapsed / (double)n, n);
}

/* ---- connect_close ---------------------------------------------------- */

static void connect_close_loop(long n)
{
    for (long i = 0; i < n; i++) {
        int fd = open_connection();
        if (fd < 0)
            fail("connect");
        close(fd);
    }
}

/* An event loop's connect: EINPROGRESS, then writable, then SO_ERROR. */
static int open_nonblocking(void)
{
    int fd = socket(dest.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct linger lg = { 1, 0 };
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    int err = connect(fd, (struct sockaddr *)&dest, dest_len) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
        struct pollfd writable = { fd, POLLOUT, 0 };
        socklen_t length = sizeof err;
        if (poll(&writable, 1, 5000) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &length) < 0)
            err = err == EINPROGRESS ? ETIMEDOUT : err;
    }
    if (err) {
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

static void connect_close_nonblocking_loop(long n)
{
    for (long i = 0; i < n; i++) {
        int fd = open_nonblocking();
        if (fd < 0)
            fail("connect");
        close(fd);
    }
}

/* The fixed clock's (bench/fixed_clock.c), when it is preloaded. */
extern void bench_clock_next_second(void) __attribute__((weak));

/* A second passes before each connect (between) or while each is held
 * (inside): a loop of its own, so that the plain loop stays as it is. */
static void connect_close_seconds_loop(long n, int inside)
{
    for (long i = 0; i < n; i++) {
        if (!inside)
            bench_clock_next_second();
        int fd = open_connection();
        if (fd < 0)
            fail("connect");
        if (inside)
            bench_clock_next_second();
        close(fd);
    }
}

static __attribute__((noinline)) void measured_connect_close(long n, const char *seconds,
                                                              int inside)
{
    if (seconds)
        connect_close_seconds_loop(n, inside);
    else
        connect_close_loop(n);
}

static int mode_connect_close_nonblocking(long n)
{
    connect_close_nonblocking_loop(WARMUP);
    int64_t t0 = now_ns();
    connect_close_nonblocking_loop(n);
    report(now_ns() - t0, n);
    return 0;
}

static int mode_connect_close(long n, const char *seconds)
{
    if (seconds && strcmp(seconds, "nonblocking") == 0)
        return mode_connect_close_nonblocking(n);
    int inside = seconds && strcmp(seconds, "inside") == 0;
    if (seconds && !inside && strcmp(seconds, "between") != 0) {
        fprintf(stderr, "bench_client: connect_close's last word is between, inside "
                "or nonblocking\n");
        return 2;
    }
    if (seconds && !bench_clock_next_second) {
        fprintf(stderr, "bench_client: %s: the fixed clock is not preloaded\n", seconds);
        return 2;
    }
    connect_close_loop(WARMUP);
    int64_t t0 = now_ns();
    measured_connect_close(n, seconds, inside);
    report(now_ns() - t0, n);
    return 0;
}

/* ---- fastopen: a MSG_FASTOPEN send, which `run`'s filter traps ------------ */

static void fastopen_loop(int fd, long n)
{
    for (long i = 0; i < n; i++)
        if (sendto(fd, "x", 1, MSG_FASTOPEN | MSG_NOSIGNAL, (struct sockaddr *)&dest,
                   dest_len) >= 0)
            fail("sendto with MSG_FASTOPEN sent on a connected socket");
}

static int mode_fastopen(long n)
{
    int fd = open_connection();
    if (fd < 0)
        fail("connect");
    fastopen_loop(fd, WARMUP);
    int64_t t0 = now_ns();
    fastopen_loop(fd, n);
    report(now_ns() - t0, n);
    close(fd);
    return 0;
}

/* ---- pingpong ----------------------------------------------------------- */

static void round_trip_send(int fd, char *buf)
{
    if (send(fd, buf, PAYLOAD, 0) != PAYLOAD)
        fail("send");
    if (recv(fd, buf, PAYLOAD, MSG_WAITALL) != PAYLOAD)
        fail("recv");
}

static void round_trip_msg(int fd, char *buf)
{
    struct iovec iov = { buf, PAYLOAD };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (sendmsg(fd, &msg, 0) != PAYLOAD)
        fail("sendmsg");
    if (recvmsg(fd, &msg, MSG_WAITALL) != PAYLOAD)
        fail("recvmsg");
}

static void round_trip_rw(int fd, char *buf)
{
    if (write(fd, buf, PAYLOAD) != PAYLOAD)
        fail("write");
    for (ssize_t got = 0, n; got < PAYLOAD; got += n)
        if ((n = read(fd, buf + got, (size_t)(PAYLOAD - got))) <= 0)
            fail("read");
}

static __attribute__((noinline)) void measured_pingpong(void (*trip)(int, char *), int fd,
                                                         char *buf, long n)
{
    for (long i = 0; i < n; i++)
        trip(fd, buf);
}

static int mode_pingpong(long n, const char *api)
{
    void (*trip)(int, char *) = round_trip_send;
    if (api && strcmp(api, "msg") == 0)
        trip = round_trip_msg;
    else if (api && strcmp(api, "rw") == 0)
        trip = round_trip_rw;
    else if (api && strcmp(api, "send") != 0) {
        fprintf(stderr, "bench_client: api is send, msg or rw\n");
        return 2;
    }
    int fd = open_connection();
    if (fd < 0)
        fail("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[PAYLOAD];
    memset(buf, 'p', sizeof buf);
    for (long i = 0; i < WARMUP; i++)
        trip(fd, buf);
    int64_t t0 = now_ns();
    measured_pingpong(trip, fd, buf, n);
    report(now_ns() - t0, n);
    close(fd);
    return 0;
}

/* ---- socketpair: I/O on an fd that carries no connection ------------------ */

static void local_trip_rw(const int *pair, char *byte)
{
    if (write(pair[0], byte, 1) != 1)
        fail("write");
    if (read(pair[1], byte, 1) != 1)
        fail("read");
}

static void local_trip_send(const int *pair, char *byte)
{
    if (send(pair[0], byte, 1, 0) != 1)
        fail("send");
    if (recv(pair[1], byte, 1, 0) != 1)
        fail("recv");
}

static __attribute__((noinline)) void
measured_socketpair(void (*trip)(const int *, char *), const int *pair, char *byte, long n)
{
    for (long i = 0; i < n; i++)
        trip(pair, byte);
}

static int mode_socketpair(long n, const char *api)
{
    void (*trip)(const int *, char *) = local_trip_rw;
    if (strcmp(api, "send") == 0)
        trip = local_trip_send;
    else if (strcmp(api, "rw") != 0) {
        fprintf(stderr, "bench_client: api is send or rw\n");
        return 2;
    }
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
        fail("socketpair");
    char byte = 'l';
    for (long i = 0; i < WARMUP; i++)
        trip(pair, &byte);
    int64_t t0 = now_ns();
    measured_socketpair(trip, pair, &byte, n);
    report(now_ns() - t0, n);
    close(pair[0]);
    close(pair[1]);
    return 0;
}

/* ---- readiness: poll and epoll_wait, nothing waiting ------------------- */

static __attribute__((noinline)) void
measured_readiness(int epfd, struct pollfd *entry, long n)
{
    struct epoll_event event;
    for (long i = 0; i < n; i++)
        if ((epfd < 0 ? poll(entry, 1, 0) : epoll_wait(epfd, &event, 1, 0)) != 1)
            fail("poll or epoll_wait");
}

static int mode_readiness(long n, const char *call)
{
    int pair[2], epfd = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
        fail("socketpair");
    struct pollfd entry = {.fd = pair[0], .events = POLLOUT};
    if (strcmp(call, "epoll") == 0) {
        struct epoll_event event = {.events = EPOLLOUT};
        if ((epfd = epoll_create1(0)) < 0 ||
            epoll_ctl(epfd, EPOLL_CTL_ADD, pair[0], &event) != 0)
            fail("epoll");
    } else if (strcmp(call, "poll") != 0) {
        fprintf(stderr, "bench_client: the call is poll or epoll\n");
        return 2;
    }
    measured_readiness(epfd, &entry, WARMUP);
    int64_t t0 = now_ns();
    measured_readiness(epfd, &entry, n);
    report(now_ns() - t0, n);
    return 0;
}

/* ---- request ------------------------------------------------------------ */

static void request_loop(long n)
{
    char buf[PAYLOAD];
    memset(buf, 'q', sizeof buf);
    for (long i = 0; i < n; i++) {
        int fd = open_connection();
        if (fd < 0)
            fail("connect");
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (send(fd, buf, PAYLOAD, 0) != PAYLOAD)
            fail("send");
        ssize_t got = recv(fd, buf, PAYLOAD, MSG_WAITALL);
        if (got != PAYLOAD) {
            if (got >= 0)
                errno = EPIPE;
            fail("recv");
        }
        close(fd);
    }
}

/* ---- alternate ------------------------------------------------------------ */

/* A worker of a legacy service: every round serves a request from a
 * healthy downstream, then tries a dead one, with no deadline of its own. */
static _Noreturn void mode_alternate(const char *host, const char *dead_port)
{
    struct sockaddr_storage healthy = dest;
    socklen_t healthy_len = dest_len;
    parse_dest(host, dead_port);
    struct sockaddr_storage dead = dest;
    socklen_t dead_len = dest_len;
    long served = 0, refused = 0, timed_out = 0;
    for (;;) {
        dest = healthy;
        dest_len = healthy_len;
        char byte = 'q';
        int fd = open_connection();
        if (fd < 0 || send(fd, &byte, 1, 0) != 1 || recv(fd, &byte, 1, 0) != 1)
            fail("the healthy server");
        close(fd);
        served++;
        printf("healthy=%ld dead_refused=%ld dead_timed_out=%ld\n", served, refused,
               timed_out);
        fd = socket(dead.ss_family, SOCK_STREAM, 0);
        if (fd < 0)
            fail("socket");
        if (connect(fd, (struct sockaddr *)&dead, dead_len) < 0)
            errno == ETIMEDOUT ? timed_out++ : refused++;
        close(fd);
        printf("healthy=%ld dead_refused=%ld dead_timed_out=%ld\n", served, refused,
               timed_out);
    }
}

static int mode_request(long n)
{
    request_loop(WARMUP / 4);
    int64_t t0 = now_ns();
    request_loop(n);
    report(now_ns() - t0, n);
    return 0;
}

/* ---- contend ------------------------------------------------------------ */

struct worker_result {
    long done;          /* requests finished inside the window */
    long errors;
    int64_t wait_max;   /* connect() call, ns: the permit wait under the shim */
    int64_t wait_sum;
    int64_t req_max;    /* connect to close, ns */
    int64_t req_sum;
    char pad[16];
};

struct contend_shared {
    _Atomic int64_t start;  /* set by the parent, then workers go */
    int64_t deadline;
    struct worker_result results[];
};

static struct contend_shared *shared;

static void contend_worker(int index)
{
    struct worker_result *r = &shared->results[index];
    while (atomic_load(&shared->start) == 0)
        usleep(200);
    int64_t deadline = shared->deadline;
    for (;;) {
        int64_t t0 = now_ns();
        if (t0 >= deadline)
            break;
        int fd = open_connection();
        int64_t t1 = now_ns();
        if (fd < 0) {
            r->errors++;
            usleep(1000);
            continue;
        }
        char byte;
        ssize_t got = recv(fd, &byte, 1, 0);
        close(fd);
        int64_t t2 = now_ns();
        if (got != 1) {
            r->errors++;
            continue;
        }
        if (t2 > deadline)
            break;
        r->done++;
        r->wait_sum += t1 - t0;
        if (t1 - t0 > r->wait_max)
            r->wait_max = t1 - t0;
        r->req_sum += t2 - t0;
        if (t2 - t0 > r->req_max)
            r->req_max = t2 - t0;
    }
}

static void *contend_thread(void *arg)
{
    contend_worker((int)(intptr_t)arg);
    return NULL;
}

static int mode_contend(const char *how, int workers, int duration_ms)
{
    int threads = strcmp(how, "threads") == 0;
    if (!threads && strcmp(how, "procs") != 0) {
        fprintf(stderr, "bench_client: contend takes procs or threads\n");
        return 2;
    }
    size_t size = sizeof *shared + (size_t)workers * sizeof shared->results[0];
    shared = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
    if (shared == MAP_FAILED)
        fail("mmap");
    memset(shared, 0, size);
    pid_t *pids = calloc((size_t)workers, sizeof *pids);
    pthread_t *tids = calloc((size_t)workers, sizeof *tids);
    pid_t parent = getpid();
    for (int i = 0; i < workers; i++) {
        if (threads) {
            if (pthread_create(&tids[i], NULL, contend_thread, (void *)(intptr_t)i))
                fail("pthread_create");
            continue;
        }
        pids[i] = fork();
        if (pids[i] < 0)
            fail("fork");
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            contend_worker(i);
            _exit(0);
        }
    }
    usleep(100000);  /* let every worker reach the start line */
    int64_t start = now_ns();
    shared->deadline = start + (int64_t)duration_ms * 1000000;
    atomic_store(&shared->start, start);
    for (int i = 0; i < workers; i++) {
        if (threads)
            pthread_join(tids[i], NULL);
        else
            waitpid(pids[i], NULL, 0);
    }
    long done = 0, errors = 0;
    int64_t wait_max = 0, wait_sum = 0, req_max = 0, req_sum = 0;
    for (int i = 0; i < workers; i++) {
        struct worker_result *r = &shared->results[i];
        done += r->done;
        errors += r->errors;
        wait_sum += r->wait_sum;
        req_sum += r->req_sum;
        if (r->wait_max > wait_max)
            wait_max = r->wait_max;
        if (r->req_max > req_max)
            req_max = r->req_max;
    }
    double seconds = duration_ms / 1000.0;
    printf("done=%ld errors=%ld per_s=%.1f wait_mean_us=%.1f wait_max_us=%.1f "
           "req_mean_us=%.1f req_max_us=%.1f\n",
           done, errors, done / seconds,
           done ? wait_sum / 1e3 / done : 0.0, wait_max / 1e3,
           done ? req_sum / 1e3 / done : 0.0, req_max / 1e3);
    return 0;
}

/* ---- capacity: closed-loop workers against a service of limited capacity -- */

enum { BACKOFF_MS = 10 };  /* after a refusal: retries cost CPU, not capacity */

struct capacity_worker {
    pthread_t tid;
    int64_t start, deadline, pace;
    long refused, errors, count, size;
    unsigned seed;
    int64_t (*answers)[2];  /* end (from start) and latency, ns */
};

static int capacity_request(void)
{
    int fd = open_connection();
    if (fd < 0)
        return -1;
    char buf[256];
    ssize_t n = send(fd, "q\n", 2, 0) == 2 ? 1 : -1;
    while (n > 0)
        n = recv(fd, buf, sizeof buf, 0);
    close(fd);
    return n == 0 ? 0 : -2;
}

static void sleep_until(int64_t t)
{
    struct timespec ts = { t / 1000000000, t % 1000000000 };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static void *capacity_thread(void *arg)
{
    struct capacity_worker *w = arg;
    int64_t next = w->start;
    for (;;) {
        if (w->pace)
            sleep_until(next);
        int64_t t0 = now_ns();
        if (t0 >= w->deadline)
            break;
        int rc = capacity_request();
        int64_t t1 = now_ns();
        if (rc == -1) {
            w->refused++;
            /* anywhere in [BACKOFF_MS / 2, 3 * BACKOFF_MS / 2): refused
             * together, workers would otherwise all retry together */
            sleep_until(t1 + BACKOFF_MS * (500000LL + rand_r(&w->seed) % 1000000));
            continue;
        }
        next += w->pace;
        if (rc < 0) {
            w->errors++;
            continue;
        }
        if (w->count == w->size) {
            w->size = w->size ? 2 * w->size : 1024;
            w->answers = realloc(w->answers, (size_t)w->size * sizeof *w->answers);
            if (!w->answers)
                fail("realloc");
        }
        w->answers[w->count][0] = t1 - w->start;
        w->answers[w->count][1] = t1 - t0;
        w->count++;
    }
    return NULL;
}

static int mode_capacity(int workers, int duration_ms, int pace_ms)
{
    if (workers < 1 || duration_ms < 0 || pace_ms < 0) {
        fprintf(stderr, "bench_client: capacity takes W >= 1, DURATION_MS >= 0, "
                "PACE_MS >= 0\n");
        return 2;
    }
    struct capacity_worker *w = calloc((size_t)workers, sizeof *w);
    if (!w)
        fail("calloc");
    int64_t start = now_ns() + 50000000;  /* every thread started by then */
    printf("start_ns=%lld\n", (long long)start);
    for (int i = 0; i < workers; i++) {
        w[i].start = start;
        w[i].deadline = start + (int64_t)duration_ms * 1000000;
        w[i].pace = (int64_t)pace_ms * 1000000;
        w[i].seed = (unsigned)i;
        if (pthread_create(&w[i].tid, NULL, capacity_thread, &w[i]))
            fail("pthread_create");
    }
    long done = 0, refused = 0, errors = 0;
    for (int i = 0; i < workers; i++) {
        pthread_join(w[i].tid, NULL);
        for (long j = 0; j < w[i].count; j++)
            printf("r %lld %lld\n", (long long)(w[i].answers[j][0] / 1000),
                   (long long)(w[i].answers[j][1] / 1000));
        done += w[i].count;
        refused += w[i].refused;
        errors += w[i].errors;
        free(w[i].answers);
    }
    printf("done=%ld refused=%ld errors=%ld\n", done, refused, errors);
    free(w);
    return 0;
}

/* ---- window: the permit hand-off when a holder ends ---------------------- */

/* One question to the server's control port (an address no rule names:
 * the shim lets it through uncounted). */
static void control_query(int port, char cmd, char *line, size_t size)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        fail("control port");
    if (send(fd, &cmd, 1, 0) != 1)
        fail("control port");
    size_t got = 0;
    ssize_t n;
    while (got < size - 1 && (n = recv(fd, line + got, size - 1 - got, 0)) > 0) {
        got += (size_t)n;
        if (line[got - 1] == '\n')
            break;
    }
    line[got] = 0;
    close(fd);
}

/* 1 when pid sleeps in a semaphore wait, 0 when not (yet), -1 when this
 * kernel does not say (/proc/PID/syscall). */
static int waits_for_permit(pid_t pid)
{
    char path[64], buf[128];
    snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    if (!isdigit((unsigned char)buf[0]))
        return 0;  /* "running" */
    long nr = strtol(buf, NULL, 10);
#ifdef SYS_semop
    if (nr == SYS_semop)
        return 1;
#endif
    return nr == SYS_semtimedop;
}

static int mode_window(long trials, const char *how, int control_port)
{
    int killed = strcmp(how, "kill") == 0, quick = strcmp(how, "_exit") == 0;
    if (!killed && !quick && strcmp(how, "exit") != 0) {
        fprintf(stderr, "bench_client: window takes kill, exit or _exit\n");
        return 2;
    }
    char line[160];
    control_query(control_port, 'T', line, sizeof line);
    long seq = 0;
    if (sscanf(line, "seq=%ld", &seq) != 1) {
        errno = EPROTO;
        fail("the server has no watch port");
    }
    for (long t = 0; t < trials; t++) {
        int ready[2], go[2];
        if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
            fail("pipe");
        pid_t holder = fork();
        if (holder < 0)
            fail("fork");
        if (holder == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            /* an ordinary connection (no SO_LINGER): its end is a FIN */
            int fd = socket(dest.ss_family, SOCK_STREAM, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&dest, dest_len) < 0 ||
                send(fd, "H", 1, 0) != 1 || write(ready[1], "r", 1) != 1)
                _exit(3);
            char c;  /* SIGKILL comes while it sleeps here */
            if (read(go[0], &c, 1) != 1)
                _exit(5);  /* the parent is gone */
            if (quick)
                _exit(0);
            exit(0);  /* fd still open: the shim's exit path closes it */
        }
        close(ready[1]);
        close(go[0]);
        char c;
        if (read(ready[0], &c, 1) != 1) {
            errno = EPROTO;
            fail("holder did not connect");
        }
        pid_t waiter = fork();
        if (waiter < 0)
            fail("fork");
        if (waiter == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            int fd = open_connection();  /* waits for the holder's permit */
            if (fd < 0)
                _exit(4);
            close(fd);
            _exit(0);
        }
        /* end the holder only once the waiter sleeps for the permit */
        int64_t give_up = now_ns() + 5000000000LL;
        int state;
        while ((state = waits_for_permit(waiter)) == 0 && now_ns() < give_up)
            usleep(100);
        if (state != 1)
            usleep(20000);
        if (killed) {
            kill(holder, SIGKILL);
        } else if (write(go[1], "g", 1) != 1) {
            fail("holder's pipe");
        }
        int status;
        waitpid(holder, &status, 0);
        if (waitpid(waiter, &status, 0) < 0 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            errno = EPROTO;
            fail("waiter did not connect");
        }
        close(ready[0]);
        close(go[1]);
        seq++;
        give_up = now_ns() + 5000000000LL;
        for (;;) {
            control_query(control_port, 'T', line, sizeof line);
            long got_seq = 0, ok = 0, open = 0;
            long long lead = 0;
            if (sscanf(line, "seq=%ld lead_ns=%lld open=%ld ok=%ld",
                       &got_seq, &lead, &open, &ok) == 4 && got_seq >= seq) {
                if (got_seq != seq || !ok) {
                    errno = EPROTO;
                    fail("the server's watch saw a malformed trial");
                }
                printf("trial=%ld lead_ns=%lld open=%ld\n", t, lead, open);
                break;
            }
            if (now_ns() > give_up) {
                errno = ETIMEDOUT;
                fail("the server's watch did not finish the trial");
            }
            usleep(200);
        }
    }
    return 0;
}

/* ---- getpid: the owner check's syscall, alone ----------------------------- */

static int mode_getpid(long n)
{
    for (long i = 0; i < WARMUP; i++)
        (void)getpid();
    int64_t t0 = now_ns();
    for (long i = 0; i < n; i++)
        (void)getpid();
    report(now_ns() - t0, n);
    return 0;
}

/* ---- shared_refusal: fail fast with K shared-socket records --------------- */

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int mode_shared_refusal(long n, int k)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < (rlim_t)k + 64) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
    int *held = malloc((size_t)k * sizeof *held);
    int64_t *each = malloc((size_t)n * sizeof *each);
    int keep[2];
    if (!held || !each || pipe(keep) < 0)
        fail("memory or pipe");
    for (int i = 0; i < k; i++)
        if ((held[i] = open_connection()) < 0)
            fail("connect under the limit");
    pid_t child = fork();  /* the shim records every connection it copies */
    if (child < 0)
        fail("fork");
    if (child == 0) {
        char byte;
        close(keep[1]);
        (void)!read(keep[0], &byte, 1);  /* EOF: the parent is done */
        _exit(0);
    }
    close(keep[0]);
    int64_t total = 0, cpu = thread_cpu_ns();
    for (long i = 0; i < n; i++) {
        int64_t t0 = now_ns();
        int fd = open_connection();
        each[i] = now_ns() - t0;
        total += each[i];
        if (fd >= 0)
            fail("a connect past the limit got in");
    }
    cpu = thread_cpu_ns() - cpu;
    close(keep[1]);
    waitpid(child, NULL, 0);
    for (int i = 0; i < k; i++)
        close(held[i]);
    qsort(each, (size_t)n, sizeof *each, by_value);
    printf("ns_per_op=%.2f cpu_ns_per_op=%.2f p50_ns=%" PRId64 " p99_ns=%" PRId64
           " max_ns=%" PRId64 "\n", (double)total / (double)n, (double)cpu / (double)n,
           each[n / 2], each[n * 99 / 100], each[n - 1]);
    free(held);
    free(each);
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_client connect_close HOST PORT N [between|inside|nonblocking]\n"
            "       bench_client pingpong HOST PORT N [send|msg|rw]\n"
            "       bench_client alternate HOST PORT DEAD_PORT\n"
            "       bench_client request HOST PORT N\n"
            "       bench_client socketpair N [send|rw]\n"
            "       bench_client readiness N poll|epoll\n"
            "       bench_client contend HOST PORT procs|threads W DURATION_MS\n"
            "       bench_client capacity HOST PORT W DURATION_MS PACE_MS\n"
            "       bench_client window HOST PORT N kill|exit|_exit CONTROL_PORT\n"
            "       bench_client getpid N\n"
            "       bench_client fastopen HOST PORT N\n"
            "       bench_client shared_refusal HOST PORT N K\n");
    exit(2);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3)
        usage();
    const char *mode = argv[1];
    if (strcmp(mode, "getpid") == 0)
        return mode_getpid(atol(argv[2]));
    if (strcmp(mode, "socketpair") == 0)
        return mode_socketpair(atol(argv[2]), argc > 3 ? argv[3] : "rw");
    if (strcmp(mode, "readiness") == 0 && argc >= 4)
        return mode_readiness(atol(argv[2]), argv[3]);
    if (argc < 5)
        usage();
    parse_dest(argv[2], argv[3]);
    if (strcmp(mode, "window") == 0 && argc >= 7)
        return mode_window(atol(argv[4]), argv[5], atoi(argv[6]));
    if (strcmp(mode, "connect_close") == 0)
        return mode_connect_close(atol(argv[4]), argc > 5 ? argv[5] : NULL);
    if (strcmp(mode, "pingpong") == 0)
        return mode_pingpong(atol(argv[4]), argc > 5 ? argv[5] : "send");
    if (strcmp(mode, "request") == 0)
        return mode_request(atol(argv[4]));
    if (strcmp(mode, "fastopen") == 0)
        return mode_fastopen(atol(argv[4]));
    if (strcmp(mode, "alternate") == 0)
        mode_alternate(argv[2], argv[4]);
    if (strcmp(mode, "capacity") == 0 && argc >= 7)
        return mode_capacity(atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
    if (strcmp(mode, "shared_refusal") == 0 && argc >= 6)
        return mode_shared_refusal(atol(argv[4]), atoi(argv[5]));
    if (strcmp(mode, "contend") == 0 && argc >= 7)
        return mode_contend(argv[4], atoi(argv[5]), atoi(argv[6]));
    usage();
    return 2;
}
