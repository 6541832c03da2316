/* fdops HOST PORT SCENARIO [LIMIT [EXTRA...]]
 *
 * Each scenario takes permits of a compartment that matches HOST:PORT (a
 * running holdserver), walks one way of letting a connection go, and after
 * every step asks the only question that matters to a user: how many more
 * connections to HOST:PORT would succeed right now? That is `avail`: open up
 * to LIMIT+1 fresh blocking connections, count the successes, close them.
 * Run it with a fail-fast compartment (wait_ms = 0) of limit LIMIT
 * (default 1); a leaked permit shows as a smaller avail, a permit given back
 * twice as a larger one.
 *
 * Output: key=value lines, one per observation, then
 *   connects_ok=N   connections that reached HOST:PORT (SYN sent), counted
 *                   across forked children and exec'd images, so a test can
 *                   compare it with the server's total: a refused connect
 *                   must send nothing.
 * Refusals print the errno name the program saw. Exit: 0 when the scenario
 * ran to its end (the test judges the lines), 1 when a step it depends on
 * failed, 2 usage or setup error, 3 feature missing (fastopen unsupported).
 *
 * Scenarios (LIMIT in brackets when it is not 1):
 *   close, dup_then_close_one, dup_both_closed, dup2_copy, dup3,
 *   fcntl_dupfd, fcntl_dupfd_cloexec, dup2_onto_tracked, dup3_onto_tracked,
 *   dup2_same_fd, dup2_tracked_onto_tracked [2], fdopen_fclose,
 *   fdopen_fcloseall, close_range [2], closefrom [2],
 *   nonblock_einprogress, poll_connect_again [2], failed_connect_releases,
 *   eintr_keeps [3], fork_child_close, fork_parent_close, fork_child_own,
 *   exec_cloexec, exec_survives, exec_survives_exit, exec_mixed [2],
 *   exec_fails, sigkill [N], pass_mmsg, fastopen, errno_untouched OTHER_PORT
 *   (limit >= 1), udp_untouched (limit 0), threads [N], verify. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client_util.h"

#ifndef MSG_FASTOPEN
#define MSG_FASTOPEN 0x20000000
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static const char *g_host;
static int g_port;
static struct sockaddr_storage g_addr;
static socklen_t g_len;
static int g_limit = 1;
static char **g_argv;
static int g_argc;
/* Shared with forked children, handed to exec'd images through the
 * environment: connections that reached the server. */
static _Atomic long *g_connects;

/* ---- small helpers ------------------------------------------------------ */

static const char *res(int err)
{
    if (err == 0)
        return "ok";
    return errno_text(err);
}

static void say(const char *key, const char *value)
{
    printf("%s=%s\n", key, value);
}

static void say_int(const char *key, long value)
{
    printf("%s=%ld\n", key, value);
}

static void finish(int status)
{
    say_int("connects_ok", atomic_load(g_connects));
    exit(status);
}

static void die(const char *what)
{
    fprintf(stderr, "fdops: %s: %s\n", what, strerror(errno));
    finish(2);
}

/* Connects a fresh socket (flags: SOCK_NONBLOCK, SOCK_CLOEXEC) to an
 * address. Returns the fd when connect() returned 0, EINPROGRESS or EINTR
 * (*err says which: the last two leave the handshake going on), -1
 * otherwise with the socket closed. */
static int open_to(const struct sockaddr_storage *ss, socklen_t len, int flags, int *err)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | flags, 0);
    if (fd < 0)
        die("socket");
    if (connect(fd, (const struct sockaddr *)ss, len) == 0) {
        *err = 0;
    } else {
        *err = errno;
        if (*err == EINTR)
            return fd;
        if (*err != EINPROGRESS) {
            close(fd);
            return -1;
        }
    }
    if (ss == &g_addr)
        atomic_fetch_add(g_connects, 1);
    return fd;
}

static int open_conn(int flags, int *err)
{
    return open_to(&g_addr, g_len, flags, err);
}

/* Opens a connection that the scenario needs; the scenario cannot go on
 * without it. */
static int hold(const char *key, int flags)
{
    int err;
    int fd = open_conn(flags, &err);
    say(key, res(err));
    if (fd < 0)
        finish(1);
    return fd;
}

