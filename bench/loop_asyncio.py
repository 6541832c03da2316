"""The event-loop section's asyncio client (bench/eventloop.py):

    python3 loop_asyncio.py PORT N POOL BATCHES

BATCHES + 1 batches of N requests at once (open_connection to 127.0.0.1
PORT, an HTTP/1.0 GET, the answer read to its end), the first untimed;
POOL > 0 lets at most POOL be in flight (the program's own pool), 0 none.
A task sleeping 10 ms at a time runs beside them. Prints, for the timed
batches: "ok=N failed=M seconds=S worst_lag_ms=L", L the most that sleeper
was ever late.
"""

import asyncio
import contextlib
import sys
import time

worst = 0.0


async def timer():
    global worst
    last = time.monotonic()
    while True:
        await asyncio.sleep(0.01)
        now = time.monotonic()
        worst = max(worst, now - last - 0.01)
        last = now


async def one(port, pool):
    async with pool:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        answer = await reader.read()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return answer.startswith(b"HTTP/1.0 200")


async def main(port, n, size, batches):
    global worst
    pool = asyncio.Semaphore(size) if size > 0 else contextlib.nullcontext()
    ticking = asyncio.create_task(timer())
    ok = failed = 0
    start = 0.0
    for batch in range(batches + 1):
        if batch == 1:
            start = time.monotonic()
            worst = 0.0
        got = await asyncio.gather(*(one(port, pool) for _ in range(n)))
        if batch > 0:
            ok += sum(got)
            failed += len(got) - sum(got)
    seconds = time.monotonic() - start
    ticking.cancel()
    print("ok=%d failed=%d seconds=%.3f worst_lag_ms=%.1f" % (ok, failed, seconds, worst * 1000))


if __name__ == "__main__":
    asyncio.run(main(*map(int, sys.argv[1:5])))
