"""The bench's seccomp section (`--only seccomp`, not in the full run): a
connect+close that `bulkhead run`'s seccomp supervisor traps, beside the
shim's and no cap at all, and a trapped MSG_FASTOPEN send. See
bench/README.
"""

import os
import resource
import time

import core
import plumbing
from plumbing import CLIENT_CPU, env_for, kv, median, record, run

SECCOMP_N = dict(full=(5000, 11), quick=(1000, 3))  # connect+close per run, rounds


def title(setup):
    return "connect+close trapped by bulkhead run's seccomp supervisor"


def section(setup):
    """(report lines, budget checks as (ok, text))."""
    return seccomp_section(setup.sink, setup.cfg_m, setup.cfg_u, setup.quick)


def seccomp_section(sink, cfg_m, cfg_u, quick):
    """A connect+close the seccomp supervisor of `bulkhead run` traps, beside
    the shim's, no cap at all, and the floor: the kernel's round trip alone
    (bench/notif_floor.c answers CONTINUE at once). The static client makes
    the same calls as bench_client (it is bench_client, linked with
    -static): its connect and close reach the supervisor; the dynamic one
    under run carries the shim, which marks its calls, so the filter lets
    them through in the kernel. Client and supervisor share the client's
    CPU."""
    n, rounds = SECCOMP_N["quick" if quick else "full"]
    static_client = os.path.join(os.path.dirname(plumbing.CLIENT), "bench_client_static")
    bulkhead = os.path.join(plumbing.BUILD, "bulkhead")
    floor = os.path.join(os.path.dirname(plumbing.CLIENT), "notif_floor")
    def under_run(cfg, client, *flags):
        return [bulkhead, "run", "-c", cfg, *flags, "--", client]
    variants = [
        ("bare", [plumbing.CLIENT], None),
        ("shim", [plumbing.CLIENT], cfg_m),
        ("shim, unmatched", [plumbing.CLIENT], cfg_u),
        ("shim under run", under_run(cfg_m, plumbing.CLIENT), None),
        ("shim under run, unmatched", under_run(cfg_u, plumbing.CLIENT), None),
        ("static, bare", [static_client], None),
        (FLOOR, [floor, static_client], None),
        ("trapped, unmatched", under_run(cfg_u, static_client), None),
        ("trapped, matched", under_run(cfg_m, static_client), None),
    ]
    values, cpu, lines = timed("connect_close", sink, rounds, n, variants, "",
                               f"connect+close to loopback, {rounds} rounds x {n}, median us "
                               f"per operation (and over bare), wall clock and CPU time of "
                               f"the whole tree")
    lines += floor_lines(cpu)
    # An event loop's connect (Go's): a non-blocking socket, poll and
    # SO_ERROR; the supervisor does it on its main thread, no worker.
    lines += timed("connect_close", sink, rounds, n, [
        ("bare", [static_client], None),
        ("trapped, matched", under_run(cfg_m, static_client), None),
    ], "nonblocking ", f"the same, the socket non-blocking (EINPROGRESS, poll, SO_ERROR), "
       f"{rounds} rounds x {n}", args=["nonblocking"])[2]
    checks = [(median(values["trapped, unmatched"]) < median(values["trapped, matched"]),
               "an unmatched trapped connect (CONTINUE at once) costs less than a "
               "matched one (admission, the connect done by the supervisor)")]
    checks += floor_checks(cpu)
    # A MSG_FASTOPEN sendto on a connected socket (it fails, sending
    # nothing: EISCONN, or the supervisor's EOPNOTSUPP to a matched
    # destination): the round trip every such send costs under the filter.
    lines += timed("fastopen", sink, rounds, n, [
        ("bare", [static_client], None),
        ("trapped, unmatched", under_run(cfg_u, static_client), None),
        ("trapped, matched", under_run(cfg_m, static_client), None),
    ], "fastopen ", f"sendto with MSG_FASTOPEN on a connected socket, {rounds} rounds x "
       f"{n}, median us per call (and over bare)")[2]
    lines += exec_lines(cfg_m, rounds, bulkhead)
    return lines, checks


FLOOR = "floor: CONTINUE at once"
# What a trapped connect+close may cost over the static client's bare one,
# in the floor's own cost over bare (the kernel's two round trips, CPU
# time): the supervisor's work on top of them.
FLOOR_BUDGETS = (("trapped, unmatched", 3.0), ("trapped, matched", 3.0))


