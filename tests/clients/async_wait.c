/* async_wait HOST PORT MODE DIR
 *
 * One non-blocking connect, as an event loop makes it, and what the
 * program sees of it. Output, line buffered:
 *   connect=<ok|ERRNO>   what connect() returned
 *   again=<ok|ERRNO>     a second connect() at once
 *   send=<N|ERRNO>       a one-byte send at once (MSG_NOSIGNAL)
 * MODE wait: then polls for writability (up to 20 s) and prints
 *   poll=<OUT,ERR,HUP...|none>  and  so_error=<ok|ERRNO>
 *   and closes.
 * MODE close, dup2 or fork: waits for DIR/go, then, while the connect
 * is still under way, closes the fd (close), replaces it with dup2 of
 * another socket (dup2), or forks a child that closes its copy and then
 * closes its own (fork: the child prints child_closed); prints acted,
 * then waits for DIR/end (both processes) and exits.
 *
 * Exit: 0, or 2 on a usage or setup error. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client_util.h"

/* Waits (up to 60 s) for DIR/NAME to exist. */
static void wait_file(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (int i = 0; i < 6000 && stat(path, &st) < 0; i++)
        sleep_ms(10);
}

static void touch_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *file = fopen(path, "w");
    if (file)
        fclose(file);
}

static const char *result(long rc)
{
    static char text[32];
    if (rc < 0)
        return errno_text(errno);
    snprintf(text, sizeof text, "%ld", rc);
    return rc == 0 ? "ok" : text;
}

static void wait_outcome(int fd)
{
    struct pollfd p = { fd, POLLOUT, 0 };
    int n = poll(&p, 1, 20000);
    printf("poll=%s%s%s%s\n", n <= 0 ? "none" : "", p.revents & POLLOUT ? "OUT," : "",
           p.revents & POLLERR ? "ERR," : "", p.revents & POLLHUP ? "HUP," : "");
    int err = -1;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        printf("so_error=getsockopt:%s\n", errno_text(errno));
    else
        printf("so_error=%s\n", err ? errno_text(err) : "ok");
    close(fd);
}

static void act(int fd, const char *mode, const char *dir)
{
    wait_file(dir, "go");
    if (strcmp(mode, "close") == 0) {
        close(fd);
    } else if (strcmp(mode, "dup2") == 0) {
        int other = socket(AF_INET, SOCK_STREAM, 0);
        dup2(other, fd);
        close(other);
    } else {
        pid_t child = fork();
        if (child == 0) {
            close(fd);
            printf("child_closed\n");
            touch_file(dir, "child_closed");
            wait_file(dir, "end");
            _exit(0);
        }
        wait_file(dir, "child_closed");
        close(fd);
    }
    printf("acted\n");
    wait_file(dir, "end");
    while (wait(NULL) > 0)
        ;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 5) {
        fprintf(stderr, "usage: async_wait HOST PORT wait|close|dup2|fork DIR\n");
        return 2;
    }
    struct sockaddr_storage to;
    socklen_t length;
    if (parse_address(argv[1], atoi(argv[2]), &to, &length) < 0)
        return 2;
    int fd = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return 2;
    int rc = connect(fd, (struct sockaddr *)&to, length);
    printf("connect=%s\n", result(rc));
    if (rc == 0 || errno != EINPROGRESS)
        return 0;
    printf("again=%s\n", result(connect(fd, (struct sockaddr *)&to, length)));
    printf("send=%s\n", result(send(fd, "x", 1, MSG_NOSIGNAL)));
    if (strcmp(argv[3], "wait") == 0)
        wait_outcome(fd);
    else
        act(fd, argv[3], argv[4]);
    return 0;
}
