/* Rule matching in a few hash lookups, whatever the number of rules.
 *
 * Address rules (a single address is a /32 or /128) go into one hash keyed
 * by (family, prefix length, masked address). A destination is looked up
 * once per distinct prefix length in use, a handful in practice. Each hash
 * entry lists its rules in file order, so the first whose port range fits
 * is that entry's best; the lowest rule number over all lookups wins.
 *
 * Hostname rules cannot be matched from an address alone. The resolver
 * hooks tell us which addresses each wanted name gave (note_name), and those
 * addresses go into a second hash with the hostname rules they stand for.
 * That hash grows at run time, so it has a lock: a rwlock, written only with
 * signals blocked so that a connect() from a signal handler on the writing
 * thread can never wait on it.
 *
 * A 64 Ki-bit port map answers "no rule has this port" before any hashing,
 * and per prefix length a 64 Ki-bit filter of the stored keys answers "no
 * rule has this address": an unmatched connect costs a few bit tests. */
#include "rules/rule_index.h"
#include "libc/inlined.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

/* An IPv4 key is hashed on its first 8 bytes, an IPv6 key on all 20:
 * uthash compares key lengths, so both live in one table. */
struct address_key {
    uint8_t family;      /* AF_INET or AF_INET6, fits a byte */
    uint8_t prefix_len;
    uint16_t zero;
    uint32_t words[4];   /* network byte order, host bits cleared */
};

/* Rules that share one key, in file order. */
struct rule_list {
    int *rules;
    int count;
};

struct address_entry {
    struct address_key key;
    struct rule_list list;
    UT_hash_handle hh;
};

struct name_entry {
    char *name;          /* exact name, or ".suffix" */
    struct rule_list list;
    UT_hash_handle hh;
};

struct port_range { uint16_t lo, hi; };

enum { CACHE_BITS = 6, CACHE_SLOTS = 1 << CACHE_BITS, CACHE_MAX_RULES = 65533 };

/* One prefix length in use, with a 64 Ki-bit filter of the keys stored at
 * that length: a destination no rule names almost always misses the filter
 * (a multiply and a bit test) and never pays for the hash lookup. */
struct prefix_filter {
    uint8_t length;
    uint32_t mask[4];    /* the prefix as a word mask, network byte order */
    uint64_t *bits;
    /* The entries stored at this length, open-addressed by the top bits
     * of the filter's own hash: past the filter, a match is one probe and
     * a compare of the address words, with no key built. NULL ends a
     * probe sequence; 2^slot_bits slots, at least twice the entries. */
    struct address_entry **slots;
    unsigned slot_bits;
    unsigned rules;      /* address rules of this length: entries at most */
};

struct family_prefixes {
    struct prefix_filter filters[129];
    int count;
    /* By an address's first byte, the prefix lengths worth a look: bit i
     * for filters[i] (the first 64) when some rule of that length covers
     * addresses starting with that byte. An address far from every rule
     * tests no filter at all, however many lengths the rules use. */
    uint64_t by_first_byte[256];
};

struct bh_rule_index {
    struct port_range *ports;           /* per rule */
    uint64_t port_map[65536 / 64];      /* ports any rule covers */
    struct family_prefixes v4, v6;
    struct address_entry *by_prefix;    /* address rules */
    struct name_entry *exact_names;     /* hostname rules */
    struct name_entry *suffixes;        /* *.suffix rules */
    pthread_rwlock_t resolved_lock;
    struct address_entry *resolved;     /* addresses of wanted names */
    _Atomic int resolved_count;
    /* The last IPv4 destinations' rules, direct-mapped by address and
     * port: address, port and rule + 2 in one word (0: empty), stored and
     * loaded whole, so a thread or a signal handler sees an entry or none
     * (the worst a race does is a miss). Only for an index that never
     * changes (cache_on): without hostname rules, whose addresses grow at
     * run time, and with fewer than 65,534 rules. */
    int cache_on;
    _Atomic uint64_t cache[CACHE_SLOTS];
};

