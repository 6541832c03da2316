/* The adaptive controllers: tables of windows fed to the arithmetic
 * (controller.c), each row expecting a limit; gradient's re-measure of
 * the no-load latency over a simulated queueing downstream; and, over a
 * real namespace of its own, 8 processes closing windows at once, whose
 * result is read back from the semaphores: exactly one update per window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptive/adaptive.h"
#include "namespace_fixture.h"

enum { MS = 1000000 };
/* No re-measure due: the rows that test the gradient alone. */
#define NO_PROBE INT64_MAX

/* ---- the arithmetic ---- */

/* A downstream that serves `capacity` at once in `service_ms` each and
 * queues the rest inside itself: the mean latency at `in_flight`. */
static int64_t queueing_latency(int capacity, int service_ms, int in_flight)
{
    int64_t latency = (int64_t)service_ms * MS;
    return in_flight > capacity ? latency * in_flight / capacity : latency;
}

/* Closed-loop demand always above the limit: every window reaches it. */
static int converge(enum bh_adaptive_mode mode, int start, int capacity, int windows,
                    int latency_ms)
{
    struct bh_adaptive_settings settings = { mode, 1, 64, latency_ms };
    /* A learned baseline and no re-measure due: the gradient alone (the
     * re-measure has its table below). */
    struct bh_adaptive_state state = { (int64_t)start * 1000, 50 * MS, BH_PROBE_NONE, 0,
                                       NO_PROBE };
    for (int i = 0; i < windows; i++) {
        int limit = bh_adaptive_limit_of(&state);
        struct bh_adaptive_window window = {
            50, queueing_latency(capacity, 50, limit), 0, 1, limit, limit, 0,
        };
        bh_adaptive_step(&settings, &state, &window);
    }
    return bh_adaptive_limit_of(&state);
}

static const struct converges {
    const char *name;
    enum bh_adaptive_mode mode;
    int start, capacity, windows, latency_ms;
    int low, high;   /* where it must be: serving all it can, queueing little */
} converges[] = {
    { "gradient up from 2 to capacity 16", BH_ADAPTIVE_GRADIENT, 2, 16, 30, 0, 16, 24 },
    { "gradient down from 40 to capacity 4", BH_ADAPTIVE_GRADIENT, 40, 4, 30, 0, 4, 8 },
    { "gradient holds at capacity 8", BH_ADAPTIVE_GRADIENT, 8, 8, 60, 0, 8, 12 },
    { "gradient down from 16 to capacity 2", BH_ADAPTIVE_GRADIENT, 16, 2, 12, 0, 2, 4 },
    { "aimd up to latency 75 ms over capacity 8", BH_ADAPTIVE_AIMD, 2, 8, 60, 75, 8, 12 },
    { "aimd down to latency 75 ms over capacity 4", BH_ADAPTIVE_AIMD, 40, 4, 60, 75, 4, 7 },
};

static void test_converges(void **state)
{
    const struct converges *row = *state;
    int limit = converge(row->mode, row->start, row->capacity, row->windows,
                         row->latency_ms);
    if (limit < row->low || limit > row->high)
        fail_msg("%s: limit %d, expected %d to %d", row->name, limit, row->low, row->high);
}

/* A fixed window fed `windows` times from `start`. */
struct fixed {
    const char *name;
    enum bh_adaptive_mode mode;
    int min_limit, max_limit, latency_ms;
    int start, windows;
    struct bh_adaptive_window window;
    int64_t baseline_ns;
    int expected;
};

