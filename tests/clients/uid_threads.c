/* uid_threads MODE ...: connects around uid changes, as root.
 *
 *   uid_threads wait HOST PORT FILE
 *     A thread connects (to a full compartment: it waits for a permit);
 *     once the kernel shows it waiting in semtimedop, the main thread
 *     calls setuid(0) (the euid stays 0, but glibc signals every thread)
 *     and writes "setuid=ok" to FILE. Prints the thread's outcome once
 *     it connected or failed: "waiter=ok" or "waiter=ERRNO".
 *   uid_threads storm HOST PORT THREADS CHANGES UID
 *     THREADS threads connect and close, over and over, while a sibling
 *     moves the euid between 0 and UID with setresuid() CHANGES times,
 *     once every 20 connects; the connects stop with the changes, or at
 *     1,000 (a loopback server's pace).
 *     Once the threads are done, one more setresuid() to the euid it
 *     ended with (as a daemon's next request would), then prints "ok=N",
 *     one "ERRNO=N" line per errno seen and "changes=N", and keeps
 *     running, holding nothing, until killed.
 *   uid_threads owe HOST PORT UID FILE
 *     As root, connects; seteuid(UID); closes (root's namespace refuses
 *     the permit back: owed); forks a child that calls seteuid(0) and
 *     stays; once it has, seteuid(0) itself. Writes "ok" (or the errno's
 *     name) to FILE and keeps running, as does the child, until killed.
 *   uid_threads handoff HOST PORT UID FILE
 *     As root, connects (A); setresuid() to UID for good; connects (B);
 *     execs itself as "closeall HOST PORT A B FILE", which closes both,
 *     writes "closed" to FILE and keeps running until killed. The exec
 *     keeps both sockets open.
 *   uid_threads bracket HOST PORT UID ROUNDS close|keep FILE
 *     A root daemon's requests: ROUNDS times seteuid(UID), connect,
 *     seteuid(0), then close (keep: the connections stay open). Prints
 *     "ok=N" and "ERRNO=N" lines, writes "done" to FILE, then keeps
 *     running until killed.
 *
 * Exit: 0 when it ran, 2 on usage or setup error. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client_util.h"

static struct sockaddr_storage g_addr;
static socklen_t g_len;

/* 0, or the errno of a failed socket() or connect(); the socket in *fd. */
static int connect_once(int *fd)
{
    *fd = socket(g_addr.ss_family, SOCK_STREAM, 0);
    if (*fd < 0)
        return errno;
    return connect(*fd, (struct sockaddr *)&g_addr, g_len) == 0 ? 0 : errno;
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, text, strlen(text)) < 0) {
        perror(path);
        exit(2);
    }
    close(fd);
}

/* ---- wait ---- */

static _Atomic pid_t g_waiter_tid;

static void *waiter(void *arg)
{
    int *result = arg, fd;
    atomic_store(&g_waiter_tid, (pid_t)syscall(SYS_gettid));
    *result = connect_once(&fd);
    return NULL;
}

/* The thread is blocked in semtimedop (x86_64: 220, aarch64: 192), as
 * /proc says. */
