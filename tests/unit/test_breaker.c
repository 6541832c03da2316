/* The breaker's state machine over a real namespace of its own (SysV
 * semaphores and shared memory, removed at the end): the threshold, one
 * probe at a time, doubling, closing, io failures that only bytes can
 * answer, forced states, and a probe slot that comes back when its
 * process dies. Time is real but short: open periods of a few ms. */
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

static struct bh_namespace ns;
static int index_;
static const struct bh_breaker_config config = { 3, 5, 12 };

static int set_up(void **state)
{
    (void)state;
    char name[64], err[256];
    snprintf(name, sizeof name, "unit-breaker-%d", (int)getpid());
    if (bh_namespace_open(name, 1, &ns, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    int live;
    static const struct bh_compartment db = { .name = "db", .limit = 10 };
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

static enum bh_breaker_change failed(int probe, int io)
{
    return bh_breaker_failure(&ns, index_, &config, probe, io);
}

static struct bh_breaker_view seen(void)
{
    struct bh_breaker_view view;
    bh_breaker_read(&ns, index_, &view);
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
    bh_breaker_force(&ns, index_, 0);
    assert_int_equal(failed(0, 0), BH_BREAKER_UNCHANGED);
    assert_int_equal(failed(0, 0), BH_BREAKER_UNCHANGED);
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PASS);
    assert_int_equal(failed(0, 0), BH_BREAKER_OPENED);
    assert_int_equal(failed(0, 0), BH_BREAKER_UNCHANGED);  /* opened once */
    assert_int_equal(seen().state, BH_BREAKER_IS_OPEN);
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_REFUSE_OPEN);
}

static void test_a_success_resets_the_count(void **state)
{
    (void)state;
    bh_breaker_force(&ns, index_, 0);
    failed(0, 0);
    failed(0, 0);
    assert_int_equal(bh_breaker_success(&ns, index_, 0), BH_BREAKER_UNCHANGED);
    assert_int_equal(failed(0, 0), BH_BREAKER_UNCHANGED);
    assert_int_equal(seen().state, BH_BREAKER_IS_CLOSED);
}

static void test_one_probe_then_doubling_then_closing(void **state)
{
    (void)state;
    bh_breaker_force(&ns, index_, 0);
    for (int i = 0; i < 3; i++)
        failed(0, 0);
    wait_half_open();
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PROBE);
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_REFUSE_PROBING);
    assert_int_equal(failed(1, 0), BH_BREAKER_REOPENED);
    assert_int_equal(seen().open_ms, 10);
    wait_half_open();
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PROBE);
    assert_int_equal(failed(1, 0), BH_BREAKER_REOPENED);
    assert_int_equal(seen().open_ms, 12);  /* breaker_open_max_ms */
    wait_half_open();
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PROBE);
    assert_int_equal(bh_breaker_success(&ns, index_, 1), BH_BREAKER_CLOSED);
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PASS);
    /* the slot went back with the close: a later half-open probes again */
    for (int i = 0; i < 3; i++)
        failed(0, 0);
    wait_half_open();
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PROBE);
    bh_breaker_abandon(&ns, index_);
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PROBE);
    bh_breaker_abandon(&ns, index_);
}

static void test_after_io_failures_only_bytes_count(void **state)
{
    (void)state;
    bh_breaker_force(&ns, index_, 0);
    failed(0, 1);
    assert_false(bh_breaker_wants(&ns, index_, 0));
    assert_true(bh_breaker_wants(&ns, index_, 1));
    bh_breaker_success(&ns, index_, 0);
    assert_true(bh_breaker_wants(&ns, index_, 0));
}

static void test_forced_states(void **state)
{
    (void)state;
    bh_breaker_force(&ns, index_, 1);
    struct bh_breaker_view view = seen();
    assert_int_equal(view.state, BH_BREAKER_IS_OPEN);
    assert_true(view.forced);
    sleep_ms(20);  /* longer than any open period: forced open stays open */
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_REFUSE_OPEN);
    bh_breaker_force(&ns, index_, 0);
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PASS);
    assert_int_equal(seen().failures, 0);
}

/* The slot is a SEM_UNDO semaphore: a prober that dies gives it back. */
static void test_a_dead_probers_slot_comes_back(void **state)
{
    (void)state;
    bh_breaker_force(&ns, index_, 0);
    for (int i = 0; i < 3; i++)
        failed(0, 0);
    wait_half_open();
    pid_t pid = fork();
    if (pid == 0)
        _exit(bh_breaker_admit(&ns, index_) == BH_BREAKER_PROBE ? 0 : 1);
    int status = -1;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(bh_breaker_admit(&ns, index_), BH_BREAKER_PROBE);
    bh_breaker_abandon(&ns, index_);
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
    };
    return cmocka_run_group_tests_name("breaker", tests, set_up, tear_down);
}
