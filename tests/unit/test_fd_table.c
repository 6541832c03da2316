/* The fd table, a leaf: tables of operation sequences and the connection
 * each one ends (or not), the owner rule across a vfork child, and a race
 * of dup against the last close in which every connection must end
 * exactly once; guards, and a close that waits for one. The table only
 * holds numbers, so only the guard's race with reuse needs real fds. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fdtable/fd_table.h"

enum { NONE = BH_FD_NOTHING_ENDED };

/* One step: what to do, on which fds, and the compartment it must end. */
enum op { ATTACH, DUP, NEW, CLOSE, NEW_SOCKET };
struct step {
    enum op op;
    int fd, other;   /* DUP: other -> fd; ATTACH: other is the compartment */
    int ends;
};

struct sequence {
    const char *name;
    struct step steps[8];
    int count;
};

static int run_step(const struct step *step)
{
    switch (step->op) {
    case ATTACH:
        return bh_fd_attach(step->fd, step->other, 1, 0, 0) == 0 ? NONE : -100;
    case DUP:
        return bh_fd_duplicated(step->other, step->fd).compartment;
    case NEW:
        return bh_fd_new(step->fd, BH_FD_UNKNOWN).compartment;
    case NEW_SOCKET:
        return bh_fd_new(step->fd, BH_FD_INET_STREAM).compartment;
    case CLOSE:
    default:
        return bh_fd_release(bh_fd_detach(step->fd)).compartment;
    }
}

static const struct sequence sequences[] = {
    { "close ends the connection", { { ATTACH, 10, 3, NONE }, { CLOSE, 10, 0, 3 } }, 2 },
    { "a dup keeps it until the last fd closes",
      { { ATTACH, 10, 3, NONE }, { DUP, 11, 10, NONE }, { CLOSE, 10, 0, NONE },
        { CLOSE, 11, 0, 3 } }, 4 },
    { "dup2 of an untracked fd onto a tracked one ends that one",
      { { ATTACH, 10, 5, NONE }, { DUP, 10, 20, 5 }, { CLOSE, 10, 0, NONE } }, 3 },
    { "dup2 of a tracked fd onto itself changes nothing",
      { { ATTACH, 10, 5, NONE }, { DUP, 10, 10, NONE }, { CLOSE, 10, 0, 5 } }, 3 },
    { "dup2 of one connection onto another ends the other",
      { { ATTACH, 10, 1, NONE }, { ATTACH, 11, 2, NONE }, { DUP, 11, 10, 2 },
        { CLOSE, 10, 0, NONE }, { CLOSE, 11, 0, 1 } }, 5 },
    { "a number handed out again was closed behind our back",
      { { ATTACH, 10, 4, NONE }, { NEW, 10, 0, 4 }, { CLOSE, 10, 0, NONE } }, 3 },
    { "socket() on a tracked number ends it too",
      { { ATTACH, 10, 4, NONE }, { NEW_SOCKET, 10, 0, 4 }, { CLOSE, 10, 0, NONE } }, 3 },
    { "closing an untracked fd ends nothing", { { CLOSE, 12, 0, NONE } }, 1 },
    { "a second connection on a tracked fd is refused",
      { { ATTACH, 10, 1, NONE }, { ATTACH, 10, 2, -100 }, { CLOSE, 10, 0, 1 } }, 3 },
};

static void test_sequence(void **state)
{
    const struct sequence *sequence = *state;
    bh_fd_table_reset();
    for (int i = 0; i < sequence->count; i++) {
        int ended = run_step(&sequence->steps[i]);
        if (ended != sequence->steps[i].ends)
            fail_msg("%s: step %d ended %d, wanted %d", sequence->name, i, ended,
                     sequence->steps[i].ends);
    }
}

static void record(int fd, uint32_t detached, void *ctx)
{
    int *ended = ctx;
    (void)fd;
    struct bh_fd_ended what = bh_fd_release(detached);
    if (what.compartment != NONE)
        ended[what.compartment]++;
}

static void test_closing_range(void **state)
{
    (void)state;
    bh_fd_table_reset();
    assert_int_equal(bh_fd_attach(3, 0, 1, 0, 0), 0);
    assert_int_equal(bh_fd_duplicated(3, 4).compartment, NONE);
    assert_int_equal(bh_fd_attach(5, 1, 1, 0, 0), 0);
    assert_int_equal(bh_fd_attach(9000, 1, 1, 0, 0), 0);   /* another chunk */
    int ended[2] = { 0, 0 };
    bh_fd_closing_range(4, 8999, record, ended);
    assert_int_equal(ended[0], 0);   /* fd 3 still holds connection 0 */
    assert_int_equal(ended[1], 1);
    bh_fd_closing_range(0, ~0u, record, ended);
    assert_int_equal(ended[0], 1);
    assert_int_equal(ended[1], 2);
}

