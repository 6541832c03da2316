#!/usr/bin/env python3
"""silentserver: accepts, reads, never answers.

    silentserver.py --ready FILE [--host 127.0.0.1] [--lifetime SECONDS]

Every connection is accepted and whatever the client sends is read (so the
kernel acknowledges it) and thrown away; nothing is ever sent back. A
client waiting for an answer waits forever, unless a deadline ends it.

--ready FILE is written once listening (tmp + rename): the port.
Exits on SIGTERM/SIGINT, or after --lifetime seconds (default 900).
"""

import argparse
import os
import selectors
import signal
import socket
import sys
import time


def receive(conn):
    """What came in, b"" once the client is gone (a reset too: haproxy
    ends a server connection with one)."""
    try:
        return conn.recv(65536)
    except ConnectionError:
        return b""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ready", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--lifetime", type=float, default=900)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.socket()
    listener.bind((args.host, 0))
    listener.listen(64)
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{listener.getsockname()[1]}\n")
    os.rename(tmp, args.ready)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    end = time.monotonic() + args.lifetime
    while time.monotonic() < end:
        for key, _ in selector.select(timeout=1):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ)
            elif not receive(key.fileobj):
                selector.unregister(key.fileobj)
                key.fileobj.close()


if __name__ == "__main__":
    main()
