"""The bench's deadlines section: a dead downstream beside a healthy one,
and what a plain limit, then connect deadlines and the breaker, save of
the healthy one's service. See bench/README.
"""

import os
import subprocess
import sys
import time

import plumbing
from plumbing import (BASE_ENV, LIMIT, LIVE, LIVE_LOCK, STARTED,
                      check_rules, env_for, kv, new_namespace, note, nsstat, record,
                      wait_ready)

DEAD_WORKERS = 40     # processes alternating a healthy and a dead downstream
DEAD_HOLD_MS = 20     # the healthy server's answer time: workers, not CPUs, bound it
DEAD_SECONDS = dict(full=10, quick=4)  # per variant
BLACKHOLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                         "server", "blackhole.py")


def seconds(setup):
    return DEAD_SECONDS["quick" if setup.quick else "full"]


def title(setup):
    return f"a dead downstream: {DEAD_WORKERS} workers, {seconds(setup)} s per variant"


def section(setup):
    """(report lines, budget checks as (ok, text))."""
    return dead_downstream_section(setup.tmp, setup.base, seconds(setup))


def start_blackhole(tmp):
    """A listener whose SYNs go unanswered (tests/server/blackhole.py)."""
    ready = os.path.join(tmp, "blackhole.ready")
    p = subprocess.Popen([sys.executable, BLACKHOLE, "--ready", ready,
                          "--lifetime", "900"], env=BASE_ENV)
    STARTED.append(p)
    note("pids", p.pid)
    return int(wait_ready(p, ready, "blackhole.py"))


def write_dead_rules(path, namespace, dead_port, deadlines):
    lines = ["[global]", f"namespace = {namespace}", "log = error", "",
             "[dead]", f"limit = {LIMIT}", "wait_ms = 0", f"match = 127.0.0.1:{dead_port}"]
    if deadlines:
        lines += ["connect_timeout_ms = 1000", "breaker_failures = 3",
                  "breaker_open_ms = 2000"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def dead_downstream_run(hold, dead, cfg, seconds, tmp, label):
    """DEAD_WORKERS `bench_client alternate` processes for `seconds`, then
    SIGKILLed; their last lines summed."""
    outs, procs = [], []
    for i in range(DEAD_WORKERS):
        out = open(os.path.join(tmp, f"dead.{label}.{i}"), "w+")
        p = subprocess.Popen([plumbing.CLIENT, "alternate", "127.0.0.1", str(hold), str(dead)],
                             env=env_for(cfg), stdout=out, stderr=subprocess.DEVNULL)
        with LIVE_LOCK:
            LIVE.add(p)
        outs.append(out)
        procs.append(p)
    time.sleep(seconds)
    for p in procs:
        p.kill()
    totals = {"healthy": 0, "dead_refused": 0, "dead_timed_out": 0}
    for p, out in zip(procs, outs):
        p.wait()
        with LIVE_LOCK:
            LIVE.discard(p)
        out.seek(0)
        lines = [line for line in out.read().splitlines() if line]
        for k, v in (kv(lines[-1]) if lines else {}).items():
            totals[k] += int(v)
        out.close()
    totals["per_s"] = totals["healthy"] / seconds
    for k, v in totals.items():
        record("dead_downstream", label, 0, k, v)
    return totals


def start_slow_server(tmp):
    """A bench_server of its own whose hold port answers in DEAD_HOLD_MS."""
    ready = os.path.join(tmp, "slow.ready")
    p = subprocess.Popen([plumbing.SERVER, ready, str(DEAD_HOLD_MS), "900"], env=BASE_ENV)
    STARTED.append(p)
    note("pids", p.pid)
    return int(wait_ready(p, ready, "the slow bench_server").split()[2])


def dead_downstream_section(tmp, base, seconds):
    """Returns (report lines, budget checks as (ok, text))."""
    hold = start_slow_server(tmp)
    dead = start_blackhole(tmp)
    cfgs, namespaces = {}, {}
    for label, deadlines in (("limit", False), ("breaker", True)):
        namespaces[label] = new_namespace(base, f"dd{label}")
        cfgs[label] = os.path.join(tmp, f"dead_{label}.ini")
        write_dead_rules(cfgs[label], namespaces[label], dead, deadlines)
        check_rules(cfgs[label])
    res = {"none": dead_downstream_run(hold, dead, None, seconds, tmp, "none")}
    shim = {}
    for label in ("limit", "breaker"):
        res[label] = dead_downstream_run(hold, dead, cfgs[label], seconds, tmp, label)
        # the shim's own counters for the dead compartment (the workers are
        # gone: nothing changes them any more)
        shim[label] = nsstat(namespaces[label]).get("dead", {})
        for k in ("rejected", "breaker_refused", "connect_timeouts", "breaker_opened"):
            record("dead_downstream", label, 0, f"shim_{k}", int(shim[label].get(k, 0)))
    names = {"none": "no shim", "limit": f"limit {LIMIT}, wait_ms 0",
             "breaker": f"limit {LIMIT} + connect_timeout_ms 1000 + breaker (3 failures, 2 s open)"}
    lines = [f"a dead downstream: {DEAD_WORKERS} worker processes, each alternating a "
             f"request to the healthy server (it answers in {DEAD_HOLD_MS} ms) and a connect with no "
             f"deadline of its own to a blackhole; {seconds} s per variant",
             f"{'variant':<68} {'healthy req/s':>13} {'dead: refused':>14} {'timed out':>10}"]
    for label in ("none", "limit", "breaker"):
        r = res[label]
        lines.append(f"{names[label]:<68} {r['per_s']:>13.0f} {r['dead_refused']:>14} "
                     f"{r['dead_timed_out']:>10}")
    lines.append("  the shim's own counters for the dead compartment (connect() calls, "
                 "as the workers count them above):")
    for label in ("limit", "breaker"):
        c = {k: int(shim[label].get(k, 0)) for k in ("rejected", "breaker_refused",
                                                     "connect_timeouts", "breaker_opened")}
        lines.append(f"    {label:<8} refused {c['rejected']} with the compartment full and "
                     f"{c['breaker_refused']} with the breaker open or probing; "
                     f"{c['connect_timeouts']} connects timed out; the breaker opened "
                     f"{c['breaker_opened']} times")
    a, b, c = (res[v]["per_s"] for v in ("none", "limit", "breaker"))
    checks = [(b > a, f"a dead downstream: a plain limit keeps the healthy server served: "
                      f"{b:.0f} req/s against {a:.0f} without the shim"),
              (c > b, f"a dead downstream: deadlines and the breaker serve it better still: "
                      f"{c:.0f} req/s against {b:.0f} with the limit alone")]

    return lines, checks


# ---------------------------------------------------------------------------
