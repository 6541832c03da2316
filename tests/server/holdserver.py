#!/usr/bin/env python3
"""holdserver: a loopback TCP server that holds connections and counts them.

    holdserver.py --host 127.0.0.1|::1 --port 0 --hold-ms N [--hold-until FILE]
                  --ready FILE --stats FILE

It is the tests' observer: what it counts is what really reached the network.

Behaviour per accepted connection:
  * hold-ms >= 0: the connection is held for hold-ms after accept (whatever
    the client sends meanwhile is read and ignored), then the server sends a
    short HTTP/1.0 200 response and shuts its side down. curl and wget get
    their answer; raw clients that only read see the response, then EOF.
    If the client closes first, the connection ends then. With
    --hold-until FILE, none is answered while FILE does not exist: a test
    that has every client connected or waiting for a permit then lets them
    go.
  * hold-ms == -1: held until the client closes. If the client sends a full
    HTTP request head (bytes ending in CRLF CRLF), it is answered at once, so
    an HTTP client never hangs; a raw client that sends nothing is held for
    as long as it keeps the connection open.

A connection counts as open from accept until the server answers it or sees
the client's EOF/reset, whichever first. After answering, the server only
waits (uncounted) for the client's EOF so that it never closes with unread
data, which would turn its FIN into an RST and lose the response.

Counting is made exact for the tests:
  * before a new connection is counted, every open one is checked for a
    pending EOF, so a client that closed one connection and then opened
    another is never seen as two at once;
  * a connection is uncounted before the server sends its response, so a
    client that reacts to the response cannot be early.

Files:
  --ready FILE  written once listening (tmp + rename): line 1 the port,
                line 2 a control port on 127.0.0.1.
  --stats FILE  "max=N total=M open=K", rewritten (tmp + rename) on every change.

Control port: a connection to it makes the server first accept everything
already queued on the main port and read every pending EOF, then write the
stats line back and close. Tests use it to know that the stats file is final
once their clients have exited.

Exits on SIGTERM/SIGINT, or by itself after --lifetime seconds (default 900)
so that a forgotten server never outlives a test run by long.
"""

import argparse
import os
import selectors
import signal
import socket
import sys
import time

