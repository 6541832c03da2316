"""The bench's plumbing, one for every section: the processes it starts
and stops, the namespaces it names and removes, the raw numbers
(results.tsv), the client's environment (the shim only ever goes there),
rules files, the loopback servers and the profilers (callgrind, strace).

bench.py calls configure() once, then the sections; cleanup() undoes
everything, whatever happened. Pids and keys are also written to
OUT/run/ so that run.sh's trap can finish the job if the bench itself is
killed.
"""

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

LIMIT = 4             # permits of the compartment every load goes through
HOLD_MS = 2           # how long the hold server keeps each connection
CONTEND_MS = 2000     # length of one contention run
CG_N = (2000, 4000)   # callgrind / strace run lengths: marginal = difference

LIVE = set()          # Popen objects running now
LIVE_LOCK = threading.Lock()
STOPPING = False      # set by cleanup: start nothing more
STARTED = []          # long-lived processes (server, haproxy)
NAMESPACES = []       # every namespace name handed to a shim

# Where things are, set once by configure(); read as plumbing.NAME, never
# imported by name (an import would copy the None before configure runs).
BUILD = SHIM = CLIENT = SERVER = FIXED_CLOCK = None
RUN_DIR = CG_DIR = ST_DIR = None
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
    """A namespace no run of this bench has used: one named twice would
    carry the first user's shared state into the second's figures."""
    name = f"{base}-{suffix}"
    if name in NAMESPACES:
        raise BenchError(f"namespace {name} named twice in one run")
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


def wait_ready(p, ready, what, tries=500):
    """The contents of the ready file p writes once it is up (polled every
    20 ms, tries times); BenchError naming what when p dies first or never
    writes it."""
    for _ in range(tries):
        if os.path.exists(ready) or p.poll() is not None:
            break
        time.sleep(0.02)
    if not os.path.exists(ready):
        raise BenchError(f"{what} did not start")
    return open(ready).read()


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
        # the command first: it also removes what observe = yes recorded
        subprocess.run([os.path.join(BUILD, "bulkhead"), "reset", "--force", "-n", name],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=BASE_ENV)
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


def configure(build):
    """Where the build is; makes OUT/run, OUT/callgrind and OUT/strace
    afresh. Returns OUT (build/bench)."""
    global BUILD, SHIM, CLIENT, SERVER, FIXED_CLOCK, RUN_DIR, CG_DIR, ST_DIR
    BUILD = os.path.abspath(build)
    out_dir = os.path.join(BUILD, "bench")
    SHIM = os.path.join(BUILD, "libbulkhead.so")
    FIXED_CLOCK = os.path.join(out_dir, "libfixed_clock.so")
    CLIENT = os.path.join(out_dir, "bench_client")
    SERVER = os.path.join(out_dir, "bench_server")
    RUN_DIR = os.path.join(out_dir, "run")
    CG_DIR = os.path.join(out_dir, "callgrind")
    ST_DIR = os.path.join(out_dir, "strace")
    for d in (RUN_DIR, CG_DIR, ST_DIR):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    for f in (SHIM, os.path.join(BUILD, "bulkhead"), CLIENT, SERVER, FIXED_CLOCK,
              readiness_cost()):
        if not os.access(f, os.R_OK):
            raise BenchError(f"{f} is missing: build first (bench/run.sh does)")
    return out_dir


def readiness_cost():
    """bench/readiness_cost.c's program: the readiness layer with fds waiting."""
    return os.path.join(BUILD, "bench", "readiness_cost")


def open_results(path):
    """results.tsv: every raw number, one per line."""
    global TSV
    TSV = open(path, "w")
    TSV.write("section\tvariant\tround\tmetric\tvalue\n")


def close_results():
    if TSV:
        TSV.close()


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
# servers and measurements every section may use

def start_bench_server(tmp, name, hold_ms):
    """A bench_server holding each connection on its hold port hold_ms; its
    ports: sink, echo, hold, control, watch."""
    ready = os.path.join(tmp, name)
    server = subprocess.Popen([SERVER, ready, str(hold_ms), "900"], env=BASE_ENV,
                              preexec_fn=pinned(SERVER_CPU))
    STARTED.append(server)
    note("pids", server.pid)
    return tuple(map(int, wait_ready(server, ready, "bench_server", tries=200).split()))



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


def live_limit(cfg):
    out = subprocess.run([os.path.join(BUILD, "bulkhead"), "stat", "--json", "-c", cfg],
                         capture_output=True, text=True, env=BASE_ENV).stdout
    return json.loads(out)["compartments"][0]["limit"]


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

# glibc picks its string and memory routines (memcpy, strlen, ...) by the
# CPU's features (ifuncs), and each variant runs its own number of
# instructions: every feature that picks one is switched off, so that
# every x86-64 machine runs the SSE2 baseline under callgrind and strace.
IFUNC_FEATURES = ("AVX", "AVX2", "AVX512F", "AVX512VL", "AVX512BW", "AVX512DQ", "AVX512CD",
                  "ERMS", "FSRM", "SSE3", "SSSE3", "SSE4_1", "SSE4_2", "BMI1", "BMI2",
                  "LZCNT", "MOVBE", "POPCNT", "RTM", "AVX_Fast_Unaligned_Load",
                  "Fast_Unaligned_Load", "Fast_Unaligned_Copy", "Fast_Copy_Backward",
                  "Fast_Rep_String", "Slow_BSF", "Prefer_No_VZEROUPPER", "Prefer_ERMS",
                  "Prefer_FSRM", "Prefer_No_AVX512", "Prefer_PMINUB_for_stringop")
