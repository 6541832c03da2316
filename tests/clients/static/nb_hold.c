/* nb_hold HOST PORT N [--thread]
 *
 * Built by the tests with gcc -static, into build/tests/nb_hold: a C
 * program that connects as an event loop does, which LD_PRELOAD never
 * reaches. With --thread it first starts a thread that only sleeps (a
 * loop's resolver or timer thread). Then N TCP connects to a numeric IPv4
 * HOST and PORT, one after the other, each keeping the connections before
 * it: a non-blocking socket, connect(), and on EINPROGRESS a poll() for
 * POLLOUT (60 s at most) and SO_ERROR. For each, one line: "ok" or the
 * errno's name, and the ms from connect() to its outcome by the program's
 * own clock ("ok 1520", "ECONNREFUSED 3"). Then it closes them and exits.
 * Exit: 0, or 2 for a usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MOST = 64 };

static void *idle(void *unused)
{
    (void)unused;
    for (;;)
        pause();
    return NULL;
}

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* The connect's outcome: 0, or its errno. */
static int connect_nonblocking(int fd, const struct sockaddr_in *to)
{
    if (connect(fd, (const struct sockaddr *)to, sizeof *to) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return errno;
    struct pollfd wanted = { .fd = fd, .events = POLLOUT };
    if (poll(&wanted, 1, 60000) != 1)
        return ETIMEDOUT;
    int error = 0;
    socklen_t length = sizeof error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) < 0)
        return errno;
    return error;
}

int main(int argc, char **argv)
{
    struct sockaddr_in to = { .sin_family = AF_INET };
    if (argc < 4 || inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) {
        fprintf(stderr, "usage: nb_hold HOST PORT N [--thread]\n");
        return 2;
    }
    to.sin_port = htons((uint16_t)atoi(argv[2]));
    pthread_t thread;
    if (argc > 4 && strcmp(argv[4], "--thread") == 0 &&
        pthread_create(&thread, NULL, idle, NULL) != 0) {
        fprintf(stderr, "nb_hold: no thread\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int held[MOST], count = 0;
    for (int i = 0; i < atoi(argv[3]) && i < MOST; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            perror("nb_hold: socket");
            return 2;
        }
        long long started = now_ms();
        int error = connect_nonblocking(fd, &to);
        printf("%s %lld\n", error ? strerrorname_np(error) : "ok", now_ms() - started);
        if (error)
            close(fd);
        else
            held[count++] = fd;
    }
    for (int i = 0; i < count; i++)
        close(held[i]);
    return 0;
}
