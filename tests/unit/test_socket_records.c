/* Socket records over a real namespace of its own (removed at the end),
 * with real loopback connections: parking a permit, references, the last
 * one giving it back exactly once, stale names, the kernel's word on a
 * closed socket (sock_diag), a parked permit outliving the process that
 * took it, a member's permits going back to their pools, one reap per
 * interval, a full table, and a seccomp supervisor's permits parked for
 * another process. What each test observes is the kernel's semaphores,
 * through `stat`'s own calls. */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "permits/layout.h"
#include "permits/permits.h"
#include "namespace_fixture.h"

static struct bh_namespace ns;
static int listener;
static struct sockaddr_in listening;

static int set_up(void **state)
{
    (void)state;
    socklen_t length = sizeof listening;
    listening = (struct sockaddr_in){ .sin_family = AF_INET,
                                      .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&listening, sizeof listening) ||
        listen(listener, 64) || getsockname(listener, (struct sockaddr *)&listening, &length))
        return -1;
    return fixture_open(&ns, "sockets");
}

static int tear_down(void **state)
{
    (void)state;
    close(listener);
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

static int in_use(int index)
{
    struct bh_compartment_view view;
    assert_int_equal(bh_compartment_read(&ns, index, &view), 0);
    return view.in_use;
}

/* A connected loopback socket; the server's end in *peer. */
static int connected(int *peer)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&listening, sizeof listening), 0);
    *peer = accept(listener, NULL, NULL);
    assert_true(*peer >= 0);
    return fd;
}

static void test_the_last_reference_gives_back_once(void **state)
{
    (void)state;
    int c = compartment(1, 0), peer, fd = connected(&peer);
    assert_true(take(c, -1, 1));
    bh_share share = bh_socket_share(&ns, fd, c, 1);
    assert_true(share != 0);
    assert_int_equal(in_use(c), 1);
    assert_int_equal(bh_socket_ref(&ns, share), 0);
    assert_int_equal(bh_socket_ref(&ns, share), 0);
    assert_int_equal(bh_socket_unref(&ns, share), 0);
    assert_int_equal(bh_socket_unref(&ns, share), 0);
    assert_int_equal(in_use(c), 1);
    assert_int_equal(bh_socket_unref(&ns, share), 1);
    assert_int_equal(in_use(c), 0);
    /* Gone: a further unref or ref is a stale name and changes nothing. */
    assert_int_equal(bh_socket_unref(&ns, share), 0);
    assert_int_equal(bh_socket_ref(&ns, share), -1);
    assert_int_equal(in_use(c), 0);
    assert_true(take(c, -1, 1));
    assert_false(take(c, -1, 1));
    bh_permit_release(&ns, c, 1);
    close(fd);
    close(peer);
}

static void test_a_stale_name_never_touches_a_later_record(void **state)
{
    (void)state;
    int c = compartment(2, 0), peer, fd = connected(&peer);
    assert_true(take(c, -1, 1));
    bh_share first = bh_socket_share(&ns, fd, c, 1);
    assert_int_equal(bh_socket_unref(&ns, first), 1);
    assert_true(take(c, -1, 1));
    bh_share second = bh_socket_share(&ns, fd, c, 1);  /* same inode: same slot */
    assert_true(second != first);
    assert_int_equal(bh_socket_unref(&ns, first), 0);
    assert_int_equal(in_use(c), 1);
    assert_int_equal(bh_socket_unref(&ns, second), 1);
    assert_int_equal(in_use(c), 0);
    close(fd);
    close(peer);
}