static const struct fixed fixed[] = {
    /* application-limited: in use never reached the limit; latency at the
     * baseline, no drops: it must not climb */
    { "gradient app-limited stays", BH_ADAPTIVE_GRADIENT, 1, 1000, 0, 10, 100,
      { 50, 50 * MS, 0, 0, 0, 0, 0 }, 50 * MS, 10 },
    { "aimd app-limited stays", BH_ADAPTIVE_AIMD, 1, 1000, 100, 10, 100,
      { 50, 50 * MS, 0, 0, 0, 0, 0 }, 50 * MS, 10 },
    /* ... but it may still come down */
    { "gradient app-limited comes down on latency", BH_ADAPTIVE_GRADIENT, 1, 1000, 0,
      10, 1, { 50, 200 * MS, 0, 0, 9, 10, 0 }, 50 * MS, 8 },
    /* ... unless in use stayed under half the limit: not our queue */
    { "gradient idle window holds on latency", BH_ADAPTIVE_GRADIENT, 1, 1000, 0,
      10, 100, { 50, 200 * MS, 0, 0, 4, 10, 0 }, 50 * MS, 10 },
    { "aimd idle window holds on latency", BH_ADAPTIVE_AIMD, 1, 1000, 100,
      10, 100, { 50, 200 * MS, 0, 0, 4, 10, 0 }, 50 * MS, 10 },
    { "aimd idle window still backs off on drops", BH_ADAPTIVE_AIMD, 1, 1000, 100,
      10, 1, { 50, 50 * MS, 2, 0, 4, 10, 0 }, 50 * MS, 9 },
    /* low traffic: too few samples change nothing, however bad they look */
    { "gradient low traffic holds", BH_ADAPTIVE_GRADIENT, 1, 1000, 0, 10, 100,
      { BH_ADAPTIVE_MIN_EVENTS - 1, 900 * MS, 0, 1, 0, 0, 0 }, 50 * MS, 10 },
    { "aimd low traffic holds on drops", BH_ADAPTIVE_AIMD, 1, 1000, 0, 10, 100,
      { 4, 50 * MS, BH_ADAPTIVE_MIN_EVENTS - 5, 1, 0, 0, 0 }, 50 * MS, 10 },
    /* drops: aimd x 0.9 a window (20, 18, 16.2, 14.58, 13.122, 11.81) */
    { "aimd backs off on drops", BH_ADAPTIVE_AIMD, 1, 1000, 0, 20, 5,
      { 50, 50 * MS, 1, 1, 0, 0, 0 }, 50 * MS, 11 },
    { "aimd backs off on drops alone (a dead downstream)", BH_ADAPTIVE_AIMD, 1, 1000, 0,
      20, 5, { 0, 0, 50, 1, 0, 0, 0 }, 0, 11 },
    { "gradient backs off on drops at its baseline", BH_ADAPTIVE_GRADIENT, 1, 1000, 0,
      64, 10, { 50, 50 * MS, 3, 1, 0, 0, 0 }, 50 * MS, 44 },
    { "aimd backs off on latency", BH_ADAPTIVE_AIMD, 1, 1000, 100, 20, 5,
      { 50, 150 * MS, 0, 1, 0, 0, 0 }, 50 * MS, 11 },
    { "aimd grows one a window", BH_ADAPTIVE_AIMD, 1, 1000, 100, 20, 5,
      { 50, 50 * MS, 0, 1, 0, 0, 0 }, 50 * MS, 25 },
    /* min and max */
    { "gradient stops at min_limit", BH_ADAPTIVE_GRADIENT, 3, 1000, 0, 100, 40,
      { 50, 1000 * MS, 0, 1, 100, 100, 0 }, 50 * MS, 3 },
    { "aimd stops at min_limit", BH_ADAPTIVE_AIMD, 3, 1000, 0, 100, 100,
      { 50, 50 * MS, 5, 1, 0, 0, 0 }, 50 * MS, 3 },
    { "gradient stops at max_limit", BH_ADAPTIVE_GRADIENT, 1, 30, 0, 10, 100,
      { 50, 50 * MS, 0, 1, 0, 0, 0 }, 50 * MS, 30 },
    { "aimd stops at max_limit", BH_ADAPTIVE_AIMD, 1, 30, 100, 10, 100,
      { 50, 50 * MS, 0, 1, 0, 0, 0 }, 50 * MS, 30 },
};

static void test_fixed(void **state)
{
    const struct fixed *row = *state;
    struct bh_adaptive_settings settings = {
        row->mode, row->min_limit, row->max_limit, row->latency_ms,
    };
    struct bh_adaptive_state controller = { (int64_t)row->start * 1000, row->baseline_ns,
                                            BH_PROBE_NONE, 0, NO_PROBE };
    for (int i = 0; i < row->windows; i++)
        bh_adaptive_step(&settings, &controller, &row->window);
    if (bh_adaptive_limit_of(&controller) != row->expected)
        fail_msg("%s: limit %d, expected %d", row->name, bh_adaptive_limit_of(&controller),
                 row->expected);
}

