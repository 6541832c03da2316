/* The fleet's Redis URL (one Redis, or the sentinels that name its
 * master) and host name: read by the parser (to check them)
 * and by the agent (to connect). Plain string work, no resolver: the shim
 * parses the rules in every program it starts in. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "config/config.h"

enum {
    PORT_MAX = 65535,
    DB_MAX = 15,           /* Redis's default `databases 16` */
    HOST_NAME_MAX_LENGTH = 253,
};

static int fail(char *why, unsigned long whylen, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *why, unsigned long whylen, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(why, whylen, format, args);
    va_end(args);
    return -1;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The characters of a fleet_host, and of a Redis host name. */
static bool is_host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c)
        || c == '_' || c == '.' || c == '-';
}

/* The digits at text, as a number no larger than max; how many digits were
 * read, 0 when none, or -1 when the number is past max. */
static int read_whole(const char *text, long max, long *value)
{
    int digits = 0;
    *value = 0;
    while (is_digit(text[digits])) {
        *value = *value * 10 + (text[digits] - '0');
        if (*value > max)
            return -1;
        digits++;
    }
    return digits;
}

/* "[v6]" at text: the address into host; what follows the ']' in *rest.
 * ends: the characters that end this host's part of the URL. */
static const char *bracketed_host(const char *text, const char *ends, char *host,
                                  size_t size, const char **rest)
{
    const char *close = strchr(text, ']');
    if (!close || strcspn(text, ends) < (size_t)(close - text))
        return "has no ] after its IPv6 address";
    size_t length = (size_t)(close - text - 1);
    struct in6_addr scratch;
    if (length == 0 || length >= size)
        return "has a bad IPv6 address in [brackets]";
    memcpy(host, text + 1, length);
    host[length] = '\0';
    if (inet_pton(AF_INET6, host, &scratch) != 1)
        return "has a bad IPv6 address in [brackets]";
    *rest = close + 1;
    return NULL;
}

/* A name or an IPv4 address at text, up to ':' or one of ends; into host. */
static const char *plain_host(const char *text, const char *ends, char *host,
                              size_t size, const char **rest)
{
    size_t authority = strcspn(text, ends);
    const char *colon = memchr(text, ':', authority);
    if (colon && memchr(colon + 1, ':', authority - (size_t)(colon + 1 - text)))
        return "has an IPv6 address without [brackets]";
    size_t length = colon ? (size_t)(colon - text) : authority;
    if (length == 0)
        return "has no host";
    bool numeric = true;
    for (size_t i = 0; i < length; i++) {
        if (!is_host_char(text[i]))
            return "has a bad host (a name, an IPv4 address or [IPv6])";
        numeric = numeric && (is_digit(text[i]) || text[i] == '.');
    }
    if (length > HOST_NAME_MAX_LENGTH || length >= size)
        return "has a host name longer than 253 characters";
    memcpy(host, text, length);
    host[length] = '\0';
    struct in_addr scratch;
    if (numeric && inet_pton(AF_INET, host, &scratch) != 1)
        return "has a bad IPv4 address";
    *rest = text + length;
    return NULL;
}

static const char *any_host(const char *text, const char *ends, char *host,
                            size_t size, const char **rest)
{
    return *text == '['
        ? bracketed_host(text, ends, host, size, rest)
        : plain_host(text, ends, host, size, rest);
}

/* ":PORT" at *rest, moved past. NULL, or what is wrong. */
static const char *port_at(const char **rest, int *port)
{
    long number;
    int digits = read_whole(*rest + 1, PORT_MAX, &number);
    if (digits <= 0 || number < 1)
        return "has a bad port (1 to 65535)";
    *port = (int)number;
    *rest += 1 + digits;
    return NULL;
}

/* "/DB" or nothing at rest: the database number, 0 when not given. */
static const char *database_at(const char *rest, const char *after, int *db)
{
    long number;
    *db = 0;
    if (*rest == '\0')
        return NULL;
    if (*rest != '/')
        return after;
    int digits = read_whole(rest + 1, DB_MAX, &number);
    if (digits <= 0)
        return "has a bad database number (0 to 15)";
    if (rest[1 + digits] != '\0')
        return "has something after its database number";
    *db = (int)number;
    return NULL;
}