static void test_found_by_the_sockets_inode(void **state)
{
    (void)state;
    int c = compartment(3, 0), peer, fd = connected(&peer), index = -1, weight = 0;
    struct stat socket_stat;
    assert_true(take(c, -1, 2));
    bh_share share = bh_socket_share(&ns, fd, c, 2);
    assert_int_equal(fstat(fd, &socket_stat), 0);
    assert_int_equal(bh_socket_find(&ns, socket_stat.st_ino, &index, &weight), share);
    assert_int_equal(index, c);
    assert_int_equal(weight, 2);
    assert_int_equal(bh_socket_find(&ns, socket_stat.st_ino + 1, &index, &weight), 0);
    int permits, count = bh_socket_count(&ns, c, &permits);
    assert_int_equal(count, 1);
    assert_int_equal(permits, 2);
    assert_int_equal(bh_socket_unref(&ns, share), 1);
    assert_int_equal(bh_socket_find(&ns, socket_stat.st_ino, &index, &weight), 0);
    close(fd);
    close(peer);
}

static int64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* Reaps until some permit of compartment c comes back, for up to 2 s;
 * when the last try ended, in *ended. */
static int reap_until_given(int c, int64_t *ended)
{
    int64_t give_up = now_ns() + 2000000000;
    int given;
    do {
        given = bh_socket_reap(&ns, c);
        *ended = now_ns();
    } while (given == 0 && *ended < give_up);
    return given;
}

/* References that nobody will drop (holders killed): the kernel says when
 * the socket is closed everywhere, and only then. */
static void test_the_reaper_asks_the_kernel(void **state)
{
    (void)state;
    int c = compartment(1, 0), peer, fd = connected(&peer);
    assert_true(take(c, -1, 1));
    bh_share share = bh_socket_share(&ns, fd, c, 1);
    assert_int_equal(bh_socket_ref(&ns, share), 0);
    int64_t ended;
    assert_int_equal(bh_socket_reap(&ns, c), 0);   /* still open here */
    assert_int_equal(in_use(c), 1);
    close(fd);
    assert_int_equal(reap_until_given(c, &ended), 1);
    assert_int_equal(in_use(c), 0);
    assert_int_equal(bh_socket_reap(&ns, c), 0);
    assert_int_equal(bh_socket_unref(&ns, share), 0);  /* once, not twice */
    assert_int_equal(in_use(c), 0);
    close(peer);
}

/* The parked permit no longer belongs to the process that took it: its
 * death (SEM_UNDO) gives nothing back. */
static void test_a_parked_permit_outlives_its_taker(void **state)
{
    (void)state;
    int c = compartment(1, 0), peer, fd = connected(&peer);
    int pipe_fds[2];
    assert_int_equal(pipe(pipe_fds), 0);
    pid_t child = fork();
    if (child == 0) {
        bh_share share = take(c, -1, 1) ? bh_socket_share(&ns, fd, c, 1) : 0;
        (void)!write(pipe_fds[1], &share, sizeof share);
        _exit(0);
    }
    bh_share share = 0;
    assert_int_equal(read(pipe_fds[0], &share, sizeof share), (ssize_t)sizeof share);
    assert_int_equal(waitpid(child, NULL, 0), child);
    assert_true(share != 0);
    assert_int_equal(in_use(c), 1);
    assert_int_equal(bh_socket_unref(&ns, share), 1);
    assert_int_equal(in_use(c), 0);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    close(fd);
    close(peer);
}

/* A member's permits, from its reserve and the common pool, go back to
 * the pools they came from. */
static void test_a_members_permits_go_back_to_their_pools(void **state)
{
    (void)state;
    int c = compartment(4, 1), peer, fd = connected(&peer);
    assert_true(take(c, 0, 2));   /* one reserved, one common */
    bh_share share = bh_socket_share(&ns, fd, c, 2);
    struct bh_reserve_view reserve;
    assert_int_equal(bh_reserve_read(&ns, c, 0, &reserve), 0);
    assert_int_equal(reserve.in_use, 1);
    assert_int_equal(in_use(c), 2);
    assert_int_equal(bh_socket_unref(&ns, share), 1);
    assert_int_equal(bh_reserve_read(&ns, c, 0, &reserve), 0);
    assert_int_equal(reserve.in_use, 0);
    assert_int_equal(in_use(c), 0);
    assert_true(take(c, -1, 3));  /* the whole common pool is back */
    bh_permit_release(&ns, c, 3);
    close(fd);
    close(peer);
}