/* The baseline: down at once (a recovered downstream), up slowly within
 * the tolerance and not at all past it (a queue), and outright from a
 * slow window at the pin (the downstream's new normal). */
static void test_baseline(void **state)
{
    (void)state;
    struct bh_adaptive_settings settings = { BH_ADAPTIVE_GRADIENT, 2, 100, 0 };
    struct bh_adaptive_state controller = { 20 * 1000, 100 * MS, BH_PROBE_NONE, 0,
                                            NO_PROBE };
    struct bh_adaptive_window faster = { 50, 40 * MS, 0, 1, 20, 20, 0 };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &faster), BH_ADAPTIVE_GREW);
    assert_int_equal(controller.baseline_ns, 40 * MS);
    struct bh_adaptive_window noisy = { 50, 46 * MS, 0, 1, 21, 21, 0 };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &noisy), BH_ADAPTIVE_GREW);
    assert_int_equal(controller.baseline_ns, 40 * MS + 6 * MS / 256);  /* within 1.2 x */
    int64_t learned = controller.baseline_ns;
    struct bh_adaptive_window slower = { 50, 296 * MS, 0, 1, 22, 22, 0 };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &slower), BH_ADAPTIVE_LATENCY);
    assert_int_equal(controller.baseline_ns, learned);  /* queued: no creep */
    controller.estimate_milli = 2 * 1000;  /* at the pin */
    struct bh_adaptive_window dropping = { 50, 296 * MS, 1, 1, 2, 2, 0 };
    bh_adaptive_step(&settings, &controller, &dropping);
    assert_int_equal(controller.baseline_ns, learned);  /* drops: not a measure */
    controller.estimate_milli = 2 * 1000;
    struct bh_adaptive_window pinned = { 50, 296 * MS, 0, 1, 2, 2, 0 };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &pinned), BH_ADAPTIVE_GREW);
    assert_int_equal(controller.baseline_ns, 296 * MS);
    assert_int_equal(bh_adaptive_limit_of(&controller), 3);
    struct bh_adaptive_window few = { 3, 1 * MS, 0, 1, 0, 0, 0 };
    int64_t before = controller.baseline_ns;
    assert_int_equal(bh_adaptive_step(&settings, &controller, &few), BH_ADAPTIVE_LOW_TRAFFIC);
    assert_int_equal(controller.baseline_ns, before);
}

/* ---- the re-measure of the no-load latency (gradient) ---- */

enum { WINDOW_MS = 200, PIN = 2 };

/* A closed loop always above the limit, windows WINDOW_MS apart on a clock
 * from 0. A window's latency is the queue of the higher of its limit and
 * the one before: what a lowered limit let in is still queued as the next
 * window opens, which is why a re-measure drains one window first. */
struct remeasured { int limit, episodes, longest_pin; int64_t baseline_ns; };

static struct remeasured remeasure_run(int start, int64_t baseline_ns, int64_t probe_at_ns,
                                       int capacity, int service_ms, int windows)
{
    struct bh_adaptive_settings settings = { BH_ADAPTIVE_GRADIENT, 1, 64, 0 };
    struct bh_adaptive_state state = { (int64_t)start * 1000, baseline_ns, BH_PROBE_NONE,
                                       0, probe_at_ns };
    struct remeasured seen = { 0, 0, 0, 0 };
    int before = start, pinned_for = 0;
    for (int i = 0; i < windows; i++) {
        int limit = bh_adaptive_limit_of(&state);
        struct bh_adaptive_window window = {
            50, queueing_latency(capacity, service_ms, limit > before ? limit : before), 0, 1,
            limit, limit, (int64_t)(i + 1) * WINDOW_MS * MS,
        };
        before = limit;
        bh_adaptive_step(&settings, &state, &window);
        int pinned = state.probe != BH_PROBE_NONE;
        assert_true(!pinned || bh_adaptive_limit_of(&state) == PIN);
        seen.episodes += pinned && !pinned_for;
        pinned_for = pinned ? pinned_for + 1 : 0;
        if (pinned_for > seen.longest_pin)
            seen.longest_pin = pinned_for;
    }
    seen.limit = bh_adaptive_limit_of(&state);
    seen.baseline_ns = state.baseline_ns;
    return seen;
}