static int waiting_in_semtimedop(pid_t tid)
{
    char path[64], text[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    long number = strtol(text, NULL, 10);
    return number == SYS_semtimedop;
}

static int run_wait(const char *file)
{
    int result = -1;
    pthread_t thread;
    pthread_create(&thread, NULL, waiter, &result);
    long deadline = now_ms() + 10000;
    while (!atomic_load(&g_waiter_tid) || !waiting_in_semtimedop(atomic_load(&g_waiter_tid))) {
        if (now_ms() > deadline) {
            fprintf(stderr, "uid_threads: the thread never waited in semtimedop\n");
            return 2;
        }
        sleep_ms(5);
    }
    if (setuid(0) != 0) {
        perror("setuid");
        return 2;
    }
    write_file(file, "setuid=ok\n");
    pthread_join(thread, NULL);
    printf("waiter=%s\n", result == 0 ? "ok" : errno_text(result));
    return 0;
}

/* ---- storm ---- */

enum { MAX_THREADS = 256, MAX_ERRNO = 4096, CONNECTS_PER_CHANGE = 20,
       MAX_CONNECTS = 1000 };

static uid_t g_uid;
static _Atomic int g_storming = 1;
static _Atomic int g_ok;
static _Atomic int g_errors[MAX_ERRNO];

static int connects_done(void)
{
    int done = atomic_load(&g_ok);
    for (int err = 0; err < MAX_ERRNO; err++)
        done += atomic_load(&g_errors[err]);
    return done;
}

static void *connector(void *arg)
{
    (void)arg;
    while (atomic_load(&g_storming) && connects_done() < MAX_CONNECTS) {
        int fd, err = connect_once(&fd);
        if (err == 0)
            atomic_fetch_add(&g_ok, 1);
        else
            atomic_fetch_add(&g_errors[err < MAX_ERRNO ? err : 0], 1);
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

static void print_counts(void)
{
    printf("ok=%d\n", atomic_load(&g_ok));
    for (int err = 0; err < MAX_ERRNO; err++)
        if (atomic_load(&g_errors[err]))
            printf("%s=%d\n", errno_text(err), atomic_load(&g_errors[err]));
}

static int run_storm(int threads, int changes)
{
    pthread_t tids[MAX_THREADS];
    for (int i = 0; i < threads; i++)
        pthread_create(&tids[i], NULL, connector, NULL);
    for (int i = 0; i < changes; i++) {
        /* a change every CONNECTS_PER_CHANGE connects, while they go on */
        while (connects_done() < (i + 1) * CONNECTS_PER_CHANGE &&
               connects_done() < MAX_CONNECTS)
            sched_yield();
        if (setresuid((uid_t)-1, i % 2 ? 0 : g_uid, (uid_t)-1) != 0) {
            perror("setresuid");
            return 2;
        }
    }
    atomic_store(&g_storming, 0);
    for (int i = 0; i < threads; i++)
        pthread_join(tids[i], NULL);
    if (setresuid((uid_t)-1, geteuid(), (uid_t)-1) != 0) {
        perror("setresuid");
        return 2;
    }
    print_counts();
    printf("changes=%d\n", changes);
    for (;;)
        pause();
}

/* ---- owe ---- */

static int run_owe(const char *file)
{
    int fd, ready[2];
    int err = connect_once(&fd);
    if (err != 0) {
        write_file(file, errno_text(err));
        return 0;
    }
    if (pipe(ready) != 0 || seteuid(g_uid) != 0) {
        perror("owe");
        return 2;
    }
    close(fd);
    pid_t child = fork();
    if (child == 0) {
        char byte = seteuid(0) == 0 ? 'y' : 'n';
        if (write(ready[1], &byte, 1) != 1)
            _exit(2);
        for (;;)
            pause();
    }
    char byte = 'n';
    if (child < 0 || read(ready[0], &byte, 1) != 1 || byte != 'y' || seteuid(0) != 0) {
        perror("owe");
        return 2;
    }
    write_file(file, "ok\n");
    for (;;)
        pause();
}

/* ---- handoff ---- */

static int run_handoff(const char *host, const char *port, const char *file)
{
    int root_fd, user_fd;
    char root_text[16], user_text[16];
    if (connect_once(&root_fd) != 0 || setresuid(g_uid, g_uid, g_uid) != 0 ||
        connect_once(&user_fd) != 0) {
        perror("handoff");
        return 2;
    }
    snprintf(root_text, sizeof root_text, "%d", root_fd);
    snprintf(user_text, sizeof user_text, "%d", user_fd);
    execl("/proc/self/exe", "uid_threads", "closeall", host, port, root_text, user_text,
          file, (char *)NULL);
    perror("execl");
    return 2;
}

static __attribute__((noreturn)) void run_closeall(int first, int second, const char *file)
{
    close(first);
    close(second);
    write_file(file, "closed\n");
    for (;;)
        pause();
}

/* ---- bracket ---- */

static int run_bracket(int rounds, int keep, const char *file)
{
    for (int i = 0; i < rounds; i++) {
        int fd;
        if (seteuid(g_uid) != 0) {
            perror("seteuid");
            return 2;
        }
        int err = connect_once(&fd);
        if (seteuid(0) != 0) {
            perror("seteuid");
            return 2;
        }
        if (err == 0)
            atomic_fetch_add(&g_ok, 1);
        else
            atomic_fetch_add(&g_errors[err < MAX_ERRNO ? err : 0], 1);
        if (fd >= 0 && !keep)
            close(fd);
    }
    print_counts();
    fflush(stdout);
    write_file(file, "done\n");
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 4 || parse_address(argv[2], atoi(argv[3]), &g_addr, &g_len) != 0) {
        fprintf(stderr, "usage: uid_threads wait|storm|owe|handoff|closeall|bracket HOST "
                "PORT ...\n");
        return 2;
    }
    if (strcmp(argv[1], "wait") == 0 && argc == 5)
        return run_wait(argv[4]);
    if (strcmp(argv[1], "storm") == 0 && argc == 7) {
        int threads = atoi(argv[4]);
        g_uid = (uid_t)atoi(argv[6]);
        if (threads < 1 || threads > MAX_THREADS)
            return 2;
        return run_storm(threads, atoi(argv[5]));
    }
    if (strcmp(argv[1], "owe") == 0 && argc == 6) {
        g_uid = (uid_t)atoi(argv[4]);
        return run_owe(argv[5]);
    }
    if (strcmp(argv[1], "handoff") == 0 && argc == 6) {
        g_uid = (uid_t)atoi(argv[4]);
        return run_handoff(argv[2], argv[3], argv[5]);
    }
    if (strcmp(argv[1], "closeall") == 0 && argc == 7)
        run_closeall(atoi(argv[4]), atoi(argv[5]), argv[6]);
    if (strcmp(argv[1], "bracket") == 0 && argc == 8) {
        g_uid = (uid_t)atoi(argv[4]);
        return run_bracket(atoi(argv[5]), strcmp(argv[6], "keep") == 0, argv[7]);
    }
    fprintf(stderr, "uid_threads: bad arguments\n");
    return 2;
}
