#!/usr/bin/env python3
"""blackhole: a loopback listener that never answers a SYN.

    blackhole.py --ready FILE [--host 127.0.0.1] [--lifetime SECONDS]

It listens with a backlog of 0 and fills its own accept queue with
connections it never accepts; Linux then drops every further SYN to that
port (tcp_conn_request: the accept queue is full), so a client's connect
hangs as it would to a blackholed host: about two minutes of SYN
retransmissions for a blocking connect() with no deadline.

--ready FILE is written once the queue is full (tmp + rename): the port.
Exits on SIGTERM/SIGINT, or after --lifetime seconds (default 900).
"""

import argparse
import os
import select
import signal
import socket
import sys
import time


def fill(port, host):
    """Connects until one connection stays pending: the queue is full."""
    queued = []
    for _ in range(16):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect((host, port))
        except BlockingIOError:
            pass
        queued.append(s)
        _, writable, _ = select.select([], [s], [], 0.3)
        if not writable:
            return queued  # its SYN was dropped: the queue is full
    sys.exit("blackhole: the accept queue never filled")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ready", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--lifetime", type=float, default=900)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.socket()
    listener.bind((args.host, 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = fill(port, args.host)
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.rename(tmp, args.ready)
    time.sleep(args.lifetime)
    del queued


if __name__ == "__main__":
    main()
