#!/usr/bin/env python3
"""badserver: a loopback server that accepts and then misbehaves.

    badserver.py --mode reset|deaf|trickle --ready FILE [--stats FILE]
                 [--host 127.0.0.1] [--port 0] [--every-ms N] [--bytes N]
                 [--stall] [--lifetime SECONDS]

Modes, per accepted connection:
  reset    closes at once with an RST (SO_LINGER 0), before sending any byte:
           the client's next receive fails with ECONNRESET.
  deaf     never reads and never sends: once the socket buffers are full
           the client's sends meet a zero window.
  trickle  sends one byte every --every-ms (default 200), --bytes of them
           (default 10), then closes: a client is never without data for
           longer than every-ms. With --stall it then keeps the connection
           open and silent instead of closing it.

--ready FILE is written once listening (tmp + rename): the port.
--stats FILE holds "total=N", the connections accepted so far (tmp +
rename, rewritten before the connection is acted on).
Exits on SIGTERM/SIGINT, or after --lifetime seconds (default 900).
"""

import argparse
import os
import selectors
import signal
import socket
import struct
import sys
import time


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=("reset", "deaf", "trickle"))
    ap.add_argument("--ready", required=True)
    ap.add_argument("--stats")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--every-ms", type=int, default=200)
    ap.add_argument("--bytes", type=int, default=10)
    ap.add_argument("--stall", action="store_true")
    ap.add_argument("--lifetime", type=float, default=900)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(64)
    total = 0
    if args.stats:
        write_atomic(args.stats, "total=0\n")
    write_atomic(args.ready, f"{listener.getsockname()[1]}\n")

    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    kept = []       # deaf connections, never read
    trickles = {}   # socket -> [bytes left, next send time]
    end = time.monotonic() + args.lifetime
    while time.monotonic() < end:
        now = time.monotonic()
        wait = 1.0
        if trickles:
            wait = max(0.0, min(t for _, t in trickles.values()) - now)
        for key, _ in selector.select(timeout=wait):
            conn, _ = listener.accept()
            total += 1
            if args.stats:
                write_atomic(args.stats, f"total={total}\n")
            if args.mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                struct.pack("ii", 1, 0))
                conn.close()
            elif args.mode == "deaf":
                kept.append(conn)
            else:
                trickles[conn] = [args.bytes, time.monotonic() + args.every_ms / 1000]
        now = time.monotonic()
        for conn, state in list(trickles.items()):
            if state[1] > now:
                continue
            try:
                conn.send(b"x")
                state[0] -= 1
            except OSError:
                state[0] = 0
            state[1] = now + args.every_ms / 1000
            if state[0] <= 0:
                del trickles[conn]
                if args.stall:
                    kept.append(conn)
                else:
                    conn.close()


if __name__ == "__main__":
    main()
