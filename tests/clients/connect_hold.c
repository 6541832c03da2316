/* connect_hold HOST PORT HOLD_MS|until=PATH [--nonblock]
 *
 * Connects one TCP socket to a numeric HOST (v4 or v6) and PORT, prints the
 * outcome as the kernel (or the shim) reported it, holds the connection,
 * closes it.
 *
 * Output, line buffered so a test can poll for it while the hold runs:
 *   connect=<ok|ERRNO>  only with --nonblock: what connect() itself returned
 *   <ok|ERRNO>          the outcome: "ok" or the errno name
 *   connect_ms=N        how long connect (and, non-blocking, the wait for
 *                       completion) took
 * HOLD_MS: N sleeps N ms before closing; -1 reads until the server closes.
 * until=PATH holds until PATH exists, then closes: a test that wants the
 * permit back while the connection is surely gone uses it rather than a
 * kill (the kernel gives a dead process's permit back, in exit_sem, before
 * it closes its sockets).
 * --nonblock uses SOCK_NONBLOCK and polls for completion (up to 10 s).
 *
 * Exit: 0 connected, 1 connect failed, 2 usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client_util.h"

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "--nonblock") != 0)) {
        fprintf(stderr, "usage: connect_hold HOST PORT HOLD_MS|until=PATH [--nonblock]\n");
        return 2;
    }
    int nonblock = argc == 5;
    int port = atoi(argv[2]);
    const char *release = strncmp(argv[3], "until=", 6) == 0 ? argv[3] + 6 : NULL;
    int hold_ms = release ? 0 : atoi(argv[3]);
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_address(argv[1], port, &ss, &len) != 0) {
        fprintf(stderr, "connect_hold: not a numeric address: %s\n", argv[1]);
        return 2;
    }

    int fd = socket(ss.ss_family, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0) {
        perror("connect_hold: socket");
        return 2;
    }
    long start = now_ms();
    int rc = connect(fd, (struct sockaddr *)&ss, len);
    int err = rc == 0 ? 0 : errno;
    if (nonblock) {
        printf("connect=%s\n", err ? errno_text(err) : "ok");
        if (err == EINPROGRESS) {
            struct pollfd p = { .fd = fd, .events = POLLOUT };
            if (poll(&p, 1, 10000) != 1) {
                err = ETIMEDOUT;
            } else {
                socklen_t elen = sizeof(err);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
                    err = errno;
            }
        }
    }
    long took = now_ms() - start;
    printf("%s\n", err ? errno_text(err) : "ok");
    printf("connect_ms=%ld\n", took);
    if (err) {
        close(fd);
        return 1;
    }

    if (hold_ms < 0) {
        char buf[4096];
        for (;;) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n > 0)
                continue;
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                poll(&p, 1, -1);
                continue;
            }
            break;
        }
    } else if (release) {
        struct stat st;
        struct timespec step = { 0, 10 * 1000000L };
        while (stat(release, &st) != 0)
            nanosleep(&step, NULL);
    } else if (hold_ms > 0) {
        struct timespec ts = { hold_ms / 1000, (long)(hold_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    close(fd);
    return 0;
}