static const struct remeasures {
    const char *name;
    int start, baseline_ms, probe_at_ms, capacity, service_ms, windows;
    int low, high;                  /* the limit at the end */
    int fewest, most;               /* re-measures (windows at the pin, together) */
    int baseline_low_ms, baseline_high_ms;  /* it creeps up 1/256 of the way a window */
} remeasures[] = {
    { "gradient started 4x above capacity re-measures at once and comes down",
      32, 0, 0, 8, 25, 40, 8, 12, 1, 1, 25, 28 },
    { "gradient with a queued baseline comes down at the next re-measure",
      32, 100, 10000, 8, 25, 100, 8, 12, 1, 1, 25, 28 },
    { "gradient re-measures every 60 to 69 s and resumes near capacity",
      8, 25, 10000, 8, 25, 750, 8, 12, 2, 3, 25, 28 },
    { "gradient learns a 2 x slower downstream at the pin, before the re-measure",
      8, 25, 10000, 8, 50, 100, 8, 12, 0, 0, 50, 56 },
    { "gradient learns a 4 x slower downstream at the pin, before the re-measure",
      8, 25, 10000, 8, 100, 100, 8, 12, 0, 0, 100, 112 },
};

static void test_remeasures(void **state)
{
    const struct remeasures *row = *state;
    struct remeasured seen = remeasure_run(row->start, (int64_t)row->baseline_ms * MS,
                                           (int64_t)row->probe_at_ms * MS, row->capacity,
                                           row->service_ms, row->windows);
    if (seen.limit < row->low || seen.limit > row->high)
        fail_msg("%s: limit %d, expected %d to %d", row->name, seen.limit, row->low,
                 row->high);
    if (seen.episodes < row->fewest || seen.episodes > row->most)
        fail_msg("%s: %d re-measures, expected %d to %d", row->name, seen.episodes,
                 row->fewest, row->most);
    /* a drain and a measure, then back */
    if (seen.longest_pin > 2)
        fail_msg("%s: pinned for %d windows", row->name, seen.longest_pin);
    if (seen.baseline_ns < (int64_t)row->baseline_low_ms * MS ||
        seen.baseline_ns > (int64_t)row->baseline_high_ms * MS)
        fail_msg("%s: baseline %.1f ms, expected %d to %d", row->name,
                 (double)seen.baseline_ns / MS, row->baseline_low_ms, row->baseline_high_ms);
}

