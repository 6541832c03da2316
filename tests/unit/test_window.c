/* The windowed figures (permits/window.c) on a window of the tests' own,
 * with the clock given by the tests: the log-linear histogram's quantiles
 * within 10% over 10 us to 60 s, slots expiring, sums over a window, where
 * a window starts, permit time spread over the seconds a hold covered and
 * its admission counted in the second it began, a
 * slot left mid-clear by a dead recorder, and threads turning slots over
 * together. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "permits/window.h"

static const int64_t S = 1000000000, MS = 1000000, US = 1000;

/* Far from the clock's origin, like a machine that has been up a while. */
static const int64_t T0 = (int64_t)86400 * 5 * S;

static struct bh_window_shared *window;
static struct bh_window_view view;

static int set_up(void **state)
{
    (void)state;
    window = calloc(1, sizeof *window);
    return window ? 0 : -1;
}

static int tear_down(void **state)
{
    (void)state;
    free(window);
    return 0;
}

/* The q-quantile of n sorted values, as the histogram's rank picks it. */
static double exact_quantile(const uint64_t *sorted, int n, double q)
{
    int rank = (int)ceil(q * n);
    return (double)sorted[(rank < 1 ? 1 : rank) - 1];
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void test_buckets_tile_the_range(void **state)
{
    (void)state;
    for (int b = 0; b + 1 < BH_LOGHIST_BUCKETS; b++) {
        assert_int_equal(bh_loghist_lower_us(b) + bh_loghist_width_us(b),
                         bh_loghist_lower_us(b + 1));
        assert_int_equal(bh_loghist_bucket(bh_loghist_lower_us(b)), b);
        assert_int_equal(bh_loghist_bucket(bh_loghist_lower_us(b + 1) - 1), b);
        /* never wider than an eighth of its lower bound, past the linear part */
        if (bh_loghist_lower_us(b) >= 16)
            assert_true(bh_loghist_width_us(b) * 8 <= bh_loghist_lower_us(b));
    }
    assert_int_equal(bh_loghist_bucket(UINT64_MAX), BH_LOGHIST_BUCKETS - 1);
    assert_true(bh_loghist_lower_us(BH_LOGHIST_BUCKETS - 1) > 120ull * 1000000);
}

/* Every single value from 10 us to 60 s comes back within 10% as any
 * quantile of itself. */
static void test_one_value_within_ten_percent(void **state)
{
    (void)state;
    for (double us = 10; us <= 60e6; us *= 1.013) {
        uint64_t counts[BH_LOGHIST_BUCKETS] = { 0 };
        counts[bh_loghist_bucket((uint64_t)us)] = 1;
        double got = bh_loghist_quantile_us(counts, 1, 0.5);
        assert_true(fabs(got - (uint64_t)us) <= 0.10 * (uint64_t)us);
    }
}

/* p50, p90 and p99 of spread-out samples (log-uniform over three decades,
 * at several places in the range) within 10% of the exact ones. */
static void test_quantiles_within_ten_percent(void **state)
{
    (void)state;
    enum { N = 5000 };
    static uint64_t values[N];
    srand(7);
    for (double low = 10; low <= 60e3; low *= 10) {
        uint64_t counts[BH_LOGHIST_BUCKETS] = { 0 };
        for (int i = 0; i < N; i++) {
            values[i] = (uint64_t)(low * pow(1000, (double)rand() / RAND_MAX));
            counts[bh_loghist_bucket(values[i])]++;
        }
        qsort(values, N, sizeof values[0], by_value);
        const double qs[] = { 0.5, 0.9, 0.99 };
        for (int k = 0; k < 3; k++) {
            double exact = exact_quantile(values, N, qs[k]);
            double got = bh_loghist_quantile_us(counts, N, qs[k]);
            assert_true(fabs(got - exact) <= 0.10 * exact);
        }
    }
    uint64_t none[BH_LOGHIST_BUCKETS] = { 0 };
    assert_true(bh_loghist_quantile_us(none, 0, 0.99) == 0);
}

static void test_slots_expire_after_the_window(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++)
        bh_window_count(window, BH_WINDOW_ADMITTED, T0 + 100 * MS);
    bh_window_count(window, BH_WINDOW_REFUSED, T0 + 200 * MS);
    bh_window_read(window, 60, T0 + 30 * S, &view);
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], 5);
    assert_int_equal(view.events[BH_WINDOW_REFUSED], 1);
    bh_window_read(window, 60, T0 + 61 * S, &view);
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], 0);
    assert_int_equal(view.window_ns, 0);  /* nothing ran in it */
    /* the slot's next turn, 64 s on, clears it before counting */
    bh_window_count(window, BH_WINDOW_ADMITTED, T0 + 64 * S + 5 * MS);
    bh_window_read(window, 60, T0 + 65 * S, &view);
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], 1);
    assert_int_equal(view.events[BH_WINDOW_REFUSED], 0);
}

