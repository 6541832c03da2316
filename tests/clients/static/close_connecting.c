/* close_connecting PORT
 *
 * Built by the tests with gcc -static, into build/tests/close_connecting.
 * Connects a blocking TCP socket to 127.0.0.1:PORT (a blackhole: the
 * connect hangs) while a second thread closes the socket's fd 300 ms
 * later, as a program may from another thread. Prints "close=RC" from the
 * closing thread and "connect=ok" or "connect=ERRNO_NAME" once the
 * connect returns. Exit: 0, or 2 for a usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int fd;

static void *close_it(void *unused)
{
    (void)unused;
    struct timespec pause = { 0, 300 * 1000000L };
    nanosleep(&pause, NULL);
    printf("close=%d\n", close(fd));
    return NULL;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sockaddr_in to = { .sin_family = AF_INET };
    pthread_t closer;
    if (argc != 2 || inet_pton(AF_INET, "127.0.0.1", &to.sin_addr) != 1) {
        fprintf(stderr, "usage: close_connecting PORT\n");
        return 2;
    }
    to.sin_port = htons((unsigned short)atoi(argv[1]));
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || pthread_create(&closer, NULL, close_it, NULL) != 0) {
        perror("close_connecting");
        return 2;
    }
    int rc = connect(fd, (struct sockaddr *)&to, sizeof to);
    printf("connect=%s\n", rc == 0 ? "ok" : strerrorname_np(errno));
    pthread_join(closer, NULL);
    return 0;
}
