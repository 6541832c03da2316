/* nb_learn HOST PORT MODE POLL_MS [GO_FILE]
 *
 * A non-blocking connect, then one of the ways a program learns how it
 * turned out (the ways the breaker must learn it too):
 *
 *   so_error   poll() for POLLOUT, then getsockopt(SO_ERROR)
 *   send       poll(), then send() one byte (MSG_NOSIGNAL)
 *   write      poll(), then write() one byte
 *   recv       poll(), then recv() one byte
 *   read       poll(), then read() one byte
 *   reconnect  poll(), then connect() again on the same fd
 *   exchange   poll(), SO_ERROR; prints "connected"; waits for GO_FILE to
 *              exist (if given); sends an HTTP/1.0 request head, polls for
 *              POLLIN up to POLL_MS and recv()s: "reply" when bytes came
 *              back. holdserver.py answers a full request head at once.
 *
 * Output, one line per step (line-buffered, so a test can watch it):
 *   connect=ERRNO        connect() itself failed (the shim refused it)
 *   pending              poll() for POLLOUT gave up: still connecting
 *   result=ERRNO|ok      what the chosen call said (ok: it succeeded)
 *   connected            exchange: SO_ERROR was 0
 *   reply | eof | no_reply | result=ERRNO   exchange: what came back
 *
 * Exit: 0 ok/reply, 1 failed, 3 pending/no_reply, 2 usage. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_util.h"

static int result(long rc, int err)
{
    if (rc < 0) {
        printf("result=%s\n", errno_text(err));
        return 1;
    }
    printf("result=ok\n");
    return 0;
}

static int exchange(int fd, int poll_ms, const char *go_file)
{
    int err = 0;
    socklen_t elen = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
        err = errno;
    if (err) {
        printf("result=%s\n", errno_text(err));
        return 1;
    }
    printf("connected\n");
    if (go_file) {
        long give_up = now_ms() + 60000;
        while (access(go_file, F_OK) != 0) {
            if (now_ms() > give_up) {
                printf("no_go\n");
                return 2;
            }
            sleep_ms(10);
        }
    }
    static const char request[] = "GET / HTTP/1.0\r\n\r\n";
    if (send(fd, request, sizeof request - 1, MSG_NOSIGNAL) < 0) {
        printf("result=%s\n", errno_text(errno));
        return 1;
    }
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, poll_ms) == 0) {
        printf("no_reply\n");
        return 3;
    }
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
        printf("result=%s\n", errno_text(errno));
        return 1;
    }
    printf(n > 0 ? "reply\n" : "eof\n");
    return n > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (argc < 5 || argc > 6 || parse_address(argv[1], atoi(argv[2]), &ss, &len) != 0) {
        fprintf(stderr, "usage: nb_learn HOST PORT so_error|send|write|recv|read|"
                        "reconnect|exchange POLL_MS [GO_FILE]\n");
        return 2;
    }
    const char *mode = argv[3];
    int poll_ms = atoi(argv[4]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        perror("nb_learn: socket");
        return 2;
    }
    if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
        printf("connect=%s\n", errno_text(errno));
        return 1;
    }
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    if (poll(&p, 1, poll_ms) == 0) {
        printf("pending\n");
        return 3;
    }
    char byte = 'x';
    int status;
    if (strcmp(mode, "so_error") == 0) {
        int err = 0;
        socklen_t elen = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
            err = errno;
        status = err ? result(-1, err) : result(0, 0);
    } else if (strcmp(mode, "send") == 0) {
        long rc = send(fd, &byte, 1, MSG_NOSIGNAL);
        status = result(rc, errno);
    } else if (strcmp(mode, "write") == 0) {
        long rc = write(fd, &byte, 1);
        status = result(rc, errno);
    } else if (strcmp(mode, "recv") == 0) {
        long rc = recv(fd, &byte, 1, 0);
        status = result(rc, errno);
    } else if (strcmp(mode, "read") == 0) {
        long rc = read(fd, &byte, 1);
        status = result(rc, errno);
    } else if (strcmp(mode, "reconnect") == 0) {
        long rc = connect(fd, (struct sockaddr *)&ss, len);
        status = result(rc, errno);
    } else if (strcmp(mode, "exchange") == 0) {
        status = exchange(fd, poll_ms, argc == 6 ? argv[5] : NULL);
    } else {
        fprintf(stderr, "nb_learn: unknown mode %s\n", mode);
        status = 2;
    }
    close(fd);
    return status;
}
