/* Which compartment a destination falls into.
 *
 * Built once from the config; read on every connect(), so matching must be
 * cheap whatever the number of rules. Hostname rules match the addresses the
 * process itself resolved for a matching name (see bh_rule_index_note_name). */
#ifndef BH_RULE_INDEX_H
#define BH_RULE_INDEX_H

#include <sys/socket.h>

#include "config/config.h"

struct bh_rule_index;

/* NULL when out of memory. */
struct bh_rule_index *bh_rule_index_build(const struct bh_config *config);
void bh_rule_index_free(struct bh_rule_index *index);

/* The first rule, in file order, that matches an AF_INET/AF_INET6 address
 * (v4-mapped v6 counts as v4); -1 when none does. `length` must be at
 * least sizeof(sa_family_t): the family is read first. Async-signal-safe only
 * in the sense that it takes no lock a resolver hook could hold. */
int bh_rule_index_match(const struct bh_rule_index *index,
                        const struct sockaddr *address, socklen_t length);

/* Nonzero when some hostname rule could match this name: only then are its
 * addresses worth remembering. Lock-free. */
int bh_rule_index_wants_name(const struct bh_rule_index *index, const char *name);

/* Remembers that `name` resolved to `address` (family AF_INET or AF_INET6,
 * address bytes in network order). Thread-safe. */
void bh_rule_index_note_name(struct bh_rule_index *index, const char *name,
                             int family, const void *address);

/* In a forked child: the resolver lock may have been held by a thread that
 * does not exist here. */
void bh_rule_index_after_fork(struct bh_rule_index *index);

#endif
