"""The bench's fleetsim section: one process plays 10, 100 and 1,000 fleet
hosts against one redis-server the bench starts, calling agent/lease.lua
with the keys and arguments bulkhead-agent sends (tests/helpers/
lease_sim.py). See bench/README, section 11.

bench.py calls section() (`--only fleetsim`, and in the full run); the
plumbing is one (plumbing.py): its processes, raw numbers and cleanup.

Per fleet size:
  - cost: Redis's own time per lease call (INFO commandstats), calls made
    back to back, the least of ROUNDS batches (a loaded machine only adds);
  - in real time, every host refreshing once a second at its own phase, as
    agents do, and asking at once as an agent does (new demand, and every
    quarter refresh while Redis says more is owed to it, and once its
    connections over a lowered grant have ended): the time for capacity to
    move from idle hosts to busy ones, then the Redis CPU (utime + stime of
    redis-server from /proc) and the time per call over STEADY_S seconds;
  - over-grant: the sum over hosts of max(grant, holding), as the hosts
    hold them, past fleet_limit, after every call (it must stay 0);
  - convergence: random fleets whose every host's demand changes at once,
    and the refreshes until the shares are max-min (see convergence()).
"""

import heapq
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "helpers"))
from lease_sim import Fleet, Redis  # noqa: E402
from plumbing import STARTED, log, record, start_redis  # noqa: E402

SIZES = (10, 100, 1000)
COST_SIZES = (4, 64) + SIZES
COST_CALLS = dict(full=2000, quick=500)
ROUNDS = 5
REFRESH_S = 1.0
OWED_GAP_S = max(0.05, REFRESH_S / 4)  # agent.c's owed_gap(): how often an owed host asks
LEASE_MS = 10000      # fleet_lease_ms's default
FALLBACK_MS = 300000  # fleet_fallback_ms's default; the agent asks Redis to
RESERVE_MS = FALLBACK_MS + int(REFRESH_S * 1000)  # reserve a refresh more
AGENT = dict(fallback_ms=FALLBACK_MS, reserve_ms=RESERVE_MS)
BUSY_WANT = 8         # half the hosts want 8 each: 4 x hosts, twice the limit
BATCH = 50            # calls sent to Redis together, at most
RELEASE_S = 0.05      # how long a host's connections over a lowered grant last
IDLE_S = 2.0
MOVE_BUDGET_S = 6.0
STEADY_S = dict(full=5.0, quick=2.0)
CONVERGENCE_FLEETS = dict(full=60, quick=20)


def limit_for(hosts):
    return 2 * hosts


def redis_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cost(redis, hosts, calls):
    """Redis's microseconds per lease call at HOSTS hosts, back to back."""
    fleet = Fleet(redis, LEASE_LUA, hosts, limit_for(hosts), LEASE_MS,
                  fleet=f"cost{hosts}", **AGENT)
    for h in fleet.names[::2]:
        fleet.want[h] = BUSY_WANT
    for h in fleet.names:
        fleet.call(h)
    best = None
    for _ in range(ROUNDS):
        redis("CONFIG", "RESETSTAT")
        for i in range(calls):
            fleet.call(fleet.names[i % hosts])
        us = redis.commandstats()["usec_per_call"]
        best = us if best is None else min(best, us)
    return best, fleet.over_grant()


class Clock:
    """The hosts' refreshes and early asks, in time order."""

    def __init__(self, fleet, start):
        self.fleet = fleet
        n = len(fleet.names)
        # (when, is it an early ask, host): refreshes reschedule themselves
        self.due = [(start + i * REFRESH_S / n, False, h) for i, h in enumerate(fleet.names)]
        heapq.heapify(self.due)
        self.calls = 0
        self.worst = 0

    def ask_now(self, hosts):
        now = time.monotonic()
        for h in hosts:
            heapq.heappush(self.due, (now, True, h))

    def run_until(self, end, done=lambda: False):
        """Serves every call due before END; stops early once done(). Calls
        due at the same moment (the sim fallen behind, or many hosts asking
        at once) go to Redis together, BATCH at most, as many agents' calls
        would arrive."""
        while self.due and self.due[0][0] < end and not done():
            wait = self.due[0][0] - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            now, batch = time.monotonic(), {}
            while self.due and self.due[0][0] <= now and len(batch) < BATCH:
                when, early, h = heapq.heappop(self.due)
                if not early:
                    heapq.heappush(self.due, (when + REFRESH_S, False, h))
                batch[h] = True
            self.fleet.call_many(list(batch))
            self.calls += len(batch)
            self.worst = max(self.worst, self.fleet.used - self.fleet.limit)
            for h in batch:
                if self.fleet.owed[h] > 0 and self.fleet.want[h] > self.fleet.grant[h]:
                    heapq.heappush(self.due, (now + OWED_GAP_S, True, h))
                if self.fleet.holding[h] > self.fleet.grant[h]:
                    # its connections over the grant end (RELEASE_S), and the
                    # agent reports at once that it is down to the grant
                    heapq.heappush(self.due, (now + RELEASE_S, True, h))


