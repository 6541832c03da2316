/* copies HOST PORT MODE [ARGS...]
 *
 * Copies of a counted connection in another process, made the ways the
 * shim must follow, and closes of many at once. Every wait is on a file
 * the test creates (GO); output is line buffered, one key=value or word a
 * line, from every process of the scenario.
 *
 * MODE:
 *   peek GO        a forked receiver (holding nothing) gets one connection
 *                  over SCM_RIGHTS: recvmsg(MSG_PEEK) first, whose copy it
 *                  closes at once, then the real recvmsg, whose copy it
 *                  holds. The sender closes its own copy. Prints
 *                  "received" once the receiver holds the connection, then
 *                  waits for GO, closes it, prints "closed" and pauses.
 *   fork_bare GO   connects, glibc's _Fork(); the parent closes its copy,
 *                  prints "parent_closed" and pauses; the child waits for
 *                  GO, closes its copy ("child_closed"), connects and
 *                  closes 3 times ("loop=ok" or the errno each), prints
 *                  "looped" and pauses.
 *   inflight N     N non-blocking connects (to a blackhole: the SYNs go
 *                  unanswered), then fork: the child prints "child=PID"
 *                  and pauses holding every copy; the parent exits.
 *   take N         N non-blocking connects; prints "in=K refused=R" (R
 *                  refused by the compartment's EHOSTUNREACH) and exits.
 *   close_range N GO, closefrom N GO
 *                  N blocking connects, "held=N", then once GO exists one
 *                  close_range(first, ~0U, 0) or closefrom(first) over all
 *                  of them, "closed", and pauses.
 *   unshare N GO   the same with close_range(first, ~0U, CLOSE_RANGE_UNSHARE)
 *                  while a second thread runs: the sockets stay open in
 *                  that thread's fd table.
 * Exit: 2 on usage or setup errors. */
#include <errno.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client_util.h"

static struct sockaddr_storage g_to;
static socklen_t g_length;

static void fail(const char *what)
{
    fprintf(stderr, "copies: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void wait_file(const char *path)
{
    while (access(path, F_OK) != 0)
        sleep_ms(10);
}

/* A connected socket (flags: SOCK_NONBLOCK), or -1 with errno. */
static int open_connection(int flags)
{
    int fd = socket(g_to.ss_family, SOCK_STREAM | flags, 0);
    if (fd < 0)
        fail("socket");
    if (connect(fd, (struct sockaddr *)&g_to, g_length) == 0 || errno == EINPROGRESS)
        return fd;
    int err = errno;
    close(fd);
    errno = err;
    return -1;
}

static int must_connect(void)
{
    int fd = open_connection(0);
    if (fd < 0) {
        printf("%s\n", errno_text(errno));
        exit(1);
    }
    return fd;
}

static _Noreturn void hold_forever(void)
{
    for (;;)
        pause();
}

static void send_fd(int over, int fd)
{
    char byte = 'x', control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { &byte, 1 };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                          .msg_controllen = sizeof control };
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(over, &msg, 0) != 1)
        fail("sendmsg");
}

static int receive_fd(int over, int flags)
{
    char byte, control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { &byte, 1 };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                          .msg_controllen = sizeof control };
    if (recvmsg(over, &msg, flags) != 1)
        fail("recvmsg");
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    int fd;
    if (!c || c->cmsg_type != SCM_RIGHTS)
        fail("no fd passed");
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static void peek(const char *go)
{
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
        fail("socketpair");
    pid_t receiver = fork();
    if (receiver < 0)
        fail("fork");
    if (receiver == 0) {
        close(pair[0]);
        close(receive_fd(pair[1], MSG_PEEK));
        int held = receive_fd(pair[1], 0);
        printf("received\n");
        wait_file(go);
        close(held);
        printf("closed\n");
        hold_forever();
    }
    close(pair[1]);
    int fd = must_connect();
    send_fd(pair[0], fd);
    close(fd);
    waitpid(receiver, NULL, 0);
}

static void fork_bare(const char *go)
{
    int fd = must_connect();
    pid_t child = _Fork();
    if (child < 0)
        fail("_Fork");
    if (child > 0) {
        close(fd);
        printf("parent_closed\n");
        hold_forever();
    }
    wait_file(go);
    close(fd);
    printf("child_closed\n");
    for (int i = 0; i < 3; i++) {
        int again = open_connection(0);
        printf("loop=%s\n", again < 0 ? errno_text(errno) : "ok");
        if (again >= 0)
            close(again);
    }
    printf("looped\n");
    hold_forever();
}

static void inflight(int count)
{
    for (int i = 0; i < count; i++)
        if (open_connection(SOCK_NONBLOCK) < 0)
            fail("connect");
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        printf("child=%d\n", (int)getpid());
        hold_forever();
    }
}

static void take(int count)
{
    int in = 0, refused = 0;
    for (int i = 0; i < count; i++) {
        if (open_connection(SOCK_NONBLOCK) >= 0)
            in++;
        else if (errno == EHOSTUNREACH)
            refused++;
    }
    printf("in=%d refused=%d\n", in, refused);
}

static void *idle_thread(void *unused)
{
    (void)unused;
    hold_forever();
}

enum range_call { CLOSE_RANGE, CLOSEFROM, UNSHARE };

static void close_all(enum range_call call, int count, const char *go)
{
    pthread_t thread;
    if (call == UNSHARE && pthread_create(&thread, NULL, idle_thread, NULL) != 0)
        fail("pthread_create");
    int first = -1;
    for (int i = 0; i < count; i++) {
        int fd = must_connect();
        if (first < 0)
            first = fd;
    }
    printf("held=%d\n", count);
    wait_file(go);
    if (call == CLOSEFROM)
        closefrom(first);
    else if (close_range((unsigned)first, ~0U, call == UNSHARE ? CLOSE_RANGE_UNSHARE : 0) < 0)
        fail("close_range");
    printf("closed\n");
    hold_forever();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 5 || parse_address(argv[1], atoi(argv[2]), &g_to, &g_length) < 0) {
        fprintf(stderr, "usage: copies HOST PORT MODE ARGS...\n");
        return 2;
    }
    const char *mode = argv[3];
    if (strcmp(mode, "peek") == 0)
        peek(argv[4]);
    else if (strcmp(mode, "fork_bare") == 0)
        fork_bare(argv[4]);
    else if (strcmp(mode, "inflight") == 0)
        inflight(atoi(argv[4]));
    else if (strcmp(mode, "take") == 0)
        take(atoi(argv[4]));
    else if (strcmp(mode, "close_range") == 0 && argc == 6)
        close_all(CLOSE_RANGE, atoi(argv[4]), argv[5]);
    else if (strcmp(mode, "closefrom") == 0 && argc == 6)
        close_all(CLOSEFROM, atoi(argv[4]), argv[5]);
    else if (strcmp(mode, "unshare") == 0 && argc == 6)
        close_all(UNSHARE, atoi(argv[4]), argv[5]);
    else {
        fprintf(stderr, "copies: unknown mode or arguments: %s\n", mode);
        return 2;
    }
    return 0;
}
