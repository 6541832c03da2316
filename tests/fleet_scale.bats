#!/usr/bin/env bats
# The lease script at fleet scale, against a real redis-server on a
# loopback port: simulated hosts (tests/helpers/lease_sim.py) call it with
# the keys and arguments the agent sends. What is asserted is what Redis
# itself measured (INFO commandstats) and what it holds (its keys, read
# back), and the grants as the simulated hosts hold them.

load helpers/common
load helpers/fleet

setup() { fleet_setup; }
teardown() { bh_teardown; }

# sim PYTHON: runs PYTHON with lease_sim importable and Redis's port and
# the script's path as sys.argv[1] and [2].
sim() {
    PYTHONPATH="$BH_ROOT/tests/helpers" python3 - "$REDIS_PORT" "$BH_ROOT/agent/lease.lua"
}

@test "a lease call costs Redis about the same at 64 hosts as at 4 (at most 2.5 times)" {
    start_redis
    run sim <<'PY'
import sys
from lease_sim import Redis, Fleet

redis = Redis(int(sys.argv[1]))
CALLS = 640

def fleet(hosts):
    # Half the hosts busy (wanting 4 each), half idle, limit 2 per host.
    f = Fleet(redis, sys.argv[2], hosts, 2 * hosts, compartment=f"db{hosts}")
    for h in f.names[::2]:
        f.want[h] = 4
    for h in f.names:
        f.call(h)
    return f

def batch(f):
    """Redis's own time per call over CALLS calls (INFO commandstats)."""
    redis("CONFIG", "RESETSTAT")
    for i in range(CALLS):
        f.call(f.names[i % len(f.names)])
    stats = redis.commandstats()
    assert stats["calls"] == CALLS, stats
    return stats["usec_per_call"]

small, large = fleet(4), fleet(64)
best = {4: [], 64: []}
for _ in range(5):  # alternating; the least of each, as a loaded machine adds only delay
    best[4].append(batch(small))
    best[64].append(batch(large))
us4, us64 = min(best[4]), min(best[64])
print(f"4 hosts {us4:.1f} us, 64 hosts {us64:.1f} us, ratio {us64 / us4:.2f}")
print("within" if us64 <= 2.5 * us4 else "over")
PY
    assert_success
    assert_line within
}

@test "3,000 calls from 12 hosts that die or fall silent on their fallback, come back, see the limit lowered and Redis flushed: Redis's totals always match its leases, and no host is over-granted" {
    start_redis
    run sim <<'PY'
import random, sys, time
from lease_sim import Redis, Fleet

redis = Redis(int(sys.argv[1]))
random.seed(18)
LEASE_MS = 200
# A silent host uses its fallback share for 300 ms past its lease; Redis
# reserves it for 350.
f = Fleet(redis, sys.argv[2], 12, 10, lease_ms=LEASE_MS, fallback_ms=300, reserve_ms=350)
leases, expiry, meta = f.keys
alive = set(f.names)

# Read at once (a script), or keys could expire between the reads.
SNAPSHOT = """return { redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[3]),
                   redis.call('ZCARD', KEYS[2]), redis.call('EXISTS', KEYS[1]) }"""

def recount():
    """Redis's totals against a recount of its own leases. On a machine
    stalled past two leases every key but the limit's expires: the next
    call finds its totals wrong and rebuilds them (checked then)."""
    entries, stored, ranked, exists = redis("EVAL", SNAPSHOT, 3, leases, expiry, meta)
    sums = dict(hosts=0, use=0, held=0, unmet=0, owed=0, sat_want=0, sat_hosts=0)
    for i in range(0, len(entries), 2):
        w, h, g, e, s, o, fb, r = map(int, entries[i + 1].split())
        for k, v in (("hosts", 1), ("use", max(g, h)), ("held", h),
                     ("unmet", max(0, w - g)), ("owed", o), ("sat_want", s * w),
                     ("sat_hosts", s)):
            sums[k] += v
    stored = dict(zip(*[iter(stored)] * 2))
    totals = {k: int(stored.get(k, 0)) for k in sums}
    if exists and (totals != sums or ranked != sums["hosts"]):
        raise SystemExit(f"totals {totals}, recounted {sums}, {ranked} in the expiry set")

def over(asked_since_change):
    """The sum of max(grant, holding) over the hosts, past the limit; a host
    past its own lease (LEASE_MS from when it asked) uses its fallback share,
    and nothing once that has ended.
    Holdings above a lowered limit are never cut, so they count as
    allowed."""
    f.lapse()
    if any(f.grant[h] or f.holding[h] for h in set(f.names) - asked_since_change):
        return 0  # converging: some host still holds a grant under the old limit
    used = sum(max(f.grant[h], f.holding[h]) for h in f.names)
    return used - max(f.limit, sum(f.holding.values()))

worst, asked, calls = 0, set(f.names), 0
while calls < 3000:
    order = sorted(alive, key=lambda _: random.random())
    for h in order:
        f.want[h] = random.randint(0, 8)
        f.call(h)
        asked.add(h)
        calls += 1
        recount()
        worst = max(worst, over(asked))
    if random.random() < 0.05:
        alive ^= {random.choice(f.names)}  # a host dies, or comes back
    if calls % 1000 < len(order):
        f.limit = random.randint(4, 12)
        redis("HSET", meta, "limit", f.limit)
        asked = set()
    if calls % 1500 < len(order):
        redis("FLUSHALL")  # Redis restarted empty: learning mode
print(f"worst={worst}")
PY
    assert_success
    assert_output "worst=0"
}

@test "the lease script checks every argument before it writes anything" {
    start_redis
    run sim <<'PY'
import sys
from lease_sim import Redis, RedisError, keys

redis = Redis(int(sys.argv[1]))
sha = redis("SCRIPT", "LOAD", open(sys.argv[2]).read())
good = ["h1", 3, 1, 0, 1000, 10, 1, "split", 0]
for i, bad in ((1, ""), (2, "-1"), (3, "x"), (4, "1.5"), (5, "0"), (6, "1000001"),
               (7, "1e3"), (8, "half"), (9, "172800001")):
    args = list(good)
    args[i - 1] = bad
    try:
        redis("EVALSHA", sha, 3, *keys("f", "db"), *args)
        print(f"argument {i} {bad!r}: accepted")
    except RedisError as e:
        print(e)
try:
    redis("EVALSHA", sha, 3, *keys("f", "db"), *good[:6])
except RedisError as e:
    print(e)
print("keys:", redis("KEYS", "*"))
PY
    assert_success
    assert_line --partial 'argument 1 (host) is empty'
    assert_line --partial 'argument 2 (want) is "-1", not a whole number from 0 to'
    assert_line --partial 'argument 3 (holding) is "x"'
    assert_line --partial 'argument 4 (previous grant) is "1.5"'
    assert_line --partial 'argument 5 (lease_ms) is "0", not a whole number from 1 to'
    assert_line --partial 'argument 6 (fleet_limit) is "1000001", not a whole number from 1 to 1000000'
    assert_line --partial 'argument 7 (headroom) is "1e3"'
    assert_line --partial 'argument 8 (fallback) is "half"'
    assert_line --partial 'argument 9 (reserve_ms) is "172800001", not a whole number from 0 to 172800000'
    assert_line --partial 'wants 3 keys and 9 arguments, got 3 and 6'
    assert_line "keys: []"
}