static int list_append(struct rule_list *list, int rule)
{
    if (list->count > 0 && list->rules[list->count - 1] >= rule) {
        for (int i = 0; i < list->count; i++)  /* keep sorted and unique */
            if (list->rules[i] == rule)
                return 0;
    }
    int *grown = realloc(list->rules, (list->count + 1) * sizeof *grown);
    if (!grown)
        return -1;
    int at = list->count;
    while (at > 0 && grown[at - 1] > rule) {
        grown[at] = grown[at - 1];
        at--;
    }
    grown[at] = rule;
    list->rules = grown;
    list->count++;
    return 0;
}

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE uint32_t prefix_mask(int bits)
{
    return bits >= 32 ? ~0u : bits <= 0 ? 0 : htonl(~0u << (32 - bits));
}

/* Fills the words the family uses and returns the key's hashed length.
 * Inlined: it runs once per prefix length on every matched-port connect. */
ALWAYS_INLINE size_t make_key(struct address_key *key, int family,
                              const void *address, int prefix_len)
{
    key->family = (uint8_t)family;
    key->prefix_len = (uint8_t)prefix_len;
    key->zero = 0;
    if (family == AF_INET) {
        memcpy(&key->words[0], address, sizeof key->words[0]);
        key->words[0] &= prefix_mask(prefix_len);
        return offsetof(struct address_key, words) + sizeof key->words[0];
    }
    memcpy(key->words, address, sizeof key->words);
    for (int i = 0; i < 4; i++)
        key->words[i] &= prefix_mask(prefix_len - 32 * i);
    return sizeof *key;
}

static struct address_entry *address_entry_get(struct address_entry **table,
                                               const struct address_key *key,
                                               size_t key_length)
{
    struct address_entry *entry;
    HASH_FIND(hh, *table, key, key_length, entry);
    if (entry)
        return entry;
    entry = calloc(1, sizeof *entry);
    if (!entry)
        return NULL;
    memcpy(&entry->key, key, key_length);
    HASH_ADD(hh, *table, key, key_length, entry);
    return entry;
}

static struct name_entry *name_entry_get(struct name_entry **table, const char *name)
{
    struct name_entry *entry;
    HASH_FIND_STR(*table, name, entry);
    if (entry)
        return entry;
    entry = calloc(1, sizeof *entry);
    if (!entry || !(entry->name = strdup(name))) {
        free(entry);
        return NULL;
    }
    HASH_ADD_KEYPTR(hh, *table, entry->name, strlen(entry->name), entry);
    return entry;
}

ALWAYS_INLINE int bit_is_set(const uint64_t *bits, unsigned n)
{
    return (bits[n / 64] >> (n % 64)) & 1;
}

/* Fibonacci hashing of the masked address, from the address words as
 * they are, with no key built: its top 16 bits are the filter's slot, its
 * top slot_bits the entry's first probe. */
ALWAYS_INLINE uint64_t filter_hash(const struct prefix_filter *filter, int family,
                                   const uint32_t *words)
{
    const uint64_t golden = 0x9e3779b97f4a7c15ull;
    uint64_t mixed = words[0] & filter->mask[0];
    if (family == AF_INET6)
        for (int i = 1; i < 4; i++)
            mixed = (mixed * golden) ^ (words[i] & filter->mask[i]);
    return mixed * golden;
}

ALWAYS_INLINE unsigned filter_slot(const struct prefix_filter *filter, int family,
                                   const uint32_t *words)
{
    return (unsigned)(filter_hash(filter, family, words) >> 48);
}

