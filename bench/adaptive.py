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
                      env_for, kv, live_limit, log, new_namespace, note, record,
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
WARMUP_MS = dict(fixed=1000, adaptive=5000)  # adaptive: the down-settle budget
MEASURE_MS = dict(full=4000, quick=2000)
STEPS = ((CAPACITY, 6.0), (2, 10.0), (16, 20.0))  # capacity, seconds at it
STEP_START = CAPACITY         # where the operator set the limit: right at first
SETTLE_BUDGET_S = dict(down=5.0, up=15.0)
POLL_S = 0.1
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


def p50(answers, t0, t1):
    return statistics.median([lat for end, lat in answers if t0 <= end < t1] or [float("nan")])


# ---------------------------------------------------------------------------
# the sweep: every fixed limit, and the controllers from a bad start

def sweep(tmp, base, port, ctl, measure_ms):
    """Returns {variant: (goodput/s, p50 ms, refused/s, server's max open)}."""
    variants = [(f"fixed {n}", n, None) for n in FIXED]
    variants += [(f"{c} from {n}", n, c) for c in CONTROLLERS for n in SWEEP_STARTS]
    results = {}
    for label, limit, controller in variants:
        cfg = rules(tmp, base, label.replace(" ", ""), port, limit, controller)
        warm = WARMUP_MS["adaptive" if controller else "fixed"]
        server(ctl, "reset")
        p, _ = start_load(port, cfg, WORKERS, warm + measure_ms)
        answers, totals = finish_load(p)
        srv = server(ctl, "stat")
        t0, t1 = warm / 1000, (warm + measure_ms) / 1000
        results[label] = (goodput(answers, t0, t1), p50(answers, t0, t1),
                          int(totals["refused"]) / t1,  # over the whole run
                          srv["max_open"], live_limit(cfg))
        for metric, value in zip(("goodput_per_s", "p50_ms", "refused_per_s", "server_max_open",
                                  "final_limit"), results[label]):
            record("adaptive", label, 0, metric, f"{value:.1f}")
    return results


def sweep_lines(results):
    best = max((r[0], label) for label, r in results.items() if label.startswith("fixed"))
    lines = [f"  {'limit':<26} {'goodput/s':>10} {'p50 ms':>8} {'refused/s':>10} "
             f"{'server max':>11} {'final limit':>12}"]
    for label, (good, mid, refused, srv_max, final) in results.items():
        mark = "  <- best fixed" if label == best[1] else ""
        lines.append(f"  {label:<26} {good:>10.0f} {mid:>8.1f} {refused:>10.0f} "
                     f"{srv_max:>11} {final:>12}{mark}")
    return lines, best


# ---------------------------------------------------------------------------
# capacity steps: the limit following the downstream

def band(capacity):
    """Near the capacity: from one permit below it (a little goodput lost)
    to half as much again and one (a queue that adds at most half a service
    time: latency within 1.5 x S, where the goodput is whole). Gradient's
    10% latency tolerance and queue allowance, and aimd at its threshold
    of 1.5 x S, settle inside it."""
    return capacity - 1, capacity * 1.5 + 1


def steps_run(tmp, base, port, ctl, limit, controller):
    """The capacity steps under one limit; returns the limit's samples
    [(s, limit)], the answers, and the steps' start times (s)."""
    cfg = rules(tmp, base, f"st{controller or limit}", port, limit, controller)
    server(ctl, f"capacity {STEPS[0][0]}")
    total = sum(seconds for _, seconds in STEPS)
    p, start = start_load(port, cfg, WORKERS, total * 1000)
    samples, changes, t_change = [], [], 0.0
    for capacity, seconds in STEPS:
        while time.monotonic() < start + t_change:
            time.sleep(0.005)
        server(ctl, f"capacity {capacity}")
        changes.append(time.monotonic() - start)
        t_change += seconds
        while time.monotonic() < start + t_change:
            samples.append((time.monotonic() - start, live_limit(cfg)))
            time.sleep(POLL_S)
    answers, _ = finish_load(p)
    server(ctl, f"capacity {CAPACITY}")
    return samples, answers, changes


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


def each_second(label, samples, answers, seconds):
    """Two rows: the limit at each second's first poll, the goodput in it."""
    firsts = {int(t): limit for t, limit in reversed(samples)}
    return [f"  {label}, each second: limit   "
            + " ".join(f"{firsts.get(k, '?'):>3}" for k in range(seconds)),
            f"  {'':<{len(label)}}               goodput "
            + " ".join(f"{goodput(answers, k, k + 1):>3.0f}" for k in range(seconds))]


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
        f"controllers, {measure_ms} ms measured each")
    results = sweep(tmp, base, port, ctl, measure_ms)
    sw_lines, (best, best_label) = sweep_lines(results)
    lines += [f"  sweep: {measure_ms / 1000:.0f} s measured after {WARMUP_MS['fixed'] / 1000:.0f} s"
              f" (adaptive: after {WARMUP_MS['adaptive'] / 1000:.0f} s, from the limit named, "
              f"max_limit {SWEEP_MAX}; aimd's adaptive_latency_ms {AIMD_LATENCY_MS})"] + sw_lines
    checks = [(good >= 0.9 * best,
               f"adaptive {label}: goodput {good:.0f}/s = {good / best:.2f} of the best fixed "
               f"limit ({best_label}: {best:.0f}/s) (limit >= 0.90)")
              for label, (good, *_) in results.items() if not label.startswith("fixed")]

    log("adaptive: capacity steps " + " -> ".join(str(c) for c, _ in STEPS))
    st_lines, st_checks = steps(tmp, base, port, ctl,
                                [(f"fixed {STEP_START}", STEP_START, None)] +
                                [(c, STEP_START, c) for c in CONTROLLERS],
                                unloaded_ms=results[f"fixed {FIXED[0]}"][1])
    lines += st_lines
    checks += st_checks

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
