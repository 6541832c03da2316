/* The destinations a namespace's processes connect to, recorded under
 * `[global] observe = yes` for `bulkhead discover`: a table of its own
 * shared memory segment, apart from the namespace's, so that processes
 * without observe attach nothing more. What is shared, who writes it and
 * what a death costs is at the top of destinations.c. */
#ifndef BH_DESTINATIONS_H
#define BH_DESTINATIONS_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

enum {
    BH_DESTINATIONS = 4096,        /* destinations per namespace */
    BH_DESTINATION_NAMES = 2,      /* host names kept per destination */
    BH_DESTINATION_NAME_MAX = 64,  /* with NUL; longer names are not kept */
};

struct bh_destinations;

/* Attaches uid's table for namespace `name`, made when create is set and
 * it is missing. NULL with errno when it cannot be had (another user's
 * segment under the key: EPERM). */
struct bh_destinations *bh_destinations_open(uid_t uid, const char *name, int create);
void bh_destinations_close(struct bh_destinations *table);
/* Removes uid's table of namespace `name` (reset); 1 when one was removed. */
int bh_destinations_remove(uid_t uid, const char *name);

/* The slot of an AF_INET or AF_INET6 address and port (network order),
 * claimed if new; -1 when the table is full (counted as dropped).
 * Async-signal-safe, as every call below. */
int bh_destination_slot(struct bh_destinations *table, const struct sockaddr *to);
/* A connect to it began; name (NULL: none known) is one it was reached by. */
void bh_destination_connect(struct bh_destinations *table, int slot, const char *name);
/* The connect was refused by a compartment, or failed. */
void bh_destination_refused(struct bh_destinations *table, int slot);
void bh_destination_failed(struct bh_destinations *table, int slot);
/* A connection to it is open (or connecting) from now; one open for
 * `held_ns` ended (negative: a connect that failed, no hold). */
void bh_destination_opened(struct bh_destinations *table, int slot);
void bh_destination_closed(struct bh_destinations *table, int slot, int64_t held_ns);

/* What `bulkhead discover` reads of one slot. */
struct bh_destination_view {
    int family;
    uint8_t address[16];
    uint16_t port;                 /* host order */
    char names[BH_DESTINATION_NAMES][BH_DESTINATION_NAME_MAX];
    uint64_t connects, refused, failed, holds;
    int64_t peak;
    double hold_p50_ms, hold_p99_ms;
};
/* Seconds since the table was made (CLOCK_REALTIME), what did not fit. */
double bh_destinations_window_s(const struct bh_destinations *table);
uint64_t bh_destinations_dropped(const struct bh_destinations *table);
/* Slot i's view: 0, or -1 when it holds no destination. */
int bh_destination_read(const struct bh_destinations *table, int slot,
                        struct bh_destination_view *view);

#endif
