/* connect_flood PORT N GO_FILE
 *
 * Built by the tests with gcc -static, into build/tests/connect_flood.
 * Connects to 127.0.0.1:PORT and closes, N times in a row, says "half",
 * waits for GO_FILE to exist, does it N times more, says "done" and waits
 * for GO_FILE to be gone before it exits (so the test can look at the
 * supervisor while it still supervises). Each
 * connect that fails counts; the counts go out with each line
 * ("half ok=N failed=0"), so the test knows every connect was real.
 * Exit: 0, or 2 for a usage or setup error. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void connects(const struct sockaddr_in *to, long n, long *ok, long *failed)
{
    for (long i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s >= 0 && connect(s, (const struct sockaddr *)to, sizeof *to) == 0)
            ++*ok;
        else
            ++*failed;
        if (s >= 0)
            close(s);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sockaddr_in to = { .sin_family = AF_INET };
    long n = argc == 4 ? atol(argv[2]) : 0, ok = 0, failed = 0;
    if (n <= 0 || inet_pton(AF_INET, "127.0.0.1", &to.sin_addr) != 1) {
        fprintf(stderr, "usage: connect_flood PORT N GO_FILE\n");
        return 2;
    }
    to.sin_port = htons((unsigned short)atoi(argv[1]));
    connects(&to, n, &ok, &failed);
    printf("half ok=%ld failed=%ld\n", ok, failed);
    while (access(argv[3], F_OK) != 0)
        usleep(10000);
    connects(&to, n, &ok, &failed);
    printf("done ok=%ld failed=%ld\n", ok, failed);
    while (access(argv[3], F_OK) == 0)
        usleep(10000);
    return 0;
}