/* How many more connections would succeed right now (at most LIMIT+1). */
static int avail(void)
{
    int fds[256], n = 0;
    for (int i = 0; i <= g_limit && i < 256; i++) {
        int err;
        int fd = open_conn(0, &err);
        if (fd < 0)
            break;
        fds[n++] = fd;
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return n;
}

static void say_avail(const char *key)
{
    say_int(key, avail());
}

/* Waits for a non-blocking connect to complete; returns its SO_ERROR. */
static int complete(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    if (poll(&p, 1, 10000) != 1)
        return ETIMEDOUT;
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
        return errno;
    return err;
}

static void write_byte(int fd, char c)
{
    while (write(fd, &c, 1) < 0 && errno == EINTR) {
    }
}

static char read_byte(int fd)
{
    char c = 0;
    ssize_t n;
    while ((n = read(fd, &c, 1)) < 0 && errno == EINTR) {
    }
    return n == 1 ? c : 0;
}

static void env_connects(void)
{
    char text[32];
    snprintf(text, sizeof(text), "%ld", atomic_load(g_connects));
    setenv("FDOPS_CONNECTS", text, 1);
    fflush(stdout);
}

/* Replaces this image with `fdops HOST PORT CHILD LIMIT [EXTRA]`. */
static void exec_self(const char *child, int extra)
{
    char limit[16], extra_text[16], port[16];
    snprintf(limit, sizeof(limit), "%d", g_limit);
    snprintf(extra_text, sizeof(extra_text), "%d", extra);
    snprintf(port, sizeof(port), "%d", g_port);
    char *args[] = { g_argv[0], (char *)g_host, port, (char *)child, limit,
                     extra_text, NULL };
    env_connects();
    execv("/proc/self/exe", args);
    die("execv /proc/self/exe");
}

static int extra_arg(int index)
{
    if (g_argc <= 5 + index) {
        fprintf(stderr, "fdops: scenario needs an extra argument\n");
        finish(2);
    }
    return atoi(g_argv[5 + index]);
}

/* ---- release paths ------------------------------------------------------ */

static void sc_close(void)
{
    int s = hold("first", 0);
    say_avail("held_avail");
    close(s);
    say_avail("after_close_avail");
}

enum dup_kind { DK_DUP, DK_DUP2, DK_DUP3, DK_FCNTL, DK_FCNTL_CLOEXEC };

/* Two fds for one connection: the permit goes back with the last one. */
static void dup_pair(enum dup_kind kind, int close_original_first)
{
    int s = hold("first", 0);
    int d = -1;
    switch (kind) {
    case DK_DUP: d = dup(s); break;
    case DK_DUP2: d = dup2(s, 201); break;
    case DK_DUP3: d = dup3(s, 202, O_CLOEXEC); break;
    case DK_FCNTL: d = fcntl(s, F_DUPFD, 100); break;
    case DK_FCNTL_CLOEXEC: d = fcntl(s, F_DUPFD_CLOEXEC, 100); break;
    }
    if (d < 0)
        die("dup");
    say_avail("held_avail");
    close(close_original_first ? s : d);
    say_avail("after_one_avail");
    close(close_original_first ? d : s);
    say_avail("after_both_avail");
}

/* dup2/dup3 of an unrelated fd onto the socket's number closes the socket. */
static void onto_tracked(int use_dup3)
{
    int s = hold("first", 0);
    int n = open("/dev/null", O_RDONLY);
    if (n < 0)
        die("open /dev/null");
    say_avail("held_avail");
    int rc = use_dup3 ? dup3(n, s, O_CLOEXEC) : dup2(n, s);
    if (rc != s)
        die("dup2 onto socket");
    say_avail("after_dup_onto_avail");
    close(s); /* now /dev/null: must give nothing back */
    close(n);
    say_avail("after_close_all_avail");
}

static void sc_dup2_same_fd(void)
{
    int s = hold("first", 0);
    if (dup2(s, s) != s)
        die("dup2 same");
    say_avail("after_dup2_same_avail");
    close(s);
    say_avail("after_close_avail");
}

/* LIMIT 2: a's connection now lives on fds a and b; b's is gone. */
static void sc_dup2_tracked_onto_tracked(void)
{
    int a = hold("first", 0);
    int b = hold("second", 0);
    say_avail("held_avail");
    if (dup2(a, b) != b)
        die("dup2");
    say_avail("after_dup2_avail");
    close(a);
    say_avail("after_close_source_avail");
    close(b);
    say_avail("after_close_both_avail");
}

static void sc_fdopen_fclose(void)
{
    int s = hold("first", 0);
    FILE *f = fdopen(s, "r+");
    if (f == NULL)
        die("fdopen");
    say_avail("held_avail");
    fclose(f);
    say_avail("after_fclose_avail");
}

/* glibc's fcloseall flushes every stream but closes no fd, so the socket
 * (and its connection) may survive it: then the permit must too, until the
 * fd itself is closed. */
static void sc_fdopen_fcloseall(void)
{
    int s = hold("first", 0);
    FILE *f = fdopen(s, "r+");
    if (f == NULL)
        die("fdopen");
    say_avail("held_avail");
    /* fcloseall takes stdout too: keep a copy of fd 1 to put back. */
    int saved = dup(1);
    if (saved < 0)
        die("dup stdout");
    fflush(stdout);
    fcloseall();
    if (dup2(saved, 1) != 1)
        _exit(2);
    close(saved);
    FILE *again = fdopen(1, "w");
    if (again == NULL)
        _exit(2);
    stdout = again;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int still_open = fcntl(s, F_GETFD) >= 0;
    say("fd_after_fcloseall", still_open ? "open" : "closed");
    say_avail("after_fcloseall_avail");
    if (still_open) {
        close(s);
        say_avail("after_close_avail");
    }
}

/* LIMIT 2. */
static void range_close(int use_closefrom)
{
    int a = hold("first", 0);
    int b = hold("second", 0);
    int lo = a < b ? a : b, hi = a < b ? b : a;
    say_avail("held_avail");
    if (!use_closefrom) {
        /* Marking close-on-exec closes nothing. */
        if (close_range((unsigned)lo, (unsigned)hi, CLOSE_RANGE_CLOEXEC) != 0)
            die("close_range cloexec");
        say_avail("after_cloexec_range_avail");
        if (close_range((unsigned)lo, ~0U, 0) != 0)
            die("close_range");
    } else {
        closefrom(lo);
    }
    say_avail("after_range_avail");
}

/* ---- non-blocking, retries, failures ----------------------------------- */

static void sc_nonblock_einprogress(void)
{
    int s = socket(g_addr.ss_family, SOCK_STREAM, 0);
    if (s < 0)
        die("socket");
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    int err = connect(s, (struct sockaddr *)&g_addr, g_len) == 0 ? 0 : errno;
    if (err == 0 || err == EINPROGRESS)
        atomic_fetch_add(g_connects, 1);
    say("connect", res(err));

    long t0 = now_ms();
    int err2;
    int s2 = open_conn(SOCK_NONBLOCK, &err2);
    say("second_nonblock", res(err2));
    say_int("second_nonblock_ms", now_ms() - t0);
    if (s2 >= 0)
        close(s2);

    if (err == EINPROGRESS)
        err = complete(s);
    say("completed", res(err));
    say_avail("held_avail");
    close(s);
    say_avail("after_close_avail");
}

/* LIMIT 2: connect() called again on the same fd never takes a permit. */
static void sc_poll_connect_again(void)
{
    int err;
    int s = open_conn(SOCK_NONBLOCK, &err);
    say("first", res(err));
    if (s < 0)
        finish(1);
    char seen[256] = "";
    int calls = 0, last = err;
    while (last != EISCONN && calls < 500) {
        struct pollfd p = { .fd = s, .events = POLLOUT };
        poll(&p, 1, 20);
        last = connect(s, (struct sockaddr *)&g_addr, g_len) == 0 ? 0 : errno;
        calls++;
        const char *name = res(last);
        /* Keep the distinct sequence, e.g. EALREADY,ok,EISCONN. */
        size_t used = strlen(seen);
        const char *prev = strrchr(seen, ',');
        prev = prev ? prev + 1 : seen;
        if (strcmp(prev, name) != 0 && used + strlen(name) + 2 < sizeof(seen))
            snprintf(seen + used, sizeof(seen) - used, "%s%s", used ? "," : "", name);
    }
    say("again_seen", seen);
    say("again_last", res(last));
    say_int("again_calls", calls);
    say_avail("held_avail");

    int t = hold("blocking", 0);
    int again = connect(t, (struct sockaddr *)&g_addr, g_len) == 0 ? 0 : errno;
    say("blocking_again", res(again));
    say_avail("both_held_avail");
    close(s);
    close(t);
    say_avail("after_close_avail");
}

/* The port of a socket that was bound and closed: nothing listens there. */
static int closed_port(struct sockaddr_storage *ss, socklen_t *len)
{
    int fd = socket(g_addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    *ss = g_addr;
    *len = g_len;
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = 0;
    if (bind(fd, (struct sockaddr *)ss, *len) != 0 ||
        getsockname(fd, (struct sockaddr *)ss, len) != 0)
        die("bind");
    close(fd);
    return 0;
}

/* Rule must cover every port of HOST (e.g. 127.0.0.1:*). */
static void sc_failed_connect_releases(void)
{
    struct sockaddr_storage dead;
    socklen_t dead_len;
    closed_port(&dead, &dead_len);
    int err;
    int fd = open_to(&dead, dead_len, 0, &err);
    say("closed_port", res(err));
    if (fd >= 0)
        close(fd);
    say_avail("after_failed_avail");

    fd = open_to(&dead, dead_len, SOCK_NONBLOCK, &err);
    say("nb_connect", res(err));
    if (fd >= 0) {
        say("nb_so_error", res(complete(fd)));
        close(fd);
    }
    say_avail("after_nb_close_avail");
}

static void on_alarm(int sig)
{
    (void)sig;
}

/* LIMIT 3, rule covering every port of HOST: a blocking connect interrupted
 * by a signal keeps its permit (the handshake goes on in the kernel). */
static void sc_eintr_keeps(void)
{
    struct sockaddr_storage ls = g_addr;
    socklen_t llen = g_len;
    if (ls.ss_family == AF_INET)
        ((struct sockaddr_in *)&ls)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ls)->sin6_port = 0;
    int l = socket(ls.ss_family, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&ls, llen) != 0 ||
        getsockname(l, (struct sockaddr *)&ls, &llen) != 0 || listen(l, 0) != 0)
        die("listener");
    /* Backlog 0 takes one connection; later SYNs are dropped, so the next
     * connect blocks until the signal. */
    int err;
    int filler = open_to(&ls, llen, 0, &err);
    say("filler", res(err));
    if (filler < 0)
        finish(1);

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm; /* no SA_RESTART: connect returns EINTR */
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { .it_value = { 0, 300000 } };
    setitimer(ITIMER_REAL, &it, NULL);
    int s = open_to(&ls, llen, 0, &err);
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_DFL);
    alarm(60);
    say("interrupted", res(err));
    say_avail("after_eintr_avail");
    if (s >= 0)
        close(s);
    say_avail("after_close_avail");
    close(filler);
    close(l);
}

