/* resolve_connect METHOD NAME PORT HOLD_MS [inet|inet6]
 *
 * Resolves NAME with one resolver entry point, then connects to the first
 * address it returned, so a test can tell whether hostname rules see names
 * resolved through each of them.
 *
 * METHOD: getaddrinfo | gethostbyname | gethostbyname2 | gethostbyname_r |
 *         gethostbyname2_r. The family (default inet) picks AF_INET or
 *         AF_INET6 for getaddrinfo's hint and the gethostbyname2* calls;
 *         gethostbyname and gethostbyname_r are IPv4 only.
 *
 * Output:
 *   resolved=ADDRESS    or resolved=FAIL and exit 2
 *   <ok|ERRNO>          the connect outcome
 * HOLD_MS as in connect_hold (-1: read until the server closes).
 * Exit: 0 connected, 1 connect failed, 2 usage or resolution error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int from_hostent(const struct hostent *he, int port,
                        struct sockaddr_storage *ss, socklen_t *len)
{
    if (he == NULL || he->h_addr_list == NULL || he->h_addr_list[0] == NULL)
        return -1;
    memset(ss, 0, sizeof(*ss));
    if (he->h_addrtype == AF_INET) {
        struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        memcpy(&v4->sin_addr, he->h_addr_list[0], 4);
        *len = sizeof(*v4);
        return 0;
    }
    if (he->h_addrtype == AF_INET6) {
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        memcpy(&v6->sin6_addr, he->h_addr_list[0], 16);
        *len = sizeof(*v6);
        return 0;
    }
    return -1;
}

static int resolve(const char *method, const char *name, int family, int port,
                   struct sockaddr_storage *ss, socklen_t *len)
{
    char buf[8192];
    struct hostent he, *result = NULL;
    int herr = 0;

    if (strcmp(method, "getaddrinfo") == 0) {
        struct addrinfo hints = { .ai_family = family, .ai_socktype = SOCK_STREAM };
        struct addrinfo *ai = NULL;
        char service[16];
        snprintf(service, sizeof(service), "%d", port);
        if (getaddrinfo(name, service, &hints, &ai) != 0 || ai == NULL)
            return -1;
        memcpy(ss, ai->ai_addr, ai->ai_addrlen);
        *len = ai->ai_addrlen;
        freeaddrinfo(ai);
        return 0;
    }
    if (strcmp(method, "gethostbyname") == 0)
        return from_hostent(gethostbyname(name), port, ss, len);
    if (strcmp(method, "gethostbyname2") == 0)
        return from_hostent(gethostbyname2(name, family), port, ss, len);
    if (strcmp(method, "gethostbyname_r") == 0) {
        if (gethostbyname_r(name, &he, buf, sizeof(buf), &result, &herr) != 0)
            return -1;
        return from_hostent(result, port, ss, len);
    }
    if (strcmp(method, "gethostbyname2_r") == 0) {
        if (gethostbyname2_r(name, family, &he, buf, sizeof(buf), &result, &herr) != 0)
            return -1;
        return from_hostent(result, port, ss, len);
    }
    fprintf(stderr, "resolve_connect: unknown method %s\n", method);
    return -1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: resolve_connect METHOD NAME PORT HOLD_MS [inet|inet6]\n");
        return 2;
    }
    int family = AF_INET;
    if (argc == 6 && strcmp(argv[5], "inet6") == 0)
        family = AF_INET6;
    int port = atoi(argv[3]);
    int hold_ms = atoi(argv[4]);

    struct sockaddr_storage ss;
    socklen_t len = 0;
    if (resolve(argv[1], argv[2], family, port, &ss, &len) != 0) {
        printf("resolved=FAIL\n");
        return 2;
    }
    char text[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, text, sizeof(text));
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, text, sizeof(text));
    printf("resolved=%s\n", text);

    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0) {
        perror("resolve_connect: socket");
        return 2;
    }
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        const char *errname = strerrorname_np(errno);
        printf("%s\n", errname ? errname : "EUNKNOWN");
        close(fd);
        return 1;
    }
    printf("ok\n");
    if (hold_ms < 0) {
        char rbuf[1024];
        while (read(fd, rbuf, sizeof(rbuf)) > 0) {
        }
    } else if (hold_ms > 0) {
        struct timespec ts = { hold_ms / 1000, (long)(hold_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    close(fd);
    return 0;
}
