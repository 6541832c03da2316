"""The bench's core section (the full run's steps 1 to 5): connect+close,
round trips, rule scale and start-up, contention, and the shim against
haproxy, each as alternating rounds against no shim. See bench/README.
"""

import math
import os
import subprocess
import time

import plumbing
from plumbing import (BASE_ENV, BenchError, CLIENT_CPU, CONTEND_MS, CPUS, HOLD_MS, LIMIT,
                      STARTED, acquired, check_rules, contend, env_for, free_port, kv, log,
                      median, new_namespace, note, nsstat, record, run, stop, wait_port,
                      write_rules)

WORKERS = (8, 32, 64)
RULE_SCALE = (10, 1000, 10000)


def startup_ms(cfgs, rounds):
    """Wall clock of /bin/true starting and exiting under each config
    (None: no shim), alternating; medians in ms. What a rules file costs
    every process the shim loads into, before main."""
    times = {name: [] for name, _ in cfgs}
    for _ in range(rounds):
        for name, cfg in cfgs:
            env = env_for(cfg)
            t0 = time.perf_counter()
            subprocess.run(["/bin/true"], env=env, check=True)
            times[name].append((time.perf_counter() - t0) * 1000)
    for name, values in times.items():
        for i, v in enumerate(values):
            record("startup", name, i, "ms", f"{v:.3f}")
    return {name: median(values) for name, values in times.items()}


def timed(mode, port, n, cfg, *extra):
    out = run([plumbing.CLIENT, mode, "127.0.0.1", str(port), str(n), *extra], env_for(cfg),
              cpus=CLIENT_CPU)
    return float(kv(out)["ns_per_op"]) / 1000.0  # microseconds


