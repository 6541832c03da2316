/* fixed_clock: the clock of the cost section's callgrind and strace runs,
 * preloaded beside the shim (and alone for the bare runs); the shim itself
 * is the one `make` built.
 *
 * The shim's instruction count per connect+close depends on the time: the
 * first figure of each second claims and clears that second's slot of the
 * window ring, the first of each 8 s its histogram period (200 buckets),
 * a hold that crosses a second is spread over both, and a hold's or a
 * connect's length picks the histogram bucket's branch. Under callgrind
 * the 2,000 extra iterations of the longer run span seconds that depend on
 * the machine's speed and load, so with the real clock the marginal mixed
 * per-operation cost with per-second cost. This clock makes time a function
 * of the program's own steps: every read of any clock returns the previous
 * reading plus STEP ns (BENCH_CLOCK_STEP_NS, default 25,000), starting at
 * 1,000,000,000 s (a period's and the ring's first slot; later than any
 * real CLOCK_MONOTONIC, so no real-clock figure can be newer).
 *
 * bench_clock_next_second() (found by bench_client through dlsym) moves
 * the clock to the start of the next second: the cost section's "per
 * second of traffic" line puts one between operations or inside a hold.
 *
 * At exit, a run whose clock crossed a second it was not moved to fails
 * (exit 3, one line on stderr): its figures would hold window upkeep. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { NS_PER_S = 1000000000 };

static const int64_t ORIGIN_NS = (int64_t)1000000000 * NS_PER_S;
static int64_t step_ns = 25000;
static _Atomic int64_t now_ns = (int64_t)1000000000 * NS_PER_S;
static _Atomic int64_t seconds_moved;

__attribute__((constructor)) static void read_step(void)
{
    const char *text = getenv("BENCH_CLOCK_STEP_NS");
    if (text && *text)
        step_ns = atoll(text);
}

int clock_gettime(clockid_t clock, struct timespec *ts)
{
    (void)clock;
    int64_t t = atomic_fetch_add(&now_ns, step_ns) + step_ns;
    ts->tv_sec = t / NS_PER_S;
    ts->tv_nsec = t % NS_PER_S;
    return 0;
}

void bench_clock_next_second(void);

void bench_clock_next_second(void)
{
    int64_t t = atomic_load(&now_ns);
    while (!atomic_compare_exchange_weak(&now_ns, &t, (t / NS_PER_S + 1) * NS_PER_S))
        ;
    atomic_fetch_add(&seconds_moved, 1);
}

__attribute__((destructor)) static void check_seconds(void)
{
    int64_t crossed = atomic_load(&now_ns) / NS_PER_S - ORIGIN_NS / NS_PER_S;
    if (crossed != atomic_load(&seconds_moved)) {
        fprintf(stderr, "fixed_clock: the run crossed %lld seconds on its own (reads of "
                "%lld ns each): set a smaller BENCH_CLOCK_STEP_NS\n",
                (long long)(crossed - atomic_load(&seconds_moved)), (long long)step_ns);
        _exit(3);
    }
}
