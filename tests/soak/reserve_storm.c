/* A random-kill storm over a compartment with reserves, in a namespace of
 * its own (removed at the end). Each round, workers of every kind (members
 * of each reserve, non-members, weights 1 and 2) take, wait, hold and give
 * back permits while the reserves are resized under them; the round ends
 * by killing every worker, each with SIGKILL or SIGTERM at a random
 * moment, mid-wait included. Then what fresh processes can take must be
 * exactly every pool's live size, and once they give it back, every
 * pool's semaphore must read exactly its size free and nothing owed: a
 * permit lost or made in a round fails the run.
 *
 *   reserve_storm [SECONDS] [SEED]     default 20 s, seed from the clock
 *
 * Exit 0 when every round balanced; 1 with the first round that did not. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "permits/permits.h"

enum { LIMIT = 8, RESERVES = 2, WORKERS = 12 };

static struct bh_namespace ns;
static int compartment;
static const char *const classes[RESERVES] = { "env=CLASS=gold", "env=CLASS=silver" };

static int64_t now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* A worker: member of `reserve` (-1: none), taking `weight` at a time. */
static void work(int reserve, int weight, unsigned seed)
{
    bh_permits_forget_after_fork(&ns);
    srand(seed);
    struct bh_permit_ask ask = { compartment, reserve, weight };
    for (;;) {
        enum bh_acquire_result got = rand() % 2
            ? bh_permit_try(&ns, &ask)
            : bh_permit_wait(&ns, &ask, rand() % 50, WORKERS);
        if (got == BH_ACQUIRED) {
            usleep((useconds_t)(rand() % 3000));
            bh_permit_release(&ns, compartment, weight);
        }
    }
}

/* A fresh process takes all it can as a member of `reserve` (-1: none)
 * and says how many; it gives them back once `go` is readable. */
static pid_t drain(int reserve, int counted[2], int go[2])
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    close(go[1]);  /* or the parent's close would never reach us */
    bh_permits_forget_after_fork(&ns);
    struct bh_permit_ask ask = { compartment, reserve, 1 };
    int taken = 0;
    while (bh_permit_try(&ns, &ask) == BH_ACQUIRED)
        taken++;
    if (write(counted[1], &taken, sizeof taken) != sizeof taken)
        _exit(1);
    char byte;
    while (read(go[0], &byte, 1) < 0 && errno == EINTR)
        ;
    for (int i = 0; i < taken; i++)
        bh_permit_release(&ns, compartment, 1);
    _exit(0);
}

/* The live size of reserve r, or of the common pool (r = -1). */
static int pool_size(int r)
{
    struct bh_compartment_view view;
    struct bh_reserve_view reserve;
    if (r >= 0)
        return bh_reserve_read(&ns, compartment, r, &reserve) < 0 ? -1 : reserve.permits;
    return bh_compartment_read(&ns, compartment, &view) < 0 ? -1 : view.limit - view.reserved;
}

/* The common pool first (so members find only their reserve), then each
 * reserve: each must give exactly its live size. */
static int drains_match(int round)
{
    int counted[2], go[2], ok = 1;
    pid_t pids[1 + RESERVES];
    if (pipe(counted) < 0 || pipe(go) < 0)
        return 0;
    for (int p = 0; p <= RESERVES; p++) {
        pids[p] = drain(p - 1, counted, go);
        int taken = -1;
        if (read(counted[0], &taken, sizeof taken) != sizeof taken)
            taken = -1;
        int size = pool_size(p - 1);
        if (taken != size) {
            fprintf(stderr, "round %d: %s: took %d of %d\n", round,
                    p == 0 ? "common pool" : classes[p - 1], taken, size);
            ok = 0;
        }
    }
    close(go[1]);
    for (int p = 0; p <= RESERVES; p++)
        waitpid(pids[p], NULL, 0);
    close(go[0]);
    close(counted[0]);
    close(counted[1]);
    return ok;
}

/* With nobody holding anything: every semaphore exactly its pool's size. */
static int semaphores_match(int round)
{
    struct bh_compartment_view view;
    int ok = bh_compartment_read(&ns, compartment, &view) == 0 &&
             view.in_use == 0 && view.common_owes == 0 &&
             view.common_free == view.limit - view.reserved;
    if (!ok)
        fprintf(stderr, "round %d: common pool: %d free, %d owed, %d in use; size %d\n",
                round, view.common_free, view.common_owes, view.in_use,
                view.limit - view.reserved);
    for (int r = 0; r < RESERVES; r++) {
        struct bh_reserve_view reserve;
        if (bh_reserve_read(&ns, compartment, r, &reserve) < 0 ||
            reserve.free_now != reserve.permits || reserve.owes != 0) {
            fprintf(stderr, "round %d: %s: %d free, %d owed; size %d\n", round, classes[r],
                    reserve.free_now, reserve.owes, reserve.permits);
            ok = 0;
        }
    }
    return ok;
}

static void storm(unsigned seed)
{
    pid_t workers[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        workers[w] = fork();
        if (workers[w] == 0)
            work(w % (RESERVES + 1) - 1, 1 + w % 2, seed + (unsigned)w);
    }
    /* Reserves resized under held permits, kills at random moments. */
    for (int w = 0; w < WORKERS; w++) {
        usleep((useconds_t)(rand() % 20000));
        if (rand() % 3 == 0)
            bh_reserve_set(&ns, compartment, rand() % RESERVES, rand() % 4);
        kill(workers[w], rand() % 2 ? SIGKILL : SIGTERM);
    }
    for (int w = 0; w < WORKERS; w++)
        waitpid(workers[w], NULL, 0);
}

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 20;
    unsigned seed = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : (unsigned)time(NULL);
    char name[64], err[256];
    snprintf(name, sizeof name, "soak-storm-%d", (int)getpid());
    if (bh_namespace_open(name, 1, &ns, err, sizeof err) < 0) {
        fprintf(stderr, "reserve_storm: %s\n", err);
        return 1;
    }
    struct bh_compartment rules = { .limit = LIMIT, .reserve_count = RESERVES };
    snprintf(rules.name, sizeof rules.name, "storm");
    for (int r = 0; r < RESERVES; r++) {
        rules.reserves[r].permits = r + 1;
        snprintf(rules.reserves[r].who.text, BH_WHO_MAX, "%s", classes[r]);
    }
    int live;
    compartment = bh_compartment_register(&ns, &rules, LIMIT, &live);
    srand(seed);
    int round = 0, ok = compartment >= 0;
    for (int64_t end = now_ms() + seconds * 1000; ok && now_ms() < end; round++) {
        storm(seed + (unsigned)round * WORKERS);
        ok = drains_match(round) && semaphores_match(round);
    }
    printf("reserve_storm: %d rounds of %d workers, seed %u: %s\n", round, WORKERS, seed,
           ok ? "every pool balanced" : "FAILED");
    bh_namespace_remove(&ns);
    return ok ? 0 : 1;
}
