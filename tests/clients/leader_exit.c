/* leader_exit PORT: connects to 127.0.0.1:PORT, prints its pid, and ends
 * its main thread with pthread_exit(); another thread keeps the process
 * and its connection alive for 60 s. Its leader then shows as a zombie in
 * /proc while the process still holds its permit. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "client_util.h"

static void *keep(void *unused)
{
    (void)unused;
    sleep(60);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: leader_exit PORT\n");
        return 2;
    }
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
        printf("%s\n", errno_text(errno));
        return 1;
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, keep, NULL) != 0)
        return 1;
    printf("%d\n", (int)getpid());
    fflush(stdout);
    pthread_exit(NULL);
}
