/* disconnect PORT [GO_FILE]
 *
 * Built by the tests with gcc -static, into build/tests/disconnect.
 * Connects socket a to 127.0.0.1:PORT, dissolves that connection with
 * connect(AF_UNSPEC), waits for GO_FILE to exist if given, connects a
 * second socket b, then a again; each
 * step's outcome on a line of its own: "a=ok", "unspec=ok", "b=ok",
 * "again=ECONNREFUSED"... (ok or the errno's name). Exit: 0, or 2 for a
 * usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void step(const char *name, int rc)
{
    printf("%s=%s\n", name, rc == 0 ? "ok" : strerrorname_np(errno));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sockaddr_in to = { .sin_family = AF_INET };
    struct sockaddr unspec = { .sa_family = AF_UNSPEC };
    if (argc < 2 || argc > 3 || inet_pton(AF_INET, "127.0.0.1", &to.sin_addr) != 1) {
        fprintf(stderr, "usage: disconnect PORT [GO_FILE]\n");
        return 2;
    }
    to.sin_port = htons((unsigned short)atoi(argv[1]));
    int a = socket(AF_INET, SOCK_STREAM, 0), b = socket(AF_INET, SOCK_STREAM, 0);
    if (a < 0 || b < 0) {
        perror("disconnect");
        return 2;
    }
    step("a", connect(a, (struct sockaddr *)&to, sizeof to));
    step("unspec", connect(a, &unspec, sizeof unspec));
    while (argc == 3 && access(argv[2], F_OK) != 0)
        usleep(10000);
    step("b", connect(b, (struct sockaddr *)&to, sizeof to));
    step("again", connect(a, (struct sockaddr *)&to, sizeof to));
    close(a);
    close(b);
    return 0;
}
