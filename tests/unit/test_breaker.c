/* The breaker's state machine over a real namespace of its own (SysV
 * semaphores and shared memory, removed at the end): the threshold, one
 * probe at a time, doubling, closing, io failures that only bytes can
 * answer, forced states, a probe slot that comes back when its process
 * dies, and one taken over from a silent probe. Time is real but short:
 * open periods and probe deadlines of a few ms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "breaker/breaker.h"
#include "namespace_fixture.h"

static struct bh_namespace ns;
static int index_;
static const struct bh_breaker_config config = { 3, 5, 12 };
/* The probe slot's deadline is breaker_open_max_ms (no connect_timeout_ms):
 * long enough never to pass by itself here, but where a test waits it out. */
static const struct bh_compartment db = { .name = "db", .limit = 10,
                                          .breaker_open_max_ms = 60000 };

static int set_up(void **state)
{
    (void)state;
    if (fixture_open(&ns, "breaker") < 0)
        return -1;
    int live;
    index_ = bh_compartment_register(&ns, &db, 10, &live);
    return index_ < 0 ? -1 : 0;
}

static int tear_down(void **state)
{
    (void)state;
    return bh_namespace_remove(&ns);
}

static void sleep_ms(int ms)
{
    struct timespec wait = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&wait, &wait) < 0)
        ;
}

static enum bh_breaker_change failed(int64_t probe, int io)
{
    return bh_breaker_failure(bh_breaker_fields(&ns, index_), &config, probe, io);
}

/* The last probe admitted: its holding of the slot. */
static struct bh_probe_taken probe;

static enum bh_breaker_admission admit_within(int deadline_ms)
{
    struct bh_compartment quick = db;
    quick.breaker_open_max_ms = deadline_ms;
    return bh_breaker_admit(bh_breaker_fields(&ns, index_), &quick, &probe);
}

static enum bh_breaker_admission admit(void)
{
    return bh_breaker_admit(bh_breaker_fields(&ns, index_), &db, &probe);
}

static struct bh_breaker_view seen(void)
{
    struct bh_breaker_view view;
    bh_breaker_read(bh_breaker_fields(&ns, index_), &view);
    return view;
}

static void wait_half_open(void)
{
    for (int tries = 0; seen().state != BH_BREAKER_IS_HALF_OPEN; tries++) {
        assert_true(tries < 1000);
        sleep_ms(1);
    }
}

static void test_opens_at_the_threshold(void **state)
{
    (void)state;
    bh_breaker_force(bh_breaker_fields(&ns, index_), 0);
    assert_int_equal(failed(0, 0), BH_BREAKER_UNCHANGED);
    assert_int_equal(failed(0, 0), BH_BREAKER_UNCHANGED);
    assert_int_equal(admit(), BH_BREAKER_PASS);
    assert_int_equal(failed(0, 0), BH_BREAKER_OPENED);
    assert_int_equal(failed(0, 0), BH_BREAKER_UNCHANGED);  /* opened once */
    assert_int_equal(seen().state, BH_BREAKER_IS_OPEN);
    assert_int_equal(admit(), BH_BREAKER_REFUSE_OPEN);
}

static void test_a_success_resets_the_count(void **state)
{
    (void)state;
    bh_breaker_force(bh_breaker_fields(&ns, index_), 0);
    failed(0, 0);
    failed(0, 0);
    assert_int_equal(bh_breaker_success(bh_breaker_fields(&ns, index_), 0), BH_BREAKER_UNCHANGED);
    assert_int_equal(failed(0, 0), BH_BREAKER_UNCHANGED);
    assert_int_equal(seen().state, BH_BREAKER_IS_CLOSED);
}

static void test_one_probe_then_doubling_then_closing(void **state)
{
    (void)state;
    bh_breaker_force(bh_breaker_fields(&ns, index_), 0);
    for (int i = 0; i < 3; i++)
        failed(0, 0);
    wait_half_open();
    assert_int_equal(admit(), BH_BREAKER_PROBE);
    assert_int_equal(admit(), BH_BREAKER_REFUSE_PROBING);
    assert_int_equal(failed(probe.since_ns, 0), BH_BREAKER_REOPENED);
    assert_int_equal(seen().open_ms, 10);
    wait_half_open();
    assert_int_equal(admit(), BH_BREAKER_PROBE);
    assert_int_equal(failed(probe.since_ns, 0), BH_BREAKER_REOPENED);
    assert_int_equal(seen().open_ms, 12);  /* breaker_open_max_ms */
    wait_half_open();
    assert_int_equal(admit(), BH_BREAKER_PROBE);
    assert_int_equal(bh_breaker_success(bh_breaker_fields(&ns, index_), probe.since_ns),
                     BH_BREAKER_CLOSED);
    assert_int_equal(admit(), BH_BREAKER_PASS);
    /* the slot went back with the close: a later half-open probes again */
    for (int i = 0; i < 3; i++)
        failed(0, 0);
    wait_half_open();
    assert_int_equal(admit(), BH_BREAKER_PROBE);
    bh_breaker_abandon(bh_breaker_fields(&ns, index_), probe.since_ns);
    assert_int_equal(admit(), BH_BREAKER_PROBE);
    bh_breaker_abandon(bh_breaker_fields(&ns, index_), probe.since_ns);
}

