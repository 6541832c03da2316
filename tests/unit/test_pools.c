/* The pools of a compartment over a real namespace of its own (SysV
 * semaphores and shared memory, removed at the end): a reserve only its
 * members take, the common pool everyone takes, weights, the per_process
 * claim, reserves resized under held permits, a common permit lent to a
 * waiting member, holder records past the main segment, and what a
 * SIGKILLed member held coming back. What each test observes is the
 * kernel's semaphores, through the same calls `stat` makes. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "permits/layout.h"  /* a test of permits: it may look inside */
#include "permits/permits.h"
#include "namespace_fixture.h"

static struct bh_namespace ns;

static int set_up(void **state)
{
    (void)state;
    return fixture_open(&ns, "pools");
}

static int tear_down(void **state)
{
    (void)state;
    return bh_namespace_remove(&ns);
}

static int compartment(int limit, int reserved)
{
    return fixture_compartment(&ns, limit, reserved);
}

static int take(int index, int reserve, int weight)
{
    return fixture_take(&ns, index, reserve, weight);
}

static int takes(int index, int reserve, int weight, int times)
{
    int taken = 0;
    for (int i = 0; i < times; i++)
        taken += take(index, reserve, weight);
    return taken;
}

static void release(int index, int weight, int times)
{
    for (int i = 0; i < times; i++)
        bh_permit_release(&ns, index, weight);
}

static struct bh_compartment_view read_view(int index)
{
    struct bh_compartment_view view;
    assert_int_equal(bh_compartment_read(&ns, index, &view), 0);
    return view;
}

static struct bh_reserve_view read_reserve(int index)
{
    struct bh_reserve_view view;
    assert_int_equal(bh_reserve_read(&ns, index, 0, &view), 0);
    return view;
}

static void test_others_get_only_the_common_pool(void **state)
{
    (void)state;
    int c = compartment(5, 2);
    assert_int_equal(takes(c, -1, 1, 5), 3);
    assert_int_equal(read_view(c).in_use, 3);
    assert_int_equal(takes(c, 0, 1, 3), 2);     /* the reserve is still there */
    assert_int_equal(read_reserve(c).in_use, 2);
    release(c, 1, 5);
    assert_int_equal(read_view(c).in_use, 0);
}

static void test_members_take_their_reserve_then_the_common_pool(void **state)
{
    (void)state;
    int c = compartment(5, 2);
    assert_int_equal(takes(c, 0, 1, 6), 5);
    assert_int_equal(read_reserve(c).in_use, 2);
    assert_int_equal(takes(c, -1, 1, 1), 0);
    /* The common pool's go back first: others may take one again. */
    release(c, 1, 1);
    assert_int_equal(read_reserve(c).in_use, 2);
    assert_int_equal(takes(c, -1, 1, 1), 1);
    release(c, 1, 1);
    release(c, 1, 4);
    assert_int_equal(read_view(c).in_use, 0);
    assert_int_equal(read_reserve(c).in_use, 0);
}

static void test_weights_take_that_many(void **state)
{
    (void)state;
    int c = compartment(8, 0);
    assert_int_equal(takes(c, -1, 4, 3), 2);
    assert_int_equal(takes(c, -1, 1, 1), 0);
    assert_int_equal(read_view(c).in_use, 8);
    release(c, 4, 1);
    assert_int_equal(takes(c, -1, 1, 5), 4);
    release(c, 1, 4);
    release(c, 4, 1);
    assert_int_equal(read_view(c).in_use, 0);
}

/* A member's weighted take splits across its reserve and the common pool,
 * and goes back the same way. */
static void test_a_weighted_member_takes_across_pools(void **state)
{
    (void)state;
    int c = compartment(6, 2);
    assert_int_equal(takes(c, 0, 1, 1), 1);      /* one reserved left */
    assert_int_equal(takes(c, 0, 3, 1), 1);      /* 1 reserved + 2 common */
    assert_int_equal(read_reserve(c).in_use, 2);
    assert_int_equal(read_view(c).in_use, 4);
    assert_int_equal(takes(c, -1, 1, 3), 2);
    release(c, 3, 1);
    release(c, 1, 1);
    release(c, 1, 2);
    assert_int_equal(read_view(c).in_use, 0);
    assert_int_equal(read_reserve(c).in_use, 0);
}

