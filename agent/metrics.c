/* GET /metrics over HTTP, for Prometheus: what `bulkhead stat
 * --prometheus` prints (every compartment's live figures and, for fleet
 * compartments, this host's grant, the fleet's use and its live hosts),
 * served by libmicrohttpd from a thread of its own. That thread only reads
 * the namespace's shared memory and semaphores, as `stat` does. */
#include "agent.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "stat_render.h"

/* /metrics may hold at most this many connections, and fewer when the fd
 * limit is low: FD_RESERVE fds always stay for Redis, the namespace and
 * stdio, so a flood of idle scrapers can never keep the agent from
 * leasing. An idle connection is closed after IDLE_TIMEOUT_S. At the cap
 * libmicrohttpd closes each new connection at once and says so: those
 * lines are said once a minute at most, with a count of those left out. */
enum { CONNECTIONS_MAX = 64, FD_RESERVE = 32, IDLE_TIMEOUT_S = 10,
       LOG_GAP_NS = 60 * 1000000000LL };

static struct MHD_Daemon *daemon_;

static struct {
    pthread_mutex_t lock;
    int64_t quiet_until_ns;
    unsigned left_out;
} log_gate = { PTHREAD_MUTEX_INITIALIZER, 0, 0 };

static void mhd_log(void *ctx, const char *format, va_list args)
{
    (void)ctx;
    char line[512];
    vsnprintf(line, sizeof line, format, args);
    line[strcspn(line, "\n")] = '\0';
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    pthread_mutex_lock(&log_gate.lock);
    unsigned left_out = log_gate.left_out;
    int say = now_ns >= log_gate.quiet_until_ns;
    if (say) {
        log_gate.quiet_until_ns = now_ns + LOG_GAP_NS;
        log_gate.left_out = 0;
    } else {
        log_gate.left_out++;
    }
    pthread_mutex_unlock(&log_gate.lock);
    if (say && left_out)
        agent_log("metrics: %s (and %u more in the last minute)", line, left_out);
    else if (say)
        agent_log("metrics: %s", line);
}

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
    int rc = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return rc;
}

static enum MHD_Result answer(void *ctx, struct MHD_Connection *connection,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **request)
{
    (void)version, (void)upload, (void)upload_size, (void)request;
    struct agent *agent = ctx;
    if (strcmp(method, "GET") != 0 || strcmp(url, "/metrics") != 0)
        return (enum MHD_Result)reply(connection, MHD_HTTP_NOT_FOUND,
                                      strdup("GET /metrics\n"), 13, "text/plain");
    char *body = NULL;
    size_t length = 0;
    FILE *out = open_memstream(&body, &length);
    if (!out)
        return MHD_NO;
    bh_stat_write_prometheus(out, &agent->ns, agent->config.namespace_name);
    fclose(out);
    return (enum MHD_Result)reply(connection, MHD_HTTP_OK, body, length,
                                  "text/plain; version=0.0.4");
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

int bh_metrics_start(const char *text, struct agent *agent)
{
    struct sockaddr_in address;
    if (parse_address(text, &address) < 0) {
        agent_log("--metrics %s: not IPV4ADDRESS:PORT (e.g. 127.0.0.1:9464)", text);
        return -1;
    }
    /* epoll (MHD_USE_AUTO): select() could not watch fds past 1,024 */
    unsigned limit = connection_limit();
    daemon_ = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG,
                               ntohs(address.sin_port), NULL, NULL, answer, agent,
                               MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                               MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address,
                               MHD_OPTION_CONNECTION_LIMIT, limit,
                               MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
                               MHD_OPTION_END);
    if (!daemon_) {
        agent_log("--metrics %s: cannot listen there", text);
        return -1;
    }
    agent_log("metrics at http://%s/metrics (at most %u connections, idle ones "
              "closed after %d s)", text, limit, IDLE_TIMEOUT_S);
    return 0;
}

void bh_metrics_stop(void)
{
    if (daemon_)
        MHD_stop_daemon(daemon_);
    daemon_ = NULL;
}
