/* libFuzzer: a fixed rule set, fuzzed names noted as resolved, then a
 * fuzzed sockaddr of fuzzed length matched. Besides crashes, the index's
 * answer is checked against a plain scan of the rules in file order.
 *
 * Input: any number of records 'N' FAMILY ADDRESS[16] LENGTH NAME[LENGTH]
 * (a name resolved to an address), then the sockaddr bytes; their count is
 * the length passed, at least sizeof(sa_family_t) as the shim's connect
 * hook ensures before it matches. */
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"
#include "rules/rule_index.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char rules_text[] =
    "[a]\nlimit = 1\n"
    "match = 10.0.0.1:80\n"
    "match = 10.1.0.0/16:8000-8099\n"
    "match = [2001:db8::1]:443\n"
    "match = [2001:db8:1::]/48:*\n"
    "match = api.example.com:443\n"
    "[b]\nlimit = 1\n"
    "match = 10.0.0.0/8:80\n"
    "match = 0.0.0.0/0:5432\n"
    "match = [::]/0:5432\n"
    "match = *.example.net:1-1024\n"
    "match = 192.0.2.0/25:*\n"
    "match = 192.0.2.0/24:80\n"
    "match = [::ffff:0:0]/96:80\n"
    "match = A.example.net:*\n";

static struct bh_config config;

static void no_errors(void *ctx, const char *message)
{
    (void)ctx;
    fprintf(stderr, "fuzz_match: bad built-in rules: %s\n", message);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char path[64];
    int fd = memfd_create("rules.ini", MFD_CLOEXEC);
    if (fd < 0 || write(fd, rules_text, sizeof rules_text - 1) != sizeof rules_text - 1)
        abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    bh_config_load(path, &config, no_errors, NULL);
    close(fd);
    return 0;
}

/* ---- the plain scan the index must agree with ---- */

enum { MAX_NOTES = 16 };
struct note {
    char name[256];        /* as the index keeps it: lower case, no dot */
    int family;
    uint8_t address[16];
};

static int normalise(const char *name, char *out)
{
    size_t length = strlen(name);
    if (length > 0 && name[length - 1] == '.')
        length--;
    if (length == 0 || length >= 256)
        return -1;
    for (size_t i = 0; i < length; i++)
        out[i] = (char)tolower((unsigned char)name[i]);
    out[length] = '\0';
    return 0;
}

static int prefix_equal(const uint8_t *a, const uint8_t *b, int bits)
{
    for (int bit = 0; bit < bits; bit++)
        if (((a[bit / 8] ^ b[bit / 8]) >> (7 - bit % 8)) & 1)
            return 0;
    return 1;
}

static int name_fits(const struct bh_rule *rule, const char *name)
{
    if (rule->kind == BH_RULE_HOSTNAME)
        return strcmp(rule->hostname, name) == 0;
    size_t length = strlen(name), suffix = strlen(rule->hostname);
    return length > suffix && strcmp(name + length - suffix, rule->hostname) == 0;
}

static int plain_match(const struct note *notes, int note_count, int family,
                       const uint8_t *address, unsigned port)
{
    for (int i = 0; i < config.rule_count; i++) {
        const struct bh_rule *rule = &config.rules[i];
        if (port < rule->port_lo || port > rule->port_hi)
            continue;
        if (rule->kind == BH_RULE_ADDRESS) {
            if (rule->family == family
                && prefix_equal(rule->address, address, rule->prefix_len))
                return i;
            continue;
        }
        for (int n = 0; n < note_count; n++)
            if (notes[n].family == family
                && memcmp(notes[n].address, address, family == AF_INET ? 4 : 16) == 0
                && name_fits(rule, notes[n].name))
                return i;
    }
    return -1;
}

/* v4-mapped v6 is v4, for connects and for resolver answers alike. */
static const uint8_t *unmap(int *family, const uint8_t *address)
{
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    if (*family == AF_INET6 && memcmp(address, mapped, 12) == 0) {
        *family = AF_INET;
        return address + 12;
    }
    return address;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct bh_rule_index *index = bh_rule_index_build(&config);
    if (!index)
        abort();
    struct note notes[MAX_NOTES];
    int note_count = 0;
    for (int records = 0; records < MAX_NOTES && size >= 19 && data[0] == 'N'
                          && (size_t)data[18] + 19 <= size; records++) {
        char name[256];
        size_t length = data[18];
        memcpy(name, data + 19, length);
        name[length] = '\0';
        int family = data[1] & 1 ? AF_INET6 : AF_INET;
        /* Aligned, as the resolver hooks' addresses are: note_name reads
         * the bytes as a struct in6_addr. */
        struct in6_addr resolved;
        memcpy(&resolved, data + 2, sizeof resolved);
        bh_rule_index_note_name(index, name, family, &resolved);
        struct note *note = &notes[note_count];
        const uint8_t *address = unmap(&family, (const uint8_t *)&resolved);
        /* Noted only when some rule wants the name, as the hooks do. */
        if (bh_rule_index_wants_name(index, name)
            && normalise(name, note->name) == 0) {
            note->family = family;
            memcpy(note->address, address, family == AF_INET ? 4 : 16);
            note_count++;
        }
        data += 19 + length;
        size -= 19 + length;
    }
    if (size >= sizeof(sa_family_t)) {
        /* A copy of exactly `size` bytes: ASan sees any read past it. */
        struct sockaddr *address = malloc(size);
        memcpy(address, data, size);
        int got = bh_rule_index_match(index, address, (socklen_t)size);
        int want = -1;
        if (address->sa_family == AF_INET && size >= sizeof(struct sockaddr_in)) {
            const struct sockaddr_in *v4 = (const struct sockaddr_in *)address;
            want = plain_match(notes, note_count, AF_INET,
                               (const uint8_t *)&v4->sin_addr, ntohs(v4->sin_port));
        } else if (address->sa_family == AF_INET6 && size >= sizeof(struct sockaddr_in6)) {
            const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)address;
            int family = AF_INET6;
            const uint8_t *bytes = unmap(&family, (const uint8_t *)&v6->sin6_addr);
            want = plain_match(notes, note_count, family, bytes, ntohs(v6->sin6_port));
        }
        if (got != want) {
            fprintf(stderr, "fuzz_match: index says rule %d, a plain scan %d\n", got, want);
            abort();
        }
        free(address);
    }
    bh_rule_index_free(index);
    return 0;
}
