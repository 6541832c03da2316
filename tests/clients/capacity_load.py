#!/usr/bin/env python3
"""capacity_load: closed-loop workers against tests/server/capacityserver.py.

    capacity_load.py HOST PORT WORKERS SECONDS

WORKERS threads of this one process each loop for SECONDS: connect, send a
line, read the answer to EOF, close, and at once again. A refused connect
(the shim's fail-fast refusal) waits 5 to 15 ms, at random so that refused
workers do not all retry together, and tries again. At the end it prints
    answers=N refused=N errors=N
Exit 0, or 2 on usage errors. The demo and tests/adaptive_capacity.bats run
it under the shim.
"""

import random
import socket
import sys
import threading
import time


def worker(host, port, end, counts, lock):
    answers = refused = errors = 0
    while time.monotonic() < end:
        try:
            s = socket.create_connection((host, port))
        except ConnectionRefusedError:
            refused += 1
            time.sleep(random.uniform(0.005, 0.015))
            continue
        except OSError:
            errors += 1
            time.sleep(0.01)
            continue
        try:
            s.sendall(b"q\n")
            while s.recv(4096):
                pass
            answers += 1
        except OSError:
            errors += 1
        finally:
            s.close()
    with lock:
        counts[0] += answers
        counts[1] += refused
        counts[2] += errors


def main():
    if len(sys.argv) != 5:
        print("usage: capacity_load.py HOST PORT WORKERS SECONDS", file=sys.stderr)
        return 2
    host, port, workers, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4])
    end = time.monotonic() + seconds
    counts, lock = [0, 0, 0], threading.Lock()
    threads = [threading.Thread(target=worker, args=(host, port, end, counts, lock))
               for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("answers=%d refused=%d errors=%d" % tuple(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