/* redis://HOST:PORT[/DB], past the scheme. */
static const char *redis_url(const char *text, struct bh_fleet_address *address)
{
    const char *rest;
    const char *problem = any_host(text, "/", address->host, sizeof address->host,
                                   &rest);
    if (problem)
        return problem;
    if (*rest != ':' || rest[1] == '\0' || rest[1] == '/')
        return "has no port";
    if ((problem = port_at(&rest, &address->port)))
        return problem;
    return database_at(rest, "has something after its port other than /DB",
                       &address->db);
}

/* The sentinels of HOST[:PORT],HOST[:PORT]... at text; *rest past them. */
static const char *sentinel_list(const char *text, struct bh_fleet_address *address,
                                 const char **rest)
{
    if (*text == '\0' || *text == '/')
        return "has no sentinel host (redis-sentinel://HOST[:PORT],.../MASTER)";
    for (;;) {
        if (address->sentinel_count == BH_FLEET_SENTINELS_MAX)
            return "has more than 8 sentinels";
        struct bh_fleet_endpoint *sentinel =
            &address->sentinels[address->sentinel_count++];
        if (*text == ',' || *text == '/' || *text == '\0')
            return "has an empty host in its sentinel list";
        const char *problem = any_host(text, ",/", sentinel->host,
                                       sizeof sentinel->host, rest);
        if (problem)
            return problem;
        sentinel->port = BH_FLEET_SENTINEL_PORT;
        if (**rest == ':' && (problem = port_at(rest, &sentinel->port)))
            return problem;
        if (**rest != ',')
            return **rest == '/' || **rest == '\0' ? NULL
                 : "has something after a sentinel's port other than , or /MASTER";
        text = *rest + 1;
    }
}

/* redis-sentinel://HOST[:PORT],.../MASTER[/DB], past the scheme. */
static const char *sentinel_url(const char *text, struct bh_fleet_address *address)
{
    const char *rest;
    const char *problem = sentinel_list(text, address, &rest);
    if (problem)
        return problem;
    size_t length = *rest == '/' ? strcspn(rest + 1, "/") : 0;
    if (length == 0)
        return "has no master name (redis-sentinel://HOST[:PORT],.../MASTER)";
    for (size_t i = 0; i < length; i++)
        if (!is_host_char(rest[1 + i]))
            return "has a bad master name (use A-Z a-z 0-9 _ . -)";
    if (length >= sizeof address->master)
        return "has a master name longer than 63 characters";
    memcpy(address->master, rest + 1, length);
    address->master[length] = '\0';
    return database_at(rest + 1 + length, NULL, &address->db);
}

int bh_fleet_url_parse(const char *url, struct bh_fleet_address *address,
                       char *why, unsigned long whylen)
{
    static const char redis[] = "redis://", sentinel[] = "redis-sentinel://";
    static const char forms[] = "redis://HOST:PORT[/DB] or "
                                "redis-sentinel://HOST[:PORT],.../MASTER[/DB]";
    memset(address, 0, sizeof *address);
    if (!strstr(url, "://"))
        return fail(why, whylen, "is not a %s URL", forms);
    if (strncmp(url, "rediss://", 9) == 0)
        return fail(why, whylen, "uses TLS (rediss://), which bulkhead agent does "
                    "not speak: use %s", forms);
    bool is_sentinel = strncmp(url, sentinel, sizeof sentinel - 1) == 0;
    if (!is_sentinel && strncmp(url, redis, sizeof redis - 1) != 0)
        return fail(why, whylen, "is not redis:// or redis-sentinel:// (use %s)", forms);
    if (strchr(url, '@'))
        return fail(why, whylen, "%s", is_sentinel
                    ? "holds a user or password: put the passwords in "
                      "fleet_password_file and fleet_sentinel_password_file"
                    : "holds a user or password: put the password in "
                      "fleet_password_file");
    const char *problem = is_sentinel
        ? sentinel_url(url + sizeof sentinel - 1, address)
        : redis_url(url + sizeof redis - 1, address);
    return problem ? fail(why, whylen, "%s", problem) : 0;
}

/* uname's node name is the host name whole (gethostname fails on a name
 * longer than its buffer); it is cut to what a fleet_host holds. */
void bh_fleet_default_host(char *out, unsigned long outlen)
{
    struct utsname names;
    if (uname(&names) < 0 || names.nodename[0] == '\0')
        snprintf(out, outlen, "localhost");
    else
        snprintf(out, outlen, "%s", names.nodename);
    for (char *c = out; *c; c++)
        if (!is_host_char(*c))
            *c = '-';
}