def real_time(redis, redis_pid, hosts, steady_s):
    """Move time (s, None if not within MOVE_BUDGET_S), Redis CPU %, us per
    call and calls per second in the steady state, and the worst over-grant."""
    fleet = Fleet(redis, LEASE_LUA, hosts, limit_for(hosts), LEASE_MS,
                  fleet=f"live{hosts}", **AGENT)
    clock = Clock(fleet, time.monotonic())
    clock.run_until(time.monotonic() + IDLE_S)      # every host idle: headroom only
    busy = fleet.names[::2]
    for h in busy:
        fleet.want[h] = BUSY_WANT
    start = time.monotonic()
    clock.ask_now(busy)                             # new demand: asked at once

    def moved():
        return sum(fleet.grant[h] for h in busy) >= fleet.limit
    clock.run_until(start + MOVE_BUDGET_S, moved)
    move_s = time.monotonic() - start if moved() else None
    clock.run_until(time.monotonic() + REFRESH_S)   # settle: every host refreshed
    redis("CONFIG", "RESETSTAT")
    cpu0, t0, calls0 = redis_cpu_s(redis_pid), time.monotonic(), clock.calls
    clock.run_until(t0 + steady_s)
    wall = time.monotonic() - t0
    cpu = (redis_cpu_s(redis_pid) - cpu0) / wall * 100
    per_call = redis.commandstats()["usec_per_call"]
    return move_s, cpu, per_call, (clock.calls - calls0) / wall, clock.worst


def max_min(wants, limit):
    """The exact max-min shares (water-filling, not rounded) of WANTS."""
    left, out = limit, {}
    ordered = sorted(wants.items(), key=lambda kv: kv[1])
    for i, (host, want) in enumerate(ordered):
        fair = left / (len(ordered) - i)
        if want > fair:
            out.update((h, fair) for h, _ in ordered[i:])
            break
        out[host] = want
        left -= want
    return out


def convergence(redis, fleets):
    """FLEETS random fleets (3 to 30 hosts, random limits and wants, all set
    at once): how many refreshes until every host holds at least its max-min
    share rounded down and the whole limit (or all wanted) is in use. Each
    refresh: every host calls once, in random order, then up to 4 rounds of
    the agent's early asks (a host down to a lowered grant, a host owed
    more). A histogram {refreshes: fleets}, None for not within 8; and the
    worst over-grant after any round of calls."""
    rng = random.Random(18)
    histogram, worst = {}, 0
    for trial in range(fleets):
        hosts = rng.choice((3, 5, 10, 30))
        limit = rng.randint(hosts, 4 * hosts)
        fleet = Fleet(redis, LEASE_LUA, hosts, limit, LEASE_MS, fleet=f"conv{trial}",
                      **AGENT)
        for h in fleet.names:
            fleet.want[h] = rng.randint(0, 8)
        share = max_min(fleet.want, limit)
        enough = min(limit, sum(fleet.want.values()))
        took = None
        for refresh in range(1, 9):
            order = rng.sample(fleet.names, len(fleet.names))
            fleet.call_many(order)
            worst = max(worst, fleet.used - limit)
            for _ in range(4):
                early = [h for h in order if fleet.holding[h] > fleet.grant[h] or
                         (fleet.owed[h] > 0 and fleet.want[h] > fleet.grant[h])]
                if early:
                    fleet.call_many(early)
                    worst = max(worst, fleet.used - limit)
            if all(fleet.grant[h] >= min(fleet.want[h], int(share[h])) for h in order) and \
               sum(min(fleet.grant[h], fleet.want[h]) for h in order) >= enough:
                took = refresh
                break
        histogram[took] = histogram.get(took, 0) + 1
    return histogram, worst


def title(setup):
    return f"fleetsim: {', '.join(map(str, SIZES))} simulated hosts, one Redis"