static void test_lookup(void **state)
{
    (void)state;
    bh_fd_table_reset();
    assert_int_equal(bh_fd_new(7, BH_FD_INET_STREAM).compartment, NONE);
    struct bh_fd_state seen = bh_fd_lookup(7);
    assert_int_equal(seen.kind, BH_FD_INET_STREAM);
    assert_int_equal(seen.compartment, -1);
    assert_int_equal(bh_fd_attach(7, 6, 1, 0, 0), 0);
    seen = bh_fd_lookup(7);
    assert_int_equal(seen.kind, BH_FD_INET_STREAM);
    assert_int_equal(seen.compartment, 6);
    assert_int_equal(bh_fd_lookup(-1).compartment, -1);
}

/* A vfork child shares the table's memory but is another process: it may
 * end nothing, and the parent's entries survive it. */
static void test_vfork_child_changes_nothing(void **state)
{
    (void)state;
    bh_fd_table_reset();
    assert_int_equal(bh_fd_attach(10, 2, 1, 0, 0), 0);
    assert_int_equal(bh_fd_attach(11, 2, 1, 0, 0), 0);
    pid_t pid = vfork();
    if (pid == 0) {
        int ended = bh_fd_release(bh_fd_detach(10)).compartment;
        ended += bh_fd_new(11, BH_FD_UNKNOWN).compartment + 1;
        ended += bh_fd_duplicated(12, 11).compartment + 1;
        int ranged[8] = { 0 };
        bh_fd_closing_range(0, ~0u, record, ranged);
        _exit(ended == NONE && ranged[2] == 0 && !bh_fd_table_owned_here() ? 0 : 1);
    }
    int status = -1;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(bh_fd_lookup(10).compartment, 2);
    assert_int_equal(bh_fd_lookup(11).compartment, 2);
    assert_int_equal(bh_fd_release(bh_fd_detach(10)).compartment, 2);
    assert_int_equal(bh_fd_release(bh_fd_detach(11)).compartment, 2);
}

/* dup (10 -> 11, then close 11) races the last close of 10. Whichever
 * wins, the connection ends exactly once: a dup must never revive it. */
enum { ROUNDS = 20000 };
static pthread_barrier_t start_line;
static _Atomic int ended_count;

static void count_if_ended(int compartment)
{
    if (compartment != NONE)
        atomic_fetch_add(&ended_count, 1);
}

static void *closer(void *arg)
{
    (void)arg;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_wait(&start_line);
        count_if_ended(bh_fd_release(bh_fd_detach(10)).compartment);
        pthread_barrier_wait(&start_line);
    }
    return NULL;
}

static void *duplicator(void *arg)
{
    (void)arg;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_wait(&start_line);
        count_if_ended(bh_fd_duplicated(10, 11).compartment);
        count_if_ended(bh_fd_release(bh_fd_detach(11)).compartment);
        pthread_barrier_wait(&start_line);
    }
    return NULL;
}

static void test_dup_races_last_close(void **state)
{
    (void)state;
    bh_fd_table_reset();
    pthread_barrier_init(&start_line, NULL, 3);
    pthread_t threads[2];
    pthread_create(&threads[0], NULL, closer, NULL);
    pthread_create(&threads[1], NULL, duplicator, NULL);
    for (int round = 0; round < ROUNDS; round++) {
        assert_int_equal(bh_fd_attach(10, 1, 1, 0, 0), 0);
        pthread_barrier_wait(&start_line);   /* go */
        pthread_barrier_wait(&start_line);   /* both done */
        if (atomic_load(&ended_count) != round + 1)
            fail_msg("round %d: %d connections ended, wanted %d", round,
                     atomic_load(&ended_count), round + 1);
    }
    pthread_join(threads[0], NULL);
    pthread_join(threads[1], NULL);
    pthread_barrier_destroy(&start_line);
}

/* Watch bits live with the connection, not the fd: a dup sees them, each
 * bit is cleared for exactly one caller, and the connection's end hands
 * back what was still set and the time it was attached with. */