/* Two pipes to talk to a child (up: child to parent, down: parent to
 * child), then fork; stdout flushed so the child does not repeat it. */
static pid_t fork_with_pipes(int up[2], int down[2])
{
    if (pipe(up) != 0 || pipe(down) != 0)
        die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    return pid;
}

/* ---- fork and exec ------------------------------------------------------ */

static void sc_fork_child_close(void)
{
    int s = hold("first", 0);
    int up[2], down[2];
    pid_t pid = fork_with_pipes(up, down);
    if (pid == 0) {
        close(s); /* the parent still holds the socket: nothing goes back */
        write_byte(up[1], 'c');
        read_byte(down[0]);
        _exit(0);
    }
    read_byte(up[0]);
    say_avail("child_closed_avail");
    write_byte(down[1], 'x');
    waitpid(pid, NULL, 0);
    say_avail("child_exited_avail");
    close(s);
    say_avail("parent_closed_avail");
}

static void sc_fork_parent_close(void)
{
    int s = hold("first", 0);
    int up[2], down[2];
    pid_t pid = fork_with_pipes(up, down);
    if (pid == 0) {
        write_byte(up[1], 'r');
        read_byte(down[0]); /* keeps the inherited fd open meanwhile */
        close(s);
        write_byte(up[1], 'c');
        read_byte(down[0]);
        exit(0); /* a normal exit, destructors and all */
    }
    read_byte(up[0]);
    close(s);
    say_avail("parent_closed_avail");
    write_byte(down[1], 'x');
    read_byte(up[0]);
    say_avail("child_closed_avail");
    write_byte(down[1], 'x');
    waitpid(pid, NULL, 0);
    say_avail("child_exited_avail");
}

