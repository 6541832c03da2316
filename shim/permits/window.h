/* What sizing a limit needs, over the last minute: per compartment, a ring
 * of 1 s slots (admitted, refused, timed out, permit time) and rings of 8 s
 * slots of log-linear histograms (hold time, turnaround). The layout lives
 * in the namespace's memory (permits.h puts one per compartment in
 * bh_shared_state); what the fields mean, who writes them and what a death
 * costs is at the top of window.c, the only code that writes them. Readers
 * (stat, suggest, the agent's /metrics) use bh_window_read and the view. */
#ifndef BH_WINDOW_H
#define BH_WINDOW_H

#include <stdatomic.h>
#include <stdint.h>

enum {
    BH_WINDOW_SECONDS = 60,     /* the longest window a reader may ask for */
    BH_WINDOW_SLOTS = 64,       /* 1 s slots: 60 s, the current one, spare */
    BH_WINDOW_PERIOD_S = 8,     /* a histogram slot's length (a shift) */
    BH_WINDOW_PERIODS = 8,      /* 64 s of them, the current one included */
    /* Log-linear buckets of microseconds: below 16 one per us, then 8 per
     * power of two up to 2^27 us (134 s); the last holds everything
     * longer. A bucket is at most 1/8 of its lower bound wide, so its
     * midpoint is within 6.25% of any value in it. */
    BH_LOGHIST_SUB_BITS = 3,
    BH_LOGHIST_BUCKETS = 200,
};

/* Events counted per second (admissions through bh_window_hold). */
enum bh_window_event {
    BH_WINDOW_ADMITTED, BH_WINDOW_REFUSED, BH_WINDOW_TIMED_OUT,
    BH_WINDOW_TURNAROUNDS,        /* exchanges on turnaround connections,
                                     timed or not (outcome.c samples them) */
    BH_WINDOW_EVENTS
};

/* One second. tag: the second + 1 it counts (CLOCK_MONOTONIC), -(second
 * + 1) while a recorder clears it for that second, 0 never used. */
struct bh_window_second {
    _Atomic int64_t tag;
    _Atomic uint32_t events[BH_WINDOW_EVENTS];
    _Atomic uint32_t first_us;    /* the earliest figure, us into the second:
                                     where a window's first second starts */
    uint32_t unused;
    _Atomic uint64_t permit_us;   /* permits x microseconds held in it */
};

/* One 8 s period of a histogram, tagged like a second. */
struct bh_window_period {
    _Atomic int64_t tag;
    _Atomic uint32_t counts[BH_LOGHIST_BUCKETS];
};

/* Turnaround, cumulative since the namespace was made (or reset), in the
 * 16 fixed buckets of permits.h's histograms, for Prometheus. */
struct bh_window_fixed {
    _Atomic int64_t sum_ns;
    _Atomic uint64_t buckets[17];
};

struct bh_window_shared {
    struct bh_window_second seconds[BH_WINDOW_SLOTS];
    struct bh_window_period hold[BH_WINDOW_PERIODS];
    struct bh_window_period turnaround[BH_WINDOW_PERIODS];
    _Atomic int64_t last_ns;            /* CLOCK_MONOTONIC of the latest figure:
                                           where a window ends */
    _Atomic uint64_t permit_us_total;   /* every hold ever ended: a counter */
    struct bh_window_fixed turnaround_total;
};

/* Recording: atomics only, async-signal-safe, no syscall. now_ns and
 * since_ns are CLOCK_MONOTONIC. */
void bh_window_count(struct bh_window_shared *window, enum bh_window_event event,
                     int64_t now_ns);
void bh_window_count_many(struct bh_window_shared *window, enum bh_window_event event,
                          uint32_t count, int64_t now_ns);
/* A hold of `weight` permits from since_ns to now_ns ended: its time in
 * the histogram, weight x its length spread over the seconds it covered
 * (those still in the ring), and its admission in the second it began:
 * the connect path pays nothing, and a connection counts once it ends. */
void bh_window_hold(struct bh_window_shared *window, int weight, int64_t since_ns,
                    int64_t now_ns);
/* A timed send's first answer came back elapsed_ns after it: the
 * histograms only (its exchange is counted with bh_window_count_many). */
void bh_window_turnaround(struct bh_window_shared *window, int64_t elapsed_ns,
                          int64_t now_ns);
/* Forgets everything (bulkhead reset NAME). */
void bh_window_clear(struct bh_window_shared *window);

/* What a reader gets: sums over the window, which starts `seconds` ago
 * (at most BH_WINDOW_SECONDS) or at the first figure in it if that is
 * later, and ends at the last figure, so that time before and after the
 * traffic divides nothing. Histograms are read in whole 8 s periods, so
 * they may reach up to 8 s further back. */
struct bh_window_view {
    int64_t window_ns;            /* its length; 0: nothing in it */
    uint64_t events[BH_WINDOW_EVENTS];
    uint64_t permit_us;           /* integral of permits in use, in permit-us */
    uint64_t hold[BH_LOGHIST_BUCKETS];       /* holds ended, by bucket */
    uint64_t turnaround[BH_LOGHIST_BUCKETS];
    uint64_t hold_count, turnaround_count;
    uint64_t permit_us_total;     /* cumulative, not windowed */
    struct {
        uint64_t buckets[17];
        uint64_t count;
        int64_t sum_ns;
    } turnaround_total;           /* cumulative, the 16 fixed buckets */
};
void bh_window_read(struct bh_window_shared *window, int seconds, int64_t now_ns,
                    struct bh_window_view *view);

/* The log-linear buckets: the bucket of a value, and a bucket's lower
 * bound and width in microseconds. */
int bh_loghist_bucket(uint64_t us);
uint64_t bh_loghist_lower_us(int bucket);
uint64_t bh_loghist_width_us(int bucket);
/* The q-quantile (0 < q <= 1) of count samples in counts[], as the
 * midpoint of its bucket, in microseconds; 0 when count is 0. */
double bh_loghist_quantile_us(const uint64_t counts[BH_LOGHIST_BUCKETS],
                              uint64_t count, double q);

#endif
