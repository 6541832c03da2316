"""The bench's hand-off section: when a permit's holder ends (SIGKILL,
exit(), _exit()), how long its socket stays open after its permit went
back, on the wire (tcpdump) and at the server, on a quiet machine and with
every CPU busy. See bench/README.
"""

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

import plumbing
from plumbing import (BASE_ENV, BenchError, CPUS, LIVE, LIVE_LOCK, env_for, median, note,
                      record, run, stop)

HANDOFF_ENDS = (("kill", "SIGKILL"), ("exit", "exit()"), ("_exit", "_exit()"))


def title(setup):
    return (f"permit hand-off when a holder ends: {setup.cfgp['handoffs']} trials each "
            f"of SIGKILL, exit(), _exit(), on a quiet machine and with every CPU busy")


def section(setup):
    """(report lines, budget checks as (ok, text))."""
    return handoff_section(setup.watch, setup.ctl, setup.cfg_w, setup.cfgp["handoffs"],
                           setup.tmp)


def write_window_rules(path, namespace, port):
    with open(path, "w") as f:
        f.write(f"[global]\nnamespace = {namespace}\nlog = warn\n\n"
                f"[svc]\nlimit = 1\nwait_ms = 10000\nmax_waiters = 10\n"
                f"match = 127.0.0.1:{port}\n")


def tcpdump_start(port, path):
    """A capture of the SYNs, FINs and RSTs the clients send to `port` on lo;
    (process, None), or (None, why) where tcpdump cannot capture."""
    if not shutil.which("tcpdump"):
        return None, "tcpdump is not installed"
    with LIVE_LOCK:
        if plumbing.STOPPING:
            raise BenchError("stopping")
        p = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-n", "-U", "--immediate-mode",
             "--time-stamp-precision=nano", "-w", path,
             f"tcp dst port {port} and (tcp[tcpflags] & (tcp-syn|tcp-fin|tcp-rst) != 0)"],
            env=BASE_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        LIVE.add(p)
    note("pids", p.pid)
    line = ""
    if select.select([p.stderr], [], [], 10)[0]:
        line = p.stderr.readline()  # "listening on lo, ..." once it captures
    if "listening on" not in line:
        stop(p)
        with LIVE_LOCK:
            LIVE.discard(p)
        return None, f"tcpdump cannot capture here: {line.strip() or 'no output'}"
    return p, None


def tcpdump_leads(p, path, trials):
    """Per trial: the waiter's SYN minus the holder's first FIN or RST, ns,
    from the capture's kernel timestamps; None if packets are missing."""
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    with LIVE_LOCK:
        LIVE.discard(p)
    out = subprocess.run(["tcpdump", "-r", path, "-n", "-tt",
                          "--time-stamp-precision=nano"], capture_output=True,
                         text=True, env=BASE_ENV).stdout
    syns, ends = [], {}
    for line in out.splitlines():
        m = re.match(r"(\d+)\.(\d+) IP [\d.]+\.(\d+) > [\d.]+\.\d+: Flags \[([^\]]*)\]", line)
        if not m:
            continue
        t = int(m.group(1)) * 10**9 + int(m.group(2).ljust(9, "0")[:9])
        src, flags = m.group(3), m.group(4)
        if "S" in flags:
            syns.append((t, src))
        elif ("F" in flags or "R" in flags) and src not in ends:
            ends[src] = t
    if len(syns) != 2 * trials:
        return None
    leads = []
    for i in range(0, len(syns), 2):  # holder's SYN, then its waiter's
        (_, holder), (t_syn, _) = syns[i], syns[i + 1]
        if holder not in ends:
            return None
        leads.append(t_syn - ends[holder])
    return leads


def handoff(how, watch, ctl, cfg, trials, pcap):
    """`trials` hand-offs with the holder ending by `how` (kill, exit,
    _exit): {"server": [lead ns], "open": count, "wire": [lead ns] or None,
    "wire_why": why there is no wire view}."""
    cap, why = tcpdump_start(watch, pcap)
    try:
        out = run([plumbing.CLIENT, "window", "127.0.0.1", str(watch), str(trials), how, str(ctl)],
                  env_for(cfg), timeout=300)
    except BaseException:
        if cap:
            stop(cap)
        raise
    server, opened = [], 0
    for line in out.splitlines():
        f = dict(t.split("=", 1) for t in line.split())
        server.append(int(f["lead_ns"]))
        opened += int(f["open"])
    if len(server) != trials:
        raise BenchError(f"window {how}: {len(server)} of {trials} trials reported")
    wire = tcpdump_leads(cap, pcap, trials) if cap else None
    if cap and wire is None:
        why = "the capture missed packets"
    return {"server": server, "open": opened, "wire": wire, "wire_why": why}


