/* Resolver hooks: remember which addresses a wanted name gave, so hostname
 * rules can match the connect() that follows. Names no rule could match
 * are not remembered, but under observe = yes, whose records name each
 * destination (core/observe.h). Results, errno and h_errno pass through
 * untouched. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>

#include "core/observe.h"
#include "core/shim.h"
#include "hooks/export.h"
#include "libc/libc.h"

static int wanted(const char *name)
{
    return name && bh_shim_active() && bh_rule_index_wants_name(bh_shim.rules, name);
}

/* One address the name gave: for the rules that want the name, and for
 * observe's records (nothing when it is off). */
static void note(const char *name, int rules_want, int family, const void *address)
{
    if (rules_want)
        bh_rule_index_note_name(bh_shim.rules, name, family, address);
    bh_observe_resolved(name, family, address);
}

static void note_addrinfo(const char *node, int rc, const struct addrinfo *result)
{
    int rules_want = rc == 0 && wanted(node);
    if (rc != 0 || !node || (!rules_want && !bh_observing))
        return;
    int saved_errno = errno;
    for (const struct addrinfo *ai = result; ai; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET)
            note(node, rules_want, AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr);
        else if (ai->ai_family == AF_INET6)
            note(node, rules_want, AF_INET6,
                 &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    }
    errno = saved_errno;
}

static struct hostent *note_hostent(const char *name, struct hostent *host)
{
    int rules_want = host && wanted(name);
    if (!host || !name || (!rules_want && !bh_observing) ||
        (host->h_addrtype != AF_INET && host->h_addrtype != AF_INET6))
        return host;
    int saved_errno = errno;
    for (char **address = host->h_addr_list; *address; address++)
        note(name, rules_want, host->h_addrtype, *address);
    errno = saved_errno;
    return host;
}

static int bh_getaddrinfo(const char *node, const char *service,
                          const struct addrinfo *hints, struct addrinfo **result)
{
    int rc = libc_getaddrinfo(node, service, hints, result);
    note_addrinfo(node, rc, rc == 0 ? *result : NULL);
    return rc;
}

static int noted_r(const char *name, int rc, struct hostent **result)
{
    if (rc == 0 && result)
        note_hostent(name, *result);
    return rc;
}

BH_EXPORT int getaddrinfo(const char *node, const char *service,
                          const struct addrinfo *hints, struct addrinfo **result)
{
    return bh_getaddrinfo(node, service, hints, result);
}
BH_EXPORT struct hostent *gethostbyname(const char *name)
{
    return note_hostent(name, libc_gethostbyname(name));
}
BH_EXPORT struct hostent *gethostbyname2(const char *name, int family)
{
    return note_hostent(name, libc_gethostbyname2(name, family));
}
BH_EXPORT int gethostbyname_r(const char *name, struct hostent *ret, char *buf,
                              size_t buflen, struct hostent **result, int *h_errnop)
{
    return noted_r(name, libc_gethostbyname_r(name, ret, buf, buflen, result, h_errnop),
                   result);
}
BH_EXPORT int gethostbyname2_r(const char *name, int family, struct hostent *ret,
                               char *buf, size_t buflen, struct hostent **result,
                               int *h_errnop)
{
    return noted_r(name, libc_gethostbyname2_r(name, family, ret, buf, buflen,
                                               result, h_errnop), result);
}