static int note_prefix(struct family_prefixes *prefixes, const struct address_key *key)
{
    struct prefix_filter *filter = NULL;
    for (int i = 0; i < prefixes->count && !filter; i++)
        if (prefixes->filters[i].length == key->prefix_len)
            filter = &prefixes->filters[i];
    if (!filter) {
        filter = &prefixes->filters[prefixes->count];
        filter->bits = calloc(65536 / 64, sizeof *filter->bits);
        if (!filter->bits)
            return -1;
        filter->length = key->prefix_len;
        for (int i = 0; i < 4; i++)
            filter->mask[i] = prefix_mask(key->prefix_len - 32 * i);
        prefixes->count++;
    }
    unsigned slot = filter_slot(filter, key->family, key->words);
    filter->bits[slot / 64] |= (uint64_t)1 << (slot % 64);
    filter->rules++;
    long number = filter - prefixes->filters;
    if (number < 64) {
        unsigned first = ((const uint8_t *)key->words)[0];
        unsigned span = key->prefix_len >= 8 ? 1 : 1u << (8 - key->prefix_len);
        for (unsigned byte = first; byte < first + span; byte++)
            prefixes->by_first_byte[byte] |= (uint64_t)1 << number;
    }
    return 0;
}

/* A word at a time: a rule for port * costs 1,024 stores, not 65,536. */
static void mark_ports(uint64_t *port_map, const struct port_range *range)
{
    unsigned first_word = range->lo / 64, last_word = range->hi / 64;
    for (unsigned word = first_word; word <= last_word; word++) {
        unsigned first = word == first_word ? range->lo % 64 : 0;
        unsigned last = word == last_word ? range->hi % 64 : 63;
        port_map[word] |= (~(uint64_t)0 >> (63 - last)) & (~(uint64_t)0 << first);
    }
}

static int index_rule(struct bh_rule_index *index, const struct bh_rule *rule, int number)
{
    index->ports[number] = (struct port_range){ rule->port_lo, rule->port_hi };
    mark_ports(index->port_map, &index->ports[number]);
    if (rule->kind != BH_RULE_ADDRESS) {
        struct name_entry **table = rule->kind == BH_RULE_HOSTNAME
                                        ? &index->exact_names : &index->suffixes;
        struct name_entry *entry = name_entry_get(table, rule->hostname);
        return entry ? list_append(&entry->list, number) : -1;
    }
    struct address_key key;
    size_t key_length = make_key(&key, rule->family, rule->address, rule->prefix_len);
    if (note_prefix(rule->family == AF_INET ? &index->v4 : &index->v6, &key) < 0)
        return -1;
    struct address_entry *entry = address_entry_get(&index->by_prefix, &key, key_length);
    return entry ? list_append(&entry->list, number) : -1;
}

static struct prefix_filter *filter_of(struct bh_rule_index *index,
                                       const struct address_key *key)
{
    struct family_prefixes *prefixes = key->family == AF_INET ? &index->v4 : &index->v6;
    for (int i = 0; i < prefixes->count; i++)
        if (prefixes->filters[i].length == key->prefix_len)
            return &prefixes->filters[i];
    return NULL;
}

/* Each filter's slots, once every address rule is in the hash. */
static int fill_slots(struct bh_rule_index *index)
{
    struct family_prefixes *families[2] = { &index->v4, &index->v6 };
    for (int f = 0; f < 2; f++) {
        for (int i = 0; i < families[f]->count; i++) {
            struct prefix_filter *filter = &families[f]->filters[i];
            filter->slot_bits = 1;
            while ((1u << filter->slot_bits) < 2 * filter->rules)
                filter->slot_bits++;
            filter->slots = calloc(1u << filter->slot_bits, sizeof *filter->slots);
            if (!filter->slots)
                return -1;
        }
    }
    struct address_entry *entry, *next;
    HASH_ITER(hh, index->by_prefix, entry, next) {
        struct prefix_filter *filter = filter_of(index, &entry->key);
        unsigned mask = (1u << filter->slot_bits) - 1;
        unsigned slot = (unsigned)(filter_hash(filter, entry->key.family, entry->key.words) >>
                                   (64 - filter->slot_bits));
        while (filter->slots[slot])
            slot = (slot + 1) & mask;
        filter->slots[slot] = entry;
    }
    return 0;
}