/* Sums over the asked window only; the window starts at the first figure
 * in it and ends at the last, never before or after. */
static void test_sums_over_a_window_from_the_first_figure(void **state)
{
    (void)state;
    for (int second = 0; second < 40; second++)
        for (int i = 0; i <= second % 3; i++)
            bh_window_count(window, BH_WINDOW_ADMITTED, T0 + second * S + 250 * MS);
    bh_window_read(window, 10, T0 + 40 * S, &view);
    uint64_t expected = 0;
    for (int second = 30; second < 40; second++)
        expected += second % 3 + 1;
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], expected);
    assert_int_equal(view.window_ns, 9 * S);   /* from 30.25 s to the last, 39.25 s */
    bh_window_read(window, 60, T0 + 40 * S, &view);
    assert_int_equal(view.window_ns, 39 * S);  /* traffic began at 0.25 s */
    bh_window_read(window, 60, T0 + 250 * MS + 10 * MS, &view);
    assert_int_equal(view.window_ns, S);                   /* at least a second */
}

static void test_permit_time_spread_over_the_seconds_held(void **state)
{
    (void)state;
    /* 2 permits from 100.5 s to 103.25 s: 5.5 permit-seconds */
    bh_window_hold(window, 2, T0 + 100 * S + 500 * MS, T0 + 103 * S + 250 * MS);
    bh_window_read(window, 60, T0 + 104 * S, &view);
    assert_int_equal(view.permit_us, 5500000);
    assert_int_equal(view.hold_count, 1);
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], 1);
    assert_int_equal(view.window_ns, 2 * S + 750 * MS);   /* the hold's start to its end */
    bh_window_read(window, 2, T0 + 104 * S, &view);      /* 102..104: 1.25 s of it */
    assert_int_equal(view.permit_us, 2500000);
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], 0); /* admitted at 100.5 */
    assert_int_equal(view.permit_us_total, 5500000);
    /* ten minutes held: only the seconds still in the ring, all of each */
    bh_window_clear(window);
    bh_window_hold(window, 1, T0 + 1000 * S, T0 + 1600 * S);
    bh_window_read(window, 60, T0 + 1600 * S, &view);
    assert_int_equal(view.permit_us, 60000000);
    assert_int_equal(view.window_ns, 60 * S);
    assert_int_equal(view.permit_us_total, 600000000);
}

/* Two permits held for 1.2 s from T0, a refusal 100 ms after they were
 * taken: the window starts when they were taken, not at the refusal, so
 * that in use never averages more than the permits there were. */
static void test_a_window_starts_no_later_than_what_it_sums(void **state)
{
    (void)state;
    bh_window_count(window, BH_WINDOW_REFUSED, T0 + 200 * S + 100 * MS);
    bh_window_hold(window, 1, T0 + 200 * S, T0 + 201 * S + 200 * MS);
    bh_window_hold(window, 1, T0 + 200 * S + 1 * MS, T0 + 201 * S + 201 * MS);
    bh_window_read(window, 60, T0 + 202 * S, &view);
    assert_int_equal(view.permit_us, 2400000);
    assert_int_equal(view.window_ns, 1201 * MS);
}

