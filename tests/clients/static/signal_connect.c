/* signal_connect PORT HZ restart|interrupt [GO_FILE]
 *
 * Built by the tests with gcc -static, into build/tests/signal_connect.
 * One blocking connect to 127.0.0.1:PORT while a second thread sends the
 * connecting thread SIGUSR1 HZ times a second (HZ 0: none; the test
 * sends it, to the only thread). restart: the handler has
 * SA_RESTART, and an interrupted connect is restarted, as timers, SIGCHLD
 * in prefork servers or Go's SIGURG preemption do it; interrupt: it has
 * not, and an interrupted connect fails with EINTR. Prints "pid=N", then
 * "sent=N" every
 * 100 signals while the connect waits, then "connect=ok" or
 * "connect=ERRNO_NAME", "connect_ms=N" and "sent=N handled=N"; with
 * GO_FILE, waits for it to exist (the socket still open) before it exits.
 * Exit: 0 connected, 1 not, 2 usage or setup. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static pthread_t connecting;
static atomic_int done, handled;
static long hz;

static void on_signal(int signal_number)
{
    (void)signal_number;
    atomic_fetch_add(&handled, 1);
}

static void *send_signals(void *unused)
{
    (void)unused;
    struct timespec pause = { 0, 1000000000L / hz };
    for (long sent = 1; !atomic_load(&done); sent++) {
        pthread_kill(connecting, SIGUSR1);
        if (sent % 100 == 0)
            printf("sent=%ld\n", sent);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static long ms_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sockaddr_in to = { .sin_family = AF_INET };
    hz = argc == 4 || argc == 5 ? atol(argv[2]) : -1;
    int restart = hz >= 0 && strcmp(argv[3], "restart") == 0;
    if (hz < 0 || hz > 100000 || (!restart && strcmp(argv[3], "interrupt") != 0) ||
        inet_pton(AF_INET, "127.0.0.1", &to.sin_addr) != 1) {
        fprintf(stderr, "usage: signal_connect PORT HZ restart|interrupt [GO_FILE]\n");
        return 2;
    }
    to.sin_port = htons((unsigned short)atoi(argv[1]));
    struct sigaction action = { .sa_handler = on_signal, .sa_flags = restart ? SA_RESTART : 0 };
    sigemptyset(&action.sa_mask);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    pthread_t sender;
    connecting = pthread_self();
    if (fd < 0 || sigaction(SIGUSR1, &action, NULL) < 0 ||
        (hz > 0 && pthread_create(&sender, NULL, send_signals, NULL) != 0)) {
        perror("signal_connect: setup");
        return 2;
    }
    printf("pid=%d\n", (int)getpid());
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int rc = connect(fd, (struct sockaddr *)&to, sizeof to);
    int err = errno;
    long took = ms_since(&start);
    atomic_store(&done, 1);
    if (hz > 0)
        pthread_join(sender, NULL);
    printf("connect=%s\n", rc == 0 ? "ok" : strerrorname_np(err));
    printf("connect_ms=%ld\n", took);
    printf("sent=%ld handled=%d\n", took * hz / 1000, atomic_load(&handled));
    while (argc == 5 && access(argv[4], F_OK) != 0)
        usleep(10000);
    return rc == 0 ? 0 : 1;
}
