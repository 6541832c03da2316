/* The arithmetic of the adaptive controllers: what one window of samples
 * does to a compartment's limit. Pure functions: no shared memory, no
 * clock, no process state, so that tables of windows can drive them
 * (tests/unit/test_adaptive.c). adaptive.c gathers the windows and applies
 * what comes out.
 *
 * The estimate is kept in thousandths of a permit: a controller moves by
 * fractions (x 0.9, a smoothed step), and the limit it applies is the
 * estimate rounded down.
 *
 * Both controllers share three protections:
 *   - low traffic: a window with fewer than BH_ADAPTIVE_MIN_EVENTS samples
 *     and drops together changes nothing, not even the baseline;
 *   - application-limited: a window in which in use never reached the
 *     limit (and no connect found it full) may lower the limit but never
 *     raise it: nothing showed that more would be used;
 *   - the clamp: the limit stays within min_limit and max_limit.
 *
 * The baseline (the no-load latency the gradient compares with) forgets
 * quickly downward and slowly upward: a window faster than the baseline
 * becomes the baseline at once, so a recovered downstream is seen in one
 * window; a slower one within the tolerance (below) moves it 1/256 of
 * the way, and one past it not at all: the limit settles where every
 * window is past it, so the controller's own queue never creeps into
 * the baseline (Gradient2's known creep), while a busy machine's noise
 * under the capacity slowly does.
 *
 * A downstream that got slower is told from queueing by lowering the
 * limit: queueing latency falls with the limit, a slower service's does
 * not. So a window at the pin (below), with no drops, whose latency is
 * still above SLOWER_AT_PIN x the baseline is a measurement of the new
 * normal, taken for the baseline at once: a service 4 x slower is back
 * near its capacity within seconds, not at the next re-measure. Not at
 * the tolerance: at a capacity of 2 or 3 the limit dips to the pin
 * often, and one window of a busy machine's noise there would become a
 * baseline the queue above the capacity hides under.
 *
 * The tolerance: the gradient reads latency up to 1.2 x the baseline as
 * no queue. Scheduler noise on a busy machine adds milliseconds to every
 * answer whatever the limit; read as queueing, it would hold the limit
 * far under the capacity. A real queue above the capacity C still shows,
 * as latency in proportion to limit / C. The controller settles at about
 * 1.2 C + the allowance, with a fifth of C queued: enough that a slot
 * freed at the downstream finds a request waiting, which at C + 1 it
 * often does not (the gap between one answer and the next connect), at
 * a latency of 1.2 to 1.3 x the baseline.
 *
 * None of that can undo a wrong first baseline: a controller that starts far
 * above the downstream's capacity sees the queue it makes in its first
 * window, takes that for no load, and the gradient stays 1. So gradient
 * re-measures, as Envoy's adaptive concurrency and brpc do: at its first
 * window, and then every PROBE_EVERY_MS plus up to PROBE_JITTER_MS, it
 * pins the limit at max(min_limit, 2) for two windows: the first drains
 * what the old limit let in, the second is the new baseline, outright
 * (up or down); then the limit goes back to where it was and the
 * gradient brings it down from there if it queues. A drain window that
 * saw more in use than the pin (a deep queue at the downstream still
 * answering) is followed by one more before the measure, so that the
 * old queue's answers do not make the baseline: at most three windows.
 * 2 rather than 1: twice the samples a window, at no queue for any
 * downstream that serves two at once. Once a minute (60 s and 15%
 * jitter, as Envoy's example configuration), since a wrong baseline is
 * the start's, re-measured at once, and later ones only creep; each
 * re-measure costs about a second at the pin, and the jitter keeps hosts
 * from pinning together. A window in which in use never exceeded the pin
 * is itself such a measurement: it is taken instead, with no pin (low
 * traffic never sees the limit move), and so is a window at the pin that
 * was still slow (above); either puts the next re-measure a full period
 * off. The drain only ends on a window that closed with the pin live,
 * so a pin lost with its process is applied by the next window's closer
 * and drained before measuring. A phase whose estimate is not the pin is
 * stale: still the estimate it would resume, the pin was never swapped
 * in (its closer died) and the next window pins; else an operator moved
 * it (bulkhead set), and the re-measure is put off to the next one.
 *
 * Idle windows: a window that did not reach the limit and whose peak in
 * use stayed under half of it does not lower the limit on latency. Our
 * queue is not what made it slow (a stall, another client), and a limit
 * that binds nothing cannot fix it: on a busy machine at low traffic a
 * window of ten samples with one stall in it would otherwise move the
 * limit. Drops still lower it. */
