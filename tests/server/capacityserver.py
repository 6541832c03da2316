#!/usr/bin/env python3
"""capacityserver: a loopback service that can serve only C requests at once.

    capacityserver.py --ready FILE --capacity C --service-ms S [--lifetime SECONDS]

It behaves as an overloaded service does: it accepts every connection, and
a request (everything up to the first newline) is served for S ms as soon
as one of its C slots is free; requests beyond C wait in its own queue, in
arrival order. So a client's time from connect to answer is queueing + S,
and a limit above C only lengthens the queue. The answer is a short
HTTP/1.0 response (its first line is a line, so raw clients and curl both
work); the server then shuts its side and waits for the client's EOF, so
it never closes with unread data (which would turn its FIN into an RST).

A connection counts as open from accept until its answer goes out: the
server uncounts it first, so a client that reacts to the answer is never
seen twice. A client that goes away early leaves the queue, or finishes
its service time unanswered.

--ready FILE is written once listening on 127.0.0.1 (tmp + rename): line 1
the port, line 2 the control port. A control connection sends one line
and gets one line back, then the server closes it:
    stat          capacity=C open=N serving=N queued=N max_open=N
                  max_serving=N served=N
    capacity N    sets C now (more slots start queued requests at once;
                  fewer let the requests being served finish), then stat
    service MS    sets S now, for requests that start from then on, then
                  stat
    reset         stat, then starts max_open, max_serving and served over
                  (the maxima from what is open and served now)

Exits on SIGTERM/SIGINT, or by itself after --lifetime seconds (default 900)
so that a forgotten server never outlives a run by long.
"""

import argparse
import collections
import heapq
import itertools
import os
import selectors
import signal
import socket
import sys
import time

ANSWER = b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
DRAIN_SECONDS = 5.0


class Request:
    __slots__ = ("sock", "buf", "state")

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.state = "reading"  # reading, queued, serving, gone


class Server:
    def __init__(self, args):
        self.capacity = args.capacity
        self.service = args.service_ms / 1000.0
        self.sel = selectors.DefaultSelector()
        self.requests = {}                 # fd -> Request, counted as open
        self.queue = collections.deque()   # Requests waiting for a slot
        self.serving = []                  # heap of (end time, seq, Request)
        self.busy = 0                      # slots taken (gone clients' too)
        self.draining = {}                 # fd -> (sock, give-up time)
        self.seq = itertools.count()
        self.max_open = self.max_serving = self.served = 0

        self.listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        self.control = socket.create_server(("127.0.0.1", 0))
        self.sel.register(self.control, selectors.EVENT_READ, "control")

    # --- requests ------------------------------------------------------------
    def accept_all(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # BlockingIOError: none left
                return
            sock.setblocking(False)
            self.requests[sock.fileno()] = Request(sock)
            self.sel.register(sock, selectors.EVENT_READ, "request")
            self.max_open = max(self.max_open, len(self.requests))

    def start_queued(self):
        now = time.monotonic()
        while self.queue and self.busy < self.capacity:
            req = self.queue.popleft()
            req.state = "serving"
            self.busy += 1
            heapq.heappush(self.serving, (now + self.service, next(self.seq), req))
        self.max_serving = max(self.max_serving, self.busy)

    def uncount(self, req):
        del self.requests[req.sock.fileno()]
        self.sel.unregister(req.sock)

    def on_request_data(self, req):
        try:
            data = req.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away before its answer
            if req.state == "queued":
                self.queue.remove(req)
            req.state = "gone"
            self.uncount(req)
            req.sock.close()
            return
        if req.state == "reading":
            req.buf = (req.buf + data)[-4096:]
            if b"\n" in req.buf:
                req.state = "queued"
                self.queue.append(req)
                self.start_queued()

    def finish_due(self):
        now = time.monotonic()
        while self.serving and self.serving[0][0] <= now:
            _, _, req = heapq.heappop(self.serving)
            self.busy -= 1
            if req.state == "gone":
                continue
            self.uncount(req)
            self.served += 1
            try:
                req.sock.send(ANSWER)
                req.sock.shutdown(socket.SHUT_WR)
            except OSError:
                req.sock.close()
                continue
            self.sel.register(req.sock, selectors.EVENT_READ, "drain")
            self.draining[req.sock.fileno()] = (req.sock, now + DRAIN_SECONDS)
        self.start_queued()

    def on_drain(self, fd):
        sock, _ = self.draining[fd]
        try:
            if sock.recv(4096):
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        del self.draining[fd]
        self.sel.unregister(sock)
        sock.close()

    def drop_stale_drains(self):
        now = time.monotonic()
        for fd, (sock, give_up) in list(self.draining.items()):
            if give_up <= now:
                del self.draining[fd]
                self.sel.unregister(sock)
                sock.close()

    # --- control ---------------------------------------------------------------
    def stat_line(self):
        return (f"capacity={self.capacity} open={len(self.requests)} serving={self.busy} "
                f"queued={len(self.queue)} max_open={self.max_open} "
                f"max_serving={self.max_serving} served={self.served}\n")

    def command(self, line):
        words = line.split()
        if words[:1] == ["capacity"] and len(words) == 2 and words[1].isdigit():
            self.capacity = int(words[1])
            self.start_queued()
        elif words[:1] == ["service"] and len(words) == 2 and words[1].isdigit():
            self.service = int(words[1]) / 1000.0
        elif words == ["reset"]:
            figures = self.stat_line()
            self.max_open, self.max_serving, self.served = len(self.requests), self.busy, 0
            return figures
        elif words != ["stat"]:
            return f"error: unknown command {line.strip()!r}\n"
        return self.stat_line()

    def on_control(self):
        try:
            csock, _ = self.control.accept()
        except OSError:
            return
        # Everything a client did before it asked is already queued in the
        # kernel: take it in first, so the answer includes it.
        self.accept_all()
        try:
            csock.settimeout(2.0)
            line = b""
            while not line.endswith(b"\n") and len(line) < 256:
                chunk = csock.recv(256)
                if not chunk:
                    break
                line += chunk
            csock.sendall(self.command(line.decode(errors="replace")).encode())
        except OSError:
            pass
        csock.close()

    # --- main loop ---------------------------------------------------------------
    def timeout(self):
        if not self.serving:
            return 1.0
        return max(0.0, min(self.serving[0][0] - time.monotonic(), 1.0))

    def run(self, ready, lifetime):
        tmp = f"{ready}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(f"{self.listener.getsockname()[1]}\n{self.control.getsockname()[1]}\n")
        os.rename(tmp, ready)
        end = time.monotonic() + lifetime
        while time.monotonic() < end:
            for key, _ in self.sel.select(self.timeout()):
                if key.data == "listen":
                    self.accept_all()
                elif key.data == "control":
                    self.on_control()
                elif key.data == "drain":
                    self.on_drain(key.fd)
                elif key.fd in self.requests:
                    self.on_request_data(self.requests[key.fd])
            self.finish_due()
            self.drop_stale_drains()


def main():
    ap = argparse.ArgumentParser(description="loopback service of limited capacity")
    ap.add_argument("--ready", required=True)
    ap.add_argument("--capacity", type=int, required=True)
    ap.add_argument("--service-ms", type=float, required=True)
    ap.add_argument("--lifetime", type=float, default=900.0)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    try:
        Server(args).run(args.ready, args.lifetime)
    except OSError as e:
        print(f"capacityserver: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