def spinners_start(tmp):
    """One busy-looping process per CPU (they end by themselves after 120 s;
    their command line names the run's temp dir, for run.sh's trap)."""
    procs = []
    for _ in CPUS:
        with LIVE_LOCK:
            if plumbing.STOPPING:
                raise BenchError("stopping")
            p = subprocess.Popen([sys.executable, "-c",
                                  "import sys, time\nend = time.monotonic() + 120\n"
                                  "while time.monotonic() < end: pass", tmp + "/spin"],
                                 env=BASE_ENV)
            LIVE.add(p)
        note("pids", p.pid)
        procs.append(p)
    time.sleep(0.3)
    return procs


def spinners_stop(procs):
    for p in procs:
        stop(p)
        with LIVE_LOCK:
            LIVE.discard(p)


def handoff_section(watch, ctl, cfg, trials, tmp):
    """Every kind of end, on a quiet machine and with every CPU busy.
    Returns (report lines, budget checks as (ok, text))."""
    ho = {}
    for how, label in HANDOFF_ENDS:
        for busy in (False, True):
            key = f"{how}{' busy' if busy else ''}"
            spin = spinners_start(tmp) if busy else []
            try:
                ho[key] = handoff(how, watch, ctl, cfg, trials,
                                  os.path.join(tmp, f"handoff.{how}.{int(busy)}.pcap"))
            finally:
                spinners_stop(spin)
            for view in ("wire", "server"):
                for i, v in enumerate(ho[key][view] or []):
                    record("handoff", f"{key} {view}", i, "lead_ns", v)
            record("handoff", f"{key} server", 0, "open_at_accept", ho[key]["open"])
    lines = [
        f"permit hand-off when a holder ends: limit 1, a waiter blocked in connect() "
        f"for the permit, {trials} trials per row; quiet = nothing else of the bench "
        f"runs, busy = one busy-looping process per CPU ({len(CPUS)})",
        "  lead = the waiter's new connection minus the holder's end: on the wire, its "
        "SYN minus the holder's FIN/RST (tcpdump -i lo, kernel timestamps);",
        "  at the server, accept() minus EOF (CLOCK_MONOTONIC as each call returns; "
        "scheduling noise of a busy machine goes into it)",
        "  negative = the new connection arrived while the dead holder's was still open "
        "(its permit free, its socket not yet closed)",
        f"{'holder ends by':<15} {'machine':<7} {'view':<7} {'overlapped':>11} "
        f"{'median':>10} {'p1':>10} {'p99':>10} {'min':>10} {'max':>10}"]
    us = lambda v: f"{v / 1000:+.1f}us"
    checks = []
    for how, label in HANDOFF_ENDS:
        for busy in (False, True):
            key = f"{how}{' busy' if busy else ''}"
            state = "busy" if busy else "quiet"
            r = ho[key]
            for view in ("wire", "server"):
                xs = r[view]
                if not xs:
                    lines.append(f"{label:<15} {state:<7} {view:<7} not measured: "
                                 f"{r['wire_why']}")
                    continue
                lines.append(f"{label:<15} {state:<7} {view:<7} "
                             f"{sum(x < 0 for x in xs):>5}/{len(xs):<5} "
                             f"{us(median(xs)):>10} {us(rank(xs, 0.01)):>10} "
                             f"{us(rank(xs, 0.99)):>10} {us(min(xs)):>10} {us(max(xs)):>10}")
            lines.append(f"{'':<15} {'':<7} {'kernel':<7} {r['open']:>5}/{trials:<5} "
                         f"still ESTABLISHED at the server when it accepted the waiter")
            if how == "kill":
                continue  # measured, not budgeted: the shim cannot act in a killed process
            # the wire when tcpdump could capture; the server's timestamps
            # only without it (a busy machine's wake-ups can invert them)
            views = [(v, r[v]) for v in ("wire", "server") if r[v]][:1]
            bad = sum(x < 0 for _, xs in views for x in xs) + r["open"]
            checks.append((bad == 0, f"a holder's {label}, {state} machine: its socket closed "
                           f"before its permit went back in all {trials} trials (" + ", ".join(
                               f"{v}: {sum(x < 0 for x in xs)} overlapped, lead min "
                               f"{min(xs) / 1000:+.1f} us" for v, xs in views)
                           + f", kernel: {r['open']} still open at accept; limit 0)"))
    return lines, checks


def rank(xs, q):
    """Nearest-rank percentile q (0..1) of xs."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(-(-q * len(s) // 1)) - 1))]
