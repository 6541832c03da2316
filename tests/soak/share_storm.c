/* A random-kill storm of shared sockets, under the real shim, in a
 * namespace of its own (removed at the end). Each round, workers preloaded
 * with build/libbulkhead.so connect (blocking to a server that accepts,
 * non-blocking to a blackhole whose SYNs go unanswered, so some sockets
 * are shared mid-connect), close, fork, _Fork, fork and exec themselves
 * (the hand-off), vfork and exec, posix_spawn, pass connections over SCM_RIGHTS to a receiver that
 * peeks first or never receives, close ranges; the round ends by killing
 * every worker's process group, each with SIGKILL or SIGTERM at a random
 * moment. Then, with nothing alive, the permits' own reaper asks the
 * kernel (sock_diag) about every socket record, and the pool must read
 * exactly its size free, nothing in use and no record left; last a fresh
 * process under the shim must get exactly the limit, at the test server.
 *
 *   share_storm [SECONDS] [SEED]   default 20 s, seed from the clock
 *   BULKHEAD_SOAK_SHIM=PATH        the shim to preload (default: the
 *                                  libbulkhead.so beside ../ of this binary)
 *
 * Exit 0 when every round balanced; 1 with the first round that did not. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "permits/permits.h"

enum { LIMIT = 6, WORKERS = 6, MAX_HELD = 8, MAX_DEPTH = 2 };

static struct sockaddr_in server, blackhole;

static int64_t now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* ---- the workers, under the shim ---------------------------------------- */

static int held[MAX_HELD], held_count;
static int depth, to_receiver = -1;
static char *self_path;

static void keep(int fd)
{
    if (held_count < MAX_HELD)
        held[held_count++] = fd;
    else
        close(fd);
}

static void drop_one(void)
{
    if (!held_count)
        return;
    int i = rand() % held_count;
    close(held[i]);
    held[i] = held[--held_count];
}

static void connect_one(void)
{
    int to_hole = rand() % 3 == 0;
    int fd = socket(AF_INET, SOCK_STREAM | (to_hole ? SOCK_NONBLOCK : 0), 0);
    const struct sockaddr_in *to = to_hole ? &blackhole : &server;
    if (fd < 0)
        return;
    if (connect(fd, (const struct sockaddr *)to, sizeof *to) == 0 || errno == EINPROGRESS)
        keep(fd);
    else
        close(fd);
}

static void pass_one(void)
{
    if (!held_count || to_receiver < 0)
        return;
    char byte = 'x', control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { &byte, 1 };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                          .msg_controllen = sizeof control };
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &held[rand() % held_count], sizeof(int));
    sendmsg(to_receiver, &msg, MSG_DONTWAIT);
    if (rand() % 2)
        drop_one();
}

/* Receives passed connections, peeking first now and then, and holds or
 * closes them; sometimes leaves messages queued for good. */
static _Noreturn void receive_forever(int from)
{
    for (;;) {
        char byte, control[CMSG_SPACE(sizeof(int))];
        struct iovec iov = { &byte, 1 };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                              .msg_controllen = sizeof control };
        int flags = rand() % 3 == 0 ? MSG_PEEK : 0;
        if (rand() % 8 == 0) {
            usleep(20000);  /* leaves what is queued in flight a while */
            continue;
        }
        if (recvmsg(from, &msg, flags) <= 0)
            _exit(0);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        if (c && c->cmsg_type == SCM_RIGHTS) {
            int fd;
            memcpy(&fd, CMSG_DATA(c), sizeof fd);
            if (flags && rand() % 2)
                close(fd);
            else
                keep(fd);
        }
        if (rand() % 3 == 0)
            drop_one();
    }
}

static void start_receiver(void)
{
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(pair[0]);
        held_count = 0;
        receive_forever(pair[1]);
    }
    close(pair[1]);
    to_receiver = pid > 0 ? pair[0] : -1;
    if (pid < 0)
        close(pair[0]);
}

static void worker_loop(void);

/* fork, _Fork, fork and exec this program again (the hand-off), vfork and
 * exec, posix_spawn: the children that exec get the sockets without
 * close-on-exec, some of them at fd numbers made by dup2 first. */
static void spawn(void)
{
    if (depth >= MAX_DEPTH)
        return;
    char depth_text[16], seed[16], port[16], hole[16];
    snprintf(depth_text, sizeof depth_text, "%d", depth + 1);
    snprintf(seed, sizeof seed, "%u", (unsigned)rand());
    snprintf(port, sizeof port, "%d", ntohs(server.sin_port));
    snprintf(hole, sizeof hole, "%d", ntohs(blackhole.sin_port));
    char *argv[] = { self_path, "--worker", seed, port, hole, depth_text, NULL };
    int how = rand() % 5;
    if (how == 3) {
        if (vfork() == 0) {
            execv(self_path, argv);
            _exit(1);
        }
        return;
    }
    if (how == 4) {
        pid_t pid;
        posix_spawn(&pid, self_path, NULL, NULL, argv, environ);
        return;
    }
    pid_t pid = how == 1 ? _Fork() : fork();
    if (pid != 0)
        return;
    depth++;
    if (how == 2) {
        execv(self_path, argv);
        _exit(1);
    }
    srand((unsigned)rand() ^ (unsigned)getpid());
    worker_loop();
}