/* A reap asks the kernel at most once per interval (5 ms) per namespace:
 * a socket closed just after one reap is seen by the next. */
static void test_one_reap_per_interval(void **state)
{
    (void)state;
    int c = compartment(2, 0), peer_a, peer_b, a = connected(&peer_a), b = connected(&peer_b);
    int64_t ended;
    assert_true(take(c, -1, 1));
    bh_share share_a = bh_socket_share(&ns, a, c, 1);
    assert_true(take(c, -1, 1));
    bh_share share_b = bh_socket_share(&ns, b, c, 1);
    assert_int_equal(bh_socket_ref(&ns, share_a), 0);  /* references nobody drops */
    assert_int_equal(bh_socket_ref(&ns, share_b), 0);
    close(a);
    assert_int_equal(reap_until_given(c, &ended), 1);
    close(b);
    int given = bh_socket_reap(&ns, c);
    if (now_ns() - ended < 4000000) {  /* else this machine stalled past the interval */
        assert_int_equal(given, 0);
        assert_int_equal(in_use(c), 1);
        given = reap_until_given(c, &ended);
    }
    assert_int_equal(given, 1);
    assert_int_equal(in_use(c), 0);
    close(peer_a);
    close(peer_b);
}

/* Every record taken (65,536): the next share is refused and counted, its
 * permit stays with the process that took it; a freed record serves the
 * next share. */
static bh_share shares[BH_SOCKET_RECORDS];

static void test_a_full_table_refuses_and_counts(void **state)
{
    (void)state;
    int full[3] = { compartment(32767, 0), compartment(32767, 0), compartment(2, 0) };
    int spare = compartment(1, 0), peer, fd = connected(&peer);
    struct bh_socket_table_view table;
    for (int i = 0; i < BH_SOCKET_RECORDS; i++) {
        int c = full[i < 32767 ? 0 : i < 65534 ? 1 : 2];
        assert_true(take(c, -1, 1));
        shares[i] = bh_socket_share(&ns, fd, c, 1);
        assert_true(shares[i] != 0);
    }
    bh_socket_table_read(&ns, &table);
    assert_int_equal(table.in_use, BH_SOCKET_RECORDS);
    assert_int_equal(table.capacity, BH_SOCKET_RECORDS);
    assert_true(take(spare, -1, 1));
    assert_int_equal(bh_socket_share(&ns, fd, spare, 1), 0);
    bh_socket_table_read(&ns, &table);
    assert_int_equal(table.refused, 1);
    assert_int_equal(in_use(spare), 1);
    assert_int_equal(bh_socket_unref(&ns, shares[100]), 1);
    shares[100] = bh_socket_share(&ns, fd, spare, 1);
    assert_true(shares[100] != 0);
    for (int i = 0; i < BH_SOCKET_RECORDS; i++)
        assert_int_equal(bh_socket_unref(&ns, shares[i]), 1);
    assert_int_equal(in_use(full[0]) + in_use(full[1]) + in_use(full[2]) + in_use(spare), 0);
    bh_socket_table_read(&ns, &table);
    assert_int_equal(table.in_use, 0);
    close(fd);
    close(peer);
}

/* The addresses sock_diag finds a connected IPv4 socket by. */
static struct bh_sock_id id_of(int fd)
{
    struct sockaddr_in local, remote;
    socklen_t length = sizeof local;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&local, &length), 0);
    length = sizeof remote;
    assert_int_equal(getpeername(fd, (struct sockaddr *)&remote, &length), 0);
    return (struct bh_sock_id){ AF_INET, local.sin_port, remote.sin_port,
                                { local.sin_addr.s_addr }, { remote.sin_addr.s_addr } };
}

/* A seccomp supervisor's take for another process, parked: no process
 * finds the record by inode, its taker's death gives nothing back, and
 * the kernel's word settles it once the socket is closed, once. */
