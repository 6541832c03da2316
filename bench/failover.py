"""The bench's failover section: how long a Redis Sentinel failover keeps a
host's agent from leasing. A real master, its replica and one sentinel on
loopback (down after 500 ms, as in the tests), one host's bulkhead-agent
leasing through the sentinel; the master is SIGKILLed and two times are
read from outside: when the sentinel names the replica, and when the
host's lease in the promoted replica changes (its agent wrote there).
docs/fleet.md promises the second within one fleet_refresh_ms of the
first. See bench/README.
"""

import os
import signal
import socket
import subprocess
import time

import plumbing
from plumbing import (BASE_ENV, STARTED, BenchError, check_rules, free_port, median,
                      new_namespace, note, record, stop)

REFRESH_MS = 200
LEASE_MS = 2000
ROUNDS = dict(full=5, quick=2)
MASTER = "bench-master"


def title(setup):
    return f"Sentinel failover: one host's agent, refresh {REFRESH_MS} ms"


def section(setup):
    """(report lines, budget checks as (ok, text))."""
    rounds = ROUNDS["quick" if setup.quick else "full"]
    runs = [one_failover(setup.tmp, setup.base, r) for r in range(rounds)]
    promoted = [p for p, _ in runs]
    renewed = [r for _, r in runs]
    for i, (p, r) in enumerate(runs):
        record("failover", "sentinel", i, "promoted_ms", p)
        record("failover", "sentinel", i, "renewed_ms", r)
    worst = max(renewed)
    lines = [f"Sentinel failover ({rounds} rounds, the master SIGKILLed; sentinel "
             f"down-after 500 ms; the agent's refresh {REFRESH_MS} ms):",
             f"  the sentinel named the replica {median(promoted):.0f} ms after the kill "
             f"(median; {min(promoted):.0f}-{max(promoted):.0f})",
             f"  the host leased from it {median(renewed):.0f} ms after that (median; "
             f"worst {worst:.0f})"]
    checks = [(worst <= REFRESH_MS, f"failover: the host leased from the new master "
               f"{worst:.0f} ms after the sentinel named it, at worst (limit one "
               f"refresh, {REFRESH_MS} ms)")]
    return lines, checks


def redis(port, *args):
    """One command over RESP; its reply (str, int, list or None). Fast
    enough to poll every few ms, which a redis-cli per poll is not."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"".join([f"*{len(args)}\r\n".encode()] +
                           [f"${len(a.encode())}\r\n{a}\r\n".encode() for a in args]))
        return read_reply(s.makefile("rb"))


def read_reply(f):
    line = f.readline().rstrip(b"\r\n").decode()
    kind, rest = line[:1], line[1:]
    if kind in "+-":
        return rest
    if kind == ":":
        return int(rest)
    if kind == "$":
        return None if rest == "-1" else f.read(int(rest) + 2)[:-2].decode()
    if kind == "*":
        return None if rest == "-1" else [read_reply(f) for _ in range(int(rest))]
    raise BenchError(f"failover: unexpected reply from Redis: {line!r}")


def start(cmd):
    p = subprocess.Popen(cmd, env=BASE_ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    STARTED.append(p)
    note("pids", p.pid)
    return p


def poll(what, condition, timeout=20.0):
    """Polls every 2 ms; the time it first held (monotonic s)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if condition():
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.002)
    raise BenchError(f"failover: {what} not within {timeout:.0f} s")


def redis_server(tmp, port, *extra):
    # --dir: a replica writes the master's RDB where it runs, never in the checkout.
    return start(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--dir", tmp, *extra])


def trio(tmp, r):
    """A master, its replica in sync, and a sentinel that knows both: their
    processes, and the replica's and the sentinel's ports."""
    master, replica, sentinel = free_port(), free_port(), free_port()
    procs = [redis_server(tmp, master)]
    poll("the master", lambda: redis(master, "PING") == "PONG")
    procs.append(redis_server(tmp, replica, "--replicaof", "127.0.0.1", str(master)))
    poll("the replica's sync",
         lambda: "master_link_status:up" in redis(replica, "INFO", "replication"))
    conf = os.path.join(tmp, f"failover_sentinel{r}.conf")
    with open(conf, "w") as f:
        f.write(f"port {sentinel}\nbind 127.0.0.1\ndir {tmp}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {master} 1\n"
                f"sentinel down-after-milliseconds {MASTER} 500\n"
                f"sentinel failover-timeout {MASTER} 3000\n")
    procs.append(start(["redis-sentinel", conf]))
    poll("the sentinel's view of the replica",
         lambda: [f"127.0.0.1:{replica}"] == [
             f"{e[e.index('ip') + 1]}:{e[e.index('port') + 1]}"
             for e in redis(sentinel, "SENTINEL", "REPLICAS", MASTER)])
    return procs, replica, sentinel


def one_failover(tmp, base, r):
    """(ms from the kill to the sentinel naming the replica, ms from then
    to the host's lease written in it)."""
    procs, replica, sentinel = trio(tmp, r)
    fleet, host = f"{base}-fo{r}", "a"  # a fleet's name, not a namespace
    cfg = os.path.join(tmp, f"failover{r}.ini")
    with open(cfg, "w") as f:
        f.write(f"[global]\nnamespace = {new_namespace(base, f'fo{r}a')}\nlog = error\n"
                f"fleet = redis-sentinel://127.0.0.1:{sentinel}/{MASTER}\n"
                f"fleet_name = {fleet}\nfleet_host = {host}\n"
                f"fleet_refresh_ms = {REFRESH_MS}\nfleet_lease_ms = {LEASE_MS}\n"
                f"[svc]\nfleet_limit = 4\nmatch = 127.0.0.1:{free_port()}\n")
    check_rules(cfg)
    agent = start([os.path.join(plumbing.BUILD, "bulkhead-agent"), "-c", cfg])
    leases = f"bulkhead:{{{fleet}/svc}}:leases"
    lease = lambda: redis(replica, "HGET", leases, host)
    poll("the lease replicated", lambda: lease() is not None)
    killed = time.monotonic()
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    before = lease()
    switched = poll("the sentinel's promotion", lambda: redis(
        sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)[1] == str(replica))
    renewed = poll("the lease in the promoted replica", lambda: lease() != before)
    for p in [agent] + procs:
        stop(p)
    return (switched - killed) * 1000, (renewed - switched) * 1000