def over_floor(cpu, label):
    """Per round: label's CPU time over the static bare one, in the floor's."""
    bare = cpu["static, bare"]
    return [(v - b) / (f - b) if f > b else float("inf")
            for v, f, b in zip(cpu[label], cpu[FLOOR], bare)]


def floor_lines(cpu):
    lines = ["the trapped ones over the static client's bare CPU time, in the floor's "
             "(median of the rounds' ratios)"]
    for label in (FLOOR,) + tuple(label for label, _ in FLOOR_BUDGETS):
        ratios = over_floor(cpu, label)
        lines.append(f"  {label:<24} {median(ratios):8.2f} x  "
                     f"[{min(ratios):.2f}, {max(ratios):.2f}]")
    return lines


def floor_checks(cpu):
    """Within the budget when the whole interval of the median ratio is,
    NOISY when it holds the limit (core.verdict)."""
    checks = []
    floor_us = median(cpu[FLOOR]) - median(cpu["static, bare"])
    for label, limit in FLOOR_BUDGETS:
        ratios = over_floor(cpu, label)
        low, high, _ = core.median_interval(ratios)
        over_us = median(cpu[label]) - median(cpu["static, bare"])
        checks.append((core.verdict((low, high, 0), limit),
                       f"{label} connect+close: {over_us:+.1f} us of CPU over bare, "
                       f"{median(ratios):.2f}x the floor's {floor_us:+.1f} us, the median's "
                       f"interval [{low:.2f}, {high:.2f}] (limit {limit:.1f}x)"))
    return checks


def exec_lines(cfg, rounds, bulkhead, n=200):
    """A dynamic program's start-up under run: sh starting /bin/true n
    times, bare, with the shim, and under run (whose filter traps the
    closes the loader makes past the shim's hooks)."""
    loop = f"i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done"
    variants = [("bare", ["sh", "-c", loop], None),
                ("shim", ["sh", "-c", loop], cfg),
                ("shim under run", [bulkhead, "run", "-c", cfg, "--", "sh", "-c", loop], None)]
    values = {label: [] for label, _, _ in variants}
    for r in range(-1, rounds):
        for label, cmd, env_cfg in variants:
            started = time.monotonic()
            run(cmd, env_for(env_cfg), cpus=CLIENT_CPU)
            if r >= 0:
                v = (time.monotonic() - started) * 1e6 / n
                values[label].append(v)
                record("seccomp", "exec " + label, r, "us_per_op", f"{v:.3f}")
    bare = median(values["bare"])
    lines = [f"sh starting /bin/true, {rounds} rounds x {n}, median us per start "
             f"(and over bare)"]
    for label, _, _ in variants:
        m = median(values[label])
        lines.append(f"  {label:<24} {m:8.2f} us  {m - bare:+8.2f}")
    return lines


def timed(mode, sink, rounds, n, variants, tag, title, args=()):
    """bench_client MODE under each variant, alternating, `rounds` timed
    rounds after one warm-up: ({label: [us per operation]}, {label: [CPU
    us per operation, every process of the run]}, report lines of the
    medians over bare)."""
    values = {label: [] for label, _, _ in variants}
    cpu = {label: [] for label, _, _ in variants}
    for r in range(-1, rounds):  # round -1 warms up, untimed
        for label, cmd, cfg in variants:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = run(cmd + [mode, "127.0.0.1", str(sink),
                             str(n if r >= 0 else max(200, n // 4)), *args],
                      env_for(cfg), cpus=CLIENT_CPU)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if r >= 0:
                v = float(kv(out)["ns_per_op"]) / 1000.0
                used = (after.ru_utime + after.ru_stime -
                        before.ru_utime - before.ru_stime) * 1e6 / n
                values[label].append(v)
                cpu[label].append(used)
                record("seccomp", tag + label, r, "us_per_op", f"{v:.3f}")
                record("seccomp", tag + label, r, "cpu_us_per_op", f"{used:.3f}")
    bare, bare_cpu = median(values["bare"]), median(cpu["bare"])
    lines = [title]
    for label, _, _ in variants:
        m, c = median(values[label]), median(cpu[label])
        lines.append(f"  {label:<26} {m:8.2f} us  {m - bare:+8.2f}   "
                     f"CPU {c:8.2f} us  {c - bare_cpu:+8.2f}")
    return values, cpu, lines