static void test_parked_for_another_is_unlisted_and_outlives_its_taker(void **state)
{
    (void)state;
    int c = compartment(1, 0), peer, fd = connected(&peer), index, weight;
    struct stat socket_stat;
    assert_int_equal(fstat(fd, &socket_stat), 0);
    struct bh_sock_id id = id_of(fd);
    int pipe_fds[2];
    assert_int_equal(pipe(pipe_fds), 0);
    pid_t child = fork();
    if (child == 0) {
        static _Atomic uint32_t claimed[BH_MAX_COMPARTMENTS];
        struct bh_compartment rules = { .limit = 1 };
        struct bh_take take = { { c, -1, 1 }, &rules, claimed, NULL, NULL, NULL };
        struct bh_take_outcome outcome;
        bh_share share = 0;
        if (bh_permit_take_for_another(&ns, &take, &outcome) == BH_TAKE_GRANTED)
            share = bh_socket_park_for_another(&ns, (uint64_t)socket_stat.st_ino, &id, c,
                                               bh_take_taken(&take.ask, &outcome), getpid());
        (void)!write(pipe_fds[1], &share, sizeof share);
        _exit(0);
    }
    bh_share share = 0;
    assert_int_equal(read(pipe_fds[0], &share, sizeof share), (ssize_t)sizeof share);
    assert_int_equal(waitpid(child, NULL, 0), child);
    assert_true(share != 0);
    assert_int_equal(in_use(c), 1);
    assert_int_equal(bh_socket_find(&ns, socket_stat.st_ino, &index, &weight), 0);
    assert_int_equal(bh_socket_reap(&ns, c), 0);  /* still open here */
    assert_int_equal(in_use(c), 1);
    close(fd);
    int64_t ended;
    assert_int_equal(reap_until_given(c, &ended), 1);
    assert_int_equal(in_use(c), 0);
    assert_int_equal(bh_socket_unref(&ns, share), 0);  /* once, not twice */
    assert_int_equal(in_use(c), 0);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    close(peer);
}

/* While its maker lives, an unlisted record is the maker's to settle:
 * other reapers do not ask the kernel about it. */
static void test_a_live_makers_record_is_left_to_it(void **state)
{
    (void)state;
    int c = compartment(1, 0), peer, fd = connected(&peer);
    struct stat socket_stat;
    assert_int_equal(fstat(fd, &socket_stat), 0);
    struct bh_sock_id id = id_of(fd);
    static _Atomic uint32_t claimed[BH_MAX_COMPARTMENTS];
    struct bh_compartment rules = { .limit = 1 };
    struct bh_take take = { { c, -1, 1 }, &rules, claimed, NULL, NULL, NULL };
    struct bh_take_outcome outcome;
    assert_int_equal(bh_permit_take_for_another(&ns, &take, &outcome), BH_TAKE_GRANTED);
    bh_share share = bh_socket_park_for_another(&ns, (uint64_t)socket_stat.st_ino, &id, c,
                                                bh_take_taken(&take.ask, &outcome), getpid());
    assert_true(share != 0);
    close(fd);
    for (int64_t until = now_ns() + 50000000; now_ns() < until;)  /* reaps past the interval */
        assert_int_equal(bh_socket_reap(&ns, c), 0);
    assert_int_equal(in_use(c), 1);
    assert_int_equal(bh_socket_unref(&ns, share), 1);
    assert_int_equal(in_use(c), 0);
    atomic_fetch_sub(&claimed[c], 1);
    close(peer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_last_reference_gives_back_once),
        cmocka_unit_test(test_a_stale_name_never_touches_a_later_record),
        cmocka_unit_test(test_found_by_the_sockets_inode),
        cmocka_unit_test(test_the_reaper_asks_the_kernel),
        cmocka_unit_test(test_a_parked_permit_outlives_its_taker),
        cmocka_unit_test(test_a_members_permits_go_back_to_their_pools),
        cmocka_unit_test(test_one_reap_per_interval),
        cmocka_unit_test(test_a_full_table_refuses_and_counts),
        cmocka_unit_test(test_parked_for_another_is_unlisted_and_outlives_its_taker),
        cmocka_unit_test(test_a_live_makers_record_is_left_to_it),
    };
    return cmocka_run_group_tests(tests, set_up, tear_down);
}