static void sc_fork_child_own(void)
{
    int up[2], down[2];
    pid_t pid = fork_with_pipes(up, down);
    if (pid == 0) {
        int err;
        int fd = open_conn(0, &err);
        write_byte(up[1], fd >= 0 ? 'k' : 'f');
        read_byte(down[0]);
        exit(0); /* without closing: exit gives it back */
    }
    say("child_connect", read_byte(up[0]) == 'k' ? "ok" : "failed");
    say_avail("child_holds_avail");
    write_byte(down[1], 'x');
    waitpid(pid, NULL, 0);
    say_avail("child_exited_avail");
}

static void sc_exec_cloexec(void)
{
    int s = hold("first", SOCK_CLOEXEC);
    (void)s;
    say_avail("held_avail");
    exec_self("exec_cloexec_child", 0);
}

static void sc_exec_cloexec_child(void)
{
    say_avail("after_exec_avail");
}

static void sc_exec_survives(void)
{
    int s = hold("first", 0);
    say_avail("held_avail");
    exec_self("exec_survives_child", s);
}

static void sc_exec_survives_child(void)
{
    int fd = extra_arg(0);
    say_avail("after_exec_avail");
    int type = 0;
    socklen_t tlen = sizeof(type);
    say("inherited_fd", getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 ?
        "socket" : "missing");
    close(fd);
    say_avail("after_close_avail");
}

