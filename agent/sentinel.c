/* Asking a sentinel for the master (see sentinel.h). One short connection
 * per question: the agent asks only when it (re)connects to Redis, and a
 * sentinel kept open would be one more connection to watch. */
#include "sentinel.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

/* The reply to a command; NULL with why on no answer or an error reply. */
static redisReply *ask(redisContext *redis, int argc, const char **argv,
                       char *why, size_t whylen)
{
    redisReply *reply = redisCommandArgv(redis, argc, argv, NULL);
    if (!reply) {
        snprintf(why, whylen, "%s: %s", argv[0], redis->errstr[0] ? redis->errstr
                                                                  : "no answer");
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%s: %s", argv[0], reply->str);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

/* [ "IP", "PORT" ] into master. 0, or -1 when it is anything else. */
static int read_address(const redisReply *reply, struct bh_fleet_endpoint *master)
{
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING ||
        reply->element[1]->type != REDIS_REPLY_STRING ||
        reply->element[0]->len == 0 || reply->element[0]->len >= sizeof master->host)
        return -1;
    char *end;
    long port = strtol(reply->element[1]->str, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535)
        return -1;
    snprintf(master->host, sizeof master->host, "%s", reply->element[0]->str);
    master->port = (int)port;
    return 0;
}

static enum bh_sentinel_answer question(redisContext *redis, const char *name,
                                        const char *password,
                                        struct bh_fleet_endpoint *master,
                                        char *why, size_t whylen)
{
    redisReply *reply;
    if (password) {
        const char *auth[] = { "AUTH", password };
        if (!(reply = ask(redis, 2, auth, why, whylen)))
            return BH_SENTINEL_DOWN;
        freeReplyObject(reply);
    }
    const char *get[] = { "SENTINEL", "get-master-addr-by-name", name };
    if (!(reply = ask(redis, 3, get, why, whylen)))
        return BH_SENTINEL_DOWN;
    enum bh_sentinel_answer answer = BH_SENTINEL_NAMED;
    if (reply->type == REDIS_REPLY_NIL) {
        snprintf(why, whylen, "does not know master %s", name);
        answer = BH_SENTINEL_UNKNOWN;
    } else if (read_address(reply, master) < 0) {
        snprintf(why, whylen, "SENTINEL: an answer that is not an address");
        answer = BH_SENTINEL_DOWN;
    }
    freeReplyObject(reply);
    return answer;
}

enum bh_sentinel_answer bh_sentinel_ask(const struct bh_fleet_endpoint *sentinel,
                                        const char *name, const char *password,
                                        int timeout_ms, struct bh_fleet_endpoint *master,
                                        char *why, size_t whylen)
{
    struct timeval timeout = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    redisContext *redis = redisConnectWithTimeout(sentinel->host, sentinel->port,
                                                  timeout);
    if (!redis || redis->err) {
        snprintf(why, whylen, "%s", redis ? redis->errstr : "out of memory");
        redisFree(redis);
        return BH_SENTINEL_DOWN;
    }
    redisSetTimeout(redis, timeout);
    enum bh_sentinel_answer answer = question(redis, name, password, master,
                                              why, whylen);
    redisFree(redis);
    return answer;
}