def alternate(section, variants, mode, port_of, n, rounds, *extra):
    """Runs the variants in turn, A B C A B C ..., `rounds` times after one
    untimed warm-up round. Returns {label: [us per op, one per round]}."""
    values = {label: [] for label, _ in variants}
    for label, cfg in variants:
        timed(mode, port_of(label), max(200, n // 4), cfg, *extra)
    for r in range(rounds):
        for label, cfg in variants:
            v = timed(mode, port_of(label), n, cfg, *extra)
            values[label].append(v)
            record(section, label, r, "us_per_op", f"{v:.3f}")
    return values


def median_interval(xs):
    """The median's confidence interval, free of any distribution, and
    its confidence: order statistics k and n + 1 - k of n, k the largest
    with P(Binomial(n, 1/2) < k) <= 2.5% (95% or more; with few rounds,
    as --quick's 3, min and max, whatever they cover). On a busy machine
    it is wide."""
    xs, n = sorted(xs), len(xs)
    k, below = 0, 0.0
    while k < n // 2 and below + math.comb(n, k) / 2 ** n <= 0.025:
        below += math.comb(n, k) / 2 ** n
        k += 1
    if k == 0:
        k, below = 1, 1 / 2 ** n
    return xs[k - 1], xs[n - k], 1 - 2 * below


def verdict(interval, limit):
    """True (within the limit), False (past it) or None (the interval holds
    the limit: this run's noise cannot tell), for a ratio whose limit is
    an upper bound."""
    low, high, _ = interval
    return True if high <= limit else False if low > limit else None


class Table:
    def __init__(self):
        self.rows = []
        self.budget = []
        self.notes = []

    def compare(self, title, values, a, b, unit_fmt="{:.2f}"):
        ratios = [y / x for x, y in zip(values[a], values[b])]
        row = dict(title=title, a=a, b=b, ma=median(values[a]), mb=median(values[b]),
                   r=median(ratios), rmin=min(ratios), rmax=max(ratios),
                   ci=median_interval(ratios), fmt=unit_fmt)
        self.rows.append(row)
        return row

    def line(self, text):
        self.rows.append(text)

    def check(self, ok, text):
        self.budget.append(f"{'PASS' if ok else 'MISS'} {text}")


def fmt_row(row):
    if isinstance(row, str):
        return row
    f = row["fmt"]
    va = f"{row['a']} {f.format(row['ma'])}"
    vb = f"{row['b']} {f.format(row['mb'])}"
    return (f"{row['title']:<34} {va:<20} {vb:<22} "
            f"{row['r']:.3f} [{row['rmin']:.3f}, {row['rmax']:.3f}]")


def measure(setup):
    """Steps 1 to 5 of the full run: connect+close, round trips, rule scale
    and start-up, contention, haproxy. Returns what the report and the
    budget need."""
    sink, echo, hold, ctl = setup.sink, setup.echo, setup.hold, setup.ctl
    cfg_m, cfg_u, cfg_c = setup.cfg_m, setup.cfg_u, setup.cfg_c
    ns_m, ns_u, ns_c = setup.ns_m, setup.ns_u, setup.ns_c
    scale_cfgs, tmp, base, cfgp = setup.scale_cfgs, setup.tmp, setup.base, setup.cfgp
    R = cfgp["rounds"]
    table = Table()

    # ---- 1. connect+close ------------------------------------------------
    log(f"[1/9] connect+close to loopback, {R} rounds x {cfgp['cc_n']}")
    before_m, before_u = acquired(ns_m), acquired(ns_u)
    cc = alternate("connect_close", [("bare", None), ("unmatched", cfg_u),
                                     ("matched", cfg_m)],
                   "connect_close", lambda _: sink, cfgp["cc_n"], R)
    got_m, got_u = acquired(ns_m) - before_m, acquired(ns_u) - before_u
    expect_m = R * (cfgp["cc_n"] + 200) + max(200, cfgp["cc_n"] // 4) + 200
    if got_m != expect_m or got_u != 0:
        raise BenchError(f"shim did not count as expected: matched acquired "
                         f"{got_m} (expected {expect_m}), unmatched {got_u} (expected 0)")
    table.compare("connect+close (us)", cc, "bare", "unmatched")
    cc_ma = table.compare("connect+close (us)", cc, "bare", "matched")

    # ---- 2. round trips ---------------------------------------------------
    log(f"[2/9] 64-byte send/recv round trips, {R} rounds x {cfgp['pp_n']}")
    pp = alternate("pingpong", [("bare", None), ("matched", cfg_m),
                                ("unmatched", cfg_u)],
                   "pingpong", lambda _: echo, cfgp["pp_n"], R, "send")
    table.compare("send/recv round trip (us)", pp, "bare", "matched")
    table.compare("send/recv round trip (us)", pp, "bare", "unmatched")

    # ---- 3. rule scale ---------------------------------------------------
    log(f"[3/9] rule scale {RULE_SCALE}, {R} rounds x {cfgp['rs_n']}")
    rs = alternate("rule_scale", [(f"{c} rules", scale_cfgs[c][0]) for c in RULE_SCALE],
                   "connect_close", lambda _: sink, cfgp["rs_n"], R)
    for c in RULE_SCALE:
        if acquired(scale_cfgs[c][1]) == 0:
            raise BenchError(f"the {c}-rule file matched nothing")
    table.compare("matched connect+close (us)", rs, "10 rules", "1000 rules")
    rs_big = table.compare("matched connect+close (us)", rs, "10 rules", "10000 rules")
    # Start-up: what building the index costs every process. The worst
    # case is wide port ranges: 10,000 rules on port *.
    star_cfg = os.path.join(tmp, "star10000.ini")
    write_rules(star_cfg, new_namespace(base, "star"), [f"127.0.0.1:{sink}"],
                [("star", 100, [f"10.{i // 250}.{i % 250}.1:*" for i in range(10000)])])
    check_rules(star_cfg)
    start = startup_ms([("bare", None), ("10 rules", scale_cfgs[10][0]),
                        ("10000 rules", scale_cfgs[10000][0]),
                        ("10000 rules on port *", star_cfg)], 3 * R)
    for name in ("10 rules", "10000 rules", "10000 rules on port *"):
        table.line(f"start-up of /bin/true: {name} {start[name]:.2f} ms, "
                   f"bare {start['bare']:.2f} ms ({start[name] - start['bare']:+.2f} ms)")

    # ---- 4. contention ---------------------------------------------------
    log(f"[4/9] contention: limit {LIMIT}, hold {HOLD_MS} ms, "
        f"{'/'.join(map(str, WORKERS))} processes and threads, {CONTEND_MS} ms each")
    ceiling = [contend(hold, ctl, "procs", LIMIT, None, "contention", f"bare x{LIMIT}")
               for _ in range(2)]
    ceiling_per_s = median([c["per_s"] for c in ceiling])
    ctab = {}
    for how in ("procs", "threads"):
        for w in WORKERS:
            ctab[(how, w)] = contend(hold, ctl, how, w, cfg_c, "contention",
                                     f"shim {w} {how}")
    shim_c = nsstat(ns_c).get("svc", {})

    # ---- 5. haproxy --------------------------------------------------------
    log("[5/9] haproxy vs shim")
    hp_echo, hp_hold = free_port(), free_port()
    hp_cfg = os.path.join(tmp, "haproxy.cfg")
    with open(hp_cfg, "w") as f:
        f.write(f"""global
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout queue 60s
frontend fe_echo
    bind 127.0.0.1:{hp_echo}
    default_backend be_echo
backend be_echo
    server echo 127.0.0.1:{echo} maxconn {LIMIT}
frontend fe_hold
    bind 127.0.0.1:{hp_hold}
    default_backend be_hold
backend be_hold
    server hold 127.0.0.1:{hold} maxconn {LIMIT}
""")
    haproxy = subprocess.Popen(["haproxy", "-db", "-q", "-f", hp_cfg], env=BASE_ENV,
                               stdout=subprocess.DEVNULL)
    STARTED.append(haproxy)
    note("pids", haproxy.pid)
    wait_port(hp_echo, "haproxy")
    wait_port(hp_hold, "haproxy")
    hp_version = subprocess.run(["haproxy", "-v"], capture_output=True,
                                text=True).stdout.split("\n")[0]
    ports = {"bare": echo, "shim": echo, "haproxy": hp_echo}
    rq = alternate("request", [("bare", None), ("shim", cfg_m), ("haproxy", None)],
                   "request", ports.get, cfgp["req_n"], R)
    table.compare("request via limiter (us)", rq, "shim", "haproxy")
    added_shim = [s - b for b, s in zip(rq["bare"], rq["shim"])]
    added_hp = [h - b for b, h in zip(rq["bare"], rq["haproxy"])]
    hp_load = {"shim": [], "haproxy": []}
    for r in range(cfgp["hp_rounds"]):
        hp_load["shim"].append(contend(hold, ctl, "procs", 32, cfg_c,
                                       "haproxy_load", "shim"))
        hp_load["haproxy"].append(contend(hp_hold, ctl, "procs", 32, None,
                                          "haproxy_load", "haproxy"))
    stop(haproxy)
    return dict(R=R, table=table, cc_ma=cc_ma, rs_big=rs_big, start=start,
                ceiling=ceiling, ceiling_per_s=ceiling_per_s, ctab=ctab, shim_c=shim_c,
                hp_version=hp_version, added_shim=added_shim, added_hp=added_hp,
                hp_load=hp_load, hp_rounds=cfgp["hp_rounds"])


def report(res):
    """The comparison table, contention and haproxy: the full run's first
    lines."""
    R, table, ctab, ceiling_per_s = res["R"], res["table"], res["ctab"], res["ceiling_per_s"]
    shim_c, added_shim, added_hp = res["shim_c"], res["added_shim"], res["added_hp"]
    hp_load, hp_version, ceiling = res["hp_load"], res["hp_version"], res["ceiling"]
    lines = [""]
    lines.append(f"bulkhead benchmark: {len(CPUS)} cpus, {hp_version}; "
                 f"{R} alternating rounds per comparison"
                 + (f"; timed clients on cpu {CPUS[0]}, server on cpu {CPUS[-1]}"
                    if CLIENT_CPU else ""))
    lines.append("")
    lines.append(f"{'benchmark':<34} {'variant A':<20} {'variant B':<22} median B/A  [min, max]")
    for row in table.rows:
        lines.append(fmt_row(row))
    lines.append("")

    ideal = LIMIT * 1000.0 / HOLD_MS
    lines.append(f"contention: limit {LIMIT}, hold {HOLD_MS} ms, wait_ms 2000: ideal "
                 f"{ideal:.0f} conn/s; harness ceiling ({LIMIT} bare clients, no queue) "
                 f"{ceiling_per_s:.0f} conn/s = {ceiling_per_s / ideal:.2f} of ideal")
    lines.append("  a permit's cycle = hold + server's lateness answering + gap (answer to the "
                 "next accept: client wakes, closes, permit passes, next client connects)")
    lines.append(f"{'clients':<14} {'conn/s':>7} {'of ideal':>9} {'of ceiling':>11} "
                 f"{'cycle':>9} {'late':>7} {'gap':>7} {'wait mean':>10} {'wait max':>10} "
                 f"{'server max':>11} {'errors':>7}")
    rows = [((f"{LIMIT} bare (ceiling)"), c) for c in ceiling] + \
           [(f"{w} {how}", c) for (how, w), c in ctab.items()]
    for label, c in rows:
        lines.append(f"{label:<14} {c['per_s']:>7.0f} {c['util']:>9.2f} "
                     f"{c['per_s'] / ceiling_per_s:>11.2f} {c['cycle_us']:>7.0f}us "
                     f"{c['late_us']:>5.0f}us {c['gap_us']:>5.0f}us "
                     f"{c['wait_mean_us'] / 1000:>8.2f}ms "
                     f"{c['wait_max_us'] / 1000:>8.2f}ms {c['server_max']:>11.0f} "
                     f"{c['errors']:>7.0f}")
    lines.append(f"shim's own counters for the compartment: acquired "
                 f"{shim_c.get('acquired', 0):.0f}, waits {shim_c.get('waits', 0):.0f}, "
                 f"timed out {shim_c.get('timed_out', 0):.0f}, rejected "
                 f"{shim_c.get('rejected', 0):.0f}, peak (hint) {shim_c.get('peak', 0):.0f}")
    lines.append("")

    lines.append(f"against haproxy (server maxconn {LIMIT}, queue), same loopback server")
    lines.append(f"  added latency per request over bare (connect + 64 B echo + close, "
                 f"median of {R} paired rounds):")
    lines.append(f"    shim    +{median(added_shim):.1f} us   [{min(added_shim):.1f}, {max(added_shim):.1f}]")
    lines.append(f"    haproxy +{median(added_hp):.1f} us   [{min(added_hp):.1f}, {max(added_hp):.1f}]")
    lines.append(f"  32 processes, hold {HOLD_MS} ms, {res['hp_rounds']} alternating rounds:")
    for v in ("shim", "haproxy"):
        runs = hp_load[v]
        lines.append(f"    {v:<8} {median([x['per_s'] for x in runs]):>6.0f} conn/s "
                     f"({median([x['util'] for x in runs]):.2f} of ideal), gap "
                     f"{median([x['gap_us'] for x in runs]):.0f} us, request mean "
                     f"{median([x['req_mean_us'] for x in runs]) / 1000:.2f} ms, max "
                     f"{max(x['req_max_us'] for x in runs) / 1000:.2f} ms, server max "
                     f"{max(x['server_max'] for x in runs):.0f}, errors "
                     f"{sum(x['errors'] for x in runs):.0f}")
    lines.append("")
    return lines


def checks(res, ir_op):
    """Rule scale, start-up and contention budget lines (ir_op: the cost
    section's instructions per operation)."""
    rs_big, start, ctab, hp_load = res["rs_big"], res["start"], res["ctab"], res["hp_load"]
    ceiling_per_s = res["ceiling_per_s"]
    out = []
    out.append((verdict(rs_big["ci"], 1.2), f"10,000 rules: matched connect+close "
                f"{rs_big['r']:.3f}x the 10-rule cost, the median's {rs_big['ci'][2]:.0%} "
                f"interval [{rs_big['ci'][0]:.3f}, {rs_big['ci'][1]:.3f}] (limit 1.2x); "
                f"instructions "
                f"{ir_op['rs_10000']:.0f} vs {ir_op['rs_10']:.0f}"))
    worst_start = max(start["10000 rules"], start["10000 rules on port *"])
    out.append((worst_start - start["10 rules"] < 50,
                f"start-up with 10,000 rules: {worst_start - start['10 rules']:+.2f} ms "
                f"per process over 10 rules (limit < 50 ms)"))
    worst = max(c["server_max"] for c in ctab.values())
    out.append((worst <= LIMIT, f"contention: server's maximum concurrent {worst:.0f} "
                f"over all {len(ctab)} runs (limit {LIMIT})"))
    # 32 processes ran 1 + hp_rounds times with the same load: take the median
    runs32 = [ctab[("procs", 32)]] + hp_load["shim"]
    u32 = median([c["util"] for c in runs32])
    p32 = median([c["per_s"] for c in runs32])
    out.append((u32 >= 0.9, f"contention: utilisation at 32 processes "
                f"{u32:.3f} of ideal, median of {len(runs32)} runs "
                f"[{min(c['util'] for c in runs32):.3f}, "
                f"{max(c['util'] for c in runs32):.3f}] (limit >= 0.900); "
                f"{p32 / ceiling_per_s:.3f} of this harness's ceiling; "
                f"32 threads {ctab[('threads', 32)]['util']:.3f}"))
    return out


def haproxy_check(res):
    s, h = median(res["added_shim"]), median(res["added_hp"])
    return [(s < h, f"against haproxy: shim adds {s:.1f} us per request, haproxy "
                    f"{h:.1f} us: {h - s:.1f} us less per request")]
