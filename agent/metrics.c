/* GET /metrics over HTTP, for Prometheus: what `bulkhead stat
 * --prometheus` prints (every compartment's live figures and, for fleet
 * compartments, this host's grant, the fleet's use and its live hosts),
 * served by libmicrohttpd from a thread of its own. That thread only reads
 * the namespace's shared memory and semaphores, as `stat` does.
 *
 * Hostile clients. libmicrohttpd runs in external-event mode on epoll (no
 * select(): no FD_SETSIZE), driven by that one thread, which also keeps a
 * record of every connection. So every libmicrohttpd callback, every
 * record and every shutdown() below happen in that thread: a connection's
 * fd is closed only inside MHD_run(), which says so first (the CLOSED
 * notice drops the record), so a shutdown() never hits a reused fd number.
 *   - A connection must send its whole request header within
 *     HEADER_DEADLINE_MS of being accepted, however it trickles it (an idle
 *     timeout alone lets a byte every 2 s hold it for ever); past that it
 *     is shut down. One request per connection (Connection: close), so
 *     there is no wait between requests to time.
 *   - At the connection limit, each new connection sheds the oldest one
 *     still without a request header: a slowloris turns over, and a
 *     scraper, which sends its request at once, gets through.
 *   - libmicrohttpd's complaints and these closings are said once per
 *     reason per minute, with the count of the others.
 * The main thread only starts the daemon before the thread runs and stops
 * it after the thread has ended. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "stat_render.h"

/* What bh_metrics_start was given: set before the thread starts, read-only
 * afterwards. */
static struct {
    struct bh_namespace *ns;
    const char *namespace_name;
    bh_metrics_say *say;
} given;

static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *format, ...)
{
    char line[1024];
    va_list args;
    va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    given.say(line);
}

/* At most CONNECTIONS_MAX connections, fewer when the fd limit is low:
 * FD_RESERVE fds always stay for Redis, the namespace and stdio, so a
 * flood can never keep the agent from leasing. A request's buffers come
 * from a POOL_BYTES pool per connection (a scraper's header is a few
 * hundred bytes), so the connections' memory is bounded too. A connection
 * idle for IDLE_TIMEOUT_S (a client not reading its answer) is closed. */
enum { CONNECTIONS_MAX = 1024, FD_RESERVE = 32, POOL_BYTES = 8192,
       HEADER_DEADLINE_MS = 5000, IDLE_TIMEOUT_S = 10, WAKE_MAX_MS = 1000 };

#define NS_PER_MS 1000000LL
#define FOLD_GAP_NS (60 * 1000 * NS_PER_MS)

/* A connection, from accept to close. Those without a request header yet
 * are on the waiting list, oldest first. */
struct tracked {
    struct tracked *prev, *next;
    int fd;
    int waiting;
    int64_t accepted_ns;
};

static struct {
    struct MHD_Daemon *daemon;
    pthread_t thread;
    int thread_runs;
    int epoll_fd;   /* ours: libmicrohttpd's epoll fd and wake_fd */
    int wake_fd;    /* an eventfd: stop */
    unsigned limit, open;
    struct tracked *oldest, *newest;
} server = { .epoll_fd = -1, .wake_fd = -1 };

static int64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* ---- the log, folded: one line per reason per minute ------------------- */

/* A reason (libmicrohttpd's format, or ours) said in the last minute: the
 * last line for it and how many were left out. The last slot takes every
 * reason past the others. */
enum { FOLD_SLOTS = 16 };
static struct fold {
    const char *reason;  /* NULL: free */
    char line[256];
    int64_t quiet_until_ns;
    unsigned left_out;
} folds[FOLD_SLOTS];

static struct fold *fold_slot(const char *reason)
{
    struct fold *free_slot = NULL;
    for (int i = 0; i < FOLD_SLOTS; i++) {
        if (folds[i].reason && strcmp(folds[i].reason, reason) == 0)
            return &folds[i];
        if (!folds[i].reason && !free_slot)
            free_slot = &folds[i];
    }
    return free_slot ? free_slot : &folds[FOLD_SLOTS - 1];
}

static void say_left_out(int64_t now);

static void say_folded(const char *reason, const char *line)
{
    int64_t now = now_ns();
    say_left_out(now);  /* a minute just over: its count first */
    struct fold *fold = fold_slot(reason);
    snprintf(fold->line, sizeof fold->line, "%s", line);
    if (fold->reason && now < fold->quiet_until_ns) {
        fold->left_out++;
        return;
    }
    fold->reason = reason;
    fold->quiet_until_ns = now + FOLD_GAP_NS;
    fold->left_out = 0;
    say("metrics: %s", line);
}

