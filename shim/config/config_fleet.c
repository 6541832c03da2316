/* The fleet's Redis URL and host name: read by the parser (to check them)
 * and by the agent (to connect). Plain string work, no resolver: the shim
 * parses the rules in every program it starts in. */
#include <arpa/inet.h>
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

static int fail(char *why, unsigned long whylen, const char *what)
{
    snprintf(why, whylen, "%s", what);
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

/* "[v6]" at text: the address into host; what follows the ']' in *rest. */
static const char *bracketed_host(const char *text, char *host, size_t size,
                                  const char **rest)
{
    const char *close = strchr(text, ']');
    const char *slash = strchr(text, '/');
    if (!close || (slash && slash < close))
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

/* A name or an IPv4 address at text, up to ':' or '/'; into host. */
static const char *plain_host(const char *text, char *host, size_t size,
                              const char **rest)
{
    size_t authority = strcspn(text, "/");
    const char *colon = memchr(text, ':', authority);
    if (colon && memchr(colon + 1, ':', authority - (size_t)(colon + 1 - text)))
        return "has an IPv6 address without [brackets]";
    size_t length = strcspn(text, ":/");
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

int bh_fleet_url_parse(const char *url, struct bh_fleet_address *address,
                       char *why, unsigned long whylen)
{
    static const char scheme[] = "redis://";
    const char *separator = strstr(url, "://");
    if (!separator)
        return fail(why, whylen, "is not a redis://HOST:PORT[/DB] URL");
    if (strncmp(url, scheme, sizeof scheme - 1) != 0)
        return fail(why, whylen, strncmp(url, "rediss://", 9) == 0
                    ? "uses TLS (rediss://), which bulkhead agent does not "
                      "speak: use redis://HOST:PORT[/DB]"
                    : "is not redis:// (use redis://HOST:PORT[/DB])");
    const char *host = url + sizeof scheme - 1, *rest;
    if (strchr(host, '@'))
        return fail(why, whylen, "holds a user or password: put the password "
                    "in fleet_password_file");
    const char *problem = *host == '['
        ? bracketed_host(host, address->host, sizeof address->host, &rest)
        : plain_host(host, address->host, sizeof address->host, &rest);
    if (problem)
        return fail(why, whylen, problem);

    long number;
    if (*rest != ':' || rest[1] == '\0' || rest[1] == '/')
        return fail(why, whylen, "has no port");
    int digits = read_whole(rest + 1, PORT_MAX, &number);
    if (digits <= 0 || number < 1)
        return fail(why, whylen, "has a bad port (1 to 65535)");
    address->port = (int)number;
    rest += 1 + digits;

    address->db = 0;
    if (*rest == '\0')
        return 0;
    if (*rest != '/')
        return fail(why, whylen, "has something after its port other than /DB");
    digits = read_whole(rest + 1, DB_MAX, &number);
    if (digits <= 0)
        return fail(why, whylen, "has a bad database number (0 to 15)");
    if (rest[1 + digits] != '\0')
        return fail(why, whylen, "has something after its database number");
    address->db = (int)number;
    return 0;
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
