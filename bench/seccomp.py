"""The bench's seccomp section (`--only seccomp`, not in the full run): a
connect+close that `bulkhead run`'s seccomp supervisor traps, beside the
shim's and no cap at all, and a trapped MSG_FASTOPEN send. See
bench/README.
"""

import os
import time

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
    the shim's and no cap at all. The static client makes the same calls as
    bench_client (it is bench_client, linked with -static): its connect and
    close reach the supervisor; the dynamic one under run carries the
    shim, which marks its calls, so the filter lets them through in the
    kernel. Client and supervisor share the client's CPU."""
    n, rounds = SECCOMP_N["quick" if quick else "full"]
    static_client = os.path.join(os.path.dirname(plumbing.CLIENT), "bench_client_static")
    bulkhead = os.path.join(plumbing.BUILD, "bulkhead")
    def under_run(cfg, client, *flags):
        return [bulkhead, "run", "-c", cfg, *flags, "--", client]
    variants = [
        ("bare", [plumbing.CLIENT], None),
        ("shim", [plumbing.CLIENT], cfg_m),
        ("shim, unmatched", [plumbing.CLIENT], cfg_u),
        ("shim under run", under_run(cfg_m, plumbing.CLIENT), None),
        ("shim under run, unmatched", under_run(cfg_u, plumbing.CLIENT), None),
        ("trapped, unmatched", under_run(cfg_u, static_client), None),
        ("trapped, matched", under_run(cfg_m, static_client), None),
    ]
    values, lines = timed("connect_close", sink, rounds, n, variants, "",
                          f"connect+close to loopback, {rounds} rounds x {n}, median us per "
                          f"operation (and over bare)")
    checks = [(median(values["trapped, unmatched"]) < median(values["trapped, matched"]),
               "an unmatched trapped connect (CONTINUE at once) costs less than a "
               "matched one (admission, the connect done by the supervisor)")]
    # A MSG_FASTOPEN sendto on a connected socket (it fails, sending
    # nothing: EISCONN, or the supervisor's EOPNOTSUPP to a matched
    # destination): the round trip every such send costs under the filter.
    lines += timed("fastopen", sink, rounds, n, [
        ("bare", [static_client], None),
        ("trapped, unmatched", under_run(cfg_u, static_client), None),
        ("trapped, matched", under_run(cfg_m, static_client), None),
    ], "fastopen ", f"sendto with MSG_FASTOPEN on a connected socket, {rounds} rounds x "
       f"{n}, median us per call (and over bare)")[1]
    lines += exec_lines(cfg_m, rounds, bulkhead)
    return lines, checks


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


def timed(mode, sink, rounds, n, variants, tag, title):
    """bench_client MODE under each variant, alternating, `rounds` timed
    rounds after one warm-up: ({label: [us per operation]}, report lines
    of the medians over bare)."""
    values = {label: [] for label, _, _ in variants}
    for r in range(-1, rounds):  # round -1 warms up, untimed
        for label, cmd, cfg in variants:
            out = run(cmd + [mode, "127.0.0.1", str(sink),
                             str(n if r >= 0 else max(200, n // 4))],
                      env_for(cfg), cpus=CLIENT_CPU)
            if r >= 0:
                v = float(kv(out)["ns_per_op"]) / 1000.0
                values[label].append(v)
                record("seccomp", tag + label, r, "us_per_op", f"{v:.3f}")
    bare = median(values["bare"])
    lines = [title]
    for label, _, _ in variants:
        m = median(values[label])
        lines.append(f"  {label:<24} {m:8.2f} us  {m - bare:+8.2f}")
    return values, lines