/* The re-measure's steps, one window at a time. */
static void test_remeasure_steps(void **state)
{
    (void)state;
    struct bh_adaptive_settings settings = { BH_ADAPTIVE_GRADIENT, 1, 64, 0 };
    struct bh_adaptive_state controller = { 32 * 1000, 25 * MS, BH_PROBE_NONE, 0, 0 };
    struct bh_adaptive_window queued = { 50, 100 * MS, 0, 1, 32, 32, 1000 * (int64_t)MS };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &queued),
                     BH_ADAPTIVE_REMEASURE);
    assert_int_equal(bh_adaptive_limit_of(&controller), PIN);
    /* The pin was not applied (its closer died): still draining. */
    assert_int_equal(bh_adaptive_step(&settings, &controller, &queued),
                     BH_ADAPTIVE_REMEASURE);
    assert_int_equal(controller.probe, BH_PROBE_DRAINING);
    struct bh_adaptive_window draining = { 50, 90 * MS, 0, 1, 2, 2, 1200 * (int64_t)MS };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &draining),
                     BH_ADAPTIVE_REMEASURE);
    assert_int_equal(controller.probe, BH_PROBE_MEASURING);
    struct bh_adaptive_window unloaded = { 50, 24 * MS, 0, 1, 2, 2, 1400 * (int64_t)MS };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &unloaded),
                     BH_ADAPTIVE_RESUMED);
    assert_int_equal(bh_adaptive_limit_of(&controller), 32);
    assert_int_equal(controller.baseline_ns, 24 * MS);
    assert_true(controller.probe_at_ns >= 61400 * (int64_t)MS &&
                controller.probe_at_ns < 70400 * (int64_t)MS);

    /* A drain window that still saw the old queue in use: one more. */
    controller = (struct bh_adaptive_state){ 2 * 1000, 25 * MS, BH_PROBE_DRAINING,
                                             32 * 1000, 0 };
    struct bh_adaptive_window deep = { 50, 100 * MS, 0, 1, 30, 2, 1200 * (int64_t)MS };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &deep), BH_ADAPTIVE_REMEASURE);
    assert_int_equal(controller.probe, BH_PROBE_DRAINING_LAST);
    assert_int_equal(bh_adaptive_step(&settings, &controller, &deep), BH_ADAPTIVE_REMEASURE);
    assert_int_equal(controller.probe, BH_PROBE_MEASURING);
    assert_int_equal(bh_adaptive_step(&settings, &controller, &unloaded),
                     BH_ADAPTIVE_RESUMED);
    assert_int_equal(controller.baseline_ns, 24 * MS);

    /* Its closer died before the pin's swap: the next window pins. */
    controller = (struct bh_adaptive_state){ 32 * 1000, 25 * MS, BH_PROBE_DRAINING,
                                             32 * 1000, 0 };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &queued),
                     BH_ADAPTIVE_REMEASURE);
    assert_int_equal(bh_adaptive_limit_of(&controller), PIN);
    assert_int_equal(controller.resume_milli, 32 * 1000);

    /* An operator's set in the middle: theirs, and no pin again at once. */
    controller = (struct bh_adaptive_state){ 32 * 1000, 25 * MS, BH_PROBE_NONE, 0, 0 };
    bh_adaptive_step(&settings, &controller, &queued);
    controller.estimate_milli = 6 * 1000;  /* bh_adaptive_moved */
    struct bh_adaptive_window at_six = { 50, 25 * MS, 0, 1, 6, 6, 1200 * (int64_t)MS };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &at_six), BH_ADAPTIVE_GREW);
    assert_int_equal(controller.probe, BH_PROBE_NONE);
    assert_int_equal(bh_adaptive_limit_of(&controller), 7);

    /* Low traffic far under the limit: the window is the measure, no pin,
     * and a stall in a later one does not lower the limit. */
    controller = (struct bh_adaptive_state){ 16 * 1000, 0, BH_PROBE_NONE, 0, 0 };
    struct bh_adaptive_window quiet = { 10, 26 * MS, 0, 0, 1, 16, 10000 * (int64_t)MS };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &quiet),
                     BH_ADAPTIVE_APP_LIMITED);
    assert_int_equal(controller.baseline_ns, 26 * MS);
    struct bh_adaptive_window stalled = { 10, 120 * MS, 0, 0, 1, 16, 20000 * (int64_t)MS };
    assert_int_equal(bh_adaptive_step(&settings, &controller, &stalled),
                     BH_ADAPTIVE_APP_LIMITED);
    assert_int_equal(bh_adaptive_limit_of(&controller), 16);
}

/* ---- windows closed by 8 processes at once ---- */

/* 2 x 8 x 150 events make 48 windows by their counts, and a few more
 * the clock closes on a slow run: 30000 x 0.9^48 is 191, and still 2
 * after 90 windows, so every window changes the limit by at least one. */
enum { PROCESSES = 8, EVENTS_EACH = 150, START_LIMIT = 30000 };

static struct bh_namespace ns;

static int open_namespace(void **state)
{
    (void)state;
    return fixture_open(&ns, "adaptive");
}

static int remove_namespace(void **state)
{
    (void)state;
    return bh_namespace_remove(&ns);
}

static int64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* Each event a drop, then a sample: whoever finds the window due closes
 * it. A window holds at least BH_ADAPTIVE_MIN_EVENTS events, and at most
 * one orphaned sample per process (its drop counted in the window
 * before), so every window has a drop: aimd lowers by x 0.9 each. */
static void feed(int index)
{
    struct bh_adaptive_change change;
    for (int i = 0; i < EVENTS_EACH; i++) {
        bh_adaptive_drop(&ns, index, now_ns(), &change);
        bh_adaptive_sample(&ns, index, 5 * MS, 0, now_ns(), &change);
    }
}

/* The limit after `windows` windows of drops from START_LIMIT, by the
 * same arithmetic. */
static int replayed(const struct bh_adaptive_settings *settings, uint64_t windows)
{
    struct bh_adaptive_state state = { (int64_t)START_LIMIT * 1000, 0, BH_PROBE_NONE, 0, 0 };
    struct bh_adaptive_window window = { 5, 5 * MS, 5, 1, 0, 0, 0 };
    for (uint64_t i = 0; i < windows; i++)
        bh_adaptive_step(settings, &state, &window);
    return bh_adaptive_limit_of(&state);
}

