/* Hostname rules under the supervisor. The shim learns a name's addresses
 * from the program's own getaddrinfo; a Go or static program resolves
 * names itself, with nothing to hook. So the supervisor resolves the
 * rules' exact names itself, at start and again every few seconds, and
 * a connect to any address a name had is matched by its rule (the rule
 * index keeps every address it was told). Suffix rules (*.example.com)
 * name no host to resolve: they match nothing here. A name whose
 * addresses change between two refreshes is matched by what the
 * supervisor saw, not by what the program got. Main thread only. */
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <time.h>

#include "supervisor/supervisor.h"

static int64_t now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void resolve(struct sv_state *state, const char *name)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *found;
    if (getaddrinfo(name, NULL, &hints, &found) != 0)
        return;
    for (struct addrinfo *at = found; at; at = at->ai_next) {
        if (at->ai_family == AF_INET)
            bh_rule_index_note_name(state->rules, name, AF_INET,
                                    &((struct sockaddr_in *)at->ai_addr)->sin_addr);
        else if (at->ai_family == AF_INET6)
            bh_rule_index_note_name(state->rules, name, AF_INET6,
                                    &((struct sockaddr_in6 *)at->ai_addr)->sin6_addr);
    }
    freeaddrinfo(found);
}

int sv_names_refresh(struct sv_state *state, int every_ms)
{
    static int64_t last_ms = -1;
    int64_t now = now_ms();
    if (!state->names)
        return -1;  /* none: no timer */
    if (last_ms >= 0 && now - last_ms < every_ms)
        return (int)(every_ms - (now - last_ms));
    last_ms = now;
    for (int i = 0; i < state->config.rule_count; i++)
        if (state->config.rules[i].kind == BH_RULE_HOSTNAME)
            resolve(state, state->config.rules[i].hostname);
    return every_ms;
}
