"""Simulated fleet hosts against a real redis-server: the lease script
(agent/lease.lua) called with the keys and arguments bulkhead-agent sends
(agent/lease.c), one call per host, over one connection. The tests (the
cost and bookkeeping checks in tests/fleet_scale.bats) and the bench's
fleetsim section use it; it needs nothing but python3.
"""

import socket
import time


class Redis:
    """A minimal RESP client: one connection, one command at a time."""

    def __init__(self, port, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port))
        self.file = self.sock.makefile("rb")

    def __call__(self, *args):
        return self.pipeline([args])[0]

    def pipeline(self, commands):
        """Sends every command, then reads every answer: the replies, in order
        (an error reply raises once all are read)."""
        out = []
        for args in commands:
            out.append(b"*%d\r\n" % len(args))
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        replies, error = [], None
        for _ in commands:
            try:
                replies.append(self._read())
            except RedisError as e:
                replies.append(None)
                error = error or e
        if error:
            raise error
        return replies

    def _read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        if not line:
            raise RedisError("connection closed")
        return rest.decode()

    def commandstats(self, command="evalsha"):
        """INFO commandstats for COMMAND: calls, usec, usec_per_call."""
        for line in self("INFO", "commandstats").splitlines():
            if line.startswith(f"cmdstat_{command}:"):
                return {k: float(v) for k, v in
                        (kv.split("=") for kv in line.split(":", 1)[1].split(","))
                        if k in ("calls", "usec", "usec_per_call")}
        return {"calls": 0.0, "usec": 0.0, "usec_per_call": 0.0}

    def close(self):
        self.file.close()
        self.sock.close()


class RedisError(Exception):
    pass


def keys(fleet, compartment):
    """The compartment's keys, as agent/lease.c names them."""
    tag = f"bulkhead:{{{fleet}/{compartment}}}"
    return f"{tag}:leases", f"{tag}:expiry", f"{tag}:meta"


class Fleet:
    """HOSTS simulated hosts of one compartment. Each host has a want (its
    demand, set by the caller); between its calls it uses up to its grant
    (new connections up to a raised grant at once, those over a lowered
    one ending before its next call), and reports at each call what it
    holds then: min(want, grant). Its own copy of the lease runs lease_ms
    from when it asked, as the agent's does; a host past it (dead, or
    stalled) falls to the fallback share Redis last answered for
    fallback_ms, holding at most that, and then to nothing: its connections
    end with it. reserve_ms is what it asks Redis to reserve past its lease
    (the agent: fleet_fallback_ms + fleet_refresh_ms); fallback is "split"
    or N, as fleet_fallback."""

    def __init__(self, redis, script_path, hosts, fleet_limit, lease_ms=10000,
                 fleet="sim", compartment="db", fallback="split", fallback_ms=0,
                 reserve_ms=0):
        self.redis = redis
        self.sha = redis("SCRIPT", "LOAD", open(script_path).read())
        self.keys = keys(fleet, compartment)
        self.limit = fleet_limit
        self.lease_ms = lease_ms
        self.fallback, self.fallback_ms, self.reserve_ms = fallback, fallback_ms, reserve_ms
        self.names = [f"host-{i:04d}" for i in range(hosts)]
        self.want = {h: 0 for h in self.names}
        self.grant = {h: 0 for h in self.names}
        self.holding = {h: 0 for h in self.names}
        self.owed = {h: 0 for h in self.names}
        self.share = {h: 0 for h in self.names}  # the fallback share last answered
        self.lease_end = {h: 0.0 for h in self.names}
        self.used = 0  # the sum over hosts of max(grant, holding), kept as it changes
        self.leased = set()  # hosts Redis has answered

    def _set(self, host, grant, holding):
        self.used -= max(self.grant[host], self.holding[host])
        self.grant[host], self.holding[host] = grant, holding
        self.used += max(grant, holding)

    def lapse(self, now=None):
        """Hosts whose own lease has ended fall to their fallback share for
        fallback_ms, then drop their grant and holding."""
        now = time.monotonic() if now is None else now
        for h in self.names:
            if now >= self.lease_end[h] + self.fallback_ms / 1000:
                self._set(h, 0, 0)
            elif now >= self.lease_end[h]:
                kept = min(self.share[h], self.grant[h])
                self._set(h, kept, min(self.holding[h], kept))

    def call(self, host):
        """One lease call for HOST, as the agent makes it; returns the reply."""
        return self.call_many([host])[0]

    def call_many(self, hosts):
        """One lease call for each of HOSTS (distinct), sent together as many
        agents' calls arrive at once; their replies."""
        asked = time.monotonic()
        commands = []
        for host in hosts:
            if asked >= self.lease_end[host]:
                self.lapse(asked)
            holding = min(self.want[host], self.grant[host])
            self._set(host, self.grant[host], holding)
            # as the agent: a grant of 0 is sent as 1 once Redis has leased to it
            previous = self.grant[host] or int(host in self.leased)
            commands.append(("EVALSHA", self.sha, 3, *self.keys, host, self.want[host],
                             holding, previous, self.lease_ms, self.limit,
                             max(1, holding // 10), self.fallback, self.reserve_ms))
        replies = self.redis.pipeline(commands)
        for host, reply in zip(hosts, replies):
            self._set(host, reply[0], self.holding[host])
            self.owed[host] = reply[5]
            self.share[host] = reply[6]
            self.lease_end[host] = asked + self.lease_ms / 1000
            self.leased.add(host)
        return replies

    def over_grant(self):
        """How far the sum over hosts of max(grant, holding) is over the limit
        (0: not over), from the grants as the hosts hold them."""
        self.lapse()
        return max(0, self.used - self.limit)
