/* fork_share HOST PORT N HOLD_MS|all[=STATS] [--share]
 *
 * Built by the tests with gcc -static (no dynamic loader: no LD_PRELOAD),
 * into build/tests/fork_share. Forks N children at once; each connects one
 * blocking TCP socket to a numeric IPv4 HOST and PORT and prints "ok" or
 * the errno name.
 *   without --share: the child holds its connection HOLD_MS, closes it and
 *     exits; with "all", until every child has connected or been refused,
 *     so that they all overlap however slowly the machine forks them; with
 *     "all=STATS", also until the test server's stats file (holdserver.py
 *     --stats) shows every connected child open at once (30 s at most):
 *     a connect is over once the kernel finished the handshake, which can
 *     be before the server accepted it, and a child closed before then
 *     was never open beside its siblings at the server.
 *   --share: the child dups its socket, sends the dup to the parent over
 *     SCM_RIGHTS, closes both of its own fds and exits; the parent holds
 *     every socket it received HOLD_MS after the last child exited, then
 *     closes them. The connection outlives the process that made it.
 *     "held N" is printed once every child exited and N sockets arrived.
 * Prints "done" once every child exited (and, with --share, every socket
 * received was closed). Exit: 0, or 2 for a usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../client_util.h"

static void pass(int channel, int fd)
{
    char control[CMSG_SPACE(sizeof(int))] = { 0 };
    char byte = 'x';
    struct iovec data = { &byte, 1 };
    struct msghdr message = { .msg_iov = &data, .msg_iovlen = 1,
                              .msg_control = control, .msg_controllen = sizeof control };
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &fd, sizeof fd);
    if (sendmsg(channel, &message, 0) < 0)
        perror("sendmsg");
}

static int receive(int channel)
{
    char control[CMSG_SPACE(sizeof(int))];
    char byte;
    struct iovec data = { &byte, 1 };
    struct msghdr message = { .msg_iov = &data, .msg_iovlen = 1,
                              .msg_control = control, .msg_controllen = sizeof control };
    if (recvmsg(channel, &message, 0) <= 0)
        return -1;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    int fd = -1;
    if (header && header->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(header), sizeof fd);
    return fd;
}

/* The "all" hold: each child writes a byte to `tried` once its connect is
 * over ('o' connected, 'r' not), then waits for EOF on `release`, which
 * the parent closes once it has read a byte from every child (and the
 * server shows the connected ones open). */
struct barrier {
    int tried[2];
    int release[2];
    const char *stats;   /* NULL: do not wait for the server */
};

static void wait_for_siblings(struct barrier *barrier, int connected)
{
    char byte = connected ? 'o' : 'r';
    if (write(barrier->tried[1], &byte, 1) != 1)
        perror("write");
    while (read(barrier->release[0], &byte, 1) < 0 && errno == EINTR)
        ;
}

static void wait_for_server(const char *stats, int connected)
{
    for (int waited_ms = 0; waited_ms < 30000 && server_open(stats) < connected;
         waited_ms += 10)
        sleep_ms(10);
}

static void release_children(struct barrier *barrier, int count)
{
    char byte;
    int connected = 0;
    close(barrier->tried[1]);
    close(barrier->release[0]);
    for (int heard = 0; heard < count;) {
        ssize_t got = read(barrier->tried[0], &byte, 1);
        if (got == 0 || (got < 0 && errno != EINTR))
            break;  /* every child gone: nobody left to release */
        heard += got > 0;
        connected += got > 0 && byte == 'o';
    }
    if (barrier->stats)
        wait_for_server(barrier->stats, connected);
    close(barrier->release[1]);
}

static void child(const struct sockaddr_in *to, int hold_ms, int channel,
                  struct barrier *barrier)
{
    if (barrier) {
        close(barrier->release[1]);
        close(barrier->tried[0]);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int rc = fd < 0 ? -1 : connect(fd, (const struct sockaddr *)to, sizeof *to);
    printf("%s\n", rc == 0 ? "ok" : strerrorname_np(errno));
    if (rc == 0 && channel >= 0) {
        int copy = dup(fd);
        pass(channel, copy);
        close(copy);
    } else if (rc == 0 && !barrier) {
        sleep_ms(hold_ms);
    }
    if (barrier)
        wait_for_siblings(barrier, rc == 0);
    if (fd >= 0)
        close(fd);
    _exit(0);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int all = argc >= 5 && (strcmp(argv[4], "all") == 0 || strncmp(argv[4], "all=", 4) == 0);
    if (argc < 5 || argc > 6 || (argc == 6 && (all || strcmp(argv[5], "--share") != 0))) {
        fprintf(stderr, "usage: fork_share HOST PORT N HOLD_MS|all[=STATS] [--share]\n");
        return 2;
    }
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
    int count = atoi(argv[3]), hold_ms = atoi(argv[4]), channel[2] = { -1, -1 };
    if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1 ||
        (argc == 6 && socketpair(AF_UNIX, SOCK_DGRAM, 0, channel) < 0)) {
        fprintf(stderr, "fork_share: bad host or no socketpair\n");
        return 2;
    }
    struct barrier barrier = { .stats = all && argv[4][3] == '=' ? argv[4] + 4 : NULL };
    if (all && (pipe(barrier.tried) < 0 || pipe(barrier.release) < 0)) {
        perror("pipe");
        return 2;
    }
    for (int i = 0; i < count; i++)
        if (fork() == 0)
            child(&to, hold_ms, channel[1], all ? &barrier : NULL);
    if (all)
        release_children(&barrier, count);
    while (wait(NULL) > 0)
        ;
    if (argc == 6) {
        int held[256], kept = 0;
        close(channel[1]);
        struct timeval none = { 0, 1000 };
        setsockopt(channel[0], SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        while (kept < 256 && (held[kept] = receive(channel[0])) >= 0)
            kept++;
        printf("held %d\n", kept);
        sleep_ms(hold_ms);
        for (int i = 0; i < kept; i++)
            close(held[i]);
    }
    printf("done\n");
    return 0;
}