#include "adaptive/adaptive.h"

enum {
    MILLI = 1000,
    BASELINE_UP_SLOW = 256,  /* the baseline's upward step: 1/256 of the gap */
    PROBE_LIMIT = 2,         /* the re-measure's pin, at least min_limit */
};
static const int64_t PROBE_EVERY_MS = 60000;
static const int64_t PROBE_JITTER_MS = 9000;

/* Gradient: the gradient is TOLERANCE x baseline / recent, clamped to
 * [GRADIENT_MIN, 1]; the new limit is limit x gradient + queue, moving
 * GROW_SMOOTHING of the way up or SHRINK_SMOOTHING of the way down. */
static const double TOLERANCE = 1.2;
/* A window at the pin this much slower than the baseline: the downstream
 * got slower (the gradient reaches the pin only past 1.8 x). */
static const double SLOWER_AT_PIN = 1.5;
static const double GRADIENT_MIN = 0.5;
static const double GROW_SMOOTHING = 1.0;
static const double SHRINK_SMOOTHING = 0.5;
/* AIMD, and the gradient's ceiling in a window with drops. */
static const double BACKOFF = 0.9;

static double clamp(double value, double low, double high)
{
    return value < low ? low : value > high ? high : value;
}

/* The queue allowance: what the limit may grow by when latency is at the
 * baseline. One permit, and a little more for large limits (log2 / 4: 2
 * at 64, 3.5 at 16,384), so that growth from min_limit is quick but the
 * limit settles near the downstream's capacity rather than far above. */
static double queue_allowance(double limit)
{
    double allowance = 1;
    for (double power = 16; power <= limit; power *= 2)
        allowance += 0.25;
    return allowance;
}

/* Down at once; up slowly, and only from a window the gradient reads as
 * no queue: a window above the tolerance is the controller's own queue
 * (or a slower downstream, learned at the pin), and the limit it settles
 * at keeps every window there. */
static void learn_baseline(struct bh_adaptive_state *state, int64_t recent_ns)
{
    if (state->baseline_ns == 0 || recent_ns < state->baseline_ns)
        state->baseline_ns = recent_ns;
    else if ((double)recent_ns <= TOLERANCE * (double)state->baseline_ns)
        state->baseline_ns += (recent_ns - state->baseline_ns) / BASELINE_UP_SLOW;
}

static enum bh_adaptive_reason gradient(struct bh_adaptive_state *state,
                                        const struct bh_adaptive_window *window,
                                        double limit, double *next)
{
    double factor = 1;
    if (window->samples > 0) {
        int64_t baseline = state->baseline_ns ? state->baseline_ns : window->latency_ns;
        factor = clamp(TOLERANCE * (double)baseline / (double)window->latency_ns,
                       GRADIENT_MIN, 1);
    }
    if (window->drops && factor > BACKOFF)
        factor = BACKOFF;
    double target = limit * factor + queue_allowance(limit);
    *next = limit + (target - limit) * (target >= limit ? GROW_SMOOTHING : SHRINK_SMOOTHING);
    if (*next >= limit)
        return BH_ADAPTIVE_GREW;
    return window->drops ? BH_ADAPTIVE_DROPS : BH_ADAPTIVE_LATENCY;
}

static enum bh_adaptive_reason aimd(const struct bh_adaptive_settings *settings,
                                    const struct bh_adaptive_window *window,
                                    double limit, double *next)
{
    int slow = settings->latency_ms > 0 && window->samples > 0 &&
               window->latency_ns > (int64_t)settings->latency_ms * 1000000;
    *next = window->drops || slow ? limit * BACKOFF : limit + 1;
    return window->drops ? BH_ADAPTIVE_DROPS : slow ? BH_ADAPTIVE_LATENCY
                                                   : BH_ADAPTIVE_GREW;
}

static int probe_limit(const struct bh_adaptive_settings *settings)
{
    int pin = settings->min_limit > PROBE_LIMIT ? settings->min_limit : PROBE_LIMIT;
    return pin < settings->max_limit ? pin : settings->max_limit;
}

/* The jitter comes from the clock's microseconds: unrelated across hosts. */
static void schedule_probe(struct bh_adaptive_state *state, int64_t now_ns)
{
    int64_t jitter_ms = now_ns / 1000 % PROBE_JITTER_MS;
    state->probe = BH_PROBE_NONE;
    state->probe_at_ns = now_ns + (PROBE_EVERY_MS + jitter_ms) * 1000000;
}

