/* Hostname rules under the supervisor. The shim learns a name's addresses
 * from the program's own getaddrinfo; a Go or static program resolves
 * names itself, with nothing to hook. So the supervisor resolves the
 * rules' exact names itself, at start and again every few seconds, and
 * a connect to any address a name had is matched by its rule (the rule
 * index keeps every address it was told). So a rule for one name also
 * catches every other name on those addresses (a CDN, a shared front end),
 * which the shim does not: the start-up line says so. Suffix rules
 * (*.example.com) name no host to resolve: they match nothing here. A name
 * whose addresses change between two refreshes is matched by what the
 * supervisor saw, not by what the program got. Main thread only. */
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
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

/* Appends the rules of one kind, ", "-separated, to text; how many. */
static int list_rules(const struct bh_config *config, enum bh_rule_kind kind,
                      char *text, size_t size)
{
    int count = 0;
    size_t used = strlen(text);
    for (int i = 0; i < config->rule_count && used < size; i++) {
        if (config->rules[i].kind != kind)
            continue;
        used += snprintf(text + used, size - used, "%s%s (line %d)", count ? ", " : "",
                         config->rules[i].text, config->rules[i].line);
        count++;
    }
    return count;
}

void sv_names_say(const struct sv_state *state, const char *program)
{
    char hostnames[1024] = "", suffixes[1024] = "";
    if (list_rules(&state->config, BH_RULE_HOSTNAME, hostnames, sizeof hostnames))
        cli_error("run: %s: hostname rules match by address here: %s count%s every "
                  "connection to an address the name resolves to, whatever name the "
                  "program looked up", program, hostnames,
                  state->names == 1 ? "s" : "");
    if (list_rules(&state->config, BH_RULE_HOST_SUFFIX, suffixes, sizeof suffixes))
        cli_error("run: %s: suffix rules match nothing here: %s", program, suffixes);
}