/* A reason's minute is over: the count of what was left out, if any, and
 * another quiet minute; else the slot is free again. */
static void say_left_out(int64_t now)
{
    for (int i = 0; i < FOLD_SLOTS; i++) {
        struct fold *fold = &folds[i];
        if (!fold->reason || now < fold->quiet_until_ns)
            continue;
        if (fold->left_out == 0) {
            fold->reason = NULL;
            continue;
        }
        say("metrics: %s (%u more like it in the last minute)", fold->line,
            fold->left_out);
        fold->quiet_until_ns = now + FOLD_GAP_NS;
        fold->left_out = 0;
    }
}

static void mhd_log(void *ctx, const char *format, va_list args)
{
    (void)ctx;
    char line[256];
    vsnprintf(line, sizeof line, format, args);
    line[strcspn(line, "\n")] = '\0';
    say_folded(format, line);
}

/* ---- connections: the header deadline and shedding ---------------------- */

static void unlist(struct tracked *t)
{
    if (!t->waiting)
        return;
    *(t->prev ? &t->prev->next : &server.oldest) = t->next;
    *(t->next ? &t->next->prev : &server.newest) = t->prev;
    t->prev = t->next = NULL;
    t->waiting = 0;
}

/* libmicrohttpd sees the end at its next run and closes the fd then. */
static void shut(struct tracked *t, const char *reason, const char *line)
{
    unlist(t);
    shutdown(t->fd, SHUT_RDWR);
    say_folded(reason, line);
}

/* Shedding starts an eighth short of the limit, so that libmicrohttpd
 * never stops accepting: at its limit it takes one connection per turn,
 * and a scraper would queue behind every connection the attacker has
 * waiting in the listen backlog. */
static unsigned shed_at(void)
{
    return server.limit - server.limit / 8;
}

static const char deadline_reason[] = "deadline";
static const char shed_reason[] = "shed";

static void on_connection(void *ctx, struct MHD_Connection *connection,
                          void **record, enum MHD_ConnectionNotificationCode code)
{
    (void)ctx;
    struct tracked *t = *record;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (t) {
            unlist(t);
            server.open--;
            free(t);
        }
        return;
    }
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info || !(t = calloc(1, sizeof *t)))
        return;  /* untracked: only the idle timeout ends it */
    *t = (struct tracked){ .prev = server.newest, .fd = info->connect_fd,
                           .waiting = 1, .accepted_ns = now_ns() };
    *(server.newest ? &server.newest->next : &server.oldest) = t;
    server.newest = t;
    *record = t;
    if (++server.open >= shed_at() && server.oldest != t) {
        char line[160];
        snprintf(line, sizeof line, "at %u connections: closed the oldest one "
                 "without a request", shed_at());
        shut(server.oldest, shed_reason, line);
    }
}

static void end_overdue(int64_t now)
{
    while (server.oldest &&
           now - server.oldest->accepted_ns >= HEADER_DEADLINE_MS * NS_PER_MS) {
        char line[160];
        snprintf(line, sizeof line, "closed a connection that sent no whole "
                 "request header within %d ms", HEADER_DEADLINE_MS);
        shut(server.oldest, deadline_reason, line);
    }
}

/* ---- requests ------------------------------------------------------------ */

static int reply(struct MHD_Connection *connection, unsigned status,
                 char *body, size_t length, const char *type)
{
    struct MHD_Response *response = MHD_create_response_from_buffer(
        length, body, MHD_RESPMEM_MUST_FREE);
    if (!response) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    int rc = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return rc;
}

/* Called once the request header is whole: the connection has met its
 * deadline. */
static enum MHD_Result answer(void *ctx, struct MHD_Connection *connection,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **request)
{
    (void)ctx, (void)version, (void)upload, (void)upload_size, (void)request;
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (info && info->socket_context)
        unlist(info->socket_context);
    if (strcmp(method, "GET") != 0 || strcmp(url, "/metrics") != 0)
        return (enum MHD_Result)reply(connection, MHD_HTTP_NOT_FOUND,
                                      strdup("GET /metrics\n"), 13, "text/plain");
    char *body = NULL;
    size_t length = 0;
    FILE *out = open_memstream(&body, &length);
    if (!out)
        return MHD_NO;
    bh_stat_write_prometheus(out, given.ns, given.namespace_name);
    fclose(out);
    return (enum MHD_Result)reply(connection, MHD_HTTP_OK, body, length,
                                  "text/plain; version=0.0.4");
}

/* ---- the thread ---------------------------------------------------------- */

/* Until libmicrohttpd's next timeout, the oldest waiting connection's
 * deadline or WAKE_MAX_MS (for the folded log), whichever comes first. */