def section(setup):
    """Returns (report lines, budget checks as (ok, text))."""
    quick = setup.quick
    global LEASE_LUA
    LEASE_LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agent",
                             "lease.lua")
    port = start_redis()
    redis_pid = STARTED[-1].pid
    redis = Redis(port)
    calls = COST_CALLS["quick" if quick else "full"]
    steady_s = STEADY_S["quick" if quick else "full"]
    costs, over = {}, 0
    for hosts in COST_SIZES:
        log(f"fleetsim: cost at {hosts} hosts, {ROUNDS} x {calls} calls")
        costs[hosts], worst = cost(redis, hosts, calls)
        over = max(over, worst)
        record("fleetsim", f"{hosts} hosts", 0, "us_per_call", f"{costs[hosts]:.1f}")
    rows = {}
    for hosts in SIZES:
        log(f"fleetsim: {hosts} hosts in real time, refresh {REFRESH_S:.0f} s")
        rows[hosts] = real_time(redis, redis_pid, hosts, steady_s)
        move_s, cpu, per_call, rate, worst = rows[hosts]
        over = max(over, worst)
        for k, v in (("move_s", move_s if move_s is not None else -1), ("cpu_pct", cpu),
                     ("live_us_per_call", per_call), ("calls_per_s", rate),
                     ("over_grant", worst)):
            record("fleetsim", f"{hosts} hosts", 0, k, f"{v:.3f}")
    fleets = CONVERGENCE_FLEETS["quick" if quick else "full"]
    log(f"fleetsim: {fleets} random fleets, every host's demand changed at once")
    histogram, worst = convergence(redis, fleets)
    over = max(over, worst)
    for took, count in histogram.items():
        record("fleetsim", "convergence", 0, f"refreshes_{took}", count)
    redis.close()
    lines = [f"fleetsim: simulated hosts against one redis-server, agent/lease.lua with the "
             f"agent's arguments; fleet_limit 2 x hosts, half the hosts busy (want "
             f"{BUSY_WANT}), lease {LEASE_MS} ms",
             f"  cost per lease call, back to back (INFO commandstats, least of {ROUNDS} "
             f"x {calls}): " + ", ".join(f"{h} hosts {costs[h]:.1f} us" for h in COST_SIZES),
             f"  {'hosts':>6} {'us/call':>8} {'Redis CPU':>10} {'calls/s':>8} "
             f"{'idle->busy':>11} {'over-grant':>11}   (refresh {REFRESH_S:.0f} s, "
             f"{steady_s:.0f} s measured)"]
    for hosts, (move_s, cpu, per_call, rate, worst) in rows.items():
        move = f"{move_s * 1000:.0f} ms" if move_s is not None else "not moved"
        lines.append(f"  {hosts:>6} {per_call:>8.1f} {cpu:>9.1f}% {rate:>8.0f} {move:>11} "
                     f"{worst:>11}")
    done = sorted(k for k in histogram if k is not None)
    lines.append(f"  max-min shares reached, {fleets} random fleets of 3 to 30 hosts with "
                 f"every host's demand changed at once (refreshes: fleets): " +
                 ", ".join(f"{k}: {histogram[k]}" for k in done) +
                 (f", not within 8: {histogram[None]}" if None in histogram else ""))
    big, small = costs[SIZES[-1]], costs[SIZES[0]]
    checks = [(over == 0, f"fleetsim: over-grant {over} over every call at every size "
                          f"(limit 0)"),
              (costs[64] <= 2.5 * costs[4], f"fleetsim: a lease call at 64 hosts costs "
               f"{costs[64] / costs[4]:.2f} x one at 4 ({costs[64]:.1f} / {costs[4]:.1f} us; "
               f"limit 2.5)"),
              (big <= 2.5 * small, f"fleetsim: at {SIZES[-1]} hosts {big / small:.2f} x "
               f"the cost at {SIZES[0]} ({big:.1f} / {small:.1f} us; limit 2.5)")]
    checks.append((None not in histogram and max(done) <= 6,
                   f"fleetsim: every random fleet at its max-min shares within "
                   f"{max(done) if done else 'inf'} refreshes (limit 6)"))
    for hosts, (move_s, *_rest) in rows.items():
        checks.append((move_s is not None and move_s <= 2 * REFRESH_S + 0.2,
                       f"fleetsim: {hosts} hosts: idle capacity moved to the busy hosts "
                       f"in {move_s * 1000 if move_s is not None else float('inf'):.0f} ms "
                       f"(limit two refreshes + 200 ms)"))
    return lines, checks
