"""The bench's adaptive section: limits that size themselves, against a
downstream of known capacity.

bench.py calls section() (`--only adaptive`, and in the full run); the
plumbing is one (plumbing.py): its processes, namespaces, raw numbers and
cleanup. See bench/README, section 10, for what is measured.

The downstream is tests/server/capacityserver.py: CAPACITY requests at a
time for SERVICE_MS each, the rest queued inside it, so a limit above
CAPACITY only adds queueing. The load is WORKERS closed-loop threads of one
bench_client under the shim (fail fast: a refused connect retries after
5 to 15 ms). CAPACITY / SERVICE_MS = 320 answers/s at best: about 300
answers and 5,500 refusals a second take 0.4 of one CPU (the workers 0.3,
the server 0.07), so the two cores are never what bounds it.
"""

import os
import socket
import statistics
import subprocess
import sys
import time

import cost
import plumbing
from plumbing import (BASE_ENV, BenchError, LIVE, LIVE_LOCK, STARTED, check_rules,
                      env_for, kv, live_limit, log, new_namespace, note, record, stop,
                      wait_ready, write_rules)

CAPACITY = 8
SERVICE_MS = 25
GOOD_MS = 3 * SERVICE_MS      # an answer later than this is no answer
WORKERS = 64
FIXED = (1, 2, 4, 6, 8, 10, 12, 16, 24, 32, 48, 64)
CONTROLLERS = ("gradient", "aimd")
AIMD_LATENCY_MS = 3 * SERVICE_MS // 2  # aimd's threshold: the latency it steers below
# The adaptive runs' first limits: an operator's guess 4 x too low, and one
# 4 x too high, where a fixed limit serves nothing.
SWEEP_STARTS = (CAPACITY // 4, 4 * CAPACITY)
SWEEP_MAX = 64
# The same at twice the capacity, around it: the limits where raw goodput
# (every answer, late or not) is whole, for gradient's raw share.
WIDE = 2 * CAPACITY
WIDE_FIXED = (WIDE, WIDE + 2, WIDE + 4, WIDE + 8, 2 * WIDE)
WIDE_STARTS = (WIDE // 4, 4 * WIDE)
RAW_SHARE = 0.98
WARMUP_MS = dict(fixed=1000, adaptive=5000)  # adaptive: the down-settle budget
MEASURE_MS = dict(full=4000, quick=2000)
STEPS = ((CAPACITY, 6.0), (2, 10.0), (16, 20.0))  # capacity, seconds at it
STEP_START = CAPACITY         # where the operator set the limit: right at first
SETTLE_BUDGET_S = dict(down=5.0, up=15.0)
POLL_S = 0.1
NOISE_LOOPS = 2               # CPU-bound processes beside the busy machine's steps
NOISE_REACH_S = 15.0          # ... by when the limit reaches C + 1 after the step up
SLOW_FACTOR = 4
SLOW_SCHEDULE = ((1, 6.0), (SLOW_FACTOR, 24.0))  # service time x, seconds at it
SLOW_BUDGET_S = 12.0
LOW_RATE_S = dict(full=60, quick=20)  # 1 request a second for this long
LOW_START = 2 * CAPACITY
CAPACITY_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                               "server", "capacityserver.py")


def start_server(tmp, name):
    """A capacity server at CAPACITY; returns (port, control port)."""
    ready = os.path.join(tmp, f"{name}.ready")
    p = subprocess.Popen([sys.executable, CAPACITY_SERVER, "--ready", ready,
                          "--capacity", str(CAPACITY), "--service-ms", str(SERVICE_MS)],
                         env=BASE_ENV)
    STARTED.append(p)
    note("pids", p.pid)
    port, ctl = map(int, wait_ready(p, ready, "the capacity server").split())
    return port, ctl


def server(ctl, command):
    """One control command (stat, capacity N, reset); the server's figures."""
    with socket.create_connection(("127.0.0.1", ctl), timeout=5) as s:
        s.sendall(f"{command}\n".encode())
        answer = s.makefile().readline()
    if not answer.startswith("capacity="):
        raise BenchError(f"capacity server: {command}: {answer.strip()!r}")
    return {k: int(v) for k, v in (t.split("=") for t in answer.split())}


def rules(tmp, base, tag, port, limit, controller=None):
    """One fail-fast compartment, [downstream], over the server's port; a
    namespace of its own. Returns the file's path."""
    ns = new_namespace(base, f"ad{tag}")
    path = os.path.join(tmp, f"{ns}.ini")
    lines = ["[global]", f"namespace = {ns}", "log = warn", "", "[downstream]",
             f"limit = {limit}", "wait_ms = 0", f"match = 127.0.0.1:{port}"]
    if controller:
        lines.append(f"adaptive = {controller}")
        lines.append(f"max_limit = {max(SWEEP_MAX, 4 * limit)}")
        if controller == "aimd":
            lines.append(f"adaptive_latency_ms = {AIMD_LATENCY_MS}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    check_rules(path)
    return path


def start_load(port, cfg, workers, ms, pace_ms=0):
    """bench_client capacity in the background; returns (Popen, its start
    on time.monotonic()'s clock, which is CLOCK_MONOTONIC)."""
    p = subprocess.Popen([plumbing.CLIENT, "capacity", "127.0.0.1", str(port), str(workers),
                          str(int(ms)), str(pace_ms)], env=env_for(cfg),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with LIVE_LOCK:
        LIVE.add(p)
    first = p.stdout.readline()
    if not first.startswith("start_ns="):
        p.kill()
        raise BenchError(f"bench_client capacity: {p.communicate()[1].strip()}")
    return p, int(first.split("=")[1]) / 1e9


def finish_load(p):
    """Waits for the load; returns ([(end s, latency ms)], totals)."""
    out, err = p.communicate(timeout=300)
    with LIVE_LOCK:
        LIVE.discard(p)
    if p.returncode != 0:
        raise BenchError(f"bench_client capacity exited {p.returncode}: {err.strip()}")
    answers = [(int(w[1]) / 1e6, int(w[2]) / 1e3)
               for w in (line.split() for line in out.splitlines() if line.startswith("r "))]
    return answers, kv(out)


def goodput(answers, t0, t1):
    """Answers ending in [t0, t1) within GOOD_MS, per second."""
    return sum(1 for end, lat in answers if t0 <= end < t1 and lat <= GOOD_MS) / (t1 - t0)


def answered(answers, t0, t1):
    """Every answer ending in [t0, t1), late or not, per second: raw goodput."""
    return sum(1 for end, _ in answers if t0 <= end < t1) / (t1 - t0)


def p50(answers, t0, t1):
    return statistics.median([lat for end, lat in answers if t0 <= end < t1] or [float("nan")])


def p99(answers, t0, t1):
    lats = sorted(lat for end, lat in answers if t0 <= end < t1)
    return lats[min(len(lats) - 1, int(0.99 * len(lats)))] if lats else float("nan")


# ---------------------------------------------------------------------------
# the sweep: every fixed limit, and the controllers from a bad start

def sweep(tmp, base, port, ctl, measure_ms, capacity, fixed, starts):
    """Every limit of fixed, and the controllers from each of starts, at
    capacity C. Returns {variant: (goodput/s, answers/s, p50 ms, p99 ms,
    refused/s, server's max open, final limit)}."""
    variants = [(f"fixed {n}", n, None) for n in fixed]
    variants += [(f"{c} from {n}", n, c) for c in CONTROLLERS for n in starts]
    server(ctl, f"capacity {capacity}")
    results = {}
    for label, limit, controller in variants:
        cfg = rules(tmp, base, f"c{capacity}{label.replace(' ', '')}", port, limit, controller)
        warm = WARMUP_MS["adaptive" if controller else "fixed"]
        server(ctl, "reset")
        p, _ = start_load(port, cfg, WORKERS, warm + measure_ms)
        answers, totals = finish_load(p)
        srv = server(ctl, "stat")
        t0, t1 = warm / 1000, (warm + measure_ms) / 1000
        results[label] = (goodput(answers, t0, t1), answered(answers, t0, t1),
                          p50(answers, t0, t1), p99(answers, t0, t1),
                          int(totals["refused"]) / t1,  # over the whole run
                          srv["max_open"], live_limit(cfg))
        for metric, value in zip(("goodput_per_s", "answers_per_s", "p50_ms", "p99_ms",
                                  "refused_per_s", "server_max_open", "final_limit"),
                                 results[label]):
            record("adaptive", f"C={capacity} {label}", 0, metric, f"{value:.1f}")
    server(ctl, f"capacity {CAPACITY}")
    return results


def best_fixed(results, column):
    """(value, label) of the fixed limit best in results' column."""
    return max((r[column], label) for label, r in results.items() if label.startswith("fixed"))


def sweep_lines(results):
    best, raw = best_fixed(results, 0), best_fixed(results, 1)
    lines = [f"    {'limit':<20} {'goodput/s':>10} {'answers/s':>10} {'p50 ms':>7} {'p99 ms':>7} "
             f"{'refused/s':>10} {'server max':>11} {'final limit':>12}"]
    for label, (good, total, mid, tail, refused, srv_max, final) in results.items():
        marks = [what for what, (_, at) in (("goodput", best), ("answers", raw)) if at == label]
        mark = f"  <- best fixed ({', '.join(marks)})" if marks else ""
        lines.append(f"    {label:<20} {good:>10.0f} {total:>10.0f} {mid:>7.1f} {tail:>7.1f} "
                     f"{refused:>10.0f} {srv_max:>11} {final:>12}{mark}")
    return lines


def stalls(results, capacity):
    """The machine's own stalls in a sweep: the worst p99 of the fixed
    limits up to the capacity, which queue nothing, so anything past 3 x S
    there is the scheduler's. None when they show none, else the line's
    reason."""
    tail, label = max((r[3], label) for label, r in results.items()
                      if label.startswith("fixed") and int(label.split()[1]) <= capacity)
    return (None if tail <= GOOD_MS else
            f"the machine stalled: {label}, which queues nothing, had a p99 of {tail:.0f} ms")


def judged(ok, text, stalled):
    """A sweep's check: a miss in a sweep the machine stalled is NOISY
    (ok None): every variant's 4 s took the stalls, by chance."""
    if ok or not stalled:
        return ok, text
    return None, f"{text}; {stalled}"


def sweep_checks(results, capacity):
    """Each controller's goodput against the best fixed limit's, and
    gradient's p99."""
    best, best_label = best_fixed(results, 0)
    stalled = stalls(results, capacity)
    checks = []
    for label, (good, _, _, tail, *_) in results.items():
        if label.startswith("fixed"):
            continue
        checks.append(judged(good >= 0.9 * best,
                             f"adaptive {label}, C = {capacity}: goodput {good:.0f}/s = "
                             f"{good / best:.2f} of the best fixed limit ({best_label}: "
                             f"{best:.0f}/s) (limit >= 0.90)", stalled))
        if not label.startswith("gradient"):
            continue
        checks.append(judged(tail <= GOOD_MS,
                             f"adaptive {label}, C = {capacity}: p99 latency {tail:.1f} ms "
                             f"(limit {GOOD_MS} ms, 3 x S)", stalled))
    return checks


def raw_share(sweeps):
    """gradient's raw goodput (every answer, late or not) over the best
    fixed limit's, from each start at each capacity, and their mean: the
    budget is on the mean. sweeps: {capacity: sweep()'s results}."""
    shares = []
    for capacity, results in sweeps.items():
        raw, raw_label = best_fixed(results, 1)
        for label, (_, total, *_) in results.items():
            if label.startswith("gradient"):
                shares.append((f"{label} at {capacity}", total / raw))
                record("adaptive", f"C={capacity} {label}", 0, "raw_share", f"{total / raw:.3f}")
    overall = statistics.mean(share for _, share in shares)
    said = ", ".join(f"{label} {share:.3f}" for label, share in shares)
    stalled = "; ".join(filter(None, (stalls(r, c) for c, r in sweeps.items()))) or None
    return ([f"  gradient's answers/s over the best fixed limit's: {said}; "
             f"mean {overall:.3f}"],
            judged(overall >= RAW_SHARE,
                   f"adaptive gradient: answers/s (late or not) {overall:.3f} of the best "
                   f"fixed limit's, the mean over starts and capacities "
                   f"{', '.join(map(str, sweeps))} ({said}) (limit >= {RAW_SHARE:.2f})",
                   stalled))


# ---------------------------------------------------------------------------
# capacity steps: the limit following the downstream

def band(capacity):
    """Near the capacity: from one permit below it (a little goodput lost)
    to half as much again and one (a queue that adds at most half a service
    time: latency within 1.5 x S, where the goodput is whole). Gradient
    (about 1.2 C + its queue allowance) and aimd at its threshold of
    1.5 x S settle inside it."""
    return capacity - 1, capacity * 1.5 + 1


def timed_run(tmp, base, port, ctl, tag, limit, controller, schedule):
    """WORKERS under one limit while the server changes: schedule is
    [(control command, seconds until the next)]. Returns the limit's
    samples [(s, limit)], the answers, and each command's time (s); the
    server is back at CAPACITY and SERVICE_MS after."""
    cfg = rules(tmp, base, tag, port, limit, controller)
    server(ctl, schedule[0][0])
    total = sum(seconds for _, seconds in schedule)
    p, start = start_load(port, cfg, WORKERS, total * 1000)
    samples, changes, t_change = [], [], 0.0
    for command, seconds in schedule:
        while time.monotonic() < start + t_change:
            time.sleep(0.005)
        server(ctl, command)
        changes.append(time.monotonic() - start)
        t_change += seconds
        while time.monotonic() < start + t_change:
            samples.append((time.monotonic() - start, live_limit(cfg)))
            time.sleep(POLL_S)
    answers, _ = finish_load(p)
    server(ctl, f"capacity {CAPACITY}")
    server(ctl, f"service {SERVICE_MS}")
    return samples, answers, changes


def steps_run(tmp, base, port, ctl, limit, controller, tag="st"):
    """The capacity steps under one limit (timed_run)."""
    return timed_run(tmp, base, port, ctl, f"{tag}{controller or limit}", limit, controller,
                     [(f"capacity {capacity}", seconds) for capacity, seconds in STEPS])


def in_band(samples, t0, t1, low, high):
    """(first, settled): the first sample time in [t0, t1) with the limit in
    [low, high], and the first from which every later one of the span is;
    None where there is none."""
    first = settled = None
    for t, limit in samples:
        if t0 <= t < t1:
            inside = low <= limit <= high
            first = t if inside and first is None else first
            settled = (t if settled is None else settled) if inside else None
    return first, settled


def each_second(label, samples, answers, seconds, rate=goodput, rate_name="goodput"):
    """Two rows: the limit at each second's first poll, the rate in it."""
    firsts = {int(t): limit for t, limit in reversed(samples)}
    return [f"  {label}, each second: limit   "
            + " ".join(f"{firsts.get(k, '?'):>3}" for k in range(seconds)),
            f"  {'':<{len(label)}}               {rate_name:<7} "
            + " ".join(f"{rate(answers, k, k + 1):>3.0f}" for k in range(seconds))]


def step_report(label, samples, answers, step, unloaded_ms):
    """One step under a controller: (report line, checks). step: (capacity,
    the capacity before or None, start s, end s)."""
    capacity, before, t0, t1 = step
    low, high = band(capacity)
    first, at = in_band(samples, t0, t1, low, high)
    settle = (at - t0) if at is not None else None
    mid = p50(answers, at, t1) if at is not None else float("nan")
    good = goodput(answers, t0, t1)
    name = f"{label} {before or '-'}->{capacity}"
    record("adaptive", name, 0, "first_in_band_s",
           f"{first - t0 if first is not None else -1:.2f}")
    record("adaptive", name, 0, "settle_s", f"{settle if settle is not None else -1:.2f}")
    record("adaptive", name, 0, "p50_settled_ms", f"{mid:.1f}")
    record("adaptive", name, 0, "goodput_per_s", f"{good:.1f}")
    line = (f"    capacity {capacity:>2}: limit in [{low:.0f}, {high:.1f}] "
            + (f"first {first - t0:.1f} s after the step, " if first is not None else "")
            + (f"for good from {settle:.1f} s" if settle is not None else "not at the step's end")
            + f"; p50 once settled {mid:.1f} ms; goodput {good:.0f}/s")
    if not before:
        return line, []
    budget = SETTLE_BUDGET_S["down" if capacity < before else "up"]
    return line, [
        (settle is not None and settle <= budget,
         f"adaptive {label}: capacity {before} -> {capacity}, the limit in [{low:.0f}, "
         f"{high:.1f}] for good from " + (f"{settle:.1f} s" if settle is not None else "never")
         + f" after the step (limit {budget:.0f} s)"),
        # Latencies come in whole service times (S, 2S, 3S: served at once,
        # or behind one or two in the server's queue), so a p50 sits on one
        # of them; the line goes between 2S and 3S, never on a mode.
        (mid <= 2.5 * unloaded_ms,
         f"adaptive {label}: capacity {capacity}, p50 latency once settled {mid:.1f} ms "
         f"(limit {2.5 * unloaded_ms:.1f} ms: at most one service time queued, 2.5 x the "
         f"unloaded p50, S = {SERVICE_MS} ms and the harness's own time)")]


def steps(tmp, base, port, ctl, variants, unloaded_ms):
    """Returns (report lines, checks). unloaded_ms: the p50 latency with
    nothing queued (S, and the loopback's and the server's own time)."""
    ends = [sum(s for _, s in STEPS[:i + 1]) for i in range(len(STEPS))]
    lines = [f"  capacity {' -> '.join(str(c) for c, _ in STEPS)} (at "
             f"{', '.join(f'{e - s:.0f} s' for (_, s), e in zip(STEPS, ends))}), "
             f"{WORKERS} workers; the live limit polled every {POLL_S * 1000:.0f} ms "
             f"(bulkhead stat --json)"]
    checks = []
    for label, limit, controller in variants:
        samples, answers, changes = steps_run(tmp, base, port, ctl, limit, controller)
        lines += each_second(label, samples, answers, int(ends[-1]))
        for i, (capacity, _) in enumerate(STEPS):
            t0, t1 = changes[i], ends[i]
            if controller is None:
                lines.append(f"    capacity {capacity:>2}: goodput "
                             f"{goodput(answers, t0, t1):.0f}/s, p50 "
                             f"{p50(answers, t0, t1):.1f} ms")
                continue
            before = STEPS[i - 1][0] if i else None
            line, step_checks = step_report(label, samples, answers,
                                            (capacity, before, t0, t1), unloaded_ms)
            lines.append(line)
            checks += step_checks
    return lines, checks


# ---------------------------------------------------------------------------
# a busy machine: the steps again, with CPU-bound processes beside them

def busy_loops(tmp, count):
    """count CPU-bound processes (their command lines name tmp, for
    run.sh's cleanup); their Popens."""
    loops = []
    for i in range(count):
        p = subprocess.Popen([sys.executable, "-c", "while True: pass",
                              os.path.join(tmp, f"busy{i}")], env=BASE_ENV)
        STARTED.append(p)
        note("pids", p.pid)
        loops.append(p)
    return loops


def busy_steps(tmp, base, port, ctl):
    """gradient through the capacity steps with NOISE_LOOPS busy loops
    beside it: (report lines, checks)."""
    loops = busy_loops(tmp, NOISE_LOOPS)
    try:
        samples, answers, changes = steps_run(tmp, base, port, ctl, STEP_START, "gradient",
                                              tag="busy")
        load = os.getloadavg()[0]
    finally:
        for p in loops:
            stop(p)
            STARTED.remove(p)
    (before, _), (capacity, _) = STEPS[-2:]
    t0, target = changes[-1], capacity + 1
    reached = next((t - t0 for t, limit in samples if t >= t0 and limit >= target), None)
    highest = max(limit for t, limit in samples if t >= t0)
    record("adaptive", "busy gradient", 0, "reached_s", f"{reached if reached else -1:.2f}")
    record("adaptive", "busy gradient", 0, "highest", highest)
    said = f"{reached:.1f} s" if reached is not None else "never"
    lines = [f"  a busy machine: the same steps under gradient with {NOISE_LOOPS} CPU-bound "
             f"processes beside it (load average {load:.1f} as it ended)"]
    lines += each_second("gradient, busy", samples, answers, int(sum(s for _, s in STEPS)))
    lines.append(f"    capacity {before} -> {capacity}: limit {target} (C + 1) reached {said} "
                 f"after the step, highest {highest}")
    return lines, [(reached is not None and reached <= NOISE_REACH_S,
                    f"adaptive gradient, {NOISE_LOOPS} CPU-bound processes beside it: capacity "
                    f"{before} -> {capacity}, the limit at C + 1 = {target} {said} after the "
                    f"step (limit {NOISE_REACH_S:.0f} s; load average {load:.1f})")]


# ---------------------------------------------------------------------------
# a downstream that becomes uniformly slower: no queue, each answer later

def slower(tmp, base, port, ctl):
    """gradient at capacity C while the service time goes from S to
    SLOW_FACTOR x S: (report lines, checks). The limit that serves most is
    still about C; a limit left at the floor serves a fraction of it."""
    schedule = [(f"service {SERVICE_MS * factor}", seconds) for factor, seconds in SLOW_SCHEDULE]
    samples, answers, changes = timed_run(tmp, base, port, ctl, "slowgradient", STEP_START,
                                          "gradient", schedule)
    t0, t1 = changes[-1], sum(seconds for _, seconds in SLOW_SCHEDULE)
    low, high = band(CAPACITY)
    _, settled = in_band(samples, t0, t1, low, high)
    back = settled - t0 if settled is not None else None
    lowest = min(limit for t, limit in samples if t >= t0)
    slow_ms = SERVICE_MS * SLOW_SCHEDULE[-1][0]
    served = answered(answers, t0, t1)
    record("adaptive", "slower gradient", 0, "settle_s", f"{back if back else -1:.2f}")
    record("adaptive", "slower gradient", 0, "lowest", lowest)
    record("adaptive", "slower gradient", 0, "answers_per_s", f"{served:.1f}")
    said = f"for good from {back:.1f} s" if back is not None else "not at the end"
    lines = [f"  a slower downstream: service {SERVICE_MS} -> {slow_ms} ms at capacity "
             f"{CAPACITY}, no queue (at {t0:.0f} s, for {t1 - t0:.0f} s)"]
    lines += each_second("gradient, slower", samples, answers, int(t1), answered, "answers")
    lines.append(f"    the limit fell to {lowest}, back in [{low:.0f}, {high:.1f}] {said} after "
                 f"the slow-down; {served:.0f} answers/s (best possible "
                 f"{CAPACITY * 1000 / slow_ms:.0f}/s)")
    return lines, [(back is not None and back <= SLOW_BUDGET_S,
                    f"adaptive gradient: service {SERVICE_MS} -> {slow_ms} ms at capacity "
                    f"{CAPACITY}, the limit in [{low:.0f}, {high:.1f}] {said} after the "
                    f"slow-down (limit {SLOW_BUDGET_S:.0f} s)")]


# ---------------------------------------------------------------------------
# low traffic: a limit that has nothing to learn from must not wander

def low_traffic(tmp, base, port, seconds):
    """One request a second for `seconds` under each controller at once;
    returns {controller: (lowest, highest limit seen)}."""
    cfgs = {c: rules(tmp, base, f"low{c}", port, LOW_START, c) for c in CONTROLLERS}
    loads = {c: start_load(port, cfgs[c], 1, seconds * 1000, pace_ms=1000)[0]
             for c in CONTROLLERS}
    seen = {c: [LOW_START] for c in CONTROLLERS}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in CONTROLLERS:
            seen[c].append(live_limit(cfgs[c]))
        time.sleep(0.5)
    for c in CONTROLLERS:
        finish_load(loads[c])
        seen[c].append(live_limit(cfgs[c]))
        record("adaptive", f"low {c}", 0, "min_limit", min(seen[c]))
        record("adaptive", f"low {c}", 0, "max_limit", max(seen[c]))
    return {c: (min(seen[c]), max(seen[c])) for c in CONTROLLERS}


# ---------------------------------------------------------------------------
# cost: adaptive on against off, for a matched connect+close

def controller_cost(tmp, base, sink):
    """Per-op instructions and syscalls of a matched connect+close with
    each controller, against the same without (cost.deterministic)."""
    cases = []
    for c in (None,) + CONTROLLERS:
        ns = new_namespace(base, f"adcost{c}")
        cfg = os.path.join(tmp, f"{ns}.ini")
        write_rules(cfg, ns, [f"127.0.0.1:{sink}"])
        if c:
            with open(cfg, "a") as f:
                f.write(f"adaptive = {c}\n")
        check_rules(cfg)
        cases.append((f"cc_{c or 'matched'}", "connect_close", sink, cfg, ()))
    ir_op, sc_op, _ = cost.deterministic(cases, base, tmp)
    return ir_op, sc_op


def title(setup):
    return "adaptive limits against a downstream of known capacity"


def section(setup):
    """Returns (report lines, budget checks as (ok, text))."""
    tmp, base, sink, quick = setup.tmp, setup.base, setup.sink, setup.quick
    port, ctl = start_server(tmp, "capacity")
    measure_ms = MEASURE_MS["quick" if quick else "full"]
    low_s = LOW_RATE_S["quick" if quick else "full"]
    lines = [f"adaptive limits: a downstream of capacity {CAPACITY} (tests/server/"
             f"capacityserver.py: {CAPACITY} requests at a time, {SERVICE_MS} ms each, the "
             f"rest queued inside it), {WORKERS} closed-loop workers, fail fast; goodput = "
             f"answers within {GOOD_MS} ms (3 x S) per second; best possible "
             f"{CAPACITY * 1000 / SERVICE_MS:.0f}/s"]
    log(f"adaptive: the sweep, {len(FIXED)} fixed limits and {len(CONTROLLERS)} "
        f"controllers, {measure_ms} ms measured each; then at capacity {WIDE}")
    results = sweep(tmp, base, port, ctl, measure_ms, CAPACITY, FIXED, SWEEP_STARTS)
    wide = sweep(tmp, base, port, ctl, measure_ms, WIDE, WIDE_FIXED, WIDE_STARTS)
    lines += [f"  sweep: {measure_ms / 1000:.0f} s measured after {WARMUP_MS['fixed'] / 1000:.0f} s"
              f" (adaptive: after {WARMUP_MS['adaptive'] / 1000:.0f} s, from the limit named, "
              f"max_limit {SWEEP_MAX} or 4 x the start; aimd's adaptive_latency_ms "
              f"{AIMD_LATENCY_MS}); answers/s counts every answer, late or not"]
    lines += [f"  capacity {CAPACITY}:"] + sweep_lines(results)
    lines += [f"  capacity {WIDE}:"] + sweep_lines(wide)
    checks = sweep_checks(results, CAPACITY) + sweep_checks(wide, WIDE)
    share_lines, share_check = raw_share({CAPACITY: results, WIDE: wide})
    lines += share_lines
    checks.append(share_check)

    log("adaptive: capacity steps " + " -> ".join(str(c) for c, _ in STEPS))
    st_lines, st_checks = steps(tmp, base, port, ctl,
                                [(f"fixed {STEP_START}", STEP_START, None)] +
                                [(c, STEP_START, c) for c in CONTROLLERS],
                                unloaded_ms=results[f"fixed {FIXED[0]}"][2])
    lines += st_lines
    checks += st_checks

    log(f"adaptive: the steps under gradient with {NOISE_LOOPS} CPU-bound processes beside "
        f"it, then a service {SLOW_FACTOR} x slower")
    for case in (busy_steps, slower):
        case_lines, case_checks = case(tmp, base, port, ctl)
        lines += case_lines
        checks += case_checks

    log(f"adaptive: low traffic, 1 request/s for {low_s} s")
    low = low_traffic(tmp, base, port, low_s)
    lines.append(f"  low traffic: 1 request/s for {low_s} s, starting at limit {LOW_START}: "
                 + "; ".join(f"{c} between {lo} and {hi}" for c, (lo, hi) in low.items()))
    for c, (lo, hi) in low.items():
        moved = max(hi - LOW_START, LOW_START - lo) / LOW_START
        checks.append((moved < 0.10, f"adaptive {c}: at 1 request/s for {low_s} s the limit "
                       f"stayed in [{lo}, {hi}], moved {moved:.0%} from {LOW_START} "
                       f"(limit < 10%)"))

    log("adaptive: callgrind and strace of connect+close with each controller")
    ir_op, sc_op = controller_cost(tmp, base, sink)
    for c in CONTROLLERS:
        x, y = ir_op[f"cc_{c}"] - ir_op["cc_matched"], sc_op[f"cc_{c}"] - sc_op["cc_matched"]
        lines.append(f"  cost: matched connect+close with adaptive = {c}: "
                     f"{ir_op[f'cc_{c}']:.0f} instructions ({x:+.0f} over adaptive off, "
                     f"{ir_op['cc_matched']:.0f}), {sc_op[f'cc_{c}']:.2f} syscalls ({y:+.2f})")
        checks.append((x <= 300, f"adaptive {c}: matched connect+close {x:+.0f} instructions, "
                       f"{y:+.2f} syscalls over adaptive off (limit +300 instructions)"))
    return lines, checks