static int slower_at_pin(const struct bh_adaptive_state *state,
                         const struct bh_adaptive_window *window)
{
    return window->drops == 0 &&
           (double)window->latency_ns > SLOWER_AT_PIN * (double)state->baseline_ns;
}

/* The re-measure (see the top): NONE when the window goes on to the
 * gradient. */
static enum bh_adaptive_reason remeasure(const struct bh_adaptive_settings *settings,
                                         struct bh_adaptive_state *state,
                                         const struct bh_adaptive_window *window)
{
    int pin = probe_limit(settings);
    if (state->probe != BH_PROBE_NONE && bh_adaptive_limit_of(state) != pin) {
        if (state->estimate_milli == state->resume_milli)
            state->probe = BH_PROBE_NONE;  /* the pin never came: pin now */
        else
            schedule_probe(state, window->closed_ns);  /* moved by an operator: theirs */
    }
    if (state->probe == BH_PROBE_DRAINING || state->probe == BH_PROBE_DRAINING_LAST) {
        if (window->limit <= pin)
            state->probe = window->peak <= pin || state->probe == BH_PROBE_DRAINING_LAST
                ? BH_PROBE_MEASURING : BH_PROBE_DRAINING_LAST;
        return BH_ADAPTIVE_REMEASURE;
    }
    if (state->probe == BH_PROBE_MEASURING) {
        if (window->samples > 0)
            state->baseline_ns = window->latency_ns;
        state->estimate_milli = state->resume_milli;
        schedule_probe(state, window->closed_ns);
        return BH_ADAPTIVE_RESUMED;
    }
    int due = window->closed_ns >= state->probe_at_ns;
    if (window->peak <= pin && window->samples > 0 &&
        (due ? !window->reached : window->limit <= pin && slower_at_pin(state, window))) {
        state->baseline_ns = window->latency_ns;  /* no queue of ours: as good */
        schedule_probe(state, window->closed_ns);
        return BH_ADAPTIVE_NONE;
    }
    if (!due)
        return BH_ADAPTIVE_NONE;
    state->resume_milli = state->estimate_milli;
    state->estimate_milli = (int64_t)pin * MILLI;
    state->probe = BH_PROBE_DRAINING;
    return BH_ADAPTIVE_REMEASURE;
}

enum bh_adaptive_reason bh_adaptive_step(const struct bh_adaptive_settings *settings,
                                         struct bh_adaptive_state *state,
                                         const struct bh_adaptive_window *window)
{
    if (window->samples + window->drops < BH_ADAPTIVE_MIN_EVENTS)
        return BH_ADAPTIVE_LOW_TRAFFIC;
    if (settings->mode == BH_ADAPTIVE_GRADIENT) {
        enum bh_adaptive_reason probing = remeasure(settings, state, window);
        if (probing != BH_ADAPTIVE_NONE)
            return probing;
    }
    double limit = (double)state->estimate_milli / MILLI, next;
    enum bh_adaptive_reason reason = settings->mode == BH_ADAPTIVE_AIMD
        ? aimd(settings, window, limit, &next)
        : gradient(state, window, limit, &next);
    int idle = !window->reached && 2.0 * window->peak < limit;
    if ((next > limit && !window->reached) ||
        (next < limit && idle && reason == BH_ADAPTIVE_LATENCY)) {
        next = limit;
        reason = BH_ADAPTIVE_APP_LIMITED;
    }
    next = clamp(next, settings->min_limit, settings->max_limit);
    if (window->samples > 0)
        learn_baseline(state, window->latency_ns);
    state->estimate_milli = (int64_t)(next * MILLI + 0.5);
    return reason;
}

int bh_adaptive_limit_of(const struct bh_adaptive_state *state)
{
    return (int)(state->estimate_milli / MILLI);
}

const char *bh_adaptive_reason_name(enum bh_adaptive_reason reason)
{
    switch (reason) {
    case BH_ADAPTIVE_LOW_TRAFFIC: return "low traffic";
    case BH_ADAPTIVE_APP_LIMITED: return "app-limited";
    case BH_ADAPTIVE_GREW: return "grew";
    case BH_ADAPTIVE_LATENCY: return "latency";
    case BH_ADAPTIVE_DROPS: return "drops";
    case BH_ADAPTIVE_SET: return "set";
    case BH_ADAPTIVE_REMEASURE: return "re-measure";
    case BH_ADAPTIVE_RESUMED: return "resumed";
    case BH_ADAPTIVE_NONE: break;
    }
    return "none";
}
