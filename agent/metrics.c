/* GET /metrics over HTTP, for Prometheus: what `bulkhead stat
 * --prometheus` prints (every compartment's live figures and, for fleet
 * compartments, this host's grant, the fleet's use and its live hosts),
 * served by libmicrohttpd from a thread of its own. That thread only reads
 * the namespace's shared memory and semaphores, as `stat` does. */
#include "agent.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stat_render.h"

static struct MHD_Daemon *daemon_;

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
    daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                               ntohs(address.sin_port), NULL, NULL, answer, agent,
                               MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address,
                               MHD_OPTION_END);
    if (!daemon_) {
        agent_log("--metrics %s: cannot listen there", text);
        return -1;
    }
    agent_log("metrics at http://%s/metrics", text);
    return 0;
}

void bh_metrics_stop(void)
{
    if (daemon_)
        MHD_stop_daemon(daemon_);
    daemon_ = NULL;
}