struct bh_rule_index *bh_rule_index_build(const struct bh_config *config)
{
    struct bh_rule_index *index = calloc(1, sizeof *index);
    if (!index)
        return NULL;
    index->ports = calloc(config->rule_count ? config->rule_count : 1,
                          sizeof *index->ports);
    pthread_rwlock_init(&index->resolved_lock, NULL);
    if (!index->ports) {
        bh_rule_index_free(index);
        return NULL;
    }
    for (int i = 0; i < config->rule_count; i++) {
        if (index_rule(index, &config->rules[i], i) < 0) {
            bh_rule_index_free(index);
            return NULL;
        }
    }
    if (fill_slots(index) < 0) {
        bh_rule_index_free(index);
        return NULL;
    }
    index->cache_on = !index->exact_names && !index->suffixes &&
                      config->rule_count <= CACHE_MAX_RULES;
    return index;
}

static void free_address_table(struct address_entry **table)
{
    struct address_entry *entry, *next;
    HASH_ITER(hh, *table, entry, next) {
        HASH_DEL(*table, entry);
        free(entry->list.rules);
        free(entry);
    }
}

static void free_name_table(struct name_entry **table)
{
    struct name_entry *entry, *next;
    HASH_ITER(hh, *table, entry, next) {
        HASH_DEL(*table, entry);
        free(entry->list.rules);
        free(entry->name);
        free(entry);
    }
}

void bh_rule_index_free(struct bh_rule_index *index)
{
    if (!index)
        return;
    free_address_table(&index->by_prefix);
    free_address_table(&index->resolved);
    free_name_table(&index->exact_names);
    free_name_table(&index->suffixes);
    pthread_rwlock_destroy(&index->resolved_lock);
    for (int i = 0; i < index->v4.count; i++) {
        free(index->v4.filters[i].bits);
        free(index->v4.filters[i].slots);
    }
    for (int i = 0; i < index->v6.count; i++) {
        free(index->v6.filters[i].bits);
        free(index->v6.filters[i].slots);
    }
    free(index->ports);
    free(index);
}

/* The first rule of the list whose ports cover `port`; the lists are in
 * file order, so that is the list's best. */
static int first_fitting(const struct bh_rule_index *index,
                         const struct rule_list *list, unsigned port)
{
    for (int i = 0; i < list->count; i++) {
        const struct port_range *range = &index->ports[list->rules[i]];
        if (port >= range->lo && port <= range->hi)
            return list->rules[i];
    }
    return -1;
}

static int better(int best, int candidate)
{
    return candidate >= 0 && (best < 0 || candidate < best) ? candidate : best;
}

static int match_resolved(struct bh_rule_index *index, int family,
                          const uint8_t *address, unsigned port)
{
    struct address_key key;
    size_t key_length = make_key(&key, family, address, family == AF_INET ? 32 : 128);
    int best = -1;
    pthread_rwlock_rdlock(&index->resolved_lock);
    struct address_entry *entry;
    HASH_FIND(hh, index->resolved, &key, key_length, entry);
    if (entry)
        best = first_fitting(index, &entry->list, port);
    pthread_rwlock_unlock(&index->resolved_lock);
    return best;
}

/* Whether a stored key (masked words) is the address under the mask. */
ALWAYS_INLINE int same_prefix(const struct prefix_filter *filter, int family,
                              const uint32_t *stored, const uint32_t *words)
{
    if (family == AF_INET)
        return stored[0] == (words[0] & filter->mask[0]);
    for (int i = 0; i < 4; i++)
        if (stored[i] != (words[i] & filter->mask[i]))
            return 0;
    return 1;
}

/* The best rule stored under filter i's length for this address, or -1:
 * the filter's bit first, the slots only when it is set. Specialised per
 * family at each call, so the v4 path is a few instructions per prefix
 * length. */