PINNED_TUNABLES = ("glibc.cpu.hwcaps=" + ",".join(f"-{f}" for f in IFUNC_FEATURES)
                   if os.uname().machine == "x86_64" else "")
# The CPU flags behind those choices, as /proc/cpuinfo names them.
IFUNC_FLAGS = ("sse3", "ssse3", "sse4_1", "sse4_2", "popcnt", "movbe", "lzcnt", "bmi1",
               "bmi2", "avx", "avx2", "avx512f", "avx512bw", "avx512vl", "erms", "fsrm", "rtm")


def counted_vars(cfg):
    """The environment a counted run adds: the fixed clock (fixed_clock.c
    says why), the shim when cfg, the pinned string routines."""
    preload = FIXED_CLOCK + (":" + SHIM if cfg else "")
    out = {"LD_PRELOAD": preload}
    if PINNED_TUNABLES:
        out["GLIBC_TUNABLES"] = PINNED_TUNABLES
    if cfg:
        out.update({k: v for k, v in shim_vars(cfg).items() if k != "LD_PRELOAD"})
    return out


def machine_facts():
    """The report's head: what picks the string routines, and the tools."""
    flags, model = set(), "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags" and not flags:
                    flags = set(value.split())
                elif key.strip() == "model name" and model == "?":
                    model = value.strip()
    except OSError:
        pass
    libc = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else "?"
    tool = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout
    have = [f for f in IFUNC_FLAGS if f in flags]
    return [f"machine: {model}, {len(CPUS)} CPUs, kernel {os.uname().release}, {libc}, "
            f"{tool.strip() or 'valgrind ?'}",
            f"  CPU flags that pick glibc's string routines: {' '.join(have) or 'none'}",
            f"  counted runs: GLIBC_TUNABLES={PINNED_TUNABLES or '(not x86-64: unpinned)'}"]


def client_args(mode, port, n, extra):
    """bench_client's command line; port None: a mode without a peer."""
    where = [] if port is None else ["127.0.0.1", str(port)]
    return [CLIENT, mode, *where, str(n), *extra]


def callgrind(tag, mode, port, cfg, n, extra=()):
    """User-space instructions of one counted run inside bench_client's
    timed loop (its measured_* function: start-up, whose pids and figures
    vary, is left out), but the fixed clock's own (clock_reads counts the
    reads)."""
    return callgrind_of(tag, n, client_args(mode, port, n, extra),
                        {**BASE_ENV, **counted_vars(cfg)})


def callgrind_of(tag, n, args, env):
    """callgrind() of any program that times its loop in measured_*."""
    out = os.path.join(CG_DIR, f"{tag}.{n}.out")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           "--toggle-collect=measured_*", *args]
    run(cmd, env, timeout=600)
    total, _, clock_self = profile_counts(out)
    if total is None:
        raise BenchError(f"no totals in {out}")
    if total == 0:
        raise BenchError(f"{out}: nothing counted: {args[0]} {args[1]} must time its "
                         f"loop in a function named measured_*")
    return total - clock_self


def profile_counts(path, clock="clock_gettime"):
    """(total Ir, calls to the clock, the clock's own Ir) of a profile, as
    callgrind_annotate reads its format: fn= names the function the cost
    lines are of, cfn= and calls= a call whose inclusive cost the next
    line gives (the caller's, not counted as the callee's own)."""
    names, fn, callee, after_call = {}, "", "", False
    total, calls, own = None, 0, 0
    with open(path) as f:
        for raw in f:
            m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?", raw)
            if m:
                if m.group(3) is not None:
                    names[m.group(2)] = m.group(3).strip()
                if m.group(1):
                    callee = names.get(m.group(2), "")
                else:
                    fn = names.get(m.group(2), "")
                continue
            if raw.startswith("calls="):
                if callee == clock:
                    calls += int(raw[6:].split()[0])
                after_call = True
                continue
            if raw.startswith("totals:"):
                total = int(raw.split()[1])
            elif raw[:1].isdigit() or raw[:1] in "+-*":
                if fn == clock and not after_call:
                    own += int(raw.split()[-1])
                after_call = False
    return total, calls, own


def libc_routines(path):
    """The glibc string and memory routines a profile ran, by name."""
    with open(path) as f:
        return sorted(set(re.findall(r"fn=\(\d+\) (__(?:mem|str|stp|wcs|raw)\w+)", f.read())))


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
    # the fixed clock's own instructions are in no count (callgrind())
    diff = {k: v.get(k, 0) - base.get(k, 0) for k in set(v) | set(base)
            if not k.startswith("fixed_clock.c:")}
    ranked = sorted(diff.items(), key=lambda kv_: -abs(kv_[1]))
    return [(k, d) for k, d in ranked if abs(d) >= 0.5][:top]


def strace_calls(tag, mode, port, cfg, n, extra=()):
    return strace_of(tag, n, client_args(mode, port, n, extra), counted_vars(cfg))


def strace_of(tag, n, args, variables):
    """strace_calls() of any program, with variables added for it alone."""
    out = os.path.join(ST_DIR, f"{tag}.{n}.txt")
    cmd = ["strace", "-f", "-c", "-o", out]
    cmd += [f"-E{k}={v}" for k, v in variables.items()]
    cmd += args
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
