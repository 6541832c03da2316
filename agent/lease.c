/* Redis for the lease protocol, through hiredis (synchronous, with
 * timeouts: the agent has nothing else to do while it waits, and a Redis
 * that hangs must not hang it past its refresh).
 *
 * Which Redis: the one of fleet = redis://, or the master the sentinels of
 * fleet = redis-sentinel:// name, asked anew on every connect. A Redis
 * that is no master (READONLY, MASTERDOWN: a failover demoted it; LOADING)
 * is treated as one that does not answer: the agent reconnects, which asks
 * the sentinels again.
 *
 * Keys, per fleet (fleet_name, by default the namespace) and compartment,
 * with a hash tag so that the keys of a compartment live on one Redis
 * Cluster shard and compartments spread over the shards:
 *   bulkhead:{FLEET/COMPARTMENT}:leases  the hosts' leases, and the silent
 *                                        hosts' reserves (lease.lua)
 *   bulkhead:{FLEET/COMPARTMENT}:expiry  the same hosts by lease expiry
 *   bulkhead:{FLEET/COMPARTMENT}:meta    the live fleet limit, learning mode,
 *                                        the totals over the leases */
#include "lease.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "lease_lua.h"  /* LEASE_LUA: lease.lua as a C string (Makefile) */
#include "sentinel.h"

enum { SENTINEL_MIN_TIMEOUT_MS = 100 };

struct bh_lease_client {
    redisContext *redis;
    char sha[41];
    char where[300];   /* "HOST:PORT" */
    int no_master;     /* it answered READONLY, MASTERDOWN or LOADING */
};

static struct timeval ms_to_timeval(int ms)
{
    return (struct timeval){ ms / 1000, (ms % 1000) * 1000 };
}

static const char *file_kind(mode_t mode)
{
    return S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket"
         : S_ISDIR(mode) ? "a directory" : "not a regular file";
}

/* The password file's first line. 0, or -1 with why. Opened without
 * blocking and looked at before it is read, as the shim opens rules.ini: a
 * FIFO would hang the agent in open(), and a directory or /dev/zero would
 * send an empty password. Symlinks are followed: mounted secrets and
 * systemd credentials are symlinks to the real file. */
