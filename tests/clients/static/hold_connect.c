/* hold_connect HOST PORT N [--undumpable]
 *
 * Built by the tests with gcc -static (no dynamic loader: no LD_PRELOAD),
 * into build/tests/hold_connect. With --undumpable it first makes itself
 * non-dumpable (prctl(PR_SET_DUMPABLE, 0), as ssh-agent and gpg-agent
 * do), so that a process of its own user may neither read its memory nor
 * copy its fds. Then it connects N blocking TCP sockets to a numeric IPv4
 * HOST and PORT, one after the other, printing "ok" or the errno name for
 * each, and "held" after the last. Then one more connect for each line
 * read from stdin, printed the same way; at EOF it closes every socket
 * and exits. Exit: 0, or 2 for a usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

enum { MOST = 1024 };

static int sockets[MOST];
static int count;

static void connect_one(const struct sockaddr_in *to)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (const struct sockaddr *)to, sizeof *to) == 0) {
        printf("ok\n");
        if (count < MOST)
            sockets[count++] = fd;
        return;
    }
    printf("%s\n", strerrorname_np(errno));
    if (fd >= 0)
        close(fd);
}

int main(int argc, char **argv)
{
    struct sockaddr_in to = { .sin_family = AF_INET };
    if (argc < 4 || inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) {
        fprintf(stderr, "usage: hold_connect HOST PORT N [--undumpable]\n");
        return 2;
    }
    to.sin_port = htons((uint16_t)atoi(argv[2]));
    if (argc > 4 && strcmp(argv[4], "--undumpable") == 0 &&
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        perror("prctl");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < atoi(argv[3]); i++)
        connect_one(&to);
    printf("held\n");
    char line[64];
    while (fgets(line, sizeof line, stdin))
        connect_one(&to);
    for (int i = 0; i < count; i++)
        close(sockets[i]);
    return 0;
}