/* LIMIT 2: exec closes the CLOEXEC one and keeps the other. */
static void sc_exec_mixed(void)
{
    int a = hold("cloexec", SOCK_CLOEXEC);
    int b = hold("inherit", 0);
    (void)a;
    say_avail("held_avail");
    exec_self("exec_mixed_child", b);
}

static void sc_exec_mixed_child(void)
{
    int fd = extra_arg(0);
    say_avail("after_exec_avail");
    close(fd);
    say_avail("after_close_avail");
}

static void sc_exec_fails(void)
{
    int s = hold("first", SOCK_CLOEXEC);
    char *args[] = { "missing", NULL };
    fflush(stdout);
    execv("/nonexistent/bulkhead-test-program", args);
    say("exec", res(errno));
    say_avail("after_failed_exec_avail");
    close(s);
    say_avail("after_close_avail");
}

/* A forked child connects (inheriting nothing tracked), execs an image that
 * keeps the socket, reports and exits without closing it. */
static void sc_exec_survives_exit(void)
{
    int up[2], down[2];
    pid_t pid = fork_with_pipes(up, down);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        int err;
        int fd = open_conn(0, &err);
        if (fd < 0) {
            write_byte(up[1], 'f');
            _exit(1);
        }
        /* The image after exec learns its pipe fds from fixed numbers. */
        if (dup2(up[1], 150) < 0 || dup2(down[0], 151) < 0)
            _exit(1);
        char limit[16], port[16], fdtext[16];
        snprintf(limit, sizeof(limit), "%d", g_limit);
        snprintf(port, sizeof(port), "%d", g_port);
        snprintf(fdtext, sizeof(fdtext), "%d", fd);
        char *args[] = { g_argv[0], (char *)g_host, port, "exec_exit_child", limit,
                         fdtext, NULL };
        execv("/proc/self/exe", args);
        _exit(1);
    }
    close(up[1]);
    close(down[0]);
    say("exec_child", read_byte(up[0]) == 'r' ? "ready" : "failed");
    say_avail("exec_child_alive_avail");
    write_byte(down[1], 'x');
    int status = 0;
    waitpid(pid, &status, 0);
    say_avail("exec_child_exited_avail");
}

static void sc_exec_exit_child(void)
{
    int fd = extra_arg(0);
    int type = 0;
    socklen_t tlen = sizeof(type);
    int alive = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0;
    write_byte(150, alive ? 'r' : 'f');
    read_byte(151);
    _exit(0); /* the new image exits holding the inherited socket */
}

/* LIMIT N: N children take every permit and are SIGKILLed, 20 rounds. */
static void sc_sigkill(void)
{
    enum { ROUNDS = 20, MAXKIDS = 64 };
    int kids = g_limit < MAXKIDS ? g_limit : MAXKIDS;
    int full = 0, restored = 0, connected = 0, first_bad = 0;
    for (int round = 1; round <= ROUNDS; round++) {
        int up[2];
        if (pipe(up) != 0)
            die("pipe");
        pid_t pids[MAXKIDS];
        fflush(stdout);
        for (int k = 0; k < kids; k++) {
            pids[k] = fork();
            if (pids[k] < 0)
                die("fork");
            if (pids[k] == 0) {
                int err;
                int fd = open_conn(0, &err);
                write_byte(up[1], fd >= 0 ? 'k' : 'f');
                for (;;)
                    pause();
            }
        }
        int ok = 0;
        for (int k = 0; k < kids; k++)
            ok += read_byte(up[0]) == 'k';
        connected += ok;
        int held = avail();
        for (int k = 0; k < kids; k++)
            kill(pids[k], SIGKILL);
        for (int k = 0; k < kids; k++)
            waitpid(pids[k], NULL, 0);
        /* Reaped: the kernel has undone their semaphore operations. */
        int after = avail();
        full += held == 0;
        restored += after == g_limit;
        if (!first_bad && (ok != kids || held != 0 || after != g_limit)) {
            first_bad = round;
            say_int("bad_round", round);
            say_int("bad_round_connected", ok);
            say_int("bad_round_held_avail", held);
            say_int("bad_round_after_kill_avail", after);
        }
        close(up[0]);
        close(up[1]);
    }
    say_int("rounds", ROUNDS);
    say_int("children_connected", connected);
    say_int("full_while_held", full);
    say_int("restored_after_kill", restored);
}