static int read_password(const char *key, const char *path, char *out,
                         size_t outlen, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat info;
    if (fd < 0 || fstat(fd, &info) < 0) {
        snprintf(why, whylen, "%s %s: %s", key, path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(info.st_mode)) {
        snprintf(why, whylen, "%s %s: is %s, not a regular file",
                 key, path, file_kind(info.st_mode));
        close(fd);
        return -1;
    }
    ssize_t length = read(fd, out, outlen - 1);
    int saved = errno;
    close(fd);
    if (length < 0) {
        snprintf(why, whylen, "%s %s: %s", key, path, strerror(saved));
        return -1;
    }
    out[length] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    if (out[0] == '\0') {
        snprintf(why, whylen, "%s %s: its first line is empty", key,
                 path);
        return -1;
    }
    return 0;
}

/* An error reply of a Redis that takes no writes now: a replica (a
 * failover demoted it), one cut off from its master, one still loading. */
static int says_no_master(const char *error)
{
    return strncmp(error, "READONLY ", 9) == 0 || strncmp(error, "MASTERDOWN ", 11) == 0
        || strncmp(error, "LOADING ", 8) == 0;
}

/* A Redis Cluster node's redirection: not followed (README, "Redis
 * Cluster"), but named. */
static int says_cluster(const char *error)
{
    return strncmp(error, "MOVED ", 6) == 0 || strncmp(error, "ASK ", 4) == 0;
}

/* Runs a command; the reply, or NULL with why (an error reply included). */
static redisReply *command(struct bh_lease_client *client, char *why, size_t whylen,
                           const char *what, int argc, const char **argv)
{
    redisReply *reply = redisCommandArgv(client->redis, argc, argv, NULL);
    if (!reply) {
        snprintf(why, whylen, "%s: %s", what, client->redis->errstr[0]
                 ? client->redis->errstr : "no answer");
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        client->no_master |= says_no_master(reply->str);
        if (says_cluster(reply->str))
            snprintf(why, whylen, "%s: Redis at %s is a Redis Cluster node (%s): "
                     "bulkhead agent does not follow Cluster redirections; point "
                     "fleet = at one Redis or at its sentinels", what, client->where,
                     reply->str);
        else
            snprintf(why, whylen, "%s: %s", what, reply->str);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

static int simple(struct bh_lease_client *client, char *why, size_t whylen,
                  const char *what, int argc, const char **argv)
{
    redisReply *reply = command(client, why, whylen, what, argc, argv);
    if (!reply)
        return -1;
    if (reply->type == REDIS_REPLY_STRING && argc >= 2 &&
        strcmp(argv[0], "SCRIPT") == 0)
        snprintf(client->sha, sizeof client->sha, "%s", reply->str);
    freeReplyObject(reply);
    return 0;
}

/* A Redis a sentinel named: it must say it is the master. Right after a
 * failover a sentinel may still name the old one, come back as a replica. */
static int is_master(struct bh_lease_client *client, char *why, size_t whylen)
{
    const char *role[] = { "ROLE" };
    redisReply *reply = command(client, why, whylen, "ROLE", 1, role);
    if (!reply)
        return -1;
    const redisReply *first = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0
        ? reply->element[0] : NULL;
    int master = first && first->type == REDIS_REPLY_STRING &&
                 strcmp(first->str, "master") == 0;
    if (!master)
        snprintf(why, whylen, "ROLE: %s, not master", first && first->type ==
                 REDIS_REPLY_STRING ? first->str : "an unexpected answer");
    freeReplyObject(reply);
    return master ? 0 : -1;
}

static int log_in(struct bh_lease_client *client, const struct bh_config *config,
                  int db, int check_role, char *why, size_t whylen)
{
    if (config->fleet_password_file) {
        char password[512];
        if (read_password("fleet_password_file", config->fleet_password_file,
                          password, sizeof password, why, whylen) < 0)
            return -1;
        const char *auth[] = { "AUTH", password };
        int rc = simple(client, why, whylen, "AUTH", 2, auth);
        memset(password, 0, sizeof password);
        if (rc < 0)
            return -1;
    }
    if (check_role && is_master(client, why, whylen) < 0)
        return -1;
    char number[16];
    snprintf(number, sizeof number, "%d", db);
    const char *select[] = { "SELECT", number };
    const char *load[] = { "SCRIPT", "LOAD", LEASE_LUA };
    if (simple(client, why, whylen, "SELECT", 2, select) < 0)
        return -1;
    return simple(client, why, whylen, "SCRIPT LOAD", 3, load);
}

static void endpoint_text(const char *host, int port, char *out, size_t outlen)
{
    snprintf(out, outlen, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

/* A connection to the Redis at host:port, logged in; check_role: one a
 * sentinel named, which must be the master. NULL with why. */
static struct bh_lease_client *open_client(const struct bh_config *config,
                                           const char *host, int port, int db,
                                           int check_role, int timeout_ms,
                                           char *why, size_t whylen)
{
    char reason[256];
    struct bh_lease_client *client = calloc(1, sizeof *client);
    if (!client) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    endpoint_text(host, port, client->where, sizeof client->where);
    client->redis = redisConnectWithTimeout(host, port, ms_to_timeval(timeout_ms));
    if (!client->redis || client->redis->err) {
        snprintf(why, whylen, "cannot reach Redis at %s: %s", client->where,
                 client->redis ? client->redis->errstr : "out of memory");
        bh_lease_close(client);
        return NULL;
    }
    redisSetTimeout(client->redis, ms_to_timeval(timeout_ms));
    if (log_in(client, config, db, check_role, reason, sizeof reason) < 0) {
        snprintf(why, whylen, "Redis at %s: %s", client->where, reason);
        bh_lease_close(client);
        return NULL;
    }
    return client;
}

/* Why no sentinel led to a master: one that named a master out of reach
 * says most (Redis is down, as with redis://); else one that does not know
 * the name; else none answered. Each sentinel's answer follows. */
static void no_master_why(const struct bh_fleet_address *address,
                          char said[][320], int unknown, const char *master_why,
                          char *why, size_t whylen)
{
    char list[1024] = "";
    size_t used = 0;
    for (int i = 0; i < address->sentinel_count && used < sizeof list; i++) {
        char where[300];
        endpoint_text(address->sentinels[i].host, address->sentinels[i].port,
                      where, sizeof where);
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s: %s",
                                 i ? "; " : "", where, said[i]);
    }
    if (master_why[0])
        snprintf(why, whylen, "%s", master_why);
    else if (unknown)
        snprintf(why, whylen, "no sentinel knows master %s (%s)", address->master, list);
    else
        snprintf(why, whylen, "no sentinel answers for master %s (%s)",
                 address->master, list);
}

/* The sentinels, in turn, until one names a master that answers as one. */
static struct bh_lease_client *via_sentinels(const struct bh_config *config,
                                             const struct bh_fleet_address *address,
                                             int timeout_ms, char *why, size_t whylen)
{
    char password[512], said[BH_FLEET_SENTINELS_MAX][320], master_why[1024] = "";
    const char *given = NULL;
    if (config->fleet_sentinel_password_file) {
        if (read_password("fleet_sentinel_password_file",
                          config->fleet_sentinel_password_file, password,
                          sizeof password, why, whylen) < 0)
            return NULL;
        given = password;
    }
    struct bh_lease_client *client = NULL;
    struct bh_fleet_endpoint named, tried[BH_FLEET_SENTINELS_MAX];
    int tried_count = 0, unknown = 0;
    /* The sentinels share one timeout: eight that do not answer must not
     * hold the agent for eight. */
    int each_ms = timeout_ms / address->sentinel_count;
    each_ms = each_ms < SENTINEL_MIN_TIMEOUT_MS ? SENTINEL_MIN_TIMEOUT_MS : each_ms;
    for (int i = 0; i < address->sentinel_count && !client; i++) {
        enum bh_sentinel_answer answer = bh_sentinel_ask(
            &address->sentinels[i], address->master, given, each_ms, &named,
            said[i], sizeof said[i]);
        unknown |= answer == BH_SENTINEL_UNKNOWN;
        if (answer != BH_SENTINEL_NAMED)
            continue;
        char where[300], sentinel[300], reason[512];
        endpoint_text(named.host, named.port, where, sizeof where);
        endpoint_text(address->sentinels[i].host, address->sentinels[i].port,
                      sentinel, sizeof sentinel);
        snprintf(said[i], sizeof said[i], "names %s", where);
        int seen = 0;
        for (int t = 0; t < tried_count; t++)
            seen |= strcmp(tried[t].host, named.host) == 0 && tried[t].port == named.port;
        if (seen)
            continue;
        tried[tried_count++] = named;
        client = open_client(config, named.host, named.port, address->db, 1,
                             timeout_ms, reason, sizeof reason);
        if (!client && !master_why[0])
            snprintf(master_why, sizeof master_why, "%s (master %s, named by "
                     "sentinel %s)", reason, address->master, sentinel);
    }
    memset(password, 0, sizeof password);
    if (!client)
        no_master_why(address, said, unknown, master_why, why, whylen);
    return client;
}

struct bh_lease_client *bh_lease_connect(const struct bh_config *config,
                                         int timeout_ms, char *why, size_t whylen)
{
    struct bh_fleet_address address;
    char reason[256];
    if (bh_fleet_url_parse(config->fleet_url, &address, reason, sizeof reason) < 0) {
        snprintf(why, whylen, "fleet = %s: %s", config->fleet_url, reason);
        return NULL;
    }
    if (address.sentinel_count > 0)
        return via_sentinels(config, &address, timeout_ms, why, whylen);
    return open_client(config, address.host, address.port, address.db, 0,
                       timeout_ms, why, whylen);
}

const char *bh_lease_where(const struct bh_lease_client *client)
{
    return client->where;
}

void bh_lease_close(struct bh_lease_client *client)
{
    if (!client)
        return;
    if (client->redis)
        redisFree(client->redis);
    free(client);
}

struct lease_keys {
    char leases[256], expiry[256], meta[256];
};

static void keys_of(const struct bh_config *config, const char *compartment,
                    struct lease_keys *keys)
{
    snprintf(keys->leases, sizeof keys->leases, "bulkhead:{%s/%s}:leases",
             config->fleet_name, compartment);
    snprintf(keys->expiry, sizeof keys->expiry, "bulkhead:{%s/%s}:expiry",
             config->fleet_name, compartment);
    snprintf(keys->meta, sizeof keys->meta, "bulkhead:{%s/%s}:meta",
             config->fleet_name, compartment);
}

/* Element i of an array reply if it is an integer from low to high. */
static int integer_in(const redisReply *reply, size_t i, long long low, long long high,
                      long long *value)
{
    if (i >= reply->elements || reply->element[i]->type != REDIS_REPLY_INTEGER)
        return -1;
    *value = reply->element[i]->integer;
    return *value >= low && *value <= high ? 0 : -1;
}

int bh_lease_read_reply(const struct redisReply *reply, const char *meta,
                        struct bh_lease_reply *out, char *why, size_t whylen)
{
    long long v[7] = { 0 };
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 7 ||
        reply->element[4]->type != REDIS_REPLY_INTEGER) {
        snprintf(why, whylen, "lease: unexpected answer from Redis (%s)", meta);
        return -1;
    }
    if (integer_in(reply, 4, 1, BH_LEASE_LIMIT_MAX, &v[4]) < 0) {
        snprintf(why, whylen, "bad fleet limit in Redis: %s limit is %lld, not a "
                 "whole number from 1 to %d", meta, v[4], BH_LEASE_LIMIT_MAX);
        return -1;
    }
    if (integer_in(reply, 0, 0, v[4], &v[0]) < 0 ||
        integer_in(reply, 1, 0, INT_MAX, &v[1]) < 0 ||
        integer_in(reply, 2, 1, INT_MAX, &v[2]) < 0 ||
        integer_in(reply, 3, 0, 1, &v[3]) < 0 ||
        integer_in(reply, 5, 0, v[4], &v[5]) < 0 ||
        integer_in(reply, 6, 0, v[0], &v[6]) < 0) {
        snprintf(why, whylen, "lease: unexpected answer from Redis (%s)", meta);
        return -1;
    }
    *out = (struct bh_lease_reply){ (int)v[0], (int)v[1], (int)v[2], (int)v[3],
                                    (int)v[4], (int)v[5], (int)v[6] };
    return 0;
}

int bh_lease_call(struct bh_lease_client *client, const struct bh_config *config,
                  const struct bh_compartment *compartment,
                  const struct bh_lease_report *report, struct bh_lease_reply *out,
                  char *why, size_t whylen)
{
    struct lease_keys keys;
    char args[8][16];
    keys_of(config, compartment->name, &keys);
    snprintf(args[0], 16, "%d", report->want);
    snprintf(args[1], 16, "%d", report->holding);
    snprintf(args[2], 16, "%d", report->previous_grant);
    snprintf(args[3], 16, "%d", config->fleet_lease_ms);
    snprintf(args[4], 16, "%d", compartment->fleet_limit);
    snprintf(args[5], 16, "%d", report->headroom);
    if (config->fleet_fallback < 0)
        snprintf(args[6], 16, "split");
    else
        snprintf(args[6], 16, "%d", config->fleet_fallback);
    /* A refresh of margin: the host's clock and Redis's may run apart a
     * little over the fallback's minutes. */
    snprintf(args[7], 16, "%d", config->fleet_fallback_ms + config->fleet_refresh_ms);
    const char *argv[] = { "EVALSHA", client->sha, "3", keys.leases, keys.expiry,
                           keys.meta, config->fleet_host, args[0], args[1], args[2],
                           args[3], args[4], args[5], args[6], args[7] };
    enum { ARGC = sizeof argv / sizeof argv[0] };
    redisReply *reply = command(client, why, whylen, "lease", ARGC, argv);
    if (!reply && !client->redis->err && strstr(why, "NOSCRIPT")) {
        /* Redis restarted: load it again */
        const char *load[] = { "SCRIPT", "LOAD", LEASE_LUA };
        if (simple(client, why, whylen, "SCRIPT LOAD", 3, load) == 0)
            reply = command(client, why, whylen, "lease", ARGC, argv);
    }
    if (!reply)
        return client->redis->err || client->no_master ? BH_LEASE_DOWN
                                                       : BH_LEASE_REFUSED;
    int rc = bh_lease_read_reply(reply, keys.meta, out, why, whylen);
    freeReplyObject(reply);
    return rc == 0 ? BH_LEASE_OK : BH_LEASE_REFUSED;
}

int bh_lease_set_limit(struct bh_lease_client *client, const struct bh_config *config,
                       const char *compartment, int limit, char *why, size_t whylen)
{
    struct lease_keys keys;
    char number[16];
    keys_of(config, compartment, &keys);
    snprintf(number, sizeof number, "%d", limit);
    const char *argv[] = { "HSET", keys.meta, "limit", number };
    return simple(client, why, whylen, "HSET", 4, argv);
}