static void close_some_range(void)
{
    if (!held_count)
        return;
    int from = held[rand() % held_count];
    if (rand() % 2)
        close_range((unsigned)from, ~0U, 0);
    else
        closefrom(from);
    int kept = 0;
    for (int i = 0; i < held_count; i++)
        if (held[i] < from)
            held[kept++] = held[i];
    held_count = kept;
}

static _Noreturn void worker_loop(void)
{
    for (;;) {
        switch (rand() % 16) {
        case 0: case 1: case 2: case 3: case 4: connect_one(); break;
        case 5: case 6: case 7: drop_one(); break;
        case 8: case 9: pass_one(); break;
        case 10: spawn(); break;
        case 11: close_some_range(); break;
        case 12: if (depth && rand() % 4 == 0) exit(0); break;
        case 13: if (depth && rand() % 4 == 0) _exit(0); break;
        default: usleep((useconds_t)(rand() % 3000)); break;
        }
    }
}

/* An exec'd image holds whatever sockets it was handed. */
static void adopt_inherited(void)
{
    for (int fd = 3; fd < 64 && held_count < MAX_HELD; fd++) {
        int type;
        socklen_t length = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 &&
            type == SOCK_STREAM)
            held[held_count++] = fd;
    }
}

static int worker_main(char **argv)
{
    srand((unsigned)strtoul(argv[2], NULL, 10));
    server.sin_port = htons((uint16_t)atoi(argv[3]));
    blackhole.sin_port = htons((uint16_t)atoi(argv[4]));
    depth = atoi(argv[5]);
    adopt_inherited();
    if (!depth)
        start_receiver();
    worker_loop();
}

/* N non-blocking connects to the server: "in" of them get through. */
static int take_main(char **argv)
{
    server.sin_port = htons((uint16_t)atoi(argv[2]));
    int count = atoi(argv[3]), in = 0;
    for (int i = 0; i < count; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (connect(fd, (struct sockaddr *)&server, sizeof server) == 0 ||
            errno == EINPROGRESS)
            in++;
    }
    return in;
}

/* ---- the judge, without the shim ---------------------------------------- */

static char rules_path[PATH_MAX], shim_path[PATH_MAX], namespace_name[64];

static void *accept_and_close(void *listener)
{
    for (;;) {
        int fd = accept(*(int *)listener, NULL, NULL);
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

static int listen_on(struct sockaddr_in *at, int backlog)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t length = sizeof *at;
    *at = (struct sockaddr_in){ .sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (fd < 0 || bind(fd, (struct sockaddr *)at, sizeof *at) < 0 ||
        listen(fd, backlog) < 0 || getsockname(fd, (struct sockaddr *)at, &length) < 0)
        return -1;
    return fd;
}

/* A listener whose accept queue is full: further SYNs are dropped. */
static int fill_blackhole(void)
{
    int listener = listen_on(&blackhole, 0);
    for (int i = 0; listener >= 0 && i < 2; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fd, (struct sockaddr *)&blackhole, sizeof blackhole);
        usleep(50000);
    }
    return listener;
}

static pid_t start_under_shim(char *const argv[])
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 1);
    dup2(null, 2);
    setenv("LD_PRELOAD", shim_path, 1);
    setenv("BULKHEAD_CONFIG", rules_path, 1);
    execv(self_path, argv);
    _exit(127);
}

