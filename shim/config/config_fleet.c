/* The fleet's Redis URL and host name: read by the parser (to check them)
 * and by the agent (to connect). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

static int fail(char *why, unsigned long whylen, const char *what)
{
    snprintf(why, whylen, "%s", what);
    return -1;
}

/* "N" with min <= N <= max, all digits; -1 otherwise. */
static long whole(const char *text, size_t length, long min, long max)
{
    long value = 0;
    if (length == 0 || length > 6)
        return -1;
    for (size_t i = 0; i < length; i++) {
        if (text[i] < '0' || text[i] > '9')
            return -1;
        value = value * 10 + (text[i] - '0');
    }
    return value >= min && value <= max ? value : -1;
}

int bh_fleet_url_parse(const char *url, struct bh_fleet_address *address,
                       char *why, unsigned long whylen)
{
    static const char scheme[] = "redis://";
    if (strncmp(url, scheme, sizeof scheme - 1) != 0)
        return fail(why, whylen, "is not a redis://HOST:PORT[/DB] URL");
    const char *host = url + sizeof scheme - 1, *end = host;
    if (*host == '[') {  /* [v6] */
        end = strchr(host, ']');
        if (!end)
            return fail(why, whylen, "has no ] after its IPv6 address");
        host++;
    } else {
        end = host + strcspn(host, ":/");
    }
    size_t host_length = (size_t)(end - host);
    if (host_length == 0 || host_length >= sizeof address->host)
        return fail(why, whylen, "has no host");
    memcpy(address->host, host, host_length);
    address->host[host_length] = '\0';
    const char *rest = *end == ']' ? end + 1 : end;
    if (*rest != ':')
        return fail(why, whylen, "has no port");
    const char *port = rest + 1, *slash = strchr(port, '/');
    size_t port_length = slash ? (size_t)(slash - port) : strlen(port);
    address->port = (int)whole(port, port_length, 1, 65535);
    if (address->port < 0)
        return fail(why, whylen, "has a bad port (1 to 65535)");
    address->db = 0;
    if (slash && (address->db = (int)whole(slash + 1, strlen(slash + 1), 0, 15)) < 0)
        return fail(why, whylen, "has a bad database number (0 to 15)");
    return 0;
}

void bh_fleet_default_host(char *out, unsigned long outlen)
{
    if (gethostname(out, outlen) < 0 || out[0] == '\0')
        snprintf(out, outlen, "localhost");
    out[outlen - 1] = '\0';
    for (char *c = out; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9') || *c == '_' || *c == '.' || *c == '-'))
            *c = '-';
}
