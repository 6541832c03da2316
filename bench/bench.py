#!/usr/bin/env python3
"""The bulkhead benchmark: one run, every comparison side by side.

Started by bench/run.sh (which builds build/bench/bench_client and
bench_server first); see bench/README for what is measured and why.

This is the driver: it sets up (plumbing.py, fixtures.py), runs the
sections, one module each (core, handoff, deadlines, fleet, failover,
fleetsim, adaptive, records, eventloop, cost with policy, seccomp), and prints their lines and
budget.
`--only NAME` runs one section; the full run runs them all but seccomp,
and reports core and cost together (cost's budget takes core's wall
clock). Everything started is stopped, and every namespace named is
removed, on the way out, whatever happens (plumbing.cleanup).
"""

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

import adaptive
import core
import cost
import deadlines
import eventloop
import failover
import fixtures
import fleet
import fleetsim
import handoff
import plumbing
import records
import seccomp
from plumbing import BenchError, Tee, log

FULL = dict(rounds=31, cc_n=5000, pp_n=5000, rs_n=5000, req_n=2000,
            hp_rounds=3, handoffs=200)
QUICK = dict(rounds=3, cc_n=2000, pp_n=2000, rs_n=2000, req_n=1000,
             hp_rounds=1, handoffs=30)

# --only NAME: each module has title(setup) and section(setup), which
# returns (report lines, budget checks as (ok, text)).
SECTIONS = {"handoff": handoff, "deadlines": deadlines, "cost": cost, "fleet": fleet,
            "failover": failover, "fleetsim": fleetsim, "adaptive": adaptive,
            "records": records, "eventloop": eventloop, "seccomp": seccomp}
# The full run's steps after core's five (cost is the last, step 9).
FULL_STEPS = (("6", handoff), ("7", deadlines), ("8", fleet), ("8a", failover),
              ("8b", fleetsim), ("8c", adaptive), ("8d", records), ("8e", eventloop))


def print_budget(checks):
    """ok None: a timed line whose spread in this run holds its limit,
    NOISY rather than a coin's PASS or MISS (docs/bench.md)."""
    print("budget")
    for ok, text in checks:
        print(f"{'NOISY' if ok is None else 'PASS' if ok else 'MISS'} {text}")
    print()


def only(name, setup, tsv_path, t_start):
    module = SECTIONS[name]
    log(module.title(setup))
    lines, checks = module.section(setup)
    print()
    for line in plumbing.machine_facts() + [""] + lines:
        print(line)
    print()
    print_budget(checks)
    print(f"raw numbers: {tsv_path}")
    print(f"total time: {time.monotonic() - t_start:.0f} s")


def full(setup, tsv_path, t_start):
    measured = core.measure(setup)
    steps = []
    for step, module in FULL_STEPS:
        log(f"[{step}/9] {module.title(setup)}")
        steps.append(module.section(setup))
    log(f"[9/9] {cost.title(setup)}")
    costs = cost.measure(setup)

    for line in (plumbing.machine_facts() + [""] + core.report(measured) +
                 cost.report(costs, measured["cc_ma"])):
        print(line)
    print()
    ho_lines = steps[0][0]
    for line in ho_lines:
        print(line)
    print()
    others = [lines for lines, _ in steps[1:]]
    for line in sum((lines + [""] for lines in others[:-1]), []) + others[-1]:
        print(line)
    print()
    print_budget(cost.checks(costs, measured["cc_ma"]) +
                 core.checks(measured, costs["ir_op"]) +
                 sum((checks for _, checks in steps), []) +
                 core.haproxy_check(measured))
    print(f"raw numbers: {tsv_path}")
    print(f"callgrind profiles: {plumbing.CG_DIR}/  strace summaries: {plumbing.ST_DIR}/")
    print(f"total time: {time.monotonic() - t_start:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default="build")
    ap.add_argument("--summary", help="also write the report to this file")
    ap.add_argument("--quick", action="store_true",
                    help="fewer rounds and iterations (a smoke test, not numbers)")
    ap.add_argument("--only", choices=tuple(SECTIONS),
                    help="run one section alone (its table and budget lines)")
    args = ap.parse_args()
    if args.summary:
        sys.stdout = Tee(sys.stdout, open(args.summary, "w"))
    out_dir = plumbing.configure(args.build)
    tmp = tempfile.mkdtemp(prefix="bulkhead-bench.")
    plumbing.note("tmpdir", tmp)
    tsv_path = os.path.join(out_dir, "results.tsv")
    plumbing.open_results(tsv_path)
    t_start = time.monotonic()
    base = f"bench-{os.getpid()}-{os.urandom(2).hex()}"
    try:
        setup = fixtures.prepare(tmp, base, out_dir, args.quick,
                                 QUICK if args.quick else FULL)
        if args.only:
            only(args.only, setup, tsv_path, t_start)
        else:
            full(setup, tsv_path, t_start)
    finally:
        plumbing.close_results()
        plumbing.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def on_signal(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    # SIGINT too: started in the background by run.sh, it would be ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        main()
    except BenchError as e:
        log(f"bench: {e}")
        sys.exit(1)
    except KeyboardInterrupt:
        log("bench: interrupted")
        sys.exit(130)