static void test_one_update_per_window(void **state)
{
    (void)state;
    struct bh_compartment rules = {
        .name = "racing", .limit = START_LIMIT, .adaptive = BH_ADAPTIVE_AIMD,
        .min_limit = 1, .max_limit = START_LIMIT,
    };
    int live, index = bh_compartment_register(&ns, &rules, START_LIMIT, &live);
    assert_true(index >= 0);
    struct bh_adaptive_change change;
    /* The first window (open since registration) closes at once, too
     * short to count: done here, before the race. */
    bh_adaptive_sample(&ns, index, 5 * MS, 0, now_ns(), &change);
    struct bh_adaptive_view before;
    bh_adaptive_read(&ns, index, &before);
    int64_t started_ns = now_ns();
    pid_t children[PROCESSES];
    for (int i = 0; i < PROCESSES; i++) {
        children[i] = fork();
        assert_true(children[i] >= 0);
        if (children[i] == 0) {
            feed(index);
            _exit(0);
        }
    }
    for (int i = 0; i < PROCESSES; i++) {
        int status;
        assert_int_equal(waitpid(children[i], &status, 0), children[i]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    int64_t took_ms = (now_ns() - started_ns) / MS;
    struct bh_adaptive_view after;
    bh_adaptive_read(&ns, index, &after);
    uint64_t windows = after.windows - before.windows;
    struct bh_adaptive_settings settings = { BH_ADAPTIVE_AIMD, 1, START_LIMIT, 0 };
    int expected = replayed(&settings, windows);
    /* Windows of at least 50 events each, but for one the clock closes
     * early, at most one per BH_ADAPTIVE_WINDOW_MS the race took; fewer
     * when a closer is preempted mid-close, as the others' events then
     * pile into the next window (two idle cores give as few as 19, a
     * sanitizer's slow run fewer): several, for the race to be one. */
    uint64_t most = 2 * PROCESSES * EVENTS_EACH / BH_ADAPTIVE_WINDOW_SAMPLES +
                    (uint64_t)took_ms / BH_ADAPTIVE_WINDOW_MS + 1;
    assert_in_range(windows, 5, most);
    assert_int_equal(after.changes - before.changes, windows);
    /* Nothing is held: every permit of the limit is free in the kernel
     * (common_free is the common pool's semaphore, GETVAL). */
    struct bh_compartment_view view;
    assert_int_equal(bh_compartment_read(&ns, index, &view), 0);
    assert_int_equal(view.common_free, expected);
    assert_int_equal(view.limit, expected);
    assert_int_equal(view.in_use, 0);
}

int main(void)
{
    enum { CONVERGES = sizeof converges / sizeof converges[0],
           FIXED = sizeof fixed / sizeof fixed[0],
           REMEASURES = sizeof remeasures / sizeof remeasures[0] };
    struct CMUnitTest tests[CONVERGES + FIXED + REMEASURES + 2];
    for (int i = 0; i < CONVERGES; i++)
        tests[i] = (struct CMUnitTest){ converges[i].name, test_converges, NULL, NULL,
                                        (void *)&converges[i] };
    for (int i = 0; i < FIXED; i++)
        tests[CONVERGES + i] = (struct CMUnitTest){ fixed[i].name, test_fixed, NULL, NULL,
                                                    (void *)&fixed[i] };
    for (int i = 0; i < REMEASURES; i++)
        tests[CONVERGES + FIXED + i] = (struct CMUnitTest){
            remeasures[i].name, test_remeasures, NULL, NULL, (void *)&remeasures[i] };
    tests[CONVERGES + FIXED + REMEASURES] =
        (struct CMUnitTest)cmocka_unit_test(test_baseline);
    tests[CONVERGES + FIXED + REMEASURES + 1] =
        (struct CMUnitTest)cmocka_unit_test(test_remeasure_steps);
    const struct CMUnitTest racing[] = {
        cmocka_unit_test(test_one_update_per_window),
    };
    int failed = cmocka_run_group_tests_name("adaptive arithmetic", tests, NULL, NULL);
    return failed + cmocka_run_group_tests_name("adaptive windows across processes",
                                                racing, open_namespace, remove_namespace);
}
