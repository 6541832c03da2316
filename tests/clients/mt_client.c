/* mt_client HOST PORT THREADS HOLD_MS
 *
 * THREADS threads of one process connect to HOST:PORT at the same moment
 * (released together from a barrier), each holds its connection HOLD_MS
 * (-1: reads until the server closes) and closes it.
 *
 * Output (key=value lines):
 *   threads=N
 *   ok=N              connects that succeeded
 *   <ERRNO>=N         one line per errno name seen, e.g. ECONNREFUSED=60
 * Exit: 0 when every thread ran, 2 on usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client_util.h"

enum { MAX_THREADS = 1024 };

static struct sockaddr_storage g_addr;
static socklen_t g_len;
static int g_hold_ms;
static pthread_barrier_t g_barrier;
static int g_result[MAX_THREADS]; /* 0 = connected, else errno */

static void *worker(void *arg)
{
    int index = (int)(long)arg;
    int fd = socket(g_addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0) {
        g_result[index] = errno;
        return NULL;
    }
    pthread_barrier_wait(&g_barrier);
    if (connect(fd, (struct sockaddr *)&g_addr, g_len) != 0) {
        g_result[index] = errno;
        close(fd);
        return NULL;
    }
    g_result[index] = 0;
    if (g_hold_ms < 0) {
        char buf[1024];
        for (;;) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n > 0 || (n < 0 && errno == EINTR))
                continue;
            break;
        }
    } else if (g_hold_ms > 0) {
        struct timespec ts = { g_hold_ms / 1000, (long)(g_hold_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: mt_client HOST PORT THREADS HOLD_MS\n");
        return 2;
    }
    int threads = atoi(argv[3]);
    g_hold_ms = atoi(argv[4]);
    if (threads < 1 || threads > MAX_THREADS ||
        parse_address(argv[1], atoi(argv[2]), &g_addr, &g_len) != 0) {
        fprintf(stderr, "mt_client: bad arguments\n");
        return 2;
    }
    pthread_barrier_init(&g_barrier, NULL, (unsigned)threads);
    pthread_t tids[MAX_THREADS];
    for (int i = 0; i < threads; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        int rc = pthread_create(&tids[i], &attr, worker, (void *)(long)i);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            fprintf(stderr, "mt_client: pthread_create: %s\n", strerror(rc));
            return 2;
        }
    }
    for (int i = 0; i < threads; i++)
        pthread_join(tids[i], NULL);

    /* Tally by errno; a handful of distinct values at most. */
    int codes[64], counts[64], distinct = 0, ok = 0;
    for (int i = 0; i < threads; i++) {
        if (g_result[i] == 0) {
            ok++;
            continue;
        }
        int j = 0;
        while (j < distinct && codes[j] != g_result[i])
            j++;
        if (j == distinct && distinct < 64) {
            codes[distinct] = g_result[i];
            counts[distinct++] = 0;
        }
        if (j < distinct)
            counts[j]++;
    }
    printf("threads=%d\nok=%d\n", threads, ok);
    for (int j = 0; j < distinct; j++) {
        printf("%s=%d\n", errno_text(codes[j]), counts[j]);
    }
    return 0;
}
