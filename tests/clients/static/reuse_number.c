/* reuse_number PORT
 *
 * Built by the tests with gcc -static, into build/tests/reuse_number.
 * Gives one fd number to three sockets in turn, against 127.0.0.1:PORT:
 *   first   connects socket A on number N;
 *   dup2    puts a fresh socket B on N with dup2() (A's last fd goes
 *           without a close() call) and connects it;
 *   reopen  closes N, makes socket C (the lowest free number: N again)
 *           and connects it;
 * then closes everything. Each step's connect on a line ("first=ok",
 * "dup2=ok", "reopen=ok", or the errno's name), and "same=yes" when C got
 * the number N. Exit: 0, or 2 for a usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in to = { .sin_family = AF_INET };

static void step(const char *name, int fd)
{
    int rc = connect(fd, (struct sockaddr *)&to, sizeof to);
    printf("%s=%s\n", name, rc == 0 ? "ok" : strerrorname_np(errno));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2 || inet_pton(AF_INET, "127.0.0.1", &to.sin_addr) != 1) {
        fprintf(stderr, "usage: reuse_number PORT\n");
        return 2;
    }
    to.sin_port = htons((unsigned short)atoi(argv[1]));
    int n = socket(AF_INET, SOCK_STREAM, 0);
    if (n < 0)
        return 2;
    step("first", n);
    int b = socket(AF_INET, SOCK_STREAM, 0);
    if (b < 0 || dup2(b, n) != n)
        return 2;
    close(b);
    step("dup2", n);
    close(n);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0)
        return 2;
    printf("same=%s\n", c == n ? "yes" : "no");
    step("reopen", c);
    close(c);
    return 0;
}