static void test_watch_bits(void **state)
{
    (void)state;
    bh_fd_table_reset();
    assert_int_equal(bh_fd_watched(20), 0);
    assert_int_equal(bh_fd_attach(20, 4, 1, 0x5, 1234), 0);
    assert_int_equal(bh_fd_lookup(20).since_ns, 1234);
    assert_int_equal(bh_fd_duplicated(20, 21).compartment, NONE);
    assert_int_equal(bh_fd_watched(21), 0x5);
    assert_int_equal(bh_fd_unwatch(21, 0x1), 0x1);
    assert_int_equal(bh_fd_unwatch(20, 0x1), 0);  /* already taken */
    bh_fd_rewatch(20, 0x8);
    assert_int_equal(bh_fd_watched(21), 0xc);
    assert_int_equal(bh_fd_release(bh_fd_detach(20)).compartment, NONE);
    assert_int_equal(bh_fd_watched(20), 0);
    struct bh_fd_ended ended = bh_fd_release(bh_fd_detach(21));
    assert_int_equal(ended.compartment, 4);
    assert_int_equal(ended.watch, 0xc);
    assert_int_equal(ended.since_ns, 1234);
    assert_int_equal(bh_fd_unwatch(21, 0xff), 0);  /* nothing there now */
}

/* The watch bits as the send and receive hooks' fast path reads them
 * (core/outcome.h): from the static slot the entry's offset names, or,
 * past the static slots, as the far path looks them up. */
static uint32_t hooks_read(int fd)
{
    uint32_t entry = bh_fd_entry(fd);
    if (!bh_fd_entry_connected(entry))
        return 0;
    if (!bh_fd_slot_static(entry))
        return bh_fd_watched(fd);
    return bh_fd_static_watch(bh_fd_entry_slot(entry));
}

/* Connection ids start at the fd's number: fd 4095's is the last static
 * slot's, fd 4096's the first of a chunk. Each one's bits, read as the
 * hooks read them, are its own. */
static void test_watch_bits_at_the_static_slots_end(void **state)
{
    (void)state;
    bh_fd_table_reset();
    assert_int_equal(bh_fd_attach(4095, 1, 1, 0x3, 1), 0);
    assert_int_equal(bh_fd_attach(4096, 2, 1, 0x5, 2), 0);
    assert_true(bh_fd_slot_static(bh_fd_entry(4095)));
    assert_false(bh_fd_slot_static(bh_fd_entry(4096)));
    assert_int_equal(hooks_read(4095), 0x3);
    assert_int_equal(hooks_read(4096), 0x5);
    assert_int_equal(bh_fd_unwatch(4096, 0x4), 0x4);
    assert_int_equal(hooks_read(4096), 0x1);
    assert_int_equal(hooks_read(4095), 0x3);
    assert_int_equal(bh_fd_release(bh_fd_detach(4095)).compartment, 1);
    assert_int_equal(bh_fd_release(bh_fd_detach(4096)).compartment, 2);
    assert_int_equal(hooks_read(4096), 0);
}

static void note_id(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)fd;
    (void)compartment;
    *(uint32_t *)ctx = connection;
}

/* fd 10's connection id (it must carry one). */
static uint32_t id_of_fd_10(void)
{
    uint32_t id = UINT32_MAX;
    bh_fd_for_each(note_id, &id);
    assert_int_not_equal(id, UINT32_MAX);
    return id;
}

/* A guard names one connection of one generation on one fd: not another
 * fd, not a later connection in the same slot, not one dup2 retired. */
static void test_guard_identity(void **state)
{
    (void)state;
    bh_fd_table_reset();
    assert_int_equal(bh_fd_attach(10, 1, 1, 0, 0), 0);
    uint32_t id = id_of_fd_10(), generation = bh_fd_generation(id);
    assert_int_equal(bh_fd_guard(10, id, generation), 1);
    bh_fd_unguard(id);
    assert_int_equal(bh_fd_guard(11, id, generation), 0);
    assert_int_equal(bh_fd_guard(10, id, generation + 1), 0);
    assert_int_equal(bh_fd_release(bh_fd_detach(10)).compartment, 1);
    assert_int_equal(bh_fd_guard(10, id, generation), 0);
    assert_int_equal(bh_fd_attach(10, 1, 1, 0, 0), 0);  /* the same slot again */
    assert_int_equal(id_of_fd_10(), id);
    assert_int_equal(bh_fd_guard(10, id, generation), 0);
    assert_int_equal(bh_fd_guard(10, id, bh_fd_generation(id)), 1);
    bh_fd_unguard(id);
    bh_fd_retire(10);
    assert_int_equal(bh_fd_guard(10, id, bh_fd_generation(id)), 0);
}

static _Atomic int closed;

static void *close_fd_10(void *unused)
{
    (void)unused;
    bh_fd_release(bh_fd_detach(10));
    atomic_store(&closed, 1);
    return NULL;
}