ALWAYS_INLINE int match_length(const struct bh_rule_index *index,
                               const struct family_prefixes *prefixes, int i,
                               int family, const uint32_t *words, unsigned port)
{
    const struct prefix_filter *filter = &prefixes->filters[i];
    uint64_t hash = filter_hash(filter, family, words);
    if (!bit_is_set(filter->bits, (unsigned)(hash >> 48)))
        return -1;
    unsigned mask = (1u << filter->slot_bits) - 1;
    for (unsigned slot = (unsigned)(hash >> (64 - filter->slot_bits));;
         slot = (slot + 1) & mask) {
        const struct address_entry *entry = filter->slots[slot];
        if (!entry)
            return -1;
        if (same_prefix(filter, family, entry->key.words, words))
            return first_fitting(index, &entry->list, port);
    }
}

ALWAYS_INLINE int match_family(const struct bh_rule_index *index, int family,
                               const uint8_t *address, const uint32_t *words,
                               unsigned port)
{
    const struct family_prefixes *prefixes = family == AF_INET ? &index->v4 : &index->v6;
    int best = -1;
    for (uint64_t lengths = prefixes->by_first_byte[address[0]]; lengths;
         lengths &= lengths - 1)
        best = better(best, match_length(index, prefixes, __builtin_ctzll(lengths),
                                         family, words, port));
    for (int i = 64; family == AF_INET6 && i < prefixes->count; i++)  /* over 64 lengths */
        best = better(best, match_length(index, prefixes, i, family, words, port));
    return best;
}

ALWAYS_INLINE int match_address(const struct bh_rule_index *index, int family,
                                const uint8_t *address, const uint32_t *words,
                                unsigned port)
{
    int best = match_family(index, family, address, words, port);
    if (atomic_load_explicit(&index->resolved_count, memory_order_acquire) > 0)
        best = better(best, match_resolved((struct bh_rule_index *)index, family,
                                           address, port));
    return best;
}

/* Out of line, so the port-map test before them stays a leaf's few
 * instructions; one per family, so that IPv4's is the short loop it can
 * be (at most 33 lengths, one word). */
__attribute__((noinline))
static int match_v4(const struct bh_rule_index *index, const uint8_t *address,
                    unsigned port)
{
    uint32_t word;
    memcpy(&word, address, sizeof word);
    return match_address(index, AF_INET, address, &word, port);
}

/* A destination not in its cache slot: matched, and kept there. Out of
 * line, so that a hit is a leaf's instructions, with no frame. */
__attribute__((noinline))
static int match_v4_into(const struct bh_rule_index *index, const uint8_t *address,
                         unsigned port, _Atomic uint64_t *slot, uint64_t key)
{
    int rule = match_v4(index, address, port);
    atomic_store_explicit(slot, key | (uint64_t)(rule + 2), memory_order_relaxed);
    return rule;
}

/* match_v4 through the cache: a destination seen last time in its slot
 * costs a multiply, a load and a compare. */
ALWAYS_INLINE int match_v4_cached(struct bh_rule_index *index, const uint8_t *address,
                                  unsigned port)
{
    uint32_t word;
    memcpy(&word, address, sizeof word);
    uint64_t key = ((uint64_t)word << 32) | ((uint64_t)port << 16);
    _Atomic uint64_t *slot =
        &index->cache[(key * 0x9e3779b97f4a7c15ull) >> (64 - CACHE_BITS)];
    uint64_t seen = atomic_load_explicit(slot, memory_order_relaxed);
    if ((seen & ~(uint64_t)0xffff) == key && (seen & 0xffff))
        return (int)(seen & 0xffff) - 2;
    return match_v4_into(index, address, port, slot, key);
}

__attribute__((noinline))
static int match_v6(const struct bh_rule_index *index, const uint8_t *address,
                    unsigned port)
{
    uint32_t words[4];
    memcpy(words, address, sizeof words);
    return match_address(index, AF_INET6, address, words, port);
}

