/* thread_storm HOST PORT THREADS ROUNDS
 *
 * THREADS threads each run ROUNDS rounds of: connect (blocking, so it may
 * wait for a permit), then end the connection one of five ways:
 *   close; dup then close both; dup2 onto a spare fd then close both;
 *   fdopen then fclose; hand it to a closer thread, which closes it
 *   (a close from another thread than the one that connected).
 * Every connection ends, so afterwards every permit must be free. Then it
 * prints "storm done connected=N" and waits to be killed, so the test can
 * count the free permits while the process (and its undo records) lives.
 *
 * Exit: 2 on usage or setup errors; otherwise it never exits by itself. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "client_util.h"

enum { MAX_THREADS = 64 };

static struct sockaddr_storage to;
static socklen_t to_length;
static int rounds;
static int thread_count;
static _Atomic int handed[MAX_THREADS];   /* fd thread i handed over, or -1 */
static _Atomic int storming = 1;
static _Atomic long connected;

/* Closes what the storm threads hand over, until they are all done. */
static void *closer(void *arg)
{
    (void)arg;
    for (int last_pass = 0; !last_pass;) {
        last_pass = !atomic_load(&storming);
        for (int i = 0; i < thread_count; i++) {
            int fd = atomic_exchange(&handed[i], -1);
            if (fd >= 0)
                close(fd);
        }
        sleep_ms(1);
    }
    return NULL;
}

static void end_connection(int fd, int self, int round)
{
    switch ((self + round) % 5) {
    case 0:
        close(fd);
        break;
    case 1: {
        int copy = dup(fd);
        close(fd);
        if (copy >= 0)
            close(copy);
        break;
    }
    case 2: {
        int spare = socket(AF_INET, SOCK_DGRAM, 0);
        if (spare >= 0 && dup2(fd, spare) == spare)
            close(spare);
        close(fd);
        break;
    }
    case 3: {
        FILE *stream = fdopen(fd, "r+");
        if (stream)
            fclose(stream);
        else
            close(fd);
        break;
    }
    default: {
        int old = atomic_exchange(&handed[self], fd);
        if (old >= 0)
            close(old);  /* the closer had not got to the last one */
        break;
    }
    }
}

static void *storm(void *arg)
{
    int self = (int)(long)arg;
    for (int round = 0; round < rounds; round++) {
        int fd = socket(to.ss_family, SOCK_STREAM, 0);
        if (fd < 0)
            continue;
        if (connect(fd, (struct sockaddr *)&to, to_length) < 0) {
            close(fd);
            continue;
        }
        atomic_fetch_add(&connected, 1);
        end_connection(fd, self, round);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 5 || parse_address(argv[1], atoi(argv[2]), &to, &to_length) < 0) {
        fprintf(stderr, "usage: thread_storm HOST PORT THREADS ROUNDS\n");
        return 2;
    }
    thread_count = atoi(argv[3]);
    rounds = atoi(argv[4]);
    if (thread_count < 1 || thread_count > MAX_THREADS || rounds < 1)
        return 2;
    for (int i = 0; i < MAX_THREADS; i++)
        atomic_store(&handed[i], -1);
    pthread_t threads[MAX_THREADS], closing;
    if (pthread_create(&closing, NULL, closer, NULL) != 0)
        return 2;
    for (int i = 0; i < thread_count; i++)
        if (pthread_create(&threads[i], NULL, storm, (void *)(long)i) != 0)
            return 2;
    for (int i = 0; i < thread_count; i++)
        pthread_join(threads[i], NULL);
    atomic_store(&storming, 0);
    pthread_join(closing, NULL);
    printf("storm done connected=%ld\n", atomic_load(&connected));
    for (;;)
        pause();
}