/* A close of a guarded fd returns only once the guard is gone. */
static void test_close_waits_for_guard(void **state)
{
    (void)state;
    bh_fd_table_reset();
    assert_int_equal(bh_fd_attach(10, 1, 1, 0, 0), 0);
    uint32_t id = id_of_fd_10();
    assert_int_equal(bh_fd_guard(10, id, bh_fd_generation(id)), 1);
    atomic_store(&closed, 0);
    pthread_t thread;
    pthread_create(&thread, NULL, close_fd_10, NULL);
    usleep(50 * 1000);
    int closed_early = atomic_load(&closed);
    bh_fd_unguard(id);
    pthread_join(thread, NULL);
    assert_int_equal(closed_early, 0);
    assert_int_equal(atomic_load(&closed), 1);
}

/* Guard against close and reuse, with real sockets: one thread closes a
 * socket's fd and opens a new socket on the same number (the lowest free
 * one) over and over, attaching each; another guards whatever connection
 * that fd carries and, while guarded, asks the kernel which socket the fd
 * is. It must be the one of the generation the guard named, every time. */
enum { REUSES = 20000, INODES = 1024 };
static _Atomic unsigned long inode_of[INODES];  /* by generation */
static _Atomic int reusing;
static int reused;  /* the fd number; its connection id is the same */

static unsigned long inode(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* cmocka's checks belong to the main thread: this one says what went
 * wrong in its result. */
static void *reuse_fd(void *unused)
{
    (void)unused;
    const char *wrong = NULL;
    for (int i = 0; i < REUSES && !wrong && atomic_load(&reusing); i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        uint32_t next = bh_fd_generation((uint32_t)reused) + 1;
        atomic_store(&inode_of[next % INODES], inode(fd));
        if (fd != reused)
            wrong = "a new socket did not get the number";
        else if (bh_fd_attach(fd, 1, 1, 0, 0) < 0)
            wrong = "attach failed";
        if (i % 64 == 0)
            sched_yield();  /* the guarding thread gets in on one core too */
        uint32_t detached = bh_fd_detach(fd);
        close(fd);
        bh_fd_release(detached);
    }
    atomic_store(&reusing, 0);
    return (void *)wrong;
}

static void test_guard_against_reuse(void **state)
{
    (void)state;
    bh_fd_table_reset();
    reused = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(reused >= 0);
    close(reused);
    atomic_store(&reusing, 1);
    pthread_t thread;
    pthread_create(&thread, NULL, reuse_fd, NULL);
    uint32_t id = (uint32_t)reused;
    long guarded = 0;
    while (atomic_load(&reusing)) {
        uint32_t generation = bh_fd_generation(id);
        if (!bh_fd_guard(reused, id, generation))
            continue;
        unsigned long seen = inode(reused);
        unsigned long wanted = atomic_load(&inode_of[generation % INODES]);
        bh_fd_unguard(id);
        if (seen != wanted) {
            atomic_store(&reusing, 0);
            pthread_join(thread, NULL);
            fail_msg("guarded generation %u: fd %d is inode %lu, not %lu", generation,
                     reused, seen, wanted);
        }
        guarded++;
    }
    void *wrong = NULL;
    pthread_join(thread, &wrong);
    if (wrong)
        fail_msg("%s", (const char *)wrong);
    assert_true(guarded > 0);
}

int main(void)
{
    enum { SEQUENCES = sizeof sequences / sizeof sequences[0] };
    struct CMUnitTest tests[SEQUENCES + 9];
    for (size_t i = 0; i < SEQUENCES; i++)
        tests[i] = (struct CMUnitTest){ .name = sequences[i].name,
                                        .test_func = test_sequence,
                                        .initial_state = (void *)&sequences[i] };
    tests[SEQUENCES] = (struct CMUnitTest)cmocka_unit_test(test_closing_range);
    tests[SEQUENCES + 1] = (struct CMUnitTest)cmocka_unit_test(test_lookup);
    tests[SEQUENCES + 2] = (struct CMUnitTest)cmocka_unit_test(test_vfork_child_changes_nothing);
    tests[SEQUENCES + 3] = (struct CMUnitTest)cmocka_unit_test(test_dup_races_last_close);
    tests[SEQUENCES + 4] = (struct CMUnitTest)cmocka_unit_test(test_watch_bits);
    tests[SEQUENCES + 5] = (struct CMUnitTest)cmocka_unit_test(test_guard_identity);
    tests[SEQUENCES + 6] = (struct CMUnitTest)cmocka_unit_test(test_close_waits_for_guard);
    tests[SEQUENCES + 7] = (struct CMUnitTest)cmocka_unit_test(test_guard_against_reuse);
    tests[SEQUENCES + 8] =
        (struct CMUnitTest)cmocka_unit_test(test_watch_bits_at_the_static_slots_end);
    return _cmocka_run_group_tests("fd_table", tests, SEQUENCES + 9, NULL, NULL);
}