static int wait_ms(int64_t now)
{
    int64_t wait = WAKE_MAX_MS;
    MHD_UNSIGNED_LONG_LONG mhd_ms;
    if (MHD_get_timeout(server.daemon, &mhd_ms) == MHD_YES &&
        mhd_ms < (MHD_UNSIGNED_LONG_LONG)wait)
        wait = (int64_t)mhd_ms;
    if (server.oldest) {
        int64_t due = server.oldest->accepted_ns + HEADER_DEADLINE_MS * NS_PER_MS - now;
        due = due > 0 ? (due + NS_PER_MS - 1) / NS_PER_MS : 0;
        wait = due < wait ? due : wait;
    }
    return (int)wait;
}

static void *serve(void *unused)
{
    (void)unused;
    for (;;) {
        struct epoll_event events[2];
        int ready = epoll_wait(server.epoll_fd, events, 2, wait_ms(now_ns()));
        for (int i = 0; i < ready; i++)
            if (events[i].data.fd == server.wake_fd)
                return NULL;
        MHD_run(server.daemon);
        int64_t now = now_ns();
        end_overdue(now);
        say_left_out(now);
    }
}

/* ---- start and stop -------------------------------------------------------- */

/* How many /metrics connections the fd limit leaves room for. */
static unsigned connection_limit(void)
{
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) < 0 || files.rlim_cur == RLIM_INFINITY)
        return CONNECTIONS_MAX;
    if (files.rlim_cur < FD_RESERVE + 2)
        return 1;
    rlim_t room = files.rlim_cur - FD_RESERVE;
    return room < CONNECTIONS_MAX ? (unsigned)room : CONNECTIONS_MAX;
}

static int parse_address(const char *text, struct sockaddr_in *address)
{
    char host[64];
    const char *colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof host)
        return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    *address = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    return *end || port < 1 || port > 65535 ||
                   inet_pton(AF_INET, host, &address->sin_addr) != 1 ? -1 : 0;
}

/* Our epoll set: libmicrohttpd's epoll fd (ready when any of its sockets
 * is) and the stop eventfd. 0, or -1 with errno. */
static int watch(void)
{
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(server.daemon, MHD_DAEMON_INFO_EPOLL_FD);
    server.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    server.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!info || server.epoll_fd < 0 || server.wake_fd < 0)
        return -1;
    struct epoll_event mhd = { .events = EPOLLIN, .data.fd = info->epoll_fd };
    struct epoll_event wake = { .events = EPOLLIN, .data.fd = server.wake_fd };
    return epoll_ctl(server.epoll_fd, EPOLL_CTL_ADD, info->epoll_fd, &mhd) < 0 ||
           epoll_ctl(server.epoll_fd, EPOLL_CTL_ADD, server.wake_fd, &wake) < 0 ? -1 : 0;
}

int bh_metrics_start(const char *text, struct bh_namespace *ns,
                     const char *namespace_name, bh_metrics_say *say_line)
{
    given.ns = ns;
    given.namespace_name = namespace_name;
    given.say = say_line;
    struct sockaddr_in address;
    if (parse_address(text, &address) < 0) {
        say("--metrics %s: not IPV4ADDRESS:PORT (e.g. 127.0.0.1:9464)", text);
        return -1;
    }
    server.limit = connection_limit();
    server.daemon = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_ERROR_LOG, ntohs(address.sin_port), NULL, NULL,
        answer, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address,
        MHD_OPTION_CONNECTION_LIMIT, server.limit,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_BYTES,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL, MHD_OPTION_END);
    if (!server.daemon) {
        say("--metrics %s: cannot listen there", text);
        return -1;
    }
    int failed = watch() < 0 ? errno
               : pthread_create(&server.thread, NULL, serve, NULL);
    server.thread_runs = !failed;
    if (failed) {
        say("--metrics %s: cannot start its thread: %s", text, strerror(failed));
        bh_metrics_stop();
        return -1;
    }
    say("metrics at http://%s/metrics (at most %u connections, each sending "
        "its request within %d ms)", text, server.limit, HEADER_DEADLINE_MS);
    return 0;
}

void bh_metrics_stop(void)
{
    if (server.thread_runs && eventfd_write(server.wake_fd, 1) == 0)
        pthread_join(server.thread, NULL);
    server.thread_runs = 0;
    if (server.daemon)
        MHD_stop_daemon(server.daemon);
    if (server.epoll_fd >= 0)
        close(server.epoll_fd);
    if (server.wake_fd >= 0)
        close(server.wake_fd);
    server.daemon = NULL;
    server.epoll_fd = server.wake_fd = -1;
}
