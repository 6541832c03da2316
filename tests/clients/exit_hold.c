/* exit_hold HOST PORT HOW [MESSAGE]
 *
 * Connects one blocking TCP socket, reads until the server has answered and
 * shut its side down, then leaves WITHOUT closing the socket, the way
 * redis-cli, wget and many short-lived clients do:
 *   HOW = return   returns from main
 *         exit     calls exit(0)
 *         _exit    calls _exit(0)
 *         _Exit    calls _Exit(0)
 * With MESSAGE, the socket is fdopen()ed and MESSAGE written through stdio
 * without a flush before anything is read: only the exit's stdio flush
 * sends it (the server must see it even though nobody closed the socket).
 *
 * Exit: 0 after the answer, 1 connect failed, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_util.h"

int main(int argc, char **argv)
{
    struct sockaddr_storage to;
    socklen_t length;
    if ((argc != 4 && argc != 5) ||
        parse_address(argv[1], atoi(argv[2]), &to, &length) < 0) {
        fprintf(stderr, "usage: exit_hold HOST PORT return|exit|_exit|_Exit [MESSAGE]\n");
        return 2;
    }
    int fd = socket(to.ss_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&to, length) < 0) {
        printf("%s\n", errno_text(errno));
        return 1;
    }
    if (argc == 5) {
        FILE *stream = fdopen(fd, "w");
        if (!stream || fputs(argv[4], stream) < 0)
            return 2;
        return 0;  /* the buffered message goes out with exit's flush */
    }
    char buffer[4096];
    while (read(fd, buffer, sizeof buffer) > 0) {
    }
    const char *how = argv[3];
    if (strcmp(how, "exit") == 0)
        exit(0);
    if (strcmp(how, "_exit") == 0)
        _exit(0);
    if (strcmp(how, "_Exit") == 0)
        _Exit(0);
    return 0;
}
