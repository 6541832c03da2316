"""The bench's event-loop section: node (fetch) and python asyncio
(open_connection) each sending batches of 50 requests at once to a server
that answers each in 20 ms, three ways: no limit at all, the program's own
pool of 5 (no shim), and the shim's limit of 5 with wait_ms (the program
unchanged: its non-blocking connects wait for their permits while its loop
runs). Goodput (answered requests a second) and the loop's worst lag (how
late a 10 ms timer beside the requests ever was) per way, against the
150 ms line. See bench/README.
"""

import os
import subprocess
import sys

import plumbing
from plumbing import (BASE_ENV, STARTED, check_rules, env_for, kv, median,
                      new_namespace, note, record, run, wait_ready)

LIMIT = 5            # the shim's limit and the program's own pool
REQUESTS = 50        # requests at once, per batch
HOLD_MS = 20         # the server's answer time
LAG_LINE_MS = 150    # the worst a loop's timer may be late
GOODPUT_SHARE = 0.8  # of the program's own pool's goodput, at least
HERE = os.path.dirname(os.path.abspath(__file__))
HOLDSERVER = os.path.join(HERE, "..", "tests", "server", "holdserver.py")
PROGRAMS = {"node": ["node", os.path.join(HERE, "loop_fetch.js")],
            "asyncio": [sys.executable, os.path.join(HERE, "loop_asyncio.py")]}
WAYS = ("none", "pool", "shim")
WAY_NAMES = {"none": "no limit", "pool": f"the program's own pool of {LIMIT}",
             "shim": f"bulkhead limit {LIMIT}, wait_ms"}


def rounds(setup):
    return 2 if setup.quick else 5


def batches(setup):
    return 3 if setup.quick else 5


def title(setup):
    return (f"event loops: node and asyncio, {REQUESTS} requests at once, "
            f"{rounds(setup)} rounds of each way")


def start_holdserver(tmp, name):
    """tests/server/holdserver.py answering in HOLD_MS; its port and the
    path of its stats file (max= is the most it had open at once)."""
    ready = os.path.join(tmp, f"{name}.ready")
    stats = os.path.join(tmp, f"{name}.stats")
    p = subprocess.Popen([sys.executable, HOLDSERVER, "--host", "127.0.0.1", "--port", "0",
                          "--hold-ms", str(HOLD_MS), "--ready", ready, "--stats", stats,
                          "--lifetime", "900"], env=BASE_ENV, stdout=subprocess.DEVNULL)
    STARTED.append(p)
    note("pids", p.pid)
    return int(wait_ready(p, ready, "holdserver.py").split()[0]), stats


def server_max(stats):
    return int(kv(open(stats).read())["max"])


def section(setup):
    """(report lines, budget checks as (ok, text))."""
    ports = {}
    for way in ("plain", "shim"):  # the shim's server counts only its runs
        ports[way] = start_holdserver(setup.tmp, f"loop_{way}")
    ns = new_namespace(setup.base, "loop")
    cfg = os.path.join(setup.tmp, "loop.ini")
    with open(cfg, "w") as f:
        f.write(f"[global]\nnamespace = {ns}\nlog = warn\n\n[svc]\nlimit = {LIMIT}\n"
                f"wait_ms = 30000\n"
                f"match = 127.0.0.1:{ports['shim'][0]}\n")
    check_rules(cfg)
    res = {(p, w): [] for p in PROGRAMS for w in WAYS}
    for r in range(rounds(setup)):
        for program, cmd in PROGRAMS.items():
            for way in WAYS:  # in turn, so that drift falls on each alike
                port = ports["shim" if way == "shim" else "plain"][0]
                out = kv(run(cmd + [str(port), str(REQUESTS), str(LIMIT if way == "pool" else 0),
                                    str(batches(setup))],
                             env_for(cfg if way == "shim" else None), timeout=300))
                figures = {"goodput": int(out["ok"]) / float(out["seconds"]),
                           "failed": int(out["failed"]), "lag_ms": float(out["worst_lag_ms"])}
                for metric, value in figures.items():
                    record("event_loop", f"{program}_{way}", r, metric, f"{value:.1f}")
                res[program, way].append(figures)
    most = server_max(ports["shim"][1])
    record("event_loop", "shim", 0, "server_max", most)
    return report(res, most, setup)


def summary(runs):
    return {"goodput": median([x["goodput"] for x in runs]),
            "failed": sum(x["failed"] for x in runs),
            "lag_median": median([x["lag_ms"] for x in runs]),
            "lag_worst": max(x["lag_ms"] for x in runs)}


def report(res, most, setup):
    lines = [f"event loops: {REQUESTS} requests at once per batch, {batches(setup)} timed "
             f"batches per run, the server answering each in {HOLD_MS} ms "
             f"(best for {LIMIT} at a time: {LIMIT * 1000 // HOLD_MS} req/s); "
             f"{rounds(setup)} runs of each way, in turn; lag: how late a 10 ms timer in the "
             f"same loop was (median of the runs' worst, and the worst)",
             f"{'program':<9} {'way':<40} {'req/s':>7} {'failed':>7} {'lag ms':>7} {'worst':>7}"]
    checks = []
    for program in PROGRAMS:
        s = {w: summary(res[program, w]) for w in WAYS}
        for way in WAYS:
            lines.append(f"{program:<9} {WAY_NAMES[way]:<40} {s[way]['goodput']:>7.0f} "
                         f"{s[way]['failed']:>7} {s[way]['lag_median']:>7.0f} "
                         f"{s[way]['lag_worst']:>7.0f}")
        shim, pool = s["shim"], s["pool"]
        lag_ok = shim["lag_worst"] <= LAG_LINE_MS
        if not lag_ok and min(s["none"]["lag_worst"], pool["lag_worst"]) > LAG_LINE_MS:
            lag_ok = None  # the machine held every way's loop up as long: NOISY
        checks.append((lag_ok, f"event loop, {program} at limit {LIMIT}: its timer at most "
                               f"{shim['lag_worst']:.0f} ms late while connects wait "
                               f"(line {LAG_LINE_MS} ms; without the shim "
                               f"{s['none']['lag_worst']:.0f}, own pool "
                               f"{pool['lag_worst']:.0f})"))
        checks.append((shim["failed"] == 0 and shim["goodput"] >= GOODPUT_SHARE * pool["goodput"],
                       f"event loop, {program} at limit {LIMIT}: every request answered "
                       f"({shim['failed']} failed) at {shim['goodput']:.0f} req/s, at least "
                       f"{GOODPUT_SHARE:.0%} of its own pool's {pool['goodput']:.0f}"))
    lines.append(f"  the server behind the shim's runs: at most {most} connections at once")
    checks.append((most <= LIMIT, f"event loop: the server behind the shim saw at most {most} "
                                  f"connections at once (limit {LIMIT})"))
    return lines, checks
