#!/usr/bin/env python3
"""The bulkhead benchmark: one run, every comparison side by side.

Started by bench/run.sh (which builds build/bench/bench_client and
bench_server first); see bench/README for what is measured and why.

Everything this starts (the loopback server, haproxy, clients) is stopped,
and every namespace it names is removed, on the way out, whatever happens.
Its pids and keys are also written to OUT/run/ so that run.sh's trap can
finish the job if this process itself is killed.
"""

import argparse
import concurrent.futures
import ipaddress
import json
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import adaptive
import fleetsim

# ---------------------------------------------------------------------------
# settings

LIMIT = 4             # permits of the compartment every load goes through
HOLD_MS = 2           # how long the hold server keeps each connection
CONTEND_MS = 2000     # length of one contention run
WORKERS = (8, 32, 64)
RULE_SCALE = (10, 1000, 10000)
WIDE_COMPARTMENTS, WIDE_RULES = 1024, 10000
CG_N = (2000, 4000)   # callgrind / strace run lengths: marginal = difference

FULL = dict(rounds=31, cc_n=5000, pp_n=5000, rs_n=5000, req_n=2000,
            hp_rounds=3, handoffs=200)
QUICK = dict(rounds=3, cc_n=2000, pp_n=2000, rs_n=2000, req_n=1000,
             hp_rounds=1, handoffs=30)
HANDOFF_ENDS = (("kill", "SIGKILL"), ("exit", "exit()"), ("_exit", "_exit()"))
DEAD_WORKERS = 40     # processes alternating a healthy and a dead downstream
DEAD_HOLD_MS = 20     # the healthy server's answer time: workers, not CPUs, bound it
DEAD_SECONDS = dict(full=10, quick=4)  # per variant
BLACKHOLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                         "server", "blackhole.py")

# ---------------------------------------------------------------------------
# plumbing

LIVE = set()          # Popen objects running now
LIVE_LOCK = threading.Lock()
STOPPING = False      # set by cleanup: start nothing more
STARTED = []          # long-lived processes (server, haproxy)
NAMESPACES = []       # every namespace name handed to a shim
RUN_DIR = None
TSV = None


class BenchError(Exception):
    pass


def log(message):
    print(message, file=sys.stderr, flush=True)


KEYS = {}  # namespace name -> its SysV key, "0x%08x"


def namespace_key(name):
    """The namespace's SysV key as ipcs prints it, from `bulkhead key`:
    shim/permits owns the hash, nobody re-derives it."""
    if name not in KEYS:
        r = subprocess.run([os.path.join(BUILD, "bulkhead"), "key", "-n", name],
                           capture_output=True, text=True, env=BASE_ENV)
        if r.returncode != 0:
            raise BenchError(f"bulkhead key -n {name}: {r.stderr.strip()}")
        KEYS[name] = r.stdout.strip()
    return KEYS[name]


def note(kind, value):
    """Records a pid or a key where run.sh's trap will find it."""
    with open(os.path.join(RUN_DIR, kind), "a") as f:
        f.write(f"{value}\n")


def new_namespace(base, suffix):
    name = f"{base}-{suffix}"
    key = namespace_key(name)  # first: every name listed has its key
    NAMESPACES.append(name)
    note("keys", key)
    return name


CPUS = sorted(os.sched_getaffinity(0))
# With two CPUs or more, timed single-connection clients run on the first
# and the server on the last: where the scheduler puts the two relative to
# each other otherwise moves loopback timings by a third, run to run.
CLIENT_CPU = {CPUS[0]} if len(CPUS) >= 2 else None
SERVER_CPU = {CPUS[-1]} if len(CPUS) >= 2 else None


def pinned(cpus):
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def run(cmd, env, timeout=180, cpus=None):
    with LIVE_LOCK:
        if STOPPING:
            raise BenchError("stopping")
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=pinned(cpus))
        LIVE.add(p)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise BenchError(f"timed out after {timeout}s: {' '.join(cmd)}")
    finally:
        with LIVE_LOCK:
            LIVE.discard(p)
    if p.returncode != 0:
        why = err.strip().splitlines()[-3:] if err.strip() else []
        if p.returncode == 78:
            why.append("(exit 78: the shim rejected the rules file)")
        raise BenchError(f"{' '.join(cmd)} exited {p.returncode}: {' | '.join(why)}")
    return out


def kv(text):
    line = [l for l in text.splitlines() if "=" in l][-1]
    return dict(tok.split("=", 1) for tok in line.split())


def record(section, variant, round_, metric, value):
    TSV.write(f"{section}\t{variant}\t{round_}\t{metric}\t{value}\n")
    TSV.flush()


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"{what} is not listening on 127.0.0.1:{port}")


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=3)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)

    def flush(self):
        for s in self.streams:
            s.flush()


def cleanup():
    global STOPPING
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut this short
    with LIVE_LOCK:
        STOPPING = True
        running = list(LIVE)
    for p in running + STARTED:
        try:
            stop(p)
        except Exception:
            pass
    leftovers = []
    for name in NAMESPACES:
        key = KEYS[name]
        subprocess.run(["ipcrm", "-S", key], stderr=subprocess.DEVNULL)
        subprocess.run(["ipcrm", "-M", key], stderr=subprocess.DEVNULL)
        ipcs = subprocess.run(["ipcs", "-s", "-m"], capture_output=True, text=True).stdout
        if key in ipcs:
            leftovers.append(key)
    if leftovers:
        log(f"bench: could not remove IPC keys {' '.join(leftovers)}")


# ---------------------------------------------------------------------------
# environment of the client: the shim only ever goes here

BASE_ENV = {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith("BULKHEAD_")}


def shim_vars(cfg):
    return {"LD_PRELOAD": SHIM, "BULKHEAD_CONFIG": cfg,
            "BULKHEAD_STRICT": "1", "BULKHEAD_LOG": "warn"}


def env_for(cfg):
    env = dict(BASE_ENV)
    if cfg:
        env.update(shim_vars(cfg))
    return env


# ---------------------------------------------------------------------------
# rules files