static void test_per_process_claims(void **state)
{
    (void)state;
    int c = compartment(10, 0);
    struct bh_permit_ask one = { c, -1, 1 }, three = { c, -1, 3 };
    assert_int_equal(bh_permit_claim(&ns, &three, 4), 0);
    assert_int_equal(bh_permit_try(&ns, &three), BH_ACQUIRED);
    assert_int_equal(bh_permit_claim(&ns, &one, 4), 0);
    assert_int_equal(bh_permit_try(&ns, &one), BH_ACQUIRED);
    assert_int_equal(bh_permit_claim(&ns, &one, 4), -1);  /* would hold 5 */
    bh_permit_release(&ns, c, 1);                         /* unclaims too */
    assert_int_equal(bh_permit_claim(&ns, &one, 4), 0);
    bh_permit_unclaim(&ns, &one);                         /* took nothing */
    bh_permit_release(&ns, c, 3);
    assert_int_equal(bh_permit_claim(&ns, &three, 3), 0);
    bh_permit_unclaim(&ns, &three);
}

/* Lowered under held permits, a reserve gives the common pool what is free
 * now and the rest as it comes back; raised, the reverse. The compartment
 * never has more than its limit in use. */
static void test_resizing_a_reserve_keeps_the_limit(void **state)
{
    (void)state;
    int c = compartment(5, 3);
    assert_int_equal(takes(c, 0, 1, 3), 3);           /* the whole reserve */
    assert_int_equal(takes(c, -1, 1, 2), 2);          /* the whole common pool */
    assert_int_equal(bh_reserve_set(&ns, c, 0, 1), 0);  /* the reserve owes 2 */
    assert_int_equal(takes(c, -1, 1, 1), 0);          /* nothing came back yet */
    assert_int_equal(read_view(c).in_use, 5);
    /* This process holds 2 common and 3 reserved permits; the common pool's
     * go back first. The reserve grows by 3: 2 of them forgive its debt,
     * the third the common pool owes it. */
    assert_int_equal(bh_reserve_set(&ns, c, 0, 4), 0);
    release(c, 1, 3);   /* the first pays the reserve, the second is free,
                           the third is reserved */
    assert_int_equal(read_reserve(c).permits, 4);
    assert_int_equal(read_reserve(c).in_use, 2);
    assert_int_equal(takes(c, -1, 1, 2), 1);          /* the common pool: 1 */
    assert_int_equal(takes(c, 0, 1, 3), 2);           /* the reserve: 4, 2 held */
    assert_int_equal(read_view(c).in_use, 5);
    release(c, 1, 5);
    assert_int_equal(read_view(c).in_use, 0);
    assert_int_equal(read_reserve(c).in_use, 0);
    assert_int_equal(bh_reserve_set(&ns, c, 0, 6), -1);  /* more than the limit */
    assert_int_equal(bh_compartment_set_limit(&ns, c, 3), -1);  /* below it */
}

struct waiter {
    int index;
    enum bh_acquire_result result;
};

static void *wait_as_member(void *arg)
{
    struct waiter *waiter = arg;
    struct bh_permit_ask ask = { waiter->index, 0, 1 };
    waiter->result = bh_permit_wait(&ns, &ask, 5000, 10);
    return NULL;
}

/* A member waits on its reserve; a common permit given back while no
 * other waits is lent to it, and goes back to the common pool after. */
static void test_a_waiting_member_gets_a_common_permit(void **state)
{
    (void)state;
    int c = compartment(3, 1);
    assert_int_equal(takes(c, 0, 1, 3), 3);   /* the member holds everything */
    struct waiter waiter = { c, BH_REJECTED };
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, wait_as_member, &waiter), 0);
    while (read_view(c).waiting == 0)
        usleep(1000);
    release(c, 1, 1);                         /* a common permit */
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_int_equal(waiter.result, BH_ACQUIRED);
    assert_int_equal(read_view(c).in_use, 3);
    release(c, 1, 3);
    assert_int_equal(read_view(c).in_use, 0);
    assert_int_equal(takes(c, -1, 1, 3), 2);  /* the lent one is common again */
    release(c, 1, 2);
}

