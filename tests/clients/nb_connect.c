/* nb_connect HOST PORT POLL_MS
 *
 * A non-blocking connect, as event loops do it: connect() (EINPROGRESS),
 * then poll() for POLLOUT up to POLL_MS, then getsockopt(SO_ERROR).
 *
 * Output, one line:
 *   connected           SO_ERROR was 0
 *   so_error=ERRNO      the connect failed, as SO_ERROR said
 *   connect=ERRNO       connect() itself failed (the shim refused it)
 *   pending             poll() gave up first: our own deadline, not theirs
 *
 * Exit: 0 connected, 1 failed, 3 pending, 2 usage. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_util.h"

int main(int argc, char **argv)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (argc != 4 || parse_address(argv[1], atoi(argv[2]), &ss, &len) != 0) {
        fprintf(stderr, "usage: nb_connect HOST PORT POLL_MS\n");
        return 2;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        perror("nb_connect: socket");
        return 2;
    }
    if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
        printf("connect=%s\n", errno_text(errno));
        return 1;
    }
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    if (poll(&p, 1, atoi(argv[3])) == 0) {
        printf("pending\n");
        return 3;
    }
    int err = 0;
    socklen_t elen = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
        err = errno;
    if (err)
        printf("so_error=%s\n", errno_text(err));
    else
        printf("connected\n");
    close(fd);
    return err ? 1 : 0;
}
