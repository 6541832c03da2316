"""The bench's shared-records section: a fail-fast refusal while 4,096
connections have shared-socket records (a forked child holds copies of
them all), which makes every refusal ask whether some shared socket's
permits can come back. bench_client's shared_refusal mode times each
refusal (wall clock) and all of them together (the thread's CPU time,
which the machine's other load does not inflate). See bench/README.
"""

import os

import plumbing
from plumbing import CLIENT_CPU, env_for, kv, new_namespace, record, run

RECORDS = 4096
BUDGET_US = 50


def title(setup):
    return (f"a fail-fast refusal with {RECORDS:,} shared-socket records, "
            f"{refusals(setup):,} refusals")


def refusals(setup):
    return 2000 if setup.quick else 20000


def section(setup):
    """(report lines, budget checks as (ok, text))."""
    ns = new_namespace(setup.base, "records")
    cfg = os.path.join(setup.tmp, "records.ini")
    with open(cfg, "w") as f:
        f.write(f"[global]\nnamespace = {ns}\nlog = warn\n\n[svc]\nlimit = {RECORDS}\n"
                f"wait_ms = 0\nmatch = 127.0.0.1:{setup.sink}\n")
    n = refusals(setup)
    out = kv(run([plumbing.CLIENT, "shared_refusal", "127.0.0.1", str(setup.sink), str(n),
                  str(RECORDS)], env_for(cfg), timeout=600, cpus=CLIENT_CPU))
    figures = {k: float(out[k]) / 1000 for k in
               ("ns_per_op", "cpu_ns_per_op", "p50_ns", "p99_ns", "max_ns")}
    for metric, value in figures.items():
        record("shared_records", "refusal", 0, metric.replace("ns", "us"), f"{value:.2f}")
    cpu = figures["cpu_ns_per_op"]
    lines = [f"fail-fast refusal, {RECORDS:,} shared-socket records: CPU {cpu:.1f} us "
             f"per refusal (reaps included); wall mean {figures['ns_per_op']:.1f} us, "
             f"p50 {figures['p50_ns']:.1f}, p99 {figures['p99_ns']:.1f}, "
             f"max {figures['max_ns']:.0f} us (the refusal that reaps)"]
    checks = [(cpu <= BUDGET_US, f"fail-fast refusal with {RECORDS:,} shared-socket "
               f"records: {cpu:.1f} us of CPU each, reaps included (limit {BUDGET_US} us)")]
    return lines, checks