static int holders_of;
static void count_holder(pid_t pid, int index, uint32_t permits, uint32_t waiting,
                         void *ctx)
{
    (void)pid;
    (void)waiting;
    if (index == holders_of)
        *(uint32_t *)ctx += permits;
}

/* With every record of the main segment taken, a holder gets one in a
 * page, and `stat` still names it. */
static void test_holders_past_the_main_segment(void **state)
{
    (void)state;
    int c = compartment(2, 0), other = compartment(1, 0);
    for (int i = 0; i < BH_HOLDERS_FIRST; i++) {
        atomic_store(&ns.state->holders[i].compartment, other);
        atomic_store(&ns.state->holders[i].pid, (int32_t)getpid());
    }
    assert_int_equal(takes(c, -1, 1, 2), 2);
    uint32_t seen = 0;
    holders_of = c;
    bh_holders_visit(&ns, count_holder, &seen);
    assert_int_equal(seen, 2);
    assert_true(atomic_load(&ns.state->page_shmids[0]) > 0);
    release(c, 1, 2);
    for (int i = 0; i < BH_HOLDERS_FIRST; i++)
        atomic_store(&ns.state->holders[i].pid, 0);
}

/* Takes for other processes (the seccomp supervisor's): a non-member's
 * common permit and a member's reserved one, given back member first,
 * each to the pool it came from; this process's own counts never see
 * them, its holder record does. */
static void test_takes_for_others_go_back_to_their_own_pools(void **state)
{
    (void)state;
    int c = compartment(2, 1);
    static _Atomic uint32_t member[BH_MAX_COMPARTMENTS], other[BH_MAX_COMPARTMENTS];
    const struct bh_compartment rules = { .limit = 2 };
    const struct bh_take for_other = { { c, -1, 1 }, &rules, other, NULL, NULL, NULL };
    const struct bh_take for_member = { { c, 0, 1 }, &rules, member, NULL, NULL, NULL };
    struct bh_take_outcome outcome;
    assert_int_equal(bh_permit_take_for_another(&ns, &for_other, &outcome), BH_TAKE_GRANTED);
    struct bh_taken others = bh_take_taken(&for_other.ask, &outcome);
    assert_int_equal(bh_permit_take_for_another(&ns, &for_member, &outcome), BH_TAKE_GRANTED);
    struct bh_taken members = bh_take_taken(&for_member.ask, &outcome);
    assert_int_equal(members.reserved, 1);
    assert_int_equal(others.common, 1);
    assert_int_equal(bh_permit_held(&ns, c), 0);
    uint32_t seen = 0;
    holders_of = c;
    bh_holders_visit(&ns, count_holder, &seen);
    assert_int_equal(seen, 2);
    bh_permit_give(&ns, c, members, member);
    assert_int_equal(read_reserve(c).free_now, 1);
    assert_int_equal(take(c, -1, 1), 0);  /* the common pool is still the other's */
    assert_int_equal(atomic_load(&member[c]), 0);
    bh_permit_give(&ns, c, others, other);
    assert_int_equal(atomic_load(&other[c]), 0);
    assert_int_equal(read_view(c).in_use, 0);
    assert_int_equal(read_view(c).common_free, 1);
    seen = 0;
    bh_holders_visit(&ns, count_holder, &seen);
    assert_int_equal(seen, 0);
}

/* SIGKILL: the kernel gives back the reserved, the common and the weighted
 * permits alike (SEM_UNDO), each to its own pool. */
