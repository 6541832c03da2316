#!/usr/bin/env python3
"""keepaliveserver: an HTTP/1.1 keep-alive server that counts connections.

    keepaliveserver.py --hold-ms N --idle-ms M --ready FILE --stats FILE

The observer for clients that keep their connections (node's http Agent
with keepAlive, npm): every request head (bytes ending in CRLF CRLF) is
answered hold-ms after it came, with a short HTTP/1.1 200 that keeps the
connection open, and a connection idle (nothing unanswered) for idle-ms is
closed by the server, as every real server ends idle keep-alive
connections.

A connection counts as open from accept until the server closes it or sees
the client's EOF or reset. It is uncounted before the server's close, and
every pending EOF is read before a new connection is counted, so a client
that closed one connection and then opened another is never seen as two at
once: the maximum is exact.

Files and control port as holdserver.py's (tests' server_stat reads both):
  --ready FILE  line 1 the port, line 2 a control port on 127.0.0.1.
  --stats FILE  "max=N total=M open=K requests=R", rewritten on every change.
A connection to the control port makes the server take in everything
already queued, then write the stats line back and close.

Exits on SIGTERM/SIGINT, or after --lifetime seconds (default 900).
"""

import argparse
import os
import selectors
import signal
import socket
import sys
import time

BODY = b"kept\n"
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            b"Content-Length: " + str(len(BODY)).encode() + b"\r\n"
            b"Connection: keep-alive\r\n\r\n" + BODY)


class Conn:
    __slots__ = ("sock", "buf", "answers", "idle_until")

    def __init__(self, sock, idle_until):
        self.sock = sock
        self.buf = b""
        self.answers = []         # when each unanswered request is due
        self.idle_until = idle_until


class Server:
    def __init__(self, args):
        self.hold = args.hold_ms / 1000.0
        self.idle = args.idle_ms / 1000.0
        self.stats_path = args.stats
        self.sel = selectors.DefaultSelector()
        self.conns = {}
        self.open = self.max = self.total = self.requests = 0
        self.listener = self.listen(0, 4096)
        self.control = self.listen(0, 64)
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        self.sel.register(self.control, selectors.EVENT_READ, "control")

    @staticmethod
    def listen(port, backlog):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(backlog)
        s.setblocking(False)
        return s

    @staticmethod
    def write_atomic(path, text):
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, path)

    def stats_line(self):
        return "max=%d total=%d open=%d requests=%d\n" % (
            self.max, self.total, self.open, self.requests)

    def write_stats(self):
        self.write_atomic(self.stats_path, self.stats_line())

    def accept_one(self):
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return False
        self.read_ready()   # an EOF already queued ended its connection first
        sock.setblocking(False)
        self.conns[sock.fileno()] = Conn(sock, time.monotonic() + self.idle)
        self.sel.register(sock, selectors.EVENT_READ, "conn")
        self.total += 1
        self.open += 1
        self.max = max(self.max, self.open)
        self.write_stats()
        return True

    def close(self, conn):
        """Uncounted first, then closed: a permit given back on our FIN
        can never let a newcomer overlap it in the count."""
        del self.conns[conn.sock.fileno()]
        self.open -= 1
        self.write_stats()
        self.sel.unregister(conn.sock)
        conn.sock.close()

    def on_readable(self, conn):
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close(conn)
            return
        conn.buf += data
        while b"\r\n\r\n" in conn.buf:
            _, conn.buf = conn.buf.split(b"\r\n\r\n", 1)
            conn.answers.append(time.monotonic() + self.hold)

    def read_ready(self):
        for key, _ in self.sel.select(0):
            if key.data == "conn" and key.fd in self.conns:
                self.on_readable(self.conns[key.fd])

    def answer_due(self, conn, now):
        """Sends the answers due by now; False once the connection is gone."""
        while conn.answers and conn.answers[0] <= now:
            conn.answers.pop(0)
            self.requests += 1
            try:
                conn.sock.sendall(RESPONSE)
            except OSError:
                self.close(conn)
                return False
            conn.idle_until = now + self.idle
        return True

    def due(self):
        now = time.monotonic()
        for conn in list(self.conns.values()):
            if self.answer_due(conn, now) and not conn.answers and conn.idle_until <= now:
                self.close(conn)
        self.write_stats()

    def next_timeout(self):
        times = [c.answers[0] if c.answers else c.idle_until for c in self.conns.values()]
        return max(0.0, min(times + [time.monotonic() + 1.0]) - time.monotonic())

    def on_control(self):
        try:
            csock, _ = self.control.accept()
        except OSError:
            return
        while self.accept_one():
            pass
        self.read_ready()
        try:
            csock.setblocking(True)
            csock.settimeout(2.0)
            csock.sendall(self.stats_line().encode())
            csock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        csock.close()

    def run(self, ready, lifetime):
        self.write_stats()
        self.write_atomic(ready, "%d\n%d\n" % (self.listener.getsockname()[1],
                                               self.control.getsockname()[1]))
        end = time.monotonic() + lifetime
        while time.monotonic() < end:
            events = self.sel.select(self.next_timeout())
            listen_ready = control_ready = False
            for key, _ in events:
                if key.data == "conn":
                    if key.fd in self.conns:
                        self.on_readable(self.conns[key.fd])
                elif key.data == "listen":
                    listen_ready = True
                else:
                    control_ready = True
            self.due()
            if listen_ready:
                while self.accept_one():
                    pass
            if control_ready:
                self.on_control()


def main():
    ap = argparse.ArgumentParser(description="HTTP/1.1 keep-alive counting server")
    ap.add_argument("--hold-ms", type=int, default=50)
    ap.add_argument("--idle-ms", type=int, default=300)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--stats", required=True)
    ap.add_argument("--lifetime", type=float, default=900.0)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    try:
        Server(args).run(args.ready, args.lifetime)
    except OSError as e:
        print("keepaliveserver: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