/* ---- a connection passed with sendmmsg, received with recvmmsg --------- */

/* One message carrying fd (SCM_RIGHTS) over the unix socket pair. */
static void pass_by_sendmmsg(int pair, int fd)
{
    char byte = 'p';
    struct iovec iov = { &byte, 1 };
    union { char buffer[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct mmsghdr one = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1,
                                        .msg_control = control.buffer,
                                        .msg_controllen = sizeof control.buffer } };
    struct cmsghdr *c = CMSG_FIRSTHDR(&one.msg_hdr);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmmsg(pair, &one, 1, 0) != 1)
        die("sendmmsg");
}

static int receive_by_recvmmsg(int pair)
{
    char byte;
    struct iovec iov = { &byte, 1 };
    union { char buffer[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct mmsghdr one = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1,
                                        .msg_control = control.buffer,
                                        .msg_controllen = sizeof control.buffer } };
    if (recvmmsg(pair, &one, 1, 0, NULL) != 1)
        die("recvmmsg");
    struct cmsghdr *c = CMSG_FIRSTHDR(&one.msg_hdr);
    int fd = -1;
    if (c && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* The child is forked before the connection exists (fork shares nothing
 * then); the connection reaches it only through sendmmsg. */
static void sc_pass_mmsg(void)
{
    int pair[2], up[2], down[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
        die("socketpair");
    pid_t pid = fork_with_pipes(up, down);
    if (pid == 0) {
        int received = receive_by_recvmmsg(pair[1]);
        write_byte(up[1], received >= 0 ? 'r' : 'n');
        read_byte(down[0]);
        close(received);
        write_byte(up[1], 'c');
        read_byte(down[0]);
        _exit(0);
    }
    int s = hold("first", 0);
    pass_by_sendmmsg(pair[0], s);
    close(s);
    say("received", read_byte(up[0]) == 'r' ? "yes" : "no");
    say_avail("passed_avail");
    write_byte(down[1], 'x');
    read_byte(up[0]);
    say_avail("receiver_closed_avail");
    write_byte(down[1], 'x');
    waitpid(pid, NULL, 0);
}

/* ---- fastopen, errno, other traffic ------------------------------------- */

enum fastopen_call { BY_SENDTO, BY_SENDMSG, BY_SENDMMSG };

static int fastopen_sendto(enum fastopen_call call, int *fd_out)
{
    int fd = socket(g_addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    *fd_out = fd;
    char data[] = "x";
    ssize_t n;
    struct iovec iov = { data, 1 };
    struct mmsghdr one = { .msg_hdr = { .msg_name = &g_addr, .msg_namelen = g_len,
                                        .msg_iov = &iov, .msg_iovlen = 1 } };
    if (call == BY_SENDMSG) {
        n = sendmsg(fd, &one.msg_hdr, MSG_FASTOPEN | MSG_NOSIGNAL);
    } else if (call == BY_SENDMMSG) {
        n = sendmmsg(fd, &one, 1, MSG_FASTOPEN | MSG_NOSIGNAL);
    } else {
        n = sendto(fd, data, 1, MSG_FASTOPEN | MSG_NOSIGNAL,
                   (struct sockaddr *)&g_addr, g_len);
    }
    if (n >= 0) {
        atomic_fetch_add(g_connects, 1);
        return 0;
    }
    int err = errno;
    if (err == EINPROGRESS)
        atomic_fetch_add(g_connects, 1);
    return err;
}

static void sc_fastopen(void)
{
    int s1, s2, s3, s4, s5, s6;
    int err = fastopen_sendto(BY_SENDTO, &s1);
    if (err == EOPNOTSUPP || err == ENOPROTOOPT) {
        say("fastopen", "unsupported");
        finish(3);
    }
    say("first_fastopen", res(err));
    say("second_fastopen", res(fastopen_sendto(BY_SENDTO, &s2)));
    say("sendmsg_fastopen", res(fastopen_sendto(BY_SENDMSG, &s3)));
    say("sendmmsg_fastopen", res(fastopen_sendto(BY_SENDMMSG, &s5)));
    say_avail("held_avail");
    close(s1);
    say_avail("after_close_avail");
    say("sendmsg_after_close", res(fastopen_sendto(BY_SENDMSG, &s4)));
    say_avail("held_again_avail");
    close(s4);
    say_avail("after_close_again_avail");
    say("sendmmsg_after_close", res(fastopen_sendto(BY_SENDMMSG, &s6)));
    say_avail("held_by_sendmmsg_avail");
    close(s6);
    close(s2); /* never connected: closing them gives nothing back */
    close(s3);
    close(s5);
    say_avail("after_close_all_avail");
}

/* LIMIT >= 1, OTHER_PORT: a server port no rule matches. */
static void sc_errno_untouched(void)
{
    enum { SENTINEL = 4242 };
    struct sockaddr_storage other;
    socklen_t olen = 0;
    parse_address(g_host, extra_arg(0), &other, &olen);
    int s, u, d, rc;

#define CHECK(step, call)                                                   \
    do {                                                                    \
        errno = SENTINEL;                                                   \
        rc = (call);                                                        \
        if (rc < 0)                                                         \
            say("errno_" step, "call_failed");                              \
        else                                                                \
            say("errno_" step, errno == SENTINEL ? "kept" : res(errno));     \
    } while (0)

    CHECK("socket", s = socket(g_addr.ss_family, SOCK_STREAM, 0));
    CHECK("connect_matched", connect(s, (struct sockaddr *)&g_addr, g_len));
    if (rc == 0)
        atomic_fetch_add(g_connects, 1);
    CHECK("socket_unmatched", u = socket(other.ss_family, SOCK_STREAM, 0));
    CHECK("connect_unmatched", connect(u, (struct sockaddr *)&other, olen));
    CHECK("dup", d = dup(s));
    CHECK("close_dup", close(d));
    CHECK("fcntl_dupfd", d = fcntl(s, F_DUPFD_CLOEXEC, 50));
    CHECK("dup2_onto_dup", dup2(u, d));
    CHECK("close_dup2", close(d));
    CHECK("close_matched", close(s));
    CHECK("close_unmatched", close(u));
#undef CHECK
}

/* LIMIT 0 compartment on HOST:PORT: only TCP is capped. */
static void sc_udp_untouched(void)
{
    int u = socket(g_addr.ss_family, SOCK_DGRAM, 0);
    if (u < 0)
        die("socket udp");
    say("udp_connect", res(connect(u, (struct sockaddr *)&g_addr, g_len) == 0 ? 0 : errno));
    int u2 = socket(g_addr.ss_family, SOCK_DGRAM, 0);
    say("udp_sendto", res(sendto(u2, "x", 1, 0, (struct sockaddr *)&g_addr, g_len) == 1 ?
                          0 : errno));
    close(u);
    close(u2);

    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un un = { .sun_family = AF_UNIX };
    snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "fdops-%d", (int)getpid());
    socklen_t ulen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                                 strlen(un.sun_path + 1));
    if (l < 0 || bind(l, (struct sockaddr *)&un, ulen) != 0 || listen(l, 4) != 0)
        die("unix listener");
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    say("unix_connect", res(connect(c, (struct sockaddr *)&un, ulen) == 0 ? 0 : errno));
    close(c);
    close(l);

    int err;
    int t = open_conn(0, &err);
    say("tcp_connect", res(err));
    if (t >= 0)
        close(t);
}

/* LIMIT N: threads churn through connect/close; permits must all be there
 * at the end and never more. */
static _Atomic long g_churn_ok, g_churn_refused, g_churn_gave_up;

static void *churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 50; i++) {
        int tries = 0;
        for (;;) {
            int err;
            int fd = open_conn(0, &err);
            if (fd >= 0) {
                atomic_fetch_add(&g_churn_ok, 1);
                sleep_ms(1);
                close(fd);
                break;
            }
            atomic_fetch_add(&g_churn_refused, 1);
            if (++tries > 20000) {
                atomic_fetch_add(&g_churn_gave_up, 1);
                break;
            }
            sched_yield();
        }
    }
    return NULL;
}