static void test_windowed_histograms(void **state)
{
    (void)state;
    for (int i = 0; i < 99; i++)
        bh_window_hold(window, 1, T0 + 10 * S, T0 + 10 * S + 105 * MS);
    bh_window_hold(window, 1, T0 + 10 * S, T0 + 12 * S);
    bh_window_turnaround(window, 20 * MS, T0 + 12 * S);
    bh_window_count_many(window, BH_WINDOW_TURNAROUNDS, 16, T0 + 12 * S);
    bh_window_read(window, 60, T0 + 13 * S, &view);
    assert_int_equal(view.hold_count, 100);
    double p50 = bh_loghist_quantile_us(view.hold, view.hold_count, 0.5);
    assert_true(fabs(p50 - 105000) <= 0.0625 * 105000);  /* the old buckets said 100 to 250 ms */
    double p99 = bh_loghist_quantile_us(view.hold, view.hold_count, 0.99);
    assert_true(fabs(p99 - 105000) <= 0.0625 * 105000);
    assert_int_equal(view.turnaround_count, 1);
    assert_int_equal(view.events[BH_WINDOW_TURNAROUNDS], 16);
    assert_int_equal(view.turnaround_total.count, 1);
    /* a minute later they are gone from the window, not from the totals */
    bh_window_read(window, 60, T0 + 80 * S, &view);
    assert_int_equal(view.hold_count, 0);
    assert_int_equal(view.turnaround_total.count, 1);
}

/* A recorder killed while clearing a slot leaves it marked: the rest of
 * that second is dropped, and the slot's next turn claims it. */
static void test_a_slot_left_mid_clear(void **state)
{
    (void)state;
    int64_t second = T0 / S + 7;
    struct bh_window_second *slot = &window->seconds[second % BH_WINDOW_SLOTS];
    atomic_store(&slot->tag, -(second + 1));
    atomic_store(&slot->events[BH_WINDOW_ADMITTED], 12345);  /* half cleared */
    bh_window_count(window, BH_WINDOW_ADMITTED, second * S + 10 * MS);
    bh_window_read(window, 60, second * S + 20 * MS, &view);
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], 0);
    bh_window_count(window, BH_WINDOW_ADMITTED, (second + BH_WINDOW_SLOTS) * S);
    bh_window_read(window, 60, (second + BH_WINDOW_SLOTS) * S + 5 * MS, &view);
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], 1);
}

/* Threads recording through the same seconds, all entering each new
 * second together (as processes do when the clock ticks) and racing to
 * turn its slot over: a slot never holds another second's figures (each
 * second s adds permit time in multiples of s + 1), nothing is counted
 * twice, and what a turnover race drops is little. */
enum { THREADS = 4, SECONDS = 200, PER_SECOND = 500 };
static pthread_barrier_t tick;

static void *record_through_seconds(void *arg)
{
    (void)arg;
    for (int64_t s = 0; s < SECONDS; s++) {
        pthread_barrier_wait(&tick);
        for (int i = 0; i < PER_SECOND; i++) {
            int64_t at = T0 + s * S + (int64_t)(i + 1) * US;
            bh_window_hold(window, (int)(s + 1), at - US, at);
        }
    }
    return NULL;
}

static void test_threads_turning_slots_over(void **state)
{
    (void)state;
    pthread_t threads[THREADS];
    pthread_barrier_init(&tick, NULL, THREADS);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, record_through_seconds, NULL), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&tick);
    uint64_t admitted = 0;
    for (int64_t s = SECONDS - 60; s < SECONDS; s++) {
        struct bh_window_second *slot = &window->seconds[(T0 / S + s) % BH_WINDOW_SLOTS];
        if (atomic_load(&slot->tag) != T0 / S + s + 1)
            continue;
        uint64_t events = atomic_load(&slot->events[BH_WINDOW_ADMITTED]);
        uint64_t permit_us = atomic_load(&slot->permit_us);
        assert_true(events <= THREADS * PER_SECOND);
        assert_int_equal(permit_us % (uint64_t)(s + 1), 0);
        assert_true(permit_us <= (uint64_t)(s + 1) * THREADS * PER_SECOND);
        admitted += events;
    }
    bh_window_read(window, 59, T0 + (SECONDS - 1) * S + S - 1, &view);
    assert_int_equal(view.events[BH_WINDOW_ADMITTED], admitted);
    assert_true(admitted >= 60 * THREADS * PER_SECOND * 9 / 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_tile_the_range),
        cmocka_unit_test(test_one_value_within_ten_percent),
        cmocka_unit_test(test_quantiles_within_ten_percent),
        cmocka_unit_test_setup_teardown(test_slots_expire_after_the_window, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_sums_over_a_window_from_the_first_figure,
                                        set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_permit_time_spread_over_the_seconds_held,
                                        set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_a_window_starts_no_later_than_what_it_sums,
                                        set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_windowed_histograms, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_a_slot_left_mid_clear, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_threads_turning_slots_over, set_up, tear_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