def write_rules(path, namespace, matches, extra_sections=()):
    """One [svc] compartment (LIMIT permits, waiting allowed) with `matches`,
    after any extra sections (name, limit, [match...])."""
    lines = ["[global]", f"namespace = {namespace}", "log = warn", ""]
    for name, limit, rules in extra_sections:
        lines += [f"[{name}]", f"limit = {limit}", "wait_ms = 0"]
        lines += [f"match = {m}" for m in rules]
        lines.append("")
    lines += ["[svc]", f"limit = {LIMIT}", "wait_ms = 2000", "max_waiters = 1000"]
    lines += [f"match = {m}" for m in matches]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def decoy_rules(count, avoid_ports):
    """`count` distinct rules, none of which covers 127.0.0.1 on any port:
    exact v4, CIDR v4 of several lengths, v4 with port ranges, exact v6,
    v6 networks, host names and *.suffix names, in turn."""
    rules, seen = [], set()
    prefixes = (8, 12, 16, 20, 24, 28)

    def port(i):
        p = 1024 + (i * 7919) % 60000
        while p in avoid_ports:
            p += 1
        return p

    i = 0
    while len(rules) < count:
        kind = i % 8
        a = (i * 2654435761) & 0xFFFFFF  # spread over the space
        if kind == 0:
            text = f"10.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}:{port(i)}"
        elif kind == 1:
            plen = prefixes[(i // 8) % len(prefixes)]
            # networks with first octet 11..100: far from 127/8
            base = ((11 + (a % 90)) << 24) | (a << 4 & 0xFFFFFF)
            net = ipaddress.ip_network((base, plen), strict=False)
            text = f"{net}:{port(i)}"
        elif kind == 2:
            lo = port(i) // 100 * 100
            lo = max(1024, min(lo, 65000))
            while any(lo <= p <= lo + 99 for p in avoid_ports):
                lo += 100
            text = f"192.168.{a >> 8 & 255}.0/24:{lo}-{lo + 99}"
        elif kind == 3:
            text = f"[fd00::{a >> 12 & 0xfff:x}:{a & 0xfff:x}]:443"
        elif kind == 4:
            text = f"[fd{a >> 16 & 255:02x}:{a & 0xffff:x}::]/48:*"
        elif kind == 5:
            text = f"svc{i}.internal:{port(i)}"
        elif kind == 6:
            text = f"*.zone{i}.example.com:*"
        else:
            text = f"172.{16 + (a & 15)}.{a >> 8 & 255}.{a >> 4 & 240}/28:{port(i)}"
        i += 1
        if text not in seen:
            seen.add(text)
            rules.append(text)
    return rules


def write_scale_rules(path, namespace, total, target, avoid_ports):
    """`total` match lines; the one that matches `target` is the last line of
    the file. Spread over up to 40 compartments (the limit is 64)."""
    decoys = decoy_rules(total - 1, avoid_ports)
    groups = min(40, max(1, (total + 249) // 250))
    per = (len(decoys) + groups - 1) // groups
    sections = []
    for g in range(groups):
        chunk = decoys[g * per:(g + 1) * per]
        if chunk:
            sections.append((f"other{g:02d}", 100, chunk))
    write_rules(path, namespace, [target], sections)


def write_wide_rules(path, namespace, total, compartments, target_port, avoid_ports):
    """`total` rules over `compartments` compartments, none of which covers
    127.0.0.1: the decoys, and 127.0.0.2 on the target's port, so that the
    port map sends a connect to 127.0.0.1:target_port down the dearer
    unmatched path (the address lookups)."""
    decoys = decoy_rules(total - 1, avoid_ports) + [f"127.0.0.2:{target_port}"]
    per = (len(decoys) + compartments - 1) // compartments
    sections = [(f"w{c:04d}", 100, decoys[c * per:(c + 1) * per])
                for c in range(compartments) if decoys[c * per:(c + 1) * per]]
    write_rules(path, namespace, [], sections)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:  # [svc] without a match would be an error
        f.write(text.replace("[svc]", "[svc]\nmatch = 10.255.255.255:1", 1))


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


def check_rules(path):
    """`bulkhead check` when the command is built; the strict shim is the
    real check (it exits 78 on a bad file)."""
    cli = os.path.join(BUILD, "bulkhead")
    if not os.access(cli, os.X_OK):
        return
    r = subprocess.run([cli, "check", path], capture_output=True, text=True,
                       env=BASE_ENV)
    if r.returncode != 0:
        raise BenchError(f"bulkhead check {path}: {(r.stdout + r.stderr).strip()[:500]}")


def nsstat(namespace):
    """A namespace's counters per compartment, from `bulkhead stat --json`:
    shim/permits owns the shared layout, nobody else reads it."""
    r = subprocess.run([os.path.join(BUILD, "bulkhead"), "stat", "--json", "-n", namespace],
                       capture_output=True, text=True, env=BASE_ENV)
    if r.returncode != 0:
        raise BenchError(f"bulkhead stat -n {namespace}: {r.stderr.strip()}")
    stats = {}
    for c in json.loads(r.stdout)["compartments"]:
        stats[c["name"]] = {k: float(c[k]) for k in ("acquired", "rejected", "timed_out",
                                                      "waits", "peak", "connect_failures",
                                                      "connect_timeouts")}
        stats[c["name"]].update(breaker_opened=float(c["breaker"]["opened"]),
                                breaker_refused=float(c["breaker"]["refused"]))
    return stats


def acquired(namespace, compartment="svc"):
    try:
        return int(nsstat(namespace).get(compartment, {}).get("acquired", 0))
    except BenchError:
        return 0  # not created yet


# ---------------------------------------------------------------------------
# measurement helpers

def timed(mode, port, n, cfg, *extra):
    out = run([CLIENT, mode, "127.0.0.1", str(port), str(n), *extra], env_for(cfg),
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


class Table:
    def __init__(self):
        self.rows = []
        self.budget = []
        self.notes = []

    def compare(self, title, values, a, b, unit_fmt="{:.2f}"):
        ratios = [y / x for x, y in zip(values[a], values[b])]
        row = dict(title=title, a=a, b=b, ma=median(values[a]), mb=median(values[b]),
                   r=median(ratios), rmin=min(ratios), rmax=max(ratios),
                   fmt=unit_fmt)
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


def control(port, command):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(command.encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(256)
            if not chunk:
                break
            data += chunk
    return {k: float(v) for k, v in (t.split("=") for t in data.decode().split())}


def contend(port, ctl, how, workers, cfg, section, variant):
    control(ctl, "R")
    out = run([CLIENT, "contend", "127.0.0.1", str(port), how, str(workers),
               str(CONTEND_MS)], env_for(cfg), timeout=60)
    res = {k: float(v) for k, v in kv(out).items()}
    srv = control(ctl, "S")
    res["server_max"] = srv["max"]
    res["server_accepted"] = srv["accepted"]
    res["late_us"] = srv["late_us"]
    res["gap_us"] = srv["gap_us"]
    res["cycle_us"] = LIMIT * 1e6 / res["per_s"] if res["per_s"] else float("inf")
    res["util"] = res["per_s"] / (LIMIT * 1000.0 / HOLD_MS)
    for k in ("per_s", "util", "wait_max_us", "wait_mean_us", "req_mean_us",
              "req_max_us", "server_max", "errors", "cycle_us", "late_us", "gap_us"):
        record(section, variant, 0, k, res[k])
    return res


# ---------------------------------------------------------------------------
# deterministic cost: callgrind and strace, marginal between two run lengths

FUNC_LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$")


def client_args(mode, port, n, extra):
    """bench_client's command line; port None: a mode without a peer."""
    where = [] if port is None else ["127.0.0.1", str(port)]
    return [CLIENT, mode, *where, str(n), *extra]


def callgrind(tag, mode, port, cfg, n, extra=()):
    out = os.path.join(CG_DIR, f"{tag}.{n}.out")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           *client_args(mode, port, n, extra)]
    run(cmd, env_for(cfg), timeout=600)
    total = None
    with open(out) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                total = int(line.split()[1])
    if total is None:
        raise BenchError(f"no totals in {out}")
    return total


def per_function(path):
    """Self cost per function, from callgrind_annotate."""
    r = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no",
                        path], capture_output=True, text=True, env=BASE_ENV)
    costs, started = {}, False
    for line in r.stdout.splitlines():
        if "file:function" in line:
            started = True
            continue
        if not started:
            continue
        if not line.strip():
            break  # end of the function list; annotated source follows
        m = FUNC_LINE.match(line)
        if m:
            name = m.group(2).strip()
            name = re.sub(r"\s*\[[^\]]*\]$", "", name)  # drop [object]
            name = re.sub(r"^.*/", "", name) if ":" in name else name
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def marginal_functions(tag, base_tag, top=10):
    n1, n2 = CG_N
    def per_op(t):
        a = per_function(os.path.join(CG_DIR, f"{t}.{n1}.out"))
        b = per_function(os.path.join(CG_DIR, f"{t}.{n2}.out"))
        return {k: (b.get(k, 0) - a.get(k, 0)) / (n2 - n1) for k in set(a) | set(b)}
    v, base = per_op(tag), per_op(base_tag)
    diff = {k: v.get(k, 0) - base.get(k, 0) for k in set(v) | set(base)}
    ranked = sorted(diff.items(), key=lambda kv_: -abs(kv_[1]))
    return [(k, d) for k, d in ranked if abs(d) >= 0.5][:top]


def strace_calls(tag, mode, port, cfg, n, extra=()):
    out = os.path.join(ST_DIR, f"{tag}.{n}.txt")
    cmd = ["strace", "-f", "-c", "-o", out]
    if cfg:
        cmd += [f"-E{k}={v}" for k, v in shim_vars(cfg).items()]
    cmd += client_args(mode, port, n, extra)
    run(cmd, BASE_ENV, timeout=600)
    calls, end = {}, None
    with open(out) as f:
        for line in f:
            if "calls" in line and "syscall" in line:
                end = line.index("calls") + len("calls")
                continue
            if end is None or line.startswith("---") or not line.strip():
                continue
            head = line[:end].split()
            if head:
                calls[line.split()[-1]] = int(head[-1])
    return calls


# ---------------------------------------------------------------------------
# the close path's owner check, isolated

def owner_check_lines():
    """(first, last) source lines of owned_here() in shim/fdtable/fd_table.c,
    the getpid() owner check of the close path; None if it is not there."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shim",
                       "fdtable", "fd_table.c")
    try:
        lines = open(src).read().splitlines()
    except OSError:
        return None
    for i, text in enumerate(lines):
        if re.match(r"^static\s+(inline\s+)?int\s+owned_here\s*\(", text):
            for j in range(i + 1, len(lines)):
                if lines[j].startswith("}"):
                    return i + 1, j + 1
    return None


def line_costs(path, file_suffix, first, last):
    """Ir spent at source lines first..last of the file ending in
    file_suffix, wherever they were inlined, with what they call (getpid):
    a reading of callgrind's format, as callgrind_annotate reads it."""
    names, current, line, calls, total = {}, "", 0, False, 0
    with open(path) as f:
        for raw in f:
            m = re.match(r"([cj]?)f[lie]=\((\d+)\)(?: (.*))?", raw.rstrip("\n"))
            if m:  # file names are defined where first used, calls included
                if m.group(3) is not None:
                    names[m.group(2)] = m.group(3)
                if not m.group(1):
                    current = names.get(m.group(2), "")
                continue
            if raw.startswith("calls="):
                calls = True
                continue
            m = re.match(r"^([+-]\d+|\*|\d+)\s+(\d+)", raw)
            if not m:
                continue
            pos = m.group(1)
            line = (line + int(pos) if pos[0] in "+-" else
                    line if pos == "*" else int(pos))
            if current.endswith(file_suffix) and first <= line <= last:
                total += int(m.group(2))
            calls = False
    return total


# ---------------------------------------------------------------------------
# the permit hand-off when a holder ends: how long a dead holder's socket
# stays open after its permit went back

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
        if STOPPING:
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
        out = run([CLIENT, "window", "127.0.0.1", str(watch), str(trials), how, str(ctl)],
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
            if STOPPING:
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


# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# a dead downstream: what deadlines and the breaker save

def start_blackhole(tmp):
    """A listener whose SYNs go unanswered (tests/server/blackhole.py)."""
    ready = os.path.join(tmp, "blackhole.ready")
    p = subprocess.Popen([sys.executable, BLACKHOLE, "--ready", ready,
                          "--lifetime", "900"], env=BASE_ENV)
    STARTED.append(p)
    note("pids", p.pid)
    for _ in range(500):
        if os.path.exists(ready) or p.poll() is not None:
            break
        time.sleep(0.02)
    if not os.path.exists(ready):
        raise BenchError("blackhole.py did not start")
    return int(open(ready).read())


def write_dead_rules(path, namespace, dead_port, deadlines):
    lines = ["[global]", f"namespace = {namespace}", "log = error", "",
             "[dead]", f"limit = {LIMIT}", "wait_ms = 0", f"match = 127.0.0.1:{dead_port}"]
    if deadlines:
        lines += ["connect_timeout_ms = 1000", "breaker_failures = 3",
                  "breaker_open_ms = 2000"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def dead_downstream_run(hold, dead, cfg, seconds, tmp, label):
    """DEAD_WORKERS `bench_client alternate` processes for `seconds`, then
    SIGKILLed; their last lines summed."""
    outs, procs = [], []
    for i in range(DEAD_WORKERS):
        out = open(os.path.join(tmp, f"dead.{label}.{i}"), "w+")
        p = subprocess.Popen([CLIENT, "alternate", "127.0.0.1", str(hold), str(dead)],
                             env=env_for(cfg), stdout=out, stderr=subprocess.DEVNULL)
        with LIVE_LOCK:
            LIVE.add(p)
        outs.append(out)
        procs.append(p)
    time.sleep(seconds)
    for p in procs:
        p.kill()
    totals = {"healthy": 0, "dead_refused": 0, "dead_timed_out": 0}
    for p, out in zip(procs, outs):
        p.wait()
        with LIVE_LOCK:
            LIVE.discard(p)
        out.seek(0)
        lines = [line for line in out.read().splitlines() if line]
        for k, v in (kv(lines[-1]) if lines else {}).items():
            totals[k] += int(v)
        out.close()
    totals["per_s"] = totals["healthy"] / seconds
    for k, v in totals.items():
        record("dead_downstream", label, 0, k, v)
    return totals


def start_slow_server(tmp):
    """A bench_server of its own whose hold port answers in DEAD_HOLD_MS."""
    ready = os.path.join(tmp, "slow.ready")
    p = subprocess.Popen([SERVER, ready, str(DEAD_HOLD_MS), "900"], env=BASE_ENV)
    STARTED.append(p)
    note("pids", p.pid)
    for _ in range(500):
        if os.path.exists(ready) or p.poll() is not None:
            break
        time.sleep(0.02)
    if not os.path.exists(ready):
        raise BenchError("the slow bench_server did not start")
    return int(open(ready).read().split()[2])


def dead_downstream_section(tmp, base, seconds):
    """Returns (report lines, budget checks as (ok, text))."""
    hold = start_slow_server(tmp)
    dead = start_blackhole(tmp)
    cfgs, namespaces = {}, {}
    for label, deadlines in (("limit", False), ("breaker", True)):
        namespaces[label] = new_namespace(base, f"dd{label}")
        cfgs[label] = os.path.join(tmp, f"dead_{label}.ini")
        write_dead_rules(cfgs[label], namespaces[label], dead, deadlines)
        check_rules(cfgs[label])
    res = {"none": dead_downstream_run(hold, dead, None, seconds, tmp, "none")}
    shim = {}
    for label in ("limit", "breaker"):
        res[label] = dead_downstream_run(hold, dead, cfgs[label], seconds, tmp, label)
        # the shim's own counters for the dead compartment (the workers are
        # gone: nothing changes them any more)
        shim[label] = nsstat(namespaces[label]).get("dead", {})
        for k in ("rejected", "breaker_refused", "connect_timeouts", "breaker_opened"):
            record("dead_downstream", label, 0, f"shim_{k}", int(shim[label].get(k, 0)))
    names = {"none": "no shim", "limit": f"limit {LIMIT}, wait_ms 0",
             "breaker": f"limit {LIMIT} + connect_timeout_ms 1000 + breaker (3 failures, 2 s open)"}
    lines = [f"a dead downstream: {DEAD_WORKERS} worker processes, each alternating a "
             f"request to the healthy server (it answers in {DEAD_HOLD_MS} ms) and a connect with no "
             f"deadline of its own to a blackhole; {seconds} s per variant",
             f"{'variant':<68} {'healthy req/s':>13} {'dead: refused':>14} {'timed out':>10}"]
    for label in ("none", "limit", "breaker"):
        r = res[label]
        lines.append(f"{names[label]:<68} {r['per_s']:>13.0f} {r['dead_refused']:>14} "
                     f"{r['dead_timed_out']:>10}")
    lines.append("  the shim's own counters for the dead compartment (connect() calls, "
                 "as the workers count them above):")
    for label in ("limit", "breaker"):
        c = {k: int(shim[label].get(k, 0)) for k in ("rejected", "breaker_refused",
                                                     "connect_timeouts", "breaker_opened")}
        lines.append(f"    {label:<8} refused {c['rejected']} with the compartment full and "
                     f"{c['breaker_refused']} with the breaker open or probing; "
                     f"{c['connect_timeouts']} connects timed out; the breaker opened "
                     f"{c['breaker_opened']} times")
    a, b, c = (res[v]["per_s"] for v in ("none", "limit", "breaker"))
    checks = [(b > a, f"a dead downstream: a plain limit keeps the healthy server served: "
                      f"{b:.0f} req/s against {a:.0f} without the shim"),
              (c > b, f"a dead downstream: deadlines and the breaker serve it better still: "
                      f"{c:.0f} req/s against {b:.0f} with the limit alone")]
    return lines, checks


# ---------------------------------------------------------------------------
# the fleet: three hosts (namespaces) sharing one limit through Redis

FLEET_LIMIT = 8
FLEET_REFRESH_MS = 200
# Each connection held 50 ms (not HOLD_MS): 160 conn/s at best, so that
# what is measured is how much of the fleet limit is in use, not how fast
# a loaded machine passes permits on.
FLEET_HOLD_MS = 50
FLEET_SECONDS = dict(full=8, quick=2)  # the 2:1:0 run: its first refreshes are a small part
FLEET_MOVE_S = 2      # demand on one host alone: capacity moves to it within 500 ms


def start_redis():
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no"], env=BASE_ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    STARTED.append(p)
    note("pids", p.pid)
    for _ in range(500):
        r = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                           text=True, env=BASE_ENV)
        if r.stdout.strip() == "PONG":
            return port
        time.sleep(0.02)
    raise BenchError("redis-server did not start")


def fleet_rules(path, namespace, fleet, host, redis_port, hold):
    lines = ["[global]", f"namespace = {namespace}", "log = error",
             f"fleet = redis://127.0.0.1:{redis_port}", f"fleet_name = {fleet}",
             f"fleet_host = {host}", f"fleet_refresh_ms = {FLEET_REFRESH_MS}",
             f"fleet_lease_ms = {5 * FLEET_REFRESH_MS}", "",
             "[svc]", f"fleet_limit = {FLEET_LIMIT}", "wait_ms = 2000",
             "max_waiters = 1000", f"match = 127.0.0.1:{hold}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def live_limit(cfg):
    out = subprocess.run([os.path.join(BUILD, "bulkhead"), "stat", "--json", "-c", cfg],
                         capture_output=True, text=True, env=BASE_ENV).stdout
    return json.loads(out)["compartments"][0]["limit"]


def redis_evalsha_stats(port):
    info = subprocess.run(["redis-cli", "-p", str(port), "info", "commandstats"],
                          capture_output=True, text=True, env=BASE_ENV).stdout
    for line in info.splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return {k: float(v) for k, v in (kv_.split("=") for kv_ in
                                              line.split(":", 1)[1].split(","))
                    if k in ("calls", "usec", "usec_per_call")}
    return {"calls": 0.0, "usec": 0.0, "usec_per_call": 0.0}


def fleet_section(tmp, base, seconds):
    """Returns (report lines, budget checks as (ok, text))."""
    _, _, hold, ctl, _ = start_bench_server(tmp, "fleet_ready", FLEET_HOLD_MS)
    redis_port = start_redis()
    fleet = new_namespace(base, "fleet")
    cfgs, agents = {}, []
    for host in ("a", "b", "c"):
        cfgs[host] = os.path.join(tmp, f"fleet_{host}.ini")
        fleet_rules(cfgs[host], new_namespace(base, f"fl{host}"), fleet, host,
                    redis_port, hold)
        check_rules(cfgs[host])
        agent = subprocess.Popen([os.path.join(BUILD, "bulkhead-agent"), "-c", cfgs[host]],
                                 env=BASE_ENV, stderr=subprocess.DEVNULL)
        STARTED.append(agent)
        note("pids", agent.pid)
        agents.append(agent)
    time.sleep(3 * FLEET_REFRESH_MS / 1000)  # every agent registered and idle
    # Capacity moving to a host that wants it: demand starts on a alone.
    demand = subprocess.Popen([CLIENT, "contend", "127.0.0.1", str(hold), "procs", "16",
                               str(FLEET_MOVE_S * 1000)], env=env_for(cfgs["a"]),
                              stdout=subprocess.DEVNULL)
    t0, moved_ms = time.monotonic(), None
    while time.monotonic() - t0 < FLEET_MOVE_S and moved_ms is None:
        if live_limit(cfgs["a"]) >= FLEET_LIMIT:  # the idle hosts' headroom too
            moved_ms = (time.monotonic() - t0) * 1000
        time.sleep(0.01)
    demand.wait()
    # Beside it, at the same time and so on a machine as loaded: the same 24
    # processes on one host holding all of the limit, no fleet, against a
    # server of their own. What they move is the best these permits can do
    # here.
    _, _, one_hold, _, _ = start_bench_server(tmp, "fleet_one_ready", FLEET_HOLD_MS)
    one = os.path.join(tmp, "fleet_one.ini")
    with open(one, "w") as f:
        f.write(f"[global]\nnamespace = {new_namespace(base, 'flone')}\nlog = error\n"
                f"[svc]\nlimit = {FLEET_LIMIT}\nwait_ms = 2000\nmax_waiters = 1000\n"
                f"match = 127.0.0.1:{one_hold}\n")
    check_rules(one)
    # Uneven demand, 2:1:0, at once; the hold server counts what arrives.
    control(ctl, "R")
    calls0 = redis_evalsha_stats(redis_port)
    runs = [subprocess.Popen([CLIENT, "contend", "127.0.0.1", str(port), "procs", str(w),
                              str(int(seconds * 1000))], env=env_for(cfg),
                             stdout=subprocess.PIPE, text=True)
            for cfg, port, w in ((cfgs["a"], hold, 16), (cfgs["b"], hold, 8),
                                 (one, one_hold, 24))]
    on_a, on_b, one_per_s = (float(kv(p.communicate()[0])["per_s"]) for p in runs)
    per_s = on_a + on_b
    srv = control(ctl, "S")
    calls1 = redis_evalsha_stats(redis_port)
    for agent in agents:
        agent.terminate()
        agent.wait()
    ideal = FLEET_LIMIT * 1000.0 / FLEET_HOLD_MS
    util = per_s / ideal
    of_one = per_s / one_per_s
    calls_per_host_s = (calls1["calls"] - calls0["calls"]) / seconds / 3
    lua_us = calls1["usec_per_call"]
    for k, v in (("util", util), ("of_one_host", of_one), ("per_s", per_s),
                 ("one_host_per_s", one_per_s), ("server_max", srv["max"]),
                 ("moved_ms", moved_ms or -1), ("calls_per_host_s", calls_per_host_s),
                 ("lua_us", lua_us)):
        record("fleet", "2:1:0", 0, k, v)
    lines = [f"the fleet: 3 hosts (namespaces), fleet_limit {FLEET_LIMIT}, refresh "
             f"{FLEET_REFRESH_MS} ms, a real redis-server on loopback",
             f"  uneven demand 2:1:0 (16, 8, 0 processes, {seconds} s, each connection "
             f"held {FLEET_HOLD_MS} ms): {per_s:.0f} conn/s, {of_one:.3f} of the best "
             f"possible here ({one_per_s:.0f} conn/s: the 24 processes on one host holding "
             f"all {FLEET_LIMIT} permits, no fleet, run beside it); {util:.2f} of "
             f"{ideal:.0f}/s, every permit busy every moment; server max {srv['max']:.0f}",
             f"  capacity to a host that wants it: the busy host reached {FLEET_LIMIT} "
             f"permits {moved_ms:.0f} ms after its demand began" if moved_ms is not None else
             f"  capacity to a host that wants it: not within {FLEET_MOVE_S} s",
             f"  Redis: {calls_per_host_s:.1f} lease calls per host per second, "
             f"{lua_us:.1f} us per Lua call (INFO commandstats)"]
    checks = [(srv["max"] <= FLEET_LIMIT, f"fleet: the server's maximum {srv['max']:.0f} "
               f"under 2:1:0 demand (limit {FLEET_LIMIT}, the fleet limit)"),
              (of_one >= 0.97, f"fleet: 2:1:0 demand moved {of_one:.3f} of what one host "
               f"holding the whole limit moves (limit >= 0.970: the idle host keeps "
               f"nothing the busy ones want)"),
              (moved_ms is not None and moved_ms <= 2 * FLEET_REFRESH_MS + 100,
               f"fleet: idle share moved to a busy host in "
               f"{moved_ms if moved_ms is not None else float('inf'):.0f} ms (limit two "
               f"refreshes, {2 * FLEET_REFRESH_MS} ms, + 100 ms)")]
    return lines, checks


# ---------------------------------------------------------------------------
# deterministic cost of connect+close and of the I/O calls

def io_cost_cases(sink, echo, cfg_m, cfg_u, cfg_up, cfg_md, cfg_mt, cfg_wide):
    """(tag, mode, port, cfg, extra) for callgrind and strace: connect+close
    and every I/O call, bare, unmatched and matched; tags end in the variant,
    and PREFIX_bare is each one's baseline."""
    return [
        ("cc_bare", "connect_close", sink, None, ()),
        ("cc_unmatched", "connect_close", sink, cfg_u, ()),
        ("cc_unmatchedwide", "connect_close", sink, cfg_wide, ()),
        ("cc_matched", "connect_close", sink, cfg_m, ()),
        ("ccport_unmatched", "connect_close", sink, cfg_up, ()),
        ("cc_deadlines", "connect_close", sink, cfg_md, ()),
        ("pp_bare", "pingpong", echo, None, ("send",)),
        ("pp_matched", "pingpong", echo, cfg_m, ("send",)),
        ("pp_unmatched", "pingpong", echo, cfg_u, ("send",)),
        ("ppmsg_bare", "pingpong", echo, None, ("msg",)),
        ("ppmsg_matched", "pingpong", echo, cfg_m, ("msg",)),
        ("ppmsg_unmatched", "pingpong", echo, cfg_u, ("msg",)),
        ("pprw_bare", "pingpong", echo, None, ("rw",)),
        ("pprw_matched", "pingpong", echo, cfg_m, ("rw",)),
        ("pprw_unmatched", "pingpong", echo, cfg_u, ("rw",)),
        ("pp_deadlines", "pingpong", echo, cfg_md, ("send",)),
        ("pprw_deadlines", "pingpong", echo, cfg_md, ("rw",)),
        ("pp_turnaround", "pingpong", echo, cfg_mt, ("send",)),
        ("pprw_turnaround", "pingpong", echo, cfg_mt, ("rw",)),
        # I/O on an fd that carries no connection at all (no peer: the
        # pair's two ends in one process), the shim loaded with rules
        ("sprw_bare", "socketpair", None, None, ("rw",)),
        ("sprw_shim", "socketpair", None, cfg_m, ("rw",)),
        ("spsend_bare", "socketpair", None, None, ("send",)),
        ("spsend_shim", "socketpair", None, cfg_m, ("send",)),
    ]


def deterministic(cases, base, tmp):
    """Every case under callgrind (all) and strace (all but rs_ and ccport)
    at both run lengths, two at a time. Returns per-op instructions
    {tag: Ir}, syscalls {tag: n} and syscalls by name {tag: {name: n}}."""
    # Every run in a namespace of its own, made fresh: runs sharing one
    # (two at a time here, after the timed runs' clients) would find
    # each other's state (the peak, rows of exited clients to reap)
    # and pay for it at start-up in one run length and not the other.
    fresh_n = iter(range(1000))
    def fresh(cfg, tool, n):
        if cfg is None:
            return None
        with open(cfg) as f:
            text = f.read()
        ns = new_namespace(base, f"d{next(fresh_n)}{tool}{n}")
        text, found = re.subn(r"(?m)^namespace = .*$", f"namespace = {ns}", text, count=1)
        if not found:
            raise BenchError(f"{cfg}: no namespace line")
        path = os.path.join(tmp, f"{ns}.ini")
        with open(path, "w") as f:
            f.write(text)
        return path
    ir, sc = {}, {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    try:
        jobs = {}
        for tag, mode, port, cfg, extra in cases:
            for n in CG_N:
                jobs[pool.submit(callgrind, tag, mode, port, fresh(cfg, "i", n),
                                 n, extra)] = ("ir", tag, n)
                if not tag.startswith(("rs_", "ccport")):
                    jobs[pool.submit(strace_calls, tag, mode, port, fresh(cfg, "s", n),
                                     n, extra)] = ("sc", tag, n)
        for fut in concurrent.futures.as_completed(jobs):
            kind, tag, n = jobs[fut]
            (ir if kind == "ir" else sc)[(tag, n)] = fut.result()
    finally:
        # on the way out early, run nothing more: cleanup kills the rest
        pool.shutdown(wait=False, cancel_futures=True)
    d = CG_N[1] - CG_N[0]
    ir_op = {tag: (ir[(tag, CG_N[1])] - ir[(tag, CG_N[0])]) / d for tag, *_ in cases}
    sc_op, sc_detail = {}, {}
    for tag, *_ in cases:
        if (tag, CG_N[0]) not in sc:
            continue
        a, b = sc[(tag, CG_N[0])], sc[(tag, CG_N[1])]
        sc_op[tag] = (b.get("total", 0) - a.get("total", 0)) / d
        sc_detail[tag] = {k: (b.get(k, 0) - a.get(k, 0)) / d
                          for k in set(a) | set(b) if k != "total"}
    for tag in ir_op:
        record("deterministic", tag, 0, "instructions_per_op", f"{ir_op[tag]:.1f}")
    for tag in sc_op:
        record("deterministic", tag, 0, "syscalls_per_op", f"{sc_op[tag]:.3f}")
    return ir_op, sc_op, sc_detail


# A member of a reserve that another member holds whole: python, named
# bench_client through argv[0] so that it is a member too.
MEMBER_HOLDER = """
import socket, sys, time
held = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
open(sys.argv[2], "w").close()
time.sleep(3600)
"""


def member_fallthrough(sink, base, tmp, ir_op, sc_op):
    """The matched connect+close of a member whose reserve is used up, so it
    falls through to the common pool (`reserve = 1 for
    program=bench_client`, its one permit held by another member): per-op
    instructions and syscalls, into ir_op and sc_op as cc_member."""
    ir, sc = {}, {}
    for tool, n in [(tool, n) for tool in ("i", "s") for n in CG_N]:
        ns = new_namespace(base, f"res{tool}{n}")
        cfg = os.path.join(tmp, f"{ns}.ini")
        write_rules(cfg, ns, [f"127.0.0.1:{sink}"])
        with open(cfg, "a") as f:
            f.write("reserve = 1 for program=bench_client\n")
        ready = os.path.join(tmp, f"{ns}.ready")
        holder = subprocess.Popen(["bench_client", "-c", MEMBER_HOLDER, str(sink), ready],
                                  executable=sys.executable, env=env_for(cfg))
        note("pids", holder.pid)
        try:
            for _ in range(500):
                if os.path.exists(ready) or holder.poll() is not None:
                    break
                time.sleep(0.02)
            if not os.path.exists(ready):
                raise BenchError("the reserve's holder did not connect")
            if tool == "i":
                ir[n] = callgrind("cc_member", "connect_close", sink, cfg, n)
            else:
                sc[n] = strace_calls("cc_member", "connect_close", sink, cfg, n)["total"]
        finally:
            holder.kill()
            holder.wait()
    d = CG_N[1] - CG_N[0]
    ir_op["cc_member"] = (ir[CG_N[1]] - ir[CG_N[0]]) / d
    sc_op["cc_member"] = (sc[CG_N[1]] - sc[CG_N[0]]) / d
    record("deterministic", "cc_member", 0, "instructions_per_op", f"{ir_op['cc_member']:.1f}")
    record("deterministic", "cc_member", 0, "syscalls_per_op", f"{sc_op['cc_member']:.3f}")


def cost_lines(ir_op, sc_op, sc_detail):
    """The table of io_cost_cases, and where the extra syscalls go."""
    lines = [f"deterministic cost per operation (marginal between N={CG_N[0]} and "
             f"N={CG_N[1]}; user-space instructions from callgrind, syscalls from strace -c)",
             f"{'operation':<34} {'bare':>10} {'unmatched':>16} {'matched':>16}"]
    def row(title, prefix, per=1):
        for what, m, fmt in (("instr", ir_op, ".1f"), ("syscalls", sc_op, ".2f")):
            b, u, x = (m[f"{prefix}_{v}"] / per for v in ("bare", "unmatched", "matched"))
            lines.append(f"{title + ' ' + what:<34} {b:>10{fmt}} {u:>8{fmt}} "
                         f"({u - b:+6{fmt}}) {x:>8{fmt}} ({x - b:+6{fmt}})")
    row("connect+close", "cc")
    row("send/recv, per call", "pp", 2)
    row("sendmsg/recvmsg, per call", "ppmsg", 2)
    row("write/read, per call", "pprw", 2)
    for title, prefix in (("write/read, socketpair", "sprw"),
                          ("send/recv, socketpair", "spsend")):
        for what, m, fmt, note in (("instr", ir_op, ".1f", "   per call; an fd with no "
                                    "connection, the shim in the unmatched column"),
                                   ("syscalls", sc_op, ".2f", "")):
            b, x = m[f"{prefix}_bare"] / 2, m[f"{prefix}_shim"] / 2
            lines.append(f"{title + ' ' + what:<34} {b:>10{fmt}} {x:>8{fmt}} "
                         f"({x - b:+6{fmt}}){note}")
    lines.append(f"{'connect+close, both deadlines':<34} {'':>10} {'':>16} "
                 f"{ir_op['cc_deadlines']:>8.1f} "
                 f"({ir_op['cc_deadlines'] - ir_op['cc_bare']:+6.1f}) instr, "
                 f"{sc_op['cc_deadlines']:.2f} "
                 f"({sc_op['cc_deadlines'] - sc_op['cc_bare']:+.2f}) syscalls")
    for title, prefix, variant in (("send/recv, both deadlines", "pp", "deadlines"),
                                   ("write/read, both deadlines", "pprw", "deadlines"),
                                   ("send/recv, turnaround = yes", "pp", "turnaround"),
                                   ("write/read, turnaround = yes", "pprw", "turnaround")):
        b = ir_op[f"{prefix}_bare"] / 2
        x, y = ir_op[f"{prefix}_{variant}"] / 2, sc_op[f"{prefix}_{variant}"] / 2
        lines.append(f"{title:<34} {'':>10} {'':>16} {x:>8.1f} ({x - b:+6.1f}) instr, "
                     f"{y:.2f} ({y - sc_op[f'{prefix}_bare'] / 2:+.2f}) syscalls per call")
    u = ir_op["ccport_unmatched"]
    lines.append(f"{'connect+close instr, unmatched':<34} {'':>10} {u:>8.1f} "
                 f"({u - ir_op['cc_bare']:+6.1f})   port in no rule (port-map fast path)")
    w = ir_op["cc_unmatchedwide"]
    lines.append(f"{'connect+close instr, unmatched':<34} {'':>10} {w:>8.1f} "
                 f"({w - ir_op['cc_bare']:+6.1f})   {WIDE_COMPARTMENTS:,} compartments, "
                 f"{WIDE_RULES:,} rules")
    if "cc_member" in ir_op:
        x, y = ir_op["cc_member"], sc_op["cc_member"]
        lines.append(f"{'connect+close, member past reserve':<34} {'':>10} {'':>16} "
                     f"{x:>8.1f} ({x - ir_op['cc_bare']:+6.1f}) instr, {y:.2f} "
                     f"({y - sc_op['cc_bare']:+.2f}) syscalls: its reserve used up, "
                     f"the common pool")
    for tag in ("cc_matched", "cc_unmatched", "ppmsg_matched", "cc_deadlines"):
        base_tag = "cc_bare" if tag.startswith("cc") else "ppmsg_bare"
        extra_sc = {k: v - sc_detail[base_tag].get(k, 0) for k, v in sc_detail[tag].items()}
        extra_sc = {k: v for k, v in extra_sc.items() if abs(v) >= 0.01}
        lines.append(f"  extra syscalls per op, {tag}: " +
                     (", ".join(f"{k} {v:+.2f}" for k, v in sorted(extra_sc.items()))
                      or "none"))
    return lines


def cost_checks(ir_op, sc_op):
    """The budget lines of io_cost_cases but the matched connect+close's
    syscalls (the full run checks those with the owner check)."""
    extra = lambda m, tag, per=1: (m[tag] - m[tag.rsplit("_", 1)[0] + "_bare"]) / per
    checks = []
    x = extra(ir_op, "cc_matched")
    checks.append((x <= 1460, f"matched connect+close instructions: {x:+.0f} (limit +1460: "
                   f"one take of shim/permits, its give-back, the fd table, the outcome)"))
    x = sc_op["cc_deadlines"] - sc_op["cc_matched"]
    checks.append((x <= 2.005, f"matched connect+close with connect_timeout_ms and "
                   f"io_timeout_ms: {x:+.2f} syscalls over the matched path (limit +2: "
                   f"TCP_USER_TIMEOUT before the connect and once established)"))
    x = max(abs(sc_op[f"{p}_deadlines"] - sc_op[f"{p}_bare"]) / 2 for p in ("pp", "pprw"))
    checks.append((x <= 0.005, f"send/recv and write/read on a matched socket with both "
                   f"deadlines: {x:+.3f} syscalls per call (limit +0: the receive "
                   f"deadline is armed once per connection); instructions "
                   f"{(ir_op['pp_deadlines'] - ir_op['pp_bare']) / 2:+.1f} and "
                   f"{(ir_op['pprw_deadlines'] - ir_op['pprw_bare']) / 2:+.1f} (no limit)"))
    x = extra(sc_op, "cc_unmatched")
    checks.append((x <= 0.005, f"unmatched connect+close syscalls: {x:+.2f} (limit +0)"))
    x = extra(ir_op, "cc_unmatched")
    checks.append((x <= 288, f"unmatched connect+close instructions: {x:+.0f} (limit "
                   f"+288); port covered by rules for other addresses"))
    x = ir_op["ccport_unmatched"] - ir_op["cc_bare"]
    checks.append((x <= 288, f"unmatched connect+close instructions: {x:+.0f} (limit "
                   f"+288); port in no rule (port-map fast path)"))
    x, y = extra(ir_op, "cc_unmatchedwide"), extra(sc_op, "cc_unmatchedwide")
    checks.append((x <= 288 and y <= 0.005, f"unmatched connect+close with "
                   f"{WIDE_COMPARTMENTS:,} compartments and {WIDE_RULES:,} rules: {x:+.0f} "
                   f"instructions (limit +288), {y:+.2f} syscalls (limit +0)"))
    if "cc_member" in ir_op:
        x = sc_op["cc_member"] - sc_op["cc_matched"]
        checks.append((x <= 1.005, f"a member past its used-up reserve: {x:+.2f} syscalls "
                       f"over a matched connect+close without reserves (limit +1: the "
                       f"reserve's semop that finds it empty); instructions "
                       f"{ir_op['cc_member'] - ir_op['cc_matched']:+.0f}"))
    # An unmatched connection and a socketpair carry no counted
    # connection; a matched one is counted, here without deadlines.
    io_limits = {"unmatched": 15, "shim": 15, "matched": 40}
    io_cases = [(api, prefix, v, f"{'an' if v == 'unmatched' else 'a'} {v} socket")
                for api, prefix in (("send/recv", "pp"), ("write/read", "pprw"),
                                    ("sendmsg/recvmsg", "ppmsg"))
                for v in ("matched", "unmatched")]
    io_cases += [(api, prefix, "shim", "a socketpair (no connection)")
                 for api, prefix in (("write/read", "sprw"), ("send/recv", "spsend"))]
    for api, prefix, v, what in io_cases:
        x = extra(sc_op, f"{prefix}_{v}", 2)
        checks.append((abs(x) <= 0.005, f"{api} on {what} syscalls per call: "
                       f"{x:+.3f} (limit +0)"))
        x = extra(ir_op, f"{prefix}_{v}", 2)
        checks.append((x <= io_limits[v], f"{api} on {what} instructions per "
                       f"call: {x:+.1f} (limit +{io_limits[v]})"))
    return checks


SECCOMP_N = dict(full=(5000, 11), quick=(1000, 3))  # connect+close per run, rounds


def seccomp_section(tmp, base, sink, cfg_m, cfg_u, quick):
    """A connect+close the seccomp supervisor of `bulkhead run` traps, beside
    the shim's and no cap at all. The static client makes the same calls as
    bench_client (it is bench_client, linked with -static): its connect and
    close reach the supervisor; the dynamic one under --seccomp carries the
    shim, which marks its calls, so the filter lets them through in the
    kernel. Client and supervisor share the client's CPU."""
    n, rounds = SECCOMP_N["quick" if quick else "full"]
    static_client = os.path.join(os.path.dirname(CLIENT), "bench_client_static")
    bulkhead = os.path.join(BUILD, "bulkhead")
    def under_run(cfg, client, *flags):
        return [bulkhead, "run", "-c", cfg, *flags, "--", client]
    variants = [
        ("bare", [CLIENT], None),
        ("shim", [CLIENT], cfg_m),
        ("shim under --seccomp", under_run(cfg_m, CLIENT, "--seccomp"), None),
        ("trapped, unmatched", under_run(cfg_u, static_client), None),
        ("trapped, matched", under_run(cfg_m, static_client), None),
    ]
    values = {label: [] for label, _, _ in variants}
    for r in range(-1, rounds):  # round -1 warms up, untimed
        for label, cmd, cfg in variants:
            out = run(cmd + ["connect_close", "127.0.0.1", str(sink),
                             str(n if r >= 0 else max(200, n // 4))],
                      env_for(cfg), cpus=CLIENT_CPU)
            if r >= 0:
                v = float(kv(out)["ns_per_op"]) / 1000.0
                values[label].append(v)
                record("seccomp", label, r, "us_per_op", f"{v:.3f}")
    bare = median(values["bare"])
    lines = [f"connect+close to loopback, {rounds} rounds x {n}, median us per "
             f"operation (and over bare)"]
    for label, _, _ in variants:
        m = median(values[label])
        lines.append(f"  {label:<24} {m:8.2f} us  {m - bare:+8.2f}")
    checks = [(median(values["trapped, unmatched"]) < median(values["trapped, matched"]),
               "an unmatched trapped connect (CONTINUE at once) costs less than a "
               "matched one (admission, the connect done by the supervisor)")]
    return lines, checks


def only_section(name, cfgp, *, hold, ctl, tmp, base, watch, cfg_w, dd_seconds,
                 fl_seconds, cost_cases, sink, cfg_m, cfg_u):
    """`--only NAME`: that section alone. Returns (report lines, budget
    checks)."""
    if name == "seccomp":
        log("connect+close trapped by bulkhead run's seccomp supervisor")
        return seccomp_section(tmp, base, sink, cfg_m, cfg_u, cfgp is QUICK)
    if name == "fleet":
        log(f"the fleet: 3 hosts, fleet_limit {FLEET_LIMIT}")
        return fleet_section(tmp, base, fl_seconds)
    if name == "adaptive":
        return adaptive.section(sys.modules[__name__], tmp, base, sink, cfgp is QUICK)
    if name == "fleetsim":
        log(f"fleetsim: {', '.join(map(str, fleetsim.SIZES))} simulated hosts, one Redis")
        return fleetsim.section(sys.modules[__name__], cfgp is QUICK)
    if name == "deadlines":
        log(f"a dead downstream: {DEAD_WORKERS} workers, {dd_seconds} s per variant")
        return dead_downstream_section(tmp, base, dd_seconds)
    if name == "cost":
        log(f"callgrind and strace of connect+close and the I/O calls, N = {CG_N[0]} "
            f"and {CG_N[1]}")
        ir_op, sc_op, sc_detail = deterministic(cost_cases, base, tmp)
        member_fallthrough(sink, base, tmp, ir_op, sc_op)
        return cost_lines(ir_op, sc_op, sc_detail), cost_checks(ir_op, sc_op)
    HN = cfgp["handoffs"]
    log(f"permit hand-off when a holder ends: {HN} trials each of SIGKILL, "
        f"exit(), _exit(), on a quiet machine and with every CPU busy")
    return handoff_section(watch, ctl, cfg_w, HN, tmp)


def start_bench_server(tmp, name, hold_ms):
    """A bench_server holding each connection on its hold port hold_ms; its
    ports: sink, echo, hold, control, watch."""
    ready = os.path.join(tmp, name)
    server = subprocess.Popen([SERVER, ready, str(hold_ms), "900"], env=BASE_ENV,
                              preexec_fn=pinned(SERVER_CPU))
    STARTED.append(server)
    note("pids", server.pid)
    for _ in range(200):
        if os.path.exists(ready) or server.poll() is not None:
            break
        time.sleep(0.02)
    if not os.path.exists(ready):
        raise BenchError("bench_server did not start")
    return tuple(map(int, open(ready).read().split()))


def main():
    global RUN_DIR, TSV, SHIM, CLIENT, SERVER, BUILD, CG_DIR, ST_DIR
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default="build")
    ap.add_argument("--summary", help="also write the report to this file")
    ap.add_argument("--quick", action="store_true",
                    help="fewer rounds and iterations (a smoke test, not numbers)")
    ap.add_argument("--only", choices=("handoff", "deadlines", "cost", "fleet", "fleetsim",
                                       "adaptive", "seccomp"),
                    help="run one section alone (its table and budget lines)")
    args = ap.parse_args()
    cfgp = QUICK if args.quick else FULL
    if args.summary:
        sys.stdout = Tee(sys.stdout, open(args.summary, "w"))

    BUILD = os.path.abspath(args.build)
    out_dir = os.path.join(BUILD, "bench")
    SHIM = os.path.join(BUILD, "libbulkhead.so")
    CLIENT = os.path.join(out_dir, "bench_client")
    SERVER = os.path.join(out_dir, "bench_server")
    RUN_DIR = os.path.join(out_dir, "run")
    CG_DIR = os.path.join(out_dir, "callgrind")
    ST_DIR = os.path.join(out_dir, "strace")
    for d in (RUN_DIR, CG_DIR, ST_DIR):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    for f in (SHIM, os.path.join(BUILD, "bulkhead"), CLIENT, SERVER):
        if not os.access(f, os.R_OK):
            raise BenchError(f"{f} is missing: build first (bench/run.sh does)")
    tmp = tempfile.mkdtemp(prefix="bulkhead-bench.")
    note("tmpdir", tmp)
    tsv_path = os.path.join(out_dir, "results.tsv")
    TSV = open(tsv_path, "w")
    TSV.write("section\tvariant\tround\tmetric\tvalue\n")
    t_start = time.monotonic()
    table = Table()
    base = f"bench-{os.getpid()}-{os.urandom(2).hex()}"

    try:
        # ---- the loopback server ------------------------------------------
        sink, echo, hold, ctl, watch = start_bench_server(tmp, "ready", HOLD_MS)
        ours = {sink, echo, hold, ctl, watch}

        # ---- rules files ----------------------------------------------------
        ns_m = new_namespace(base, "m")
        ns_u = new_namespace(base, "u")
        ns_c = new_namespace(base, "c")
        cfg_m = os.path.join(tmp, "matched.ini")
        cfg_u = os.path.join(tmp, "unmatched.ini")
        cfg_c = os.path.join(tmp, "contend.ini")
        write_rules(cfg_m, ns_m, [f"127.0.0.1:{sink}", f"127.0.0.1:{echo}"])
        # Same ports, other addresses: the port map lets them through, so the
        # unmatched path does its hash lookups (the dearer unmatched case).
        write_rules(cfg_u, ns_u, [f"127.0.0.2:{sink}", f"10.0.0.0/8:{echo}",
                                  f"[::2]:{sink}", f"192.168.0.0/16:{sink}"])
        write_rules(cfg_c, ns_c, [f"127.0.0.1:{hold}"])
        # Unmatched on the fast path: no rule has the port at all.
        ns_up = new_namespace(base, "up")
        cfg_up = os.path.join(tmp, "unmatched_port.ini")
        write_rules(cfg_up, ns_up, ["127.0.0.1:9", "10.0.0.0/8:7"])
        # Matched, with both deadlines: what they add to connect+close.
        ns_md = new_namespace(base, "md")
        cfg_md = os.path.join(tmp, "deadlines.ini")
        write_rules(cfg_md, ns_md, [f"127.0.0.1:{sink}", f"127.0.0.1:{echo}"])
        with open(cfg_md, "a") as f:
            f.write("connect_timeout_ms = 2000\nio_timeout_ms = 5000\n")
        # Matched, measuring turnaround: what it adds to each send and receive.
        ns_mt = new_namespace(base, "mt")
        cfg_mt = os.path.join(tmp, "turnaround.ini")
        write_rules(cfg_mt, ns_mt, [f"127.0.0.1:{sink}", f"127.0.0.1:{echo}"])
        with open(cfg_mt, "a") as f:
            f.write("turnaround = yes\n")
        # Hand-offs: one permit on the server's watch port, waiting allowed.
        ns_w = new_namespace(base, "w")
        cfg_w = os.path.join(tmp, "handoff.ini")
        write_window_rules(cfg_w, ns_w, watch)
        scale_cfgs = {}
        for count in RULE_SCALE:
            ns = new_namespace(base, f"r{count}")
            path = os.path.join(tmp, f"rules{count}.ini")
            write_scale_rules(path, ns, count, f"127.0.0.1:{sink}", ours)
            scale_cfgs[count] = (path, ns)
        for path in [cfg_m, cfg_u, cfg_c, cfg_up, cfg_w, cfg_md, cfg_mt] + \
                [p for p, _ in scale_cfgs.values()]:
            check_rules(path)
        shutil.copy(scale_cfgs[10][0], os.path.join(out_dir, "rules10.ini"))
        shutil.copy(scale_cfgs[10000][0], os.path.join(out_dir, "rules10000.ini"))

        R = cfgp["rounds"]

        # Unmatched among 1,024 compartments and 10,000 rules: the rule index keeps it flat.
        ns_wide = new_namespace(base, "wide")
        cfg_wide = os.path.join(tmp, "wide.ini")
        write_wide_rules(cfg_wide, ns_wide, WIDE_RULES, WIDE_COMPARTMENTS, sink, ours)
        check_rules(cfg_wide)
        cost_cases = io_cost_cases(sink, echo, cfg_m, cfg_u, cfg_up, cfg_md, cfg_mt, cfg_wide)
        dd_seconds = DEAD_SECONDS["quick" if args.quick else "full"]
        fl_seconds = FLEET_SECONDS["quick" if args.quick else "full"]
        if args.only:
            lines, checks = only_section(args.only, cfgp, hold=hold, ctl=ctl, tmp=tmp,
                                         base=base, watch=watch, cfg_w=cfg_w,
                                         dd_seconds=dd_seconds, fl_seconds=fl_seconds,
                                         cost_cases=cost_cases, sink=sink,
                                         cfg_m=cfg_m, cfg_u=cfg_u)
            print()
            for line in lines:
                print(line)
            print()
            print("budget")
            for ok, text in checks:
                print(f"{'PASS' if ok else 'MISS'} {text}")
            print()
            print(f"raw numbers: {tsv_path}")
            print(f"total time: {time.monotonic() - t_start:.0f} s")
            return

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
        cc_un = table.compare("connect+close (us)", cc, "bare", "unmatched")
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

        # ---- 6. hand-off when a holder ends -------------------------------------
        HN = cfgp["handoffs"]
        log(f"[6/9] permit hand-off when a holder ends: {HN} trials each of "
            f"SIGKILL, exit(), _exit(), on a quiet machine and with every CPU busy")
        ho_lines, ho_checks = handoff_section(watch, ctl, cfg_w, HN, tmp)

        # ---- 7. a dead downstream -------------------------------------------------
        log(f"[7/9] a dead downstream: {DEAD_WORKERS} workers, {dd_seconds} s per variant")
        dd_lines, dd_checks = dead_downstream_section(tmp, base, dd_seconds)

        # ---- 8. the fleet -----------------------------------------------------------
        log(f"[8/9] the fleet: 3 hosts, fleet_limit {FLEET_LIMIT}")
        fl_lines, fl_checks = fleet_section(tmp, base, fl_seconds)
        log(f"[8b/9] fleetsim: {', '.join(map(str, fleetsim.SIZES))} simulated hosts, "
            f"one Redis")
        fs_lines, fs_checks = fleetsim.section(sys.modules[__name__], args.quick)
        log("[8c/9] adaptive limits against a downstream of known capacity")
        ad_lines, ad_checks = adaptive.section(sys.modules[__name__], tmp, base, sink,
                                               args.quick)

        # ---- 9. deterministic cost ------------------------------------------------
        log(f"[9/9] callgrind and strace, N = {CG_N[0]} and {CG_N[1]}")
        det_cases = cost_cases + [(f"rs_{c}", "connect_close", sink, scale_cfgs[c][0], ())
                                  for c in RULE_SCALE]
        ir_op, sc_op, sc_detail = deterministic(det_cases, base, tmp)
        member_fallthrough(sink, base, tmp, ir_op, sc_op)
        d = CG_N[1] - CG_N[0]
        # The close path's owner check alone: its getpid() syscalls (strace),
        # its instructions (owned_here()'s lines in fd_table.c wherever they
        # were inlined, with the getpid wrapper they call) and the wall clock
        # of one getpid() on this machine (R runs, the median).
        oc_lines = owner_check_lines()
        oc_ir = {}
        if oc_lines:
            for tag in ("cc_bare", "cc_matched", "cc_unmatched", "pp_matched"):
                a, b = (line_costs(os.path.join(CG_DIR, f"{tag}.{n}.out"),
                                   "fdtable/fd_table.c", *oc_lines) for n in CG_N)
                oc_ir[tag] = (b - a) / d
                record("owner_check", tag, 0, "instructions_per_op", f"{oc_ir[tag]:.1f}")
        oc_sc = {tag: sc_detail[tag].get("getpid", 0) for tag in sc_detail}
        for tag, v in oc_sc.items():
            record("owner_check", tag, 0, "getpid_per_op", f"{v:.3f}")
        gp = [float(kv(run([CLIENT, "getpid", "200000"], BASE_ENV,
                           cpus=CLIENT_CPU))["ns_per_op"]) for _ in range(R)]
        for r, v in enumerate(gp):
            record("owner_check", "getpid", r, "ns_per_call", f"{v:.1f}")
        getpid_ns = median(gp)

        # ---- the report --------------------------------------------------------
        print()
        print(f"bulkhead benchmark: {len(CPUS)} cpus, {hp_version}; "
              f"{R} alternating rounds per comparison"
              + (f"; timed clients on cpu {CPUS[0]}, server on cpu {CPUS[-1]}"
                 if CLIENT_CPU else ""))
        print()
        print(f"{'benchmark':<34} {'variant A':<20} {'variant B':<22} median B/A  [min, max]")
        for row in table.rows:
            print(fmt_row(row))
        print()

        ideal = LIMIT * 1000.0 / HOLD_MS
        print(f"contention: limit {LIMIT}, hold {HOLD_MS} ms, wait_ms 2000: ideal "
              f"{ideal:.0f} conn/s; harness ceiling ({LIMIT} bare clients, no queue) "
              f"{ceiling_per_s:.0f} conn/s = {ceiling_per_s / ideal:.2f} of ideal")
        print("  a permit's cycle = hold + server's lateness answering + gap (answer to the "
              "next accept: client wakes, closes, permit passes, next client connects)")
        print(f"{'clients':<14} {'conn/s':>7} {'of ideal':>9} {'of ceiling':>11} "
              f"{'cycle':>9} {'late':>7} {'gap':>7} {'wait mean':>10} {'wait max':>10} "
              f"{'server max':>11} {'errors':>7}")
        rows = [((f"{LIMIT} bare (ceiling)"), c) for c in ceiling] + \
               [(f"{w} {how}", c) for (how, w), c in ctab.items()]
        for label, c in rows:
            print(f"{label:<14} {c['per_s']:>7.0f} {c['util']:>9.2f} "
                  f"{c['per_s'] / ceiling_per_s:>11.2f} {c['cycle_us']:>7.0f}us "
                  f"{c['late_us']:>5.0f}us {c['gap_us']:>5.0f}us "
                  f"{c['wait_mean_us'] / 1000:>8.2f}ms "
                  f"{c['wait_max_us'] / 1000:>8.2f}ms {c['server_max']:>11.0f} "
                  f"{c['errors']:>7.0f}")
        print(f"shim's own counters for the compartment: acquired "
              f"{shim_c.get('acquired', 0):.0f}, waits {shim_c.get('waits', 0):.0f}, "
              f"timed out {shim_c.get('timed_out', 0):.0f}, rejected "
              f"{shim_c.get('rejected', 0):.0f}, peak (hint) {shim_c.get('peak', 0):.0f}")
        print()

        print(f"against haproxy (server maxconn {LIMIT}, queue), same loopback server")
        print(f"  added latency per request over bare (connect + 64 B echo + close, "
              f"median of {R} paired rounds):")
        print(f"    shim    +{median(added_shim):.1f} us   [{min(added_shim):.1f}, {max(added_shim):.1f}]")
        print(f"    haproxy +{median(added_hp):.1f} us   [{min(added_hp):.1f}, {max(added_hp):.1f}]")
        print(f"  32 processes, hold {HOLD_MS} ms, {cfgp['hp_rounds']} alternating rounds:")
        for v in ("shim", "haproxy"):
            runs = hp_load[v]
            print(f"    {v:<8} {median([x['per_s'] for x in runs]):>6.0f} conn/s "
                  f"({median([x['util'] for x in runs]):.2f} of ideal), gap "
                  f"{median([x['gap_us'] for x in runs]):.0f} us, request mean "
                  f"{median([x['req_mean_us'] for x in runs]) / 1000:.2f} ms, max "
                  f"{max(x['req_max_us'] for x in runs) / 1000:.2f} ms, server max "
                  f"{max(x['server_max'] for x in runs):.0f}, errors "
                  f"{sum(x['errors'] for x in runs):.0f}")
        print()

        for line in cost_lines(ir_op, sc_op, sc_detail):
            print(line)
        print(f"{'matched connect+close instr':<34} " + ", ".join(
            f"{c} rules {ir_op[f'rs_{c}']:.0f}" for c in RULE_SCALE))
        print(f"  the close path's owner check (getpid: is this the fd table's owner, "
              f"not a vfork child?): getpid per matched connect+close "
              f"{oc_sc['cc_matched'] - oc_sc['cc_bare']:+.2f}, unmatched "
              f"{oc_sc['cc_unmatched'] - oc_sc['cc_bare']:+.2f}, per send/recv call "
              f"{(oc_sc['pp_matched'] - oc_sc['pp_bare']) / 2:+.3f}, per sendmsg/recvmsg "
              f"call {(oc_sc['ppmsg_matched'] - oc_sc['ppmsg_bare']) / 2:+.3f}")
        if oc_ir:
            print(f"    instructions per matched connect+close {oc_ir['cc_matched']:+.1f} "
                  f"(owned_here, fd_table.c:{oc_lines[0]}-{oc_lines[1]}, with the getpid "
                  f"wrapper), unmatched {oc_ir['cc_unmatched']:+.1f}, per send/recv call "
                  f"{oc_ir['pp_matched'] / 2:+.1f}")
        else:
            print("    instructions: owned_here() not found in shim/fdtable/fd_table.c")
        print(f"    one getpid() here: {getpid_ns:.0f} ns (median of {R} runs of 200,000"
              f" [{min(gp):.0f}, {max(gp):.0f}]) = {getpid_ns / 10 / cc_ma['mb']:.1f}% of "
              f"a matched connect+close ({cc_ma['mb']:.2f} us)")
        for tag, base_tag in (("cc_matched", "cc_bare"), ("cc_unmatched", "cc_bare"),
                              ("ppmsg_matched", "ppmsg_bare"), ("rs_10000", "rs_10")):
            funcs = marginal_functions(tag, base_tag)
            print(f"  where {tag}'s extra instructions go (self Ir per op vs {base_tag}):")
            for name, diff in funcs:
                print(f"    {diff:+8.1f}  {name}")
        print()

        for line in ho_lines:
            print(line)
        print()
        for line in dd_lines + [""] + fl_lines + [""] + fs_lines + [""] + ad_lines:
            print(line)
        print()

        # ---- budget -------------------------------------------------------------
        extra = lambda m, tag, per=1: (m[tag] - m[tag.rsplit("_", 1)[0] + "_bare"]) / per
        x = extra(sc_op, "cc_matched")
        table.check(x <= 3.005, f"matched connect+close syscalls: {x:+.2f} (limit +3: "
                    f"semop take, the close's getpid owner check, semop give back)")
        x = oc_sc["cc_matched"] - oc_sc["cc_bare"]
        y = oc_sc["cc_unmatched"] - oc_sc["cc_bare"]
        z = max(abs(oc_sc[f"{p}_{v}"] - oc_sc[f"{p}_bare"]) / 2
                for p in ("pp", "ppmsg") for v in ("matched", "unmatched"))
        table.check(abs(x - 1) <= 0.005 and abs(y) <= 0.005 and z <= 0.0005,
                    f"close's owner check: getpid {x:+.2f} per matched connect+close "
                    f"(limit 1), {y:+.2f} unmatched, {z:+.3f} per send/recv call (limit 0)"
                    + (f"; {oc_ir['cc_matched']:+.1f} instructions" if oc_ir else "")
                    + f"; {getpid_ns:.0f} ns")
        table.check(cc_ma["r"] <= 1.10, f"matched connect+close wall clock: "
                    f"{cc_ma['r']:.3f}x bare [{cc_ma['rmin']:.3f}, {cc_ma['rmax']:.3f}] (limit 1.10x)")
        for ok, text in cost_checks(ir_op, sc_op):
            table.check(ok, text)
        table.check(rs_big["r"] <= 1.2, f"10,000 rules: matched connect+close "
                    f"{rs_big['r']:.3f}x the 10-rule cost [{rs_big['rmin']:.3f}, "
                    f"{rs_big['rmax']:.3f}] (limit 1.2x); instructions "
                    f"{ir_op['rs_10000']:.0f} vs {ir_op['rs_10']:.0f}")
        worst_start = max(start["10000 rules"], start["10000 rules on port *"])
        table.check(worst_start - start["10 rules"] < 50,
                    f"start-up with 10,000 rules: {worst_start - start['10 rules']:+.2f} ms "
                    f"per process over 10 rules (limit < 50 ms)")
        worst = max(c["server_max"] for c in ctab.values())
        table.check(worst <= LIMIT, f"contention: server's maximum concurrent {worst:.0f} "
                    f"over all {len(ctab)} runs (limit {LIMIT})")
        # 32 processes ran 1 + hp_rounds times with the same load: take the median
        runs32 = [ctab[("procs", 32)]] + hp_load["shim"]
        u32 = median([c["util"] for c in runs32])
        p32 = median([c["per_s"] for c in runs32])
        table.check(u32 >= 0.9, f"contention: utilisation at 32 processes "
                    f"{u32:.3f} of ideal, median of {len(runs32)} runs "
                    f"[{min(c['util'] for c in runs32):.3f}, "
                    f"{max(c['util'] for c in runs32):.3f}] (limit >= 0.900); "
                    f"{p32 / ceiling_per_s:.3f} of this harness's ceiling; "
                    f"32 threads {ctab[('threads', 32)]['util']:.3f}")
        for ok, text in ho_checks + dd_checks + fl_checks + fs_checks + ad_checks:
            table.check(ok, text)
        s, h = median(added_shim), median(added_hp)
        table.check(s < h, f"against haproxy: shim adds {s:.1f} us per request, haproxy "
                    f"{h:.1f} us: {h - s:.1f} us less per request")
        print("budget")
        for line in table.budget:
            print(line)
        print()
        print(f"raw numbers: {tsv_path}")
        print(f"callgrind profiles: {CG_DIR}/  strace summaries: {ST_DIR}/")
        print(f"total time: {time.monotonic() - t_start:.0f} s")
    finally:
        TSV.close()
        cleanup()
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