static void sc_threads(void)
{
    enum { THREADS = 8 };
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, churn, NULL) != 0)
            die("pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    say_int("churn_ok", atomic_load(&g_churn_ok));
    say_int("churn_gave_up", atomic_load(&g_churn_gave_up));
    say_int("churn_refused", atomic_load(&g_churn_refused));
}

/* ---- main -------------------------------------------------------------- */

struct scenario {
    const char *name;
    void (*run)(void);
};

static void sc_dup_then_close_one(void) { dup_pair(DK_DUP, 1); }
static void sc_dup_both_closed(void) { dup_pair(DK_DUP, 0); }
static void sc_dup2_copy(void) { dup_pair(DK_DUP2, 1); }
static void sc_dup3(void) { dup_pair(DK_DUP3, 1); }
static void sc_fcntl_dupfd(void) { dup_pair(DK_FCNTL, 1); }
static void sc_fcntl_dupfd_cloexec(void) { dup_pair(DK_FCNTL_CLOEXEC, 0); }
static void sc_dup2_onto_tracked(void) { onto_tracked(0); }
static void sc_dup3_onto_tracked(void) { onto_tracked(1); }
static void sc_close_range(void) { range_close(0); }
static void sc_closefrom(void) { range_close(1); }
static void sc_verify(void) {}

