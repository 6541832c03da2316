// The event-loop section's node client (bench/eventloop.py):
//
//   node loop_fetch.js PORT N POOL BATCHES
//
// BATCHES + 1 batches of N fetches at once to http://127.0.0.1:PORT/, the
// first untimed; POOL > 0 lets at most POOL be in flight (the program's own
// pool), 0 none. A 10 ms interval timer runs beside them. Prints, for the
// timed batches: "ok=N failed=M seconds=S worst_lag_ms=L", L the most the
// timer was ever late.
"use strict";
const [port, n, pool, batches] = process.argv.slice(2).map(Number);
const url = `http://127.0.0.1:${port}/`;

let worst = 0;
let last = performance.now();
const timer = setInterval(() => {
  const now = performance.now();
  worst = Math.max(worst, now - last - 10);
  last = now;
}, 10);

let free = pool;
const queued = [];
async function inPool(request) {
  if (pool > 0) {
    if (free > 0) free--;
    else await new Promise((resolve) => queued.push(resolve));
  }
  try {
    return await request();
  } finally {
    if (pool > 0) {
      const next = queued.shift();
      if (next) next();
      else free++;
    }
  }
}

async function one() {
  try {
    const answer = await fetch(url);
    await answer.text();
    return answer.status === 200;
  } catch {
    return false;
  }
}

(async () => {
  let ok = 0, failed = 0, start = 0;
  for (let batch = 0; batch <= batches; batch++) {
    if (batch === 1) {
      start = performance.now();
      worst = 0;
    }
    const got = await Promise.all(Array.from({ length: n }, () => inPool(one)));
    if (batch > 0) for (const g of got) g ? ok++ : failed++;
  }
  const seconds = (performance.now() - start) / 1000;
  clearInterval(timer);
  console.log(`ok=${ok} failed=${failed} seconds=${seconds.toFixed(3)} ` +
              `worst_lag_ms=${worst.toFixed(1)}`);
})();