BODY = b"held\n"
RESPONSE = (b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
            b"Content-Length: " + str(len(BODY)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n" + BODY)
DRAIN_SECONDS = 5.0


class Conn:
    __slots__ = ("sock", "deadline", "buf", "counted")

    def __init__(self, sock, deadline):
        self.sock = sock
        self.deadline = deadline
        self.buf = b""
        self.counted = True


class Server:
    def __init__(self, args):
        self.args = args
        self.hold = args.hold_ms
        self.sel = selectors.DefaultSelector()
        self.conns = {}      # fd -> Conn, counted as open
        self.draining = {}   # fd -> (sock, give-up time): answered, awaiting EOF
        self.open = 0
        self.max = 0
        self.total = 0

        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((args.host, args.port))
        self.listener.listen(4096)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")

        self.control = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.control.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.control.bind(("127.0.0.1", 0))
        self.control.listen(64)
        self.sel.register(self.control, selectors.EVENT_READ, "control")

    # --- files -------------------------------------------------------------
    @staticmethod
    def write_atomic(path, text):
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, path)

    def stats_line(self):
        return "max=%d total=%d open=%d\n" % (self.max, self.total, self.open)

    def write_stats(self):
        self.write_atomic(self.args.stats, self.stats_line())

    # --- connection life ---------------------------------------------------
    def accept_one(self):
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False
        # A client may have closed an earlier connection just before opening
        # this one: see that EOF first so the two never overlap in the count.
        self.scan_pending()
        sock.setblocking(False)
        deadline = None
        if self.hold >= 0:
            deadline = time.monotonic() + self.hold / 1000.0
        conn = Conn(sock, deadline)
        self.conns[sock.fileno()] = conn
        self.sel.register(sock, selectors.EVENT_READ, "conn")
        self.total += 1
        self.open += 1
        if self.open > self.max:
            self.max = self.open
        self.write_stats()
        return True

    def uncount(self, conn):
        if conn.counted:
            conn.counted = False
            del self.conns[conn.sock.fileno()]
            self.open -= 1
            self.write_stats()

    def finish(self, conn, answer):
        """Ends a counted connection: uncount first, then answer."""
        sock = conn.sock
        self.uncount(conn)
        if not answer:
            self.sel.unregister(sock)
            sock.close()
            return
        try:
            sock.send(RESPONSE)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.sel.unregister(sock)
            sock.close()
            return
        self.draining[sock.fileno()] = (sock, time.monotonic() + DRAIN_SECONDS)

    def on_readable(self, fd):
        if fd in self.draining:
            sock, _ = self.draining[fd]
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                del self.draining[fd]
                self.sel.unregister(sock)
                sock.close()
            return
        conn = self.conns.get(fd)
        if conn is None:
            return
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.finish(conn, answer=False)
            return
        if not data:
            # The client closed (or shut its side): answer if it still can
            # read, then the connection is over either way.
            self.finish(conn, answer=True)
            return
        if self.hold < 0:
            conn.buf = (conn.buf + data)[-4096:]
            if b"\r\n\r\n" in conn.buf:
                self.finish(conn, answer=True)

    def scan_pending(self):
        """Handles every open connection that is readable right now (the
        selector's poll, so that each accept costs what is ready, not what
        is open)."""
        for key, _ in self.sel.select(0):
            if key.data == "conn":
                self.on_readable(key.fd)

    def released(self):
        """No --hold-until, or its file exists (removing it holds again)."""
        return not self.args.hold_until or os.path.exists(self.args.hold_until)

    def expire(self):
        now = time.monotonic()
        for conn in [c for c in self.conns.values()
                     if c.deadline is not None and c.deadline <= now and self.released()]:
            self.finish(conn, answer=True)
        for fd, (sock, give_up) in list(self.draining.items()):
            if give_up <= now:
                del self.draining[fd]
                self.sel.unregister(sock)
                sock.close()

    def next_timeout(self):
        if self.conns and not self.released():
            return 0.005
        deadlines = [c.deadline for c in self.conns.values() if c.deadline is not None]
        deadlines += [g for _, g in self.draining.values()]
        if not deadlines:
            return 1.0
        return max(0.0, min(min(deadlines) - time.monotonic(), 1.0))

    def on_control(self):
        try:
            csock, _ = self.control.accept()
        except OSError:
            return
        # Everything a finished client did is already queued in the kernel:
        # take it all in so that the stats are final.
        while self.accept_one():
            pass
        self.scan_pending()
        self.expire()
        try:
            csock.setblocking(True)
            csock.settimeout(2.0)
            csock.sendall(self.stats_line().encode())
            csock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        csock.close()

    # --- main loop ---------------------------------------------------------
    def run(self):
        self.write_stats()
        self.write_atomic(self.args.ready, "%d\n%d\n" % (
            self.listener.getsockname()[1], self.control.getsockname()[1]))
        end = time.monotonic() + self.args.lifetime
        while time.monotonic() < end:
            events = self.sel.select(self.next_timeout())
            # Reads (EOFs) before accepts: a close seen in the same round as
            # a new connection happened first.
            listen_ready = control_ready = False
            for key, _ in events:
                if key.data == "conn":
                    self.on_readable(key.fd)
                elif key.data == "listen":
                    listen_ready = True
                else:
                    control_ready = True
            self.expire()
            if listen_ready:
                while self.accept_one():
                    pass
            if control_ready:
                self.on_control()


def main():
    ap = argparse.ArgumentParser(description="loopback TCP hold server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--hold-ms", type=int, default=1000)
    ap.add_argument("--hold-until")
    ap.add_argument("--ready", required=True)
    ap.add_argument("--stats", required=True)
    ap.add_argument("--lifetime", type=float, default=900.0)
    args = ap.parse_args()

    def stop(signum, frame):
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        Server(args).run()
    except OSError as e:
        print("holdserver: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