static void test_after_io_failures_only_bytes_count(void **state)
{
    (void)state;
    bh_breaker_force(bh_breaker_fields(&ns, index_), 0);
    failed(0, 1);
    assert_false(bh_breaker_wants(bh_breaker_fields(&ns, index_), 0));
    assert_true(bh_breaker_wants(bh_breaker_fields(&ns, index_), 1));
    bh_breaker_success(bh_breaker_fields(&ns, index_), 0);
    assert_true(bh_breaker_wants(bh_breaker_fields(&ns, index_), 0));
}

static void test_forced_states(void **state)
{
    (void)state;
    bh_breaker_force(bh_breaker_fields(&ns, index_), 1);
    struct bh_breaker_view view = seen();
    assert_int_equal(view.state, BH_BREAKER_IS_OPEN);
    assert_true(view.forced);
    sleep_ms(20);  /* longer than any open period: forced open stays open */
    assert_int_equal(admit(), BH_BREAKER_REFUSE_OPEN);
    bh_breaker_force(bh_breaker_fields(&ns, index_), 0);
    assert_int_equal(admit(), BH_BREAKER_PASS);
    assert_int_equal(seen().failures, 0);
}

/* A prober that dies cannot give its slot back: the next connect finds
 * its process gone and probes at once, long before the deadline. */
static void test_a_dead_probers_slot_comes_back(void **state)
{
    (void)state;
    bh_breaker_force(bh_breaker_fields(&ns, index_), 0);
    for (int i = 0; i < 3; i++)
        failed(0, 0);
    wait_half_open();
    pid_t pid = fork();
    if (pid == 0)
        _exit(admit() == BH_BREAKER_PROBE ? 0 : 1);
    int status = -1;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(admit(), BH_BREAKER_PROBE);
    assert_true(probe.replaced_gone);
    bh_breaker_abandon(bh_breaker_fields(&ns, index_), probe.since_ns);
}

/* A probe silent past the deadline: the next connect takes the slot over
 * and the silent one counts as a failure; its late report (success or
 * failure) finds the slot taken and changes nothing, so the slot is given
 * back once, by the new probe. */
static void test_a_silent_probe_is_taken_over(void **state)
{
    (void)state;
    uint64_t taken_over = seen().probes_taken_over;
    bh_breaker_force(bh_breaker_fields(&ns, index_), 0);
    for (int i = 0; i < 3; i++)
        failed(0, 0);
    wait_half_open();
    assert_int_equal(admit_within(20), BH_BREAKER_PROBE);
    struct bh_probe_taken silent = probe;
    assert_int_equal(admit_within(20), BH_BREAKER_REFUSE_PROBING);
    sleep_ms(25);
    assert_int_equal(admit_within(20), BH_BREAKER_PROBE);
    assert_int_equal(probe.replaced_pid, (int)getpid());
    assert_true(probe.replaced_ms >= 20);
    assert_int_equal(seen().failures, 1);
    /* The silent one reports late: the breaker stays half-open, the slot
     * stays with the new probe. */
    assert_int_equal(bh_breaker_success(bh_breaker_fields(&ns, index_), silent.since_ns),
                     BH_BREAKER_UNCHANGED);
    assert_int_equal(failed(silent.since_ns, 0), BH_BREAKER_UNCHANGED);
    bh_breaker_abandon(bh_breaker_fields(&ns, index_), silent.since_ns);
    assert_int_equal(seen().state, BH_BREAKER_IS_HALF_OPEN);
    assert_int_equal(admit_within(20), BH_BREAKER_REFUSE_PROBING);
    /* The new probe's outcome is the one that counts. */
    assert_int_equal(bh_breaker_success(bh_breaker_fields(&ns, index_), probe.since_ns),
                     BH_BREAKER_CLOSED);
    assert_int_equal(seen().probes_taken_over, taken_over + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opens_at_the_threshold),
        cmocka_unit_test(test_a_success_resets_the_count),
        cmocka_unit_test(test_one_probe_then_doubling_then_closing),
        cmocka_unit_test(test_after_io_failures_only_bytes_count),
        cmocka_unit_test(test_forced_states),
        cmocka_unit_test(test_a_dead_probers_slot_comes_back),
        cmocka_unit_test(test_a_silent_probe_is_taken_over),
    };
    return cmocka_run_group_tests_name("breaker", tests, set_up, tear_down);
}