/* What a fresh process under the shim gets: LIMIT, and no more. */
static int fresh_process_takes(void)
{
    char port[16], count[16];
    snprintf(port, sizeof port, "%d", ntohs(server.sin_port));
    snprintf(count, sizeof count, "%d", LIMIT + 1);
    char *argv[] = { self_path, "--take", port, count, NULL };
    int status;
    pid_t pid = start_under_shim(argv);
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void storm(unsigned seed)
{
    pid_t workers[WORKERS];
    char port[16], hole[16];
    snprintf(port, sizeof port, "%d", ntohs(server.sin_port));
    snprintf(hole, sizeof hole, "%d", ntohs(blackhole.sin_port));
    for (int w = 0; w < WORKERS; w++) {
        char seed_text[16];
        snprintf(seed_text, sizeof seed_text, "%u", seed + (unsigned)w);
        char *argv[] = { self_path, "--worker", seed_text, port, hole, "0", NULL };
        workers[w] = start_under_shim(argv);
    }
    usleep((useconds_t)(50000 + rand() % 200000));
    for (int w = 0; w < WORKERS; w++) {
        usleep((useconds_t)(rand() % 20000));
        kill(-workers[w], rand() % 2 ? SIGKILL : SIGTERM);
    }
    /* Orphans come to us (a subreaper); a process forked as its group was
     * signalled is signalled again. */
    for (int tries = 1;; tries++) {
        pid_t reaped = waitpid(-1, NULL, WNOHANG);
        if (reaped < 0 && errno == ECHILD)
            break;
        if (reaped == 0)
            usleep(10000);
        for (int w = 0; reaped == 0 && tries % 50 == 0 && w < WORKERS; w++)
            kill(-workers[w], SIGKILL);
    }
}

/* Reaps (waiting for the namespace's reap interval, not skipping it) until
 * the pool is whole, for a second at most: a socket's last close by a
 * dying process can reach the kernel's tables a moment after its exit. */
static int pool_whole(struct bh_namespace *ns, int compartment, int round)
{
    struct bh_compartment_view view;
    int permits = 0, records = 0;
    for (int tries = 0; tries < 20; tries++) {
        bh_socket_reap_surely(ns, -1);
        permits = 0;
        records = bh_socket_count(ns, compartment, &permits);
        if (bh_compartment_read(ns, compartment, &view) < 0)
            return 0;
        if (view.in_use == 0 && view.common_free == LIMIT && records == 0)
            return 1;
        usleep(50000);
    }
    fprintf(stderr, "round %d: %d free, %d in use, %d socket records holding %d; "
            "limit %d\n", round, view.common_free, view.in_use, records, permits, LIMIT);
    return 0;
}

static int judge(int seconds, unsigned seed)
{
    int listener = listen_on(&server, 4096), hole = fill_blackhole();
    pthread_t thread;
    if (listener < 0 || hole < 0 ||
        pthread_create(&thread, NULL, accept_and_close, &listener) != 0) {
        perror("share_storm: listeners");
        return 1;
    }
    snprintf(namespace_name, sizeof namespace_name, "soak-share-%d", (int)getpid());
    snprintf(rules_path, sizeof rules_path, "/tmp/share_storm-%d.ini", (int)getpid());
    FILE *rules = fopen(rules_path, "w");
    if (!rules)
        return 1;
    fprintf(rules, "[global]\nnamespace = %s\n[storm]\nlimit = %d\nwait_ms = 0\n"
            "errno = EHOSTUNREACH\nmatch = 127.0.0.1:%d\nmatch = 127.0.0.1:%d\n",
            namespace_name, LIMIT, ntohs(server.sin_port), ntohs(blackhole.sin_port));
    fclose(rules);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    struct bh_namespace ns;
    char err[256];
    int round = 0, taken = fresh_process_takes(), ok = taken == LIMIT;
    int compartment = -1;
    if (bh_namespace_open(namespace_name, 0, &ns, err, sizeof err) < 0) {
        fprintf(stderr, "share_storm: %s\n", err);
        ok = 0;
    } else {
        compartment = bh_compartment_find(&ns, "storm");
        ok = ok && compartment >= 0;
    }
    srand(seed);
    for (int64_t end = now_ms() + seconds * 1000; ok && now_ms() < end; round++) {
        storm(seed + (unsigned)round * WORKERS);
        ok = pool_whole(&ns, compartment, round);
        if (ok && (taken = fresh_process_takes()) != LIMIT) {
            fprintf(stderr, "round %d: a fresh process got %d of %d\n", round, taken, LIMIT);
            ok = 0;
        }
    }
    printf("share_storm: %d rounds of %d workers, seed %u: %s\n", round, WORKERS, seed,
           ok ? "every pool whole" : "FAILED");
    if (compartment >= 0 || ns.state)
        bh_namespace_remove(&ns);
    unlink(rules_path);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    static char self[PATH_MAX];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length <= 0)
        return 2;
    self_path = self;
    server.sin_family = blackhole.sin_family = AF_INET;
    server.sin_addr.s_addr = blackhole.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (argc == 6 && strcmp(argv[1], "--worker") == 0)
        return worker_main(argv);
    if (argc == 4 && strcmp(argv[1], "--take") == 0)
        return take_main(argv);
    const char *shim = getenv("BULKHEAD_SOAK_SHIM");
    char directory[PATH_MAX];
    snprintf(directory, sizeof directory, "%s", self);
    if (shim)
        snprintf(shim_path, sizeof shim_path, "%s", shim);
    else
        snprintf(shim_path, sizeof shim_path, "%s/../libbulkhead.so", dirname(directory));
    int seconds = argc > 1 ? atoi(argv[1]) : 20;
    unsigned seed = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : (unsigned)time(NULL);
    return judge(seconds, seed);
}
