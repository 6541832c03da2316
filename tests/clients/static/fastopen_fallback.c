/* fastopen_fallback HOST PORT N sendto|sendmsg|sendmmsg|mixed [--ask|--hold]
 *
 * Built by the tests with gcc -static (no dynamic loader: no LD_PRELOAD),
 * into build/tests/fastopen_fallback. Forks N children at once; each opens
 * a blocking TCP socket to a numeric IPv4 HOST and PORT the way a Fast
 * Open client does: a send with MSG_FASTOPEN (by the call named; mixed:
 * child i uses the (i % 3)th), and, when that fails with EOPNOTSUPP (client
 * Fast Open off), connect() then send. Each child prints one line:
 *   fastopen=ok|ERRNO [connect=ok|ERRNO]
 * (connect= only when it fell back), then holds its connection until every
 * child has printed, closes it and exits. What it sends is "x" (a server
 * that holds connections holds it); with --ask, an HTTP request, and the
 * line ends with reply=FIRST_WORD of the answer (or its errno). With
 * --hold, "tried" is printed once every child has, and the connections
 * are held until SIGUSR1 (which `bulkhead run` forwards).
 * Prints "done" once every child exited. Exit: 0, or 2 for a usage or
 * setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *ask = "GET / HTTP/1.0\r\n\r\n";

static const char *result(ssize_t rc)
{
    return rc >= 0 ? "ok" : strerrorname_np(errno);
}

/* The first send, with MSG_FASTOPEN, by the call named. */
static ssize_t fastopen(int fd, const char *call, const struct sockaddr_in *to,
                        const char *data)
{
    struct iovec part = { (void *)data, strlen(data) };
    struct mmsghdr message = { .msg_hdr = { .msg_name = (void *)to, .msg_namelen = sizeof *to,
                                            .msg_iov = &part, .msg_iovlen = 1 } };
    if (strcmp(call, "sendmsg") == 0)
        return sendmsg(fd, &message.msg_hdr, MSG_FASTOPEN | MSG_NOSIGNAL);
    if (strcmp(call, "sendmmsg") == 0)
        return sendmmsg(fd, &message, 1, MSG_FASTOPEN | MSG_NOSIGNAL);
    return sendto(fd, data, strlen(data), MSG_FASTOPEN | MSG_NOSIGNAL,
                  (const struct sockaddr *)to, sizeof *to);
}

/* The answer's first word, or the errno that kept it. */
static void print_reply(int fd)
{
    char answer[64] = "";
    struct timeval patience = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
    ssize_t got = recv(fd, answer, sizeof answer - 1, MSG_WAITALL);
    if (got < 0) {
        printf(" reply=%s", strerrorname_np(errno));
        return;
    }
    answer[strcspn(answer, " ")] = '\0';
    printf(" reply=%s", answer);
}

static void child(const struct sockaddr_in *to, const char *call, const char *data,
                  int reported, int release)
{
    char line[128], byte;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        _exit(2);
    ssize_t sent = fastopen(fd, call, to, data);
    int fell_back = sent < 0 && errno == EOPNOTSUPP;
    int len = snprintf(line, sizeof line, "fastopen=%s", result(sent));
    if (fell_back) {
        int rc = connect(fd, (const struct sockaddr *)to, sizeof *to);
        if (rc == 0)
            rc = send(fd, data, strlen(data), MSG_NOSIGNAL) < 0 ? -1 : 0;
        snprintf(line + len, sizeof line - (size_t)len, " connect=%s", result(rc));
        sent = rc;
    }
    printf("%s", line);
    if (data == ask && sent >= 0)
        print_reply(fd);
    printf("\n");
    fflush(stdout);
    (void)!write(reported, "x", 1);
    (void)!read(release, &byte, 1);  /* until every child has printed */
    close(fd);
    _exit(0);
}

int main(int argc, char **argv)
{
    static const char *const calls[] = { "sendto", "sendmsg", "sendmmsg" };
    const char *option = argc == 6 ? argv[5] : "";
    if (argc < 5 || argc > 6 || (argc == 6 && strcmp(option, "--ask") != 0 &&
                                 strcmp(option, "--hold") != 0)) {
        fprintf(stderr, "usage: fastopen_fallback HOST PORT N sendto|sendmsg|sendmmsg|mixed "
                        "[--ask|--hold]\n");
        return 2;
    }
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
    int count = atoi(argv[3]), reported[2], release[2], signal_number;
    const char *data = strcmp(option, "--ask") == 0 ? ask : "x";
    sigset_t hold;
    sigemptyset(&hold);
    sigaddset(&hold, SIGUSR1);
    sigprocmask(SIG_BLOCK, &hold, NULL);  /* taken by sigwait only */
    if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1 || pipe(reported) < 0 ||
        pipe(release) < 0) {
        fprintf(stderr, "fastopen_fallback: bad host or no pipe\n");
        return 2;
    }
    for (int i = 0; i < count; i++) {
        const char *call = strcmp(argv[4], "mixed") == 0 ? calls[i % 3] : argv[4];
        if (fork() == 0) {
            close(release[1]);
            child(&to, call, data, reported[1], release[0]);
        }
    }
    close(release[0]);
    close(reported[1]);  /* a child that died before printing ends the wait too */
    char byte;
    for (int i = 0; i < count && read(reported[0], &byte, 1) == 1; i++)
        ;
    if (strcmp(option, "--hold") == 0) {
        printf("tried\n");
        fflush(stdout);
        sigwait(&hold, &signal_number);
    }
    close(release[1]);  /* every child printed: they close and exit */
    while (wait(NULL) > 0)
        ;
    printf("done\n");
    return 0;
}