static const struct scenario scenarios[] = {
    { "close", sc_close },
    { "dup_then_close_one", sc_dup_then_close_one },
    { "dup_both_closed", sc_dup_both_closed },
    { "dup2_copy", sc_dup2_copy },
    { "dup3", sc_dup3 },
    { "fcntl_dupfd", sc_fcntl_dupfd },
    { "fcntl_dupfd_cloexec", sc_fcntl_dupfd_cloexec },
    { "dup2_onto_tracked", sc_dup2_onto_tracked },
    { "dup3_onto_tracked", sc_dup3_onto_tracked },
    { "dup2_same_fd", sc_dup2_same_fd },
    { "dup2_tracked_onto_tracked", sc_dup2_tracked_onto_tracked },
    { "fdopen_fclose", sc_fdopen_fclose },
    { "fdopen_fcloseall", sc_fdopen_fcloseall },
    { "close_range", sc_close_range },
    { "closefrom", sc_closefrom },
    { "nonblock_einprogress", sc_nonblock_einprogress },
    { "poll_connect_again", sc_poll_connect_again },
    { "failed_connect_releases", sc_failed_connect_releases },
    { "eintr_keeps", sc_eintr_keeps },
    { "fork_child_close", sc_fork_child_close },
    { "fork_parent_close", sc_fork_parent_close },
    { "fork_child_own", sc_fork_child_own },
    { "exec_cloexec", sc_exec_cloexec },
    { "exec_cloexec_child", sc_exec_cloexec_child },
    { "exec_survives", sc_exec_survives },
    { "exec_survives_child", sc_exec_survives_child },
    { "exec_survives_exit", sc_exec_survives_exit },
    { "exec_exit_child", sc_exec_exit_child },
    { "exec_mixed", sc_exec_mixed },
    { "exec_mixed_child", sc_exec_mixed_child },
    { "exec_fails", sc_exec_fails },
    { "sigkill", sc_sigkill },
    { "pass_mmsg", sc_pass_mmsg },
    { "fastopen", sc_fastopen },
    { "errno_untouched", sc_errno_untouched },
    { "udp_untouched", sc_udp_untouched },
    { "threads", sc_threads },
    { "verify", sc_verify },
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    alarm(60); /* a hung scenario must not hang the suite */
    g_argc = argc;
    g_argv = argv;
    if (argc < 4) {
        fprintf(stderr, "usage: fdops HOST PORT SCENARIO [LIMIT [EXTRA...]]\n");
        return 2;
    }
    g_host = argv[1];
    g_port = atoi(argv[2]);
    if (argc > 4)
        g_limit = atoi(argv[4]);
    if (parse_address(g_host, g_port, &g_addr, &g_len) != 0) {
        fprintf(stderr, "fdops: not a numeric address: %s\n", g_host);
        return 2;
    }
    g_connects = mmap(NULL, sizeof(*g_connects), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_connects == MAP_FAILED)
        return 2;
    const char *inherited = getenv("FDOPS_CONNECTS");
    atomic_store(g_connects, inherited ? atol(inherited) : 0);
    unsetenv("FDOPS_CONNECTS");

    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        if (strcmp(scenarios[i].name, argv[3]) == 0) {
            scenarios[i].run();
            /* Every fd of the scenario is closed: all permits are back. */
            if (strcmp(argv[3], "udp_untouched") != 0)
                say_avail("final_avail");
            finish(0);
        }
    }
    fprintf(stderr, "fdops: unknown scenario %s\n", argv[3]);
    return 2;
}
