/* Helpers every test client shares: address parsing, errno names, time.
 * A header, not a .c: the Makefile builds each tests/clients/NAME.c into a
 * program of its own. */
#ifndef CLIENT_UTIL_H
#define CLIENT_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* "ECONNREFUSED" for what the kernel said; the tests compare names. */
static inline const char *errno_text(int err)
{
    const char *name = strerrorname_np(err);
    return name ? name : "EUNKNOWN";
}

static inline long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A literal IPv4 or IPv6 address and a port; -1 when host is neither. */
static inline int parse_address(const char *host, int port,
                                struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof(*v4);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*v6);
        return 0;
    }
    return -1;
}

/* The "open=K" of holdserver.py's stats file (--stats): how many
 * connections the server has open. -1 while the file is not there yet;
 * INT_MAX if this process may not read it (a test that changed its uid),
 * so that a wait for the server ends at once. */
static inline int server_open(const char *stats)
{
    char line[128];
    int fd = open(stats, O_RDONLY);
    if (fd < 0 && errno == EACCES)
        return INT_MAX;
    ssize_t got = fd < 0 ? -1 : read(fd, line, sizeof line - 1);
    if (fd >= 0)
        close(fd);
    if (got <= 0)
        return -1;
    line[got] = '\0';
    const char *open_at = strstr(line, "open=");
    return open_at ? atoi(open_at + 5) : -1;
}

#endif