static void test_a_killed_member_gives_everything_back(void **state)
{
    (void)state;
    int c = compartment(6, 2);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        char byte = takes(c, 0, 3, 1) + takes(c, 0, 1, 1) == 2 ? 'y' : 'n';
        if (write(ready[1], &byte, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char byte = 0;
    assert_int_equal(read(ready[0], &byte, 1), 1);
    assert_int_equal(byte, 'y');
    assert_int_equal(read_view(c).in_use, 4);
    assert_int_equal(read_reserve(c).in_use, 2);
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    assert_int_equal(read_view(c).in_use, 0);
    assert_int_equal(read_reserve(c).in_use, 0);
    assert_int_equal(takes(c, -1, 1, 5), 4);
    release(c, 1, 4);
    close(ready[0]);
    close(ready[1]);
}

/* A forked child's permit for a copy no socket record holds, taken while
 * none is free: owed, so the copy still counts (nothing more gets in), and
 * whether the child dies before or after the parent gives its own back,
 * each permit comes back exactly once. */
static void owe_for_a_child_then(int child_dies_first)
{
    int c = compartment(2, 0), ready[2];
    assert_int_equal(takes(c, -1, 1, 2), 2);
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        char byte = bh_permit_take_for_copy(&ns, c, 1) == 0 ? 'y' : 'n';
        if (write(ready[1], &byte, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char byte = 0;
    assert_int_equal(read(ready[0], &byte, 1), 1);
    assert_int_equal(byte, 'y');
    assert_int_equal(take(c, -1, 1), 0);
    if (child_dies_first) {
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, NULL, 0), pid);
        assert_int_equal(take(c, -1, 1), 0);    /* the debt keeps it */
        release(c, 1, 1);                       /* pays the debt */
        assert_int_equal(takes(c, -1, 1, 2), 1);
    } else {
        release(c, 1, 1);                       /* retired: the child's now */
        assert_int_equal(take(c, -1, 1), 0);
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, NULL, 0), pid);
        assert_int_equal(takes(c, -1, 1, 2), 1);
    }
    release(c, 1, 2);
    assert_int_equal(takes(c, -1, 1, 3), 2);
    release(c, 1, 2);
    close(ready[0]);
    close(ready[1]);
}

static void test_a_copy_owed_when_none_is_free(void **state)
{
    (void)state;
    owe_for_a_child_then(0);
    owe_for_a_child_then(1);
}

/* A member killed while it waits on its reserve: the kernel forgets its
 * wait, so common permits given back afterwards stay common (they were
 * lent to the reserve for good when a count left behind said a member
 * still waited). Checked for what a non-member can take, and for every
 * pool's semaphores. */
static void test_a_member_killed_while_waiting_leaves_the_common_pool(void **state)
{
    (void)state;
    int c = compartment(4, 1);
    assert_int_equal(takes(c, 0, 1, 1), 1);    /* the reserved permit */
    assert_int_equal(takes(c, -1, 1, 3), 3);   /* the whole common pool */
    pid_t pid = fork();
    if (pid == 0) {
        bh_permits_forget_after_fork(&ns);
        struct bh_permit_ask ask = { c, 0, 1 };
        bh_permit_wait(&ns, &ask, 10000, 10);
        _exit(0);
    }
    while (read_reserve(c).waiting == 0)
        usleep(1000);
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    release(c, 1, 3);                          /* common ones go back first */
    struct bh_compartment_view view = read_view(c);
    struct bh_reserve_view reserve = read_reserve(c);
    assert_int_equal(view.common_free, 3);
    assert_int_equal(view.common_owes, 0);
    assert_int_equal(reserve.free_now, 0);
    assert_int_equal(reserve.owes, 0);
    assert_int_equal(takes(c, -1, 1, 4), 3);
    release(c, 1, 4);
    assert_int_equal(read_view(c).in_use, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_others_get_only_the_common_pool),
        cmocka_unit_test(test_members_take_their_reserve_then_the_common_pool),
        cmocka_unit_test(test_weights_take_that_many),
        cmocka_unit_test(test_a_weighted_member_takes_across_pools),
        cmocka_unit_test(test_per_process_claims),
        cmocka_unit_test(test_resizing_a_reserve_keeps_the_limit),
        cmocka_unit_test(test_a_waiting_member_gets_a_common_permit),
        cmocka_unit_test(test_holders_past_the_main_segment),
        cmocka_unit_test(test_takes_for_others_go_back_to_their_own_pools),
        cmocka_unit_test(test_a_killed_member_gives_everything_back),
        cmocka_unit_test(test_a_member_killed_while_waiting_leaves_the_common_pool),
        cmocka_unit_test(test_a_copy_owed_when_none_is_free),
    };
    return cmocka_run_group_tests_name("pools", tests, set_up, tear_down);
}
