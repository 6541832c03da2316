"""The bench's fleet section: three hosts (namespaces, each with its
bulkhead-agent) sharing one fleet_limit through a real redis-server on
loopback. See bench/README.
"""

import os
import subprocess
import time

import plumbing
from plumbing import (BASE_ENV, STARTED, check_rules, control, env_for, kv, live_limit,
                      new_namespace, note, record, start_bench_server, start_redis)

FLEET_LIMIT = 8
FLEET_REFRESH_MS = 200
# Each connection held 50 ms (not HOLD_MS): 160 conn/s at best, so that
# what is measured is how much of the fleet limit is in use, not how fast
# a loaded machine passes permits on.
FLEET_HOLD_MS = 50
FLEET_SECONDS = dict(full=8, quick=2)  # the 2:1:0 run: its first refreshes are a small part
FLEET_MOVE_S = 2      # demand on one host alone: capacity moves to it within 500 ms


def seconds(setup):
    return FLEET_SECONDS["quick" if setup.quick else "full"]


def title(setup):
    return f"the fleet: 3 hosts, fleet_limit {FLEET_LIMIT}"


def section(setup):
    """(report lines, budget checks as (ok, text))."""
    return fleet_section(setup.tmp, setup.base, seconds(setup))


def fleet_rules(path, namespace, fleet, host, redis_port, hold):
    lines = ["[global]", f"namespace = {namespace}", "log = error",
             f"fleet = redis://127.0.0.1:{redis_port}", f"fleet_name = {fleet}",
             f"fleet_host = {host}", f"fleet_refresh_ms = {FLEET_REFRESH_MS}",
             f"fleet_lease_ms = {5 * FLEET_REFRESH_MS}", "",
             "[svc]", f"fleet_limit = {FLEET_LIMIT}", "wait_ms = 2000",
             "max_waiters = 1000", f"match = 127.0.0.1:{hold}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def redis_evalsha_stats(port):
    info = subprocess.run(["redis-cli", "-p", str(port), "info", "commandstats"],
                          capture_output=True, text=True, env=BASE_ENV).stdout
    for line in info.splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return {k: float(v) for k, v in (kv_.split("=") for kv_ in
                                              line.split(":", 1)[1].split(","))
                    if k in ("calls", "usec", "usec_per_call")}
    return {"calls": 0.0, "usec": 0.0, "usec_per_call": 0.0}


def fleet_section(tmp, base, seconds):
    """Returns (report lines, budget checks as (ok, text))."""
    _, _, hold, ctl, _ = start_bench_server(tmp, "fleet_ready", FLEET_HOLD_MS)
    redis_port = start_redis()
    fleet = new_namespace(base, "fleet")
    cfgs, agents = {}, []
    for host in ("a", "b", "c"):
        cfgs[host] = os.path.join(tmp, f"fleet_{host}.ini")
        fleet_rules(cfgs[host], new_namespace(base, f"fl{host}"), fleet, host,
                    redis_port, hold)
        check_rules(cfgs[host])
        agent = subprocess.Popen([os.path.join(plumbing.BUILD, "bulkhead-agent"), "-c", cfgs[host]],
                                 env=BASE_ENV, stderr=subprocess.DEVNULL)
        STARTED.append(agent)
        note("pids", agent.pid)
        agents.append(agent)
    time.sleep(3 * FLEET_REFRESH_MS / 1000)  # every agent registered and idle
    # Capacity moving to a host that wants it: demand starts on a alone.
    demand = subprocess.Popen([plumbing.CLIENT, "contend", "127.0.0.1", str(hold), "procs", "16",
                               str(FLEET_MOVE_S * 1000)], env=env_for(cfgs["a"]),
                              stdout=subprocess.DEVNULL)
    t0, moved_ms = time.monotonic(), None
    while time.monotonic() - t0 < FLEET_MOVE_S and moved_ms is None:
        if live_limit(cfgs["a"]) >= FLEET_LIMIT:  # the idle hosts' headroom too
            moved_ms = (time.monotonic() - t0) * 1000
        time.sleep(0.01)
    demand.wait()
    # Beside it, at the same time and so on a machine as loaded: the same 24
    # processes on one host holding all of the limit, no fleet, against a
    # server of their own. What they move is the best these permits can do
    # here.
    _, _, one_hold, _, _ = start_bench_server(tmp, "fleet_one_ready", FLEET_HOLD_MS)
    one = os.path.join(tmp, "fleet_one.ini")
    with open(one, "w") as f:
        f.write(f"[global]\nnamespace = {new_namespace(base, 'flone')}\nlog = error\n"
                f"[svc]\nlimit = {FLEET_LIMIT}\nwait_ms = 2000\nmax_waiters = 1000\n"
                f"match = 127.0.0.1:{one_hold}\n")
    check_rules(one)
    # Uneven demand, 2:1:0, at once; the hold server counts what arrives.
    control(ctl, "R")
    calls0 = redis_evalsha_stats(redis_port)
    runs = [subprocess.Popen([plumbing.CLIENT, "contend", "127.0.0.1", str(port), "procs", str(w),
                              str(int(seconds * 1000))], env=env_for(cfg),
                             stdout=subprocess.PIPE, text=True)
            for cfg, port, w in ((cfgs["a"], hold, 16), (cfgs["b"], hold, 8),
                                 (one, one_hold, 24))]
    on_a, on_b, one_per_s = (float(kv(p.communicate()[0])["per_s"]) for p in runs)
    per_s = on_a + on_b
    srv = control(ctl, "S")
    calls1 = redis_evalsha_stats(redis_port)
    for agent in agents:
        agent.terminate()
        agent.wait()
    ideal = FLEET_LIMIT * 1000.0 / FLEET_HOLD_MS
    util = per_s / ideal
    of_one = per_s / one_per_s
    calls_per_host_s = (calls1["calls"] - calls0["calls"]) / seconds / 3
    lua_us = calls1["usec_per_call"]
    for k, v in (("util", util), ("of_one_host", of_one), ("per_s", per_s),
                 ("one_host_per_s", one_per_s), ("server_max", srv["max"]),
                 ("moved_ms", moved_ms or -1), ("calls_per_host_s", calls_per_host_s),
                 ("lua_us", lua_us)):
        record("fleet", "2:1:0", 0, k, v)
    lines = [f"the fleet: 3 hosts (namespaces), fleet_limit {FLEET_LIMIT}, refresh "
             f"{FLEET_REFRESH_MS} ms, a real redis-server on loopback",
             f"  uneven demand 2:1:0 (16, 8, 0 processes, {seconds} s, each connection "
             f"held {FLEET_HOLD_MS} ms): {per_s:.0f} conn/s, {of_one:.3f} of the best "
             f"possible here ({one_per_s:.0f} conn/s: the 24 processes on one host holding "
             f"all {FLEET_LIMIT} permits, no fleet, run beside it); {util:.2f} of "
             f"{ideal:.0f}/s, every permit busy every moment; server max {srv['max']:.0f}",
             f"  capacity to a host that wants it: the busy host reached {FLEET_LIMIT} "
             f"permits {moved_ms:.0f} ms after its demand began" if moved_ms is not None else
             f"  capacity to a host that wants it: not within {FLEET_MOVE_S} s",
             f"  Redis: {calls_per_host_s:.1f} lease calls per host per second, "
             f"{lua_us:.1f} us per Lua call (INFO commandstats)"]
    checks = [(srv["max"] <= FLEET_LIMIT, f"fleet: the server's maximum {srv['max']:.0f} "
               f"under 2:1:0 demand (limit {FLEET_LIMIT}, the fleet limit)"),
              (of_one >= 0.97, f"fleet: 2:1:0 demand moved {of_one:.3f} of what one host "
               f"holding the whole limit moves (limit >= 0.970: the idle host keeps "
               f"nothing the busy ones want)"),
              (moved_ms is not None and moved_ms <= 2 * FLEET_REFRESH_MS + 100,
               f"fleet: idle share moved to a busy host in "
               f"{moved_ms if moved_ms is not None else float('inf'):.0f} ms (limit two "
               f"refreshes, {2 * FLEET_REFRESH_MS} ms, + 100 ms)")]
    return lines, checks