BH_INLINED_ACROSS int bh_rule_index_match(const struct bh_rule_index *index,
                                          const struct sockaddr *address, socklen_t length)
{
    unsigned port;
    const uint8_t *bytes;
    int family = address->sa_family;
    if (family == AF_INET && length >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)address;
        port = ntohs(v4->sin_port);
        bytes = (const uint8_t *)&v4->sin_addr;
    } else if (family == AF_INET6 && length >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)address;
        port = ntohs(v6->sin6_port);
        bytes = (const uint8_t *)&v6->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
            family = AF_INET;   /* ::ffff:a.b.c.d is a v4 destination */
            bytes += 12;
        }
    } else {
        return -1;
    }
    if (!bit_is_set(index->port_map, port))
        return -1;
    if (family != AF_INET)
        return match_v6(index, bytes, port);
    return index->cache_on ? match_v4_cached((struct bh_rule_index *)index, bytes, port)
                           : match_v4(index, bytes, port);
}

/* Lower case, no trailing dot: the form the config stores names in. */
static int normalise_name(const char *name, char *out, size_t outlen)
{
    size_t length = strlen(name);
    if (length > 0 && name[length - 1] == '.')
        length--;
    if (length == 0 || length >= outlen)
        return -1;
    for (size_t i = 0; i < length; i++)
        out[i] = (char)tolower((unsigned char)name[i]);
    out[length] = '\0';
    return 0;
}

/* Calls visit for every rule list the name falls under: its exact entry
 * and each ".suffix" it ends with. */
static int for_each_name_list(const struct bh_rule_index *index, const char *name,
                              int (*visit)(const struct rule_list *, void *),
                              void *ctx)
{
    char normal[256];
    if (normalise_name(name, normal, sizeof normal) < 0)
        return 0;
    struct name_entry *entry;
    HASH_FIND_STR(index->exact_names, normal, entry);
    if (entry && visit(&entry->list, ctx))
        return 1;
    if (!index->suffixes)
        return 0;
    for (const char *dot = strchr(normal + 1, '.'); dot; dot = strchr(dot + 1, '.')) {
        HASH_FIND_STR(index->suffixes, dot, entry);
        if (entry && visit(&entry->list, ctx))
            return 1;
    }
    return 0;
}

static int stop_at_first(const struct rule_list *list, void *ctx)
{
    (void)list;
    (void)ctx;
    return 1;
}

int bh_rule_index_wants_name(const struct bh_rule_index *index, const char *name)
{
    if (!index->exact_names && !index->suffixes)
        return 0;
    return for_each_name_list(index, name, stop_at_first, NULL);
}

static int merge_into(const struct rule_list *list, void *ctx)
{
    struct rule_list *target = ctx;
    for (int i = 0; i < list->count; i++)
        if (list_append(target, list->rules[i]) < 0)
            return 1;
    return 0;
}

void bh_rule_index_note_name(struct bh_rule_index *index, const char *name,
                             int family, const void *address)
{
    static const uint8_t v4_mapped_prefix[12] = { [10] = 0xff, [11] = 0xff };
    if (family == AF_INET6 && memcmp(address, v4_mapped_prefix, 12) == 0) {
        family = AF_INET;  /* AI_V4MAPPED answers: matched as v4, like connects */
        address = (const uint8_t *)address + 12;
    }
    struct address_key key;
    size_t key_length = make_key(&key, family, address, family == AF_INET ? 32 : 128);
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_rwlock_wrlock(&index->resolved_lock);
    struct address_entry *entry = address_entry_get(&index->resolved, &key, key_length);
    if (entry) {
        for_each_name_list(index, name, merge_into, &entry->list);
        atomic_store_explicit(&index->resolved_count, HASH_COUNT(index->resolved),
                              memory_order_release);
    }
    pthread_rwlock_unlock(&index->resolved_lock);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
}

void bh_rule_index_after_fork(struct bh_rule_index *index)
{
    pthread_rwlock_init(&index->resolved_lock, NULL);
}
