#!/usr/bin/env python3
"""scrape: GETs a /metrics URL every 0.2 s until SIGTERM, one line a GET.

    scrape.py URL TEXT PID

ok SECONDS RSS_KB   the answer came whole within 1 s and holds TEXT;
                    SECONDS is how long it took, RSS_KB the VmRSS of PID
                    (the server) right after it
fail WHY            it did not (no answer, too slow, or without TEXT)

One process for all the GETs: on a loaded machine, a program started per
GET takes longer to start than the GET takes, and fewer GETs fit.
"""

import signal
import sys
import time
import urllib.request


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def scrape(url, text):
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=1) as answer:
        body = answer.read().decode()
    took = time.monotonic() - started
    if took > 1:
        return f"fail took {took:.3f} s"
    if text not in body:
        return "fail no " + text
    return f"ok {took:.6f}"


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    url, text, pid = sys.argv[1:]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        try:
            line = scrape(url, text)
        except OSError as e:
            line = f"fail {e}"
        if line.startswith("ok"):
            line += f" {rss_kb(pid)}"
        print(line, flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
