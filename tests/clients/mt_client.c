/* mt_client HOST PORT THREADS HOLD_MS|all=STATS
 *
 * THREADS threads of one process connect to HOST:PORT at the same moment
 * (released together from a barrier), each holds its connection HOLD_MS
 * (-1: reads until the server closes) and closes it. With all=STATS each
 * holds until every thread has tried and the test server's stats file
 * (holdserver.py --stats) shows every connected one open (30 s at most):
 * a connect is over once the kernel finished the handshake, maybe before
 * the server accepted it, and a thread that closed by its own clock may
 * never have been open beside its siblings at the server.
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
static const char *g_stats; /* all=STATS: the server's stats file */
static pthread_barrier_t g_barrier, g_tried, g_released;
static int g_connected;
static int g_result[MAX_THREADS]; /* 0 = connected, else errno */

/* all=STATS: every thread tried, and the server has the connected open. */
static void hold_with_siblings(void)
{
    if (pthread_barrier_wait(&g_tried) == PTHREAD_BARRIER_SERIAL_THREAD) {
        int connected = __atomic_load_n(&g_connected, __ATOMIC_SEQ_CST);
        for (long waited = 0; waited < 30000 && server_open(g_stats) < connected; waited += 5)
            sleep_ms(5);
    }
    pthread_barrier_wait(&g_released);
}

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
        if (g_stats)
            hold_with_siblings();
        return NULL;
    }
    g_result[index] = 0;
    if (g_stats) {
        __atomic_add_fetch(&g_connected, 1, __ATOMIC_SEQ_CST);
        hold_with_siblings();
    } else if (g_hold_ms < 0) {
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
        fprintf(stderr, "usage: mt_client HOST PORT THREADS HOLD_MS|all=STATS\n");
        return 2;
    }
    int threads = atoi(argv[3]);
    g_stats = strncmp(argv[4], "all=", 4) == 0 ? argv[4] + 4 : NULL;
    g_hold_ms = g_stats ? 0 : atoi(argv[4]);
    if (threads < 1 || threads > MAX_THREADS ||
        parse_address(argv[1], atoi(argv[2]), &g_addr, &g_len) != 0) {
        fprintf(stderr, "mt_client: bad arguments\n");
        return 2;
    }
    pthread_barrier_init(&g_barrier, NULL, (unsigned)threads);
    pthread_barrier_init(&g_tried, NULL, (unsigned)threads);
    pthread_barrier_init(&g_released, NULL, (unsigned)threads);
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
