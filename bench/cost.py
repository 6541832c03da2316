"""The bench's cost section: the deterministic cost of connect+close and of
every I/O call, bare, unmatched and matched, in user-space instructions
(callgrind) and system calls (strace), as the marginal between two run
lengths. `--only cost` runs it alone; the full run adds the rule scale's
files and the close path's owner check (step 9). See bench/README.

Counted runs see the bench's fixed clock (fixed_clock.c: time advances
with the program's clock reads, never with the machine's speed) and
glibc's baseline string routines (plumbing.PINNED_TUNABLES), so every
count is the code's alone: the same on every machine and every run. The
work that time drives (the window's slot of each second, the histogram's
period of each 8 s) has lines of its own, per second of traffic.
"""

import concurrent.futures
import itertools
import os
import re

import core
import plumbing
import policy
from plumbing import (BASE_ENV, BenchError, CG_N, CLIENT_CPU, callgrind, kv,
                      libc_routines, marginal_functions, median, new_namespace, profile_counts,
                      record, run, strace_calls)

WIDE_COMPARTMENTS, WIDE_RULES = 1024, 10000


def title(setup):
    return (f"callgrind and strace of connect+close and the I/O calls, N = {CG_N[0]} "
            f"and {CG_N[1]}")


def section(setup):
    """`--only cost`: (report lines, budget checks as (ok, text))."""
    ir_op, sc_op, sc_detail = deterministic(setup.cost_cases, setup.base, setup.tmp)
    policy.member_fallthrough(setup.sink, setup.base, setup.tmp, ir_op, sc_op)
    readiness_waiting(ir_op, sc_op)
    return cost_lines(ir_op, sc_op, sc_detail), cost_checks(ir_op, sc_op)


# ---------------------------------------------------------------------------
# the full run's step 9: the same with the rule scale's files and the close
# path's owner check, reported beside the core section's wall clock

def measure(setup):
    """Every case, the rule scale's too, and the owner check."""
    R = setup.cfgp["rounds"]
    det_cases = setup.cost_cases + [(f"rs_{c}", "connect_close", setup.sink,
                                     setup.scale_cfgs[c][0], ()) for c in core.RULE_SCALE]
    ir_op, sc_op, sc_detail = deterministic(det_cases, setup.base, setup.tmp)
    policy.member_fallthrough(setup.sink, setup.base, setup.tmp, ir_op, sc_op)
    readiness_waiting(ir_op, sc_op)
    d = CG_N[1] - CG_N[0]
    # The close path's owner check alone: its getpid() syscalls (strace),
    # its instructions (owned_here()'s lines in fd_table.c wherever they
    # were inlined, with the getpid wrapper they call) and the wall clock
    # of one getpid() on this machine (R runs, the median).
    oc_lines = owner_check_lines()
    oc_ir = {}
    if oc_lines:
        for tag in ("cc_bare", "cc_matched", "cc_unmatched", "pp_matched"):
            a, b = (line_costs(os.path.join(plumbing.CG_DIR, f"{tag}.{n}.out"),
                               "fdtable/fd_table.c", *oc_lines) for n in CG_N)
            oc_ir[tag] = (b - a) / d
            record("owner_check", tag, 0, "instructions_per_op", f"{oc_ir[tag]:.1f}")
    oc_sc = {tag: sc_detail[tag].get("getpid", 0) for tag in sc_detail}
    for tag, v in oc_sc.items():
        record("owner_check", tag, 0, "getpid_per_op", f"{v:.3f}")
    gp = [float(kv(run([plumbing.CLIENT, "getpid", "200000"], BASE_ENV,
                       cpus=CLIENT_CPU))["ns_per_op"]) for _ in range(R)]
    for r, v in enumerate(gp):
        record("owner_check", "getpid", r, "ns_per_call", f"{v:.1f}")
    getpid_ns = median(gp)
    return dict(R=R, ir_op=ir_op, sc_op=sc_op, sc_detail=sc_detail, oc_lines=oc_lines,
                oc_ir=oc_ir, oc_sc=oc_sc, gp=gp, getpid_ns=getpid_ns)


def report(res, cc_ma):
    """The cost table, the owner check and where the instructions go; cc_ma
    is the core section's matched connect+close against bare."""
    R, ir_op, sc_op, sc_detail = res["R"], res["ir_op"], res["sc_op"], res["sc_detail"]
    oc_lines, oc_ir, oc_sc = res["oc_lines"], res["oc_ir"], res["oc_sc"]
    gp, getpid_ns = res["gp"], res["getpid_ns"]
    lines = cost_lines(ir_op, sc_op, sc_detail)
    lines.append(f"{'matched connect+close instr':<34} " + ", ".join(
        f"{c} rules {ir_op[f'rs_{c}']:.0f}" for c in core.RULE_SCALE))
    lines.append(f"  the close path's owner check (getpid: is this the fd table's owner, "
                 f"not a vfork child?): getpid per matched connect+close "
                 f"{oc_sc['cc_matched'] - oc_sc['cc_bare']:+.2f}, unmatched "
                 f"{oc_sc['cc_unmatched'] - oc_sc['cc_bare']:+.2f}, per send/recv call "
                 f"{(oc_sc['pp_matched'] - oc_sc['pp_bare']) / 2:+.3f}, per sendmsg/recvmsg "
                 f"call {(oc_sc['ppmsg_matched'] - oc_sc['ppmsg_bare']) / 2:+.3f}")
    if oc_ir:
        lines.append(f"    instructions per matched connect+close {oc_ir['cc_matched']:+.1f} "
                     f"(owned_here, fd_table.c:{oc_lines[0]}-{oc_lines[1]}, with the getpid "
                     f"wrapper), unmatched {oc_ir['cc_unmatched']:+.1f}, per send/recv call "
                     f"{oc_ir['pp_matched'] / 2:+.1f}")
    else:
        lines.append("    instructions: owned_here() not found in shim/fdtable/fd_table.c")
    lines.append(f"    one getpid() here: {getpid_ns:.0f} ns (median of {R} runs of 200,000"
                 f" [{min(gp):.0f}, {max(gp):.0f}]) = {getpid_ns / 10 / cc_ma['mb']:.1f}% of "
                 f"a matched connect+close ({cc_ma['mb']:.2f} us)")
    for tag, base_tag in (("cc_matched", "cc_bare"), ("cc_unmatched", "cc_bare"),
                          ("ppmsg_matched", "ppmsg_bare"), ("rs_10000", "rs_10")):
        funcs = marginal_functions(tag, base_tag)
        lines.append(f"  where {tag}'s extra instructions go (self Ir per op vs {base_tag}):")
        for name, diff in funcs:
            lines.append(f"    {diff:+8.1f}  {name}")
    return lines


def checks(res, cc_ma):
    """The full run's cost budget lines, the matched connect+close's wall
    clock among them (cc_ma, from the core section)."""
    ir_op, sc_op, oc_ir, oc_sc = res["ir_op"], res["sc_op"], res["oc_ir"], res["oc_sc"]
    getpid_ns = res["getpid_ns"]
    out = []
    extra = lambda m, tag, per=1: (m[tag] - m[tag.rsplit("_", 1)[0] + "_bare"]) / per
    x = extra(sc_op, "cc_matched")
    out.append((x <= 3.005, f"matched connect+close syscalls: {x:+.2f} (limit +3: "
                f"semop take, the close's getpid owner check, semop give back)"))
    x = oc_sc["cc_matched"] - oc_sc["cc_bare"]
    y = oc_sc["cc_unmatched"] - oc_sc["cc_bare"]
    z = max(abs(oc_sc[f"{p}_{v}"] - oc_sc[f"{p}_bare"]) / 2
            for p in ("pp", "ppmsg") for v in ("matched", "unmatched"))
    out.append((abs(x - 1) <= 0.005 and abs(y) <= 0.005 and z <= 0.0005,
                f"close's owner check: getpid {x:+.2f} per matched connect+close "
                f"(limit 1), {y:+.2f} unmatched, {z:+.3f} per send/recv call (limit 0)"
                + (f"; {oc_ir['cc_matched']:+.1f} instructions" if oc_ir else "")
                + f"; {getpid_ns:.0f} ns"))
    out.append((core.verdict(cc_ma["ci"], 1.10), f"matched connect+close wall clock: "
                f"{cc_ma['r']:.3f}x bare, the median's {cc_ma['ci'][2]:.0%} interval "
                f"[{cc_ma['ci'][0]:.3f}, {cc_ma['ci'][1]:.3f}] (limit 1.10x; a verdict once "
                f"the interval is on "
                f"one side of it), load average {os.getloadavg()[0]:.1f}"))
    return out + cost_checks(ir_op, sc_op)


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
    names, current, line, total = {}, "", 0, 0
    with open(path) as f:
        for raw in f:
            m = re.match(r"([cj]?)f[lie]=\((\d+)\)(?: (.*))?", raw.rstrip("\n"))
            if m:  # file names are defined where first used, calls included
                if m.group(3) is not None:
                    names[m.group(2)] = m.group(3)
                if not m.group(1):
                    current = names.get(m.group(2), "")
                continue
            if raw.startswith("calls="):  # the call's own line follows: counted there
                continue
            m = re.match(r"^([+-]\d+|\*|\d+)\s+(\d+)", raw)
            if not m:
                continue
            pos = m.group(1)
            line = (line + int(pos) if pos[0] in "+-" else
                    line if pos == "*" else int(pos))
            if current.endswith(file_suffix) and first <= line <= last:
                total += int(m.group(2))
    return total


# ---------------------------------------------------------------------------
# deterministic cost of connect+close and of the I/O calls

def io_cost_cases(sink, echo, cfg_m, cfg_u, cfg_up, cfg_md, cfg_mt, cfg_wide, cfg_uo):
    """(tag, mode, port, cfg, extra) for callgrind and strace: connect+close
    and every I/O call, bare, unmatched and matched; tags end in the variant,
    and PREFIX_bare is each one's baseline."""
    return [
        ("cc_bare", "connect_close", sink, None, ()),
        ("cc_unmatched", "connect_close", sink, cfg_u, ()),
        ("cc_unmatchedwide", "connect_close", sink, cfg_wide, ()),
        ("cc_unmatchedobserve", "connect_close", sink, cfg_uo, ()),
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
        # the readiness hooks with nothing waiting: poll and epoll_wait,
        # timeout 0, on a writable socketpair end
        ("rpoll_bare", "readiness", None, None, ("poll",)),
        ("rpoll_shim", "readiness", None, cfg_m, ("poll",)),
        ("repoll_bare", "readiness", None, None, ("epoll",)),
        ("repoll_shim", "readiness", None, cfg_m, ("epoll",)),
        # the matched connect+close again, in a namespace of its own: the
        # count must come out the same
        ("ccagain_matched", "connect_close", sink, cfg_m, ()),
        # time-driven work: the fixed clock moved to its next second before
        # every connect (sec), or while every connection is held (cross)
        ("sec_bare", "connect_close", sink, None, ("between",)),
        ("sec_matched", "connect_close", sink, cfg_m, ("between",)),
        ("cross_bare", "connect_close", sink, None, ("inside",)),
        ("cross_matched", "connect_close", sink, cfg_m, ("inside",)),
    ]


# Numbers of the fresh namespaces, one count for the whole run: the
# adaptive section calls deterministic() too, and a name made again would
# join the namespace its first run left (an adaptive compartment, counted
# as the cost section's matched one).
FRESH = itertools.count()

# cases counted by callgrind alone
IR_ONLY = ("rs_", "ccport", "ccagain", "sec_", "cross_")


def profile(tag, n):
    return os.path.join(plumbing.CG_DIR, f"{tag}.{n}.out")


def clock_reads(tag):
    """Clock reads per operation of a counted case: the fixed clock's own
    instructions are left out of the counts (what a read costs is the
    kernel's vDSO and clock source, not the shim), its reads counted here."""
    a, b = (profile_counts(profile(tag, n))[1] for n in CG_N)
    return (b - a) / (CG_N[1] - CG_N[0])


def deterministic(cases, base, tmp):
    """Every case under callgrind (all) and strace (all but IR_ONLY) at both
    run lengths, two at a time. Returns per-op instructions {tag: Ir},
    syscalls {tag: n} and syscalls by name {tag: {name: n}}."""
    # Every run in a namespace of its own, made fresh: runs sharing one
    # (two at a time here, after the timed runs' clients) would find
    # each other's state (the peak, rows of exited clients to reap)
    # and pay for it at start-up in one run length and not the other.
    def fresh(cfg, tool, n):
        if cfg is None:
            return None
        with open(cfg) as f:
            text = f.read()
        ns = new_namespace(base, f"d{next(FRESH)}{tool}{n}")
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
                if not tag.startswith(IR_ONLY):
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
        record("deterministic", tag, 0, "instructions_per_op", f"{ir_op[tag]:.3f}")
        record("deterministic", tag, 0, "clock_reads_per_op", f"{clock_reads(tag):.3f}")
    for tag in sc_op:
        record("deterministic", tag, 0, "syscalls_per_op", f"{sc_op[tag]:.3f}")
    return ir_op, sc_op, sc_detail


# bench/readiness_cost.c's variants: (call, variant); tags w<call>_<variant>
READINESS_WAITING = [("poll", v) for v in ("bare", "idle", "waiting", "hidden")] + \
                    [("epoll", v) for v in ("bare", "idle", "waiting")]


def readiness_waiting(ir_op, sc_op):
    """The readiness layer's cost per call with an fd waiting, which only
    the engine makes in the shim: readiness_cost links the layer and hides
    one itself. Adds w<call>_<variant> to ir_op and sc_op."""
    def one(call, variant, n, tool):
        args = [plumbing.readiness_cost(), str(n), call, variant]
        tag = f"w{call}_{variant}"
        if tool == "ir":
            return plumbing.callgrind_of(tag, n, args, BASE_ENV)
        return plumbing.strace_of(tag, n, args, {}).get("total", 0)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        jobs = {(call, variant, n, tool): pool.submit(one, call, variant, n, tool)
                for call, variant in READINESS_WAITING for n in CG_N for tool in ("ir", "sc")}
        got = {key: job.result() for key, job in jobs.items()}
    d = CG_N[1] - CG_N[0]
    for call, variant in READINESS_WAITING:
        tag = f"w{call}_{variant}"
        for tool, into in (("ir", ir_op), ("sc", sc_op)):
            into[tag] = (got[(call, variant, CG_N[1], tool)] -
                         got[(call, variant, CG_N[0], tool)]) / d
            record("deterministic", tag, 0,
                   "instructions_per_op" if tool == "ir" else "syscalls_per_op",
                   f"{into[tag]:.3f}")


def cost_lines(ir_op, sc_op, sc_detail):
    """The table of io_cost_cases, and where the extra syscalls go."""
    lines = [f"deterministic cost per operation (marginal between N={CG_N[0]} and "
             f"N={CG_N[1]}; user-space instructions from callgrind, syscalls from strace -c)",
             "  counted under the bench's fixed clock (time moves with the program's clock "
             "reads: no second's upkeep in the marginal; the reads are counted apart) and "
             "glibc's baseline string routines (GLIBC_TUNABLES above)",
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
    for title, prefix in (("poll, per call", "rpoll"), ("epoll_wait, per call", "repoll")):
        for what, m, fmt in (("instr", ir_op, ".1f"), ("syscalls", sc_op, ".2f")):
            b, x = m[f"{prefix}_bare"], m[f"{prefix}_shim"]
            lines.append(f"{title + ' ' + what:<34} {b:>10{fmt}} {x:>8{fmt}} "
                         f"({x - b:+6{fmt}})   nothing waiting, the shim in the "
                         f"unmatched column")
    for call in ("poll", "epoll"):
        b = ir_op[f"w{call}_bare"]
        lines.append(f"{call + ' with fds waiting (layer alone)':<34} {b:>10.1f} " + ", ".join(
            f"{v} {ir_op[f'w{call}_{v}']:.1f} ({ir_op[f'w{call}_{v}'] - b:+.1f}) instr "
            f"{sc_op[f'w{call}_{v}']:.2f} syscalls"
            for c, v in READINESS_WAITING if c == call and v != "bare"))
    lines.append("  idle: nothing waits; waiting: another fd waits; hidden: the waiting fd "
                 "is in the poll array too (bench/readiness_cost.c)")
    u = ir_op["ccport_unmatched"]
    lines.append(f"{'connect+close instr, unmatched':<34} {'':>10} {u:>8.1f} "
                 f"({u - ir_op['cc_bare']:+6.1f})   port in no rule (port-map fast path)")
    w = ir_op["cc_unmatchedwide"]
    lines.append(f"{'connect+close instr, unmatched':<34} {'':>10} {w:>8.1f} "
                 f"({w - ir_op['cc_bare']:+6.1f})   {WIDE_COMPARTMENTS:,} compartments, "
                 f"{WIDE_RULES:,} rules")
    x, y = ir_op["cc_unmatchedobserve"], sc_op["cc_unmatchedobserve"]
    lines.append(f"{'connect+close, unmatched, observe':<34} {'':>10} {x:>8.1f} "
                 f"({x - ir_op['cc_bare']:+6.1f}) instr, {y:.2f} "
                 f"({y - sc_op['cc_bare']:+.2f}) syscalls: observe = yes records it "
                 f"({x - ir_op['cc_unmatched']:+.1f} over unmatched)")
    if "cc_member" in ir_op:
        x, y = ir_op["cc_member"], sc_op["cc_member"]
        lines.append(f"{'connect+close, member past reserve':<34} {'':>10} {'':>16} "
                     f"{x:>8.1f} ({x - ir_op['cc_bare']:+6.1f}) instr, {y:.2f} "
                     f"({y - sc_op['cc_bare']:+.2f}) syscalls: its reserve used up, "
                     f"the common pool")
    reads = {tag: clock_reads(tag) for tag in ("cc_unmatched", "cc_matched", "cc_deadlines",
                                               "cc_member", "pp_matched", "pp_deadlines",
                                               "pp_turnaround") if tag in ir_op}
    lines.append("clock reads per op (not in the instructions: a read's cost is the "
                 "kernel's vDSO): connect+close " + ", ".join(
                     f"{t[3:]} {reads[t]:.0f}" for t in reads if t.startswith("cc_")) +
                 "; send/recv per call " + ", ".join(
                     f"{t[3:]} {reads[t] / 2:.1f}" for t in reads if t.startswith("pp_")))
    base = ir_op["cc_matched"] - ir_op["cc_bare"]
    per_second = ir_op["sec_matched"] - ir_op["sec_bare"] - base
    across = ir_op["cross_matched"] - ir_op["cross_bare"] - base
    lines.append(f"window upkeep, per second of a compartment's traffic (once, whatever "
                 f"the rate): {per_second:+.1f} instr (the second's slot claimed and "
                 f"cleared; every 8th second the hold histogram's period, 200 buckets); "
                 f"a connection held across a second's end {across - per_second:+.1f} "
                 f"more (its permit time spread over both)")
    lines.append("  glibc routines in the matched connect+close's profile: " +
                 (" ".join(libc_routines(profile("cc_matched", CG_N[1]))) or "none"))
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
    x, y = (ir_op[t] - ir_op["cc_bare"] for t in ("cc_matched", "ccagain_matched"))
    checks.append((x == y, f"the count repeats: matched connect+close counted twice, in "
                   f"namespaces of their own: {x:+.3f} and {y:+.3f} instructions (limit: "
                   f"the same)"))
    # Work done once in so many operations makes a fraction: a second's
    # upkeep (sec_, cross_: every 8th second a period), turnaround's timed
    # exchange (one in 32). Anywhere else a fraction is work that
    # something other than the operations drives.
    fractions = [tag for tag, v in ir_op.items()
                 if not tag.startswith(("sec_", "cross_")) and not tag.endswith("_turnaround")
                 and v != round(v)]
    checks.append((not fractions, "every operation's count is a whole number of "
                   "instructions (but turnaround's, which times one exchange in 32): " +
                   (", ".join(f"{t} {ir_op[t]:.3f}" for t in fractions) or "all are")))
    x = extra(ir_op, "cc_matched")
    checks.append((x <= 800, f"matched connect+close instructions: {x:+.0f} (limit +800: "
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
    checks.append((x <= 150, f"unmatched connect+close instructions: {x:+.0f} (limit "
                   f"+150); port covered by rules for other addresses"))
    x = ir_op["ccport_unmatched"] - ir_op["cc_bare"]
    checks.append((x <= 125, f"unmatched connect+close instructions: {x:+.0f} (limit "
                   f"+125); port in no rule (port-map fast path)"))
    x, y = extra(ir_op, "cc_unmatchedwide"), extra(sc_op, "cc_unmatchedwide")
    checks.append((x <= 180 and y <= 0.005, f"unmatched connect+close with "
                   f"{WIDE_COMPARTMENTS:,} compartments and {WIDE_RULES:,} rules: {x:+.0f} "
                   f"instructions (limit +180), {y:+.2f} syscalls (limit +0)"))
    if "cc_member" in ir_op:
        x = sc_op["cc_member"] - sc_op["cc_matched"]
        checks.append((x <= 1.005, f"a member past its used-up reserve: {x:+.2f} syscalls "
                       f"over a matched connect+close without reserves (limit +1: the "
                       f"reserve's semop that finds it empty); instructions "
                       f"{ir_op['cc_member'] - ir_op['cc_matched']:+.0f}"))
    for api, prefix in (("poll", "rpoll"), ("epoll_wait", "repoll")):
        x, y = extra(ir_op, f"{prefix}_shim"), extra(sc_op, f"{prefix}_shim")
        checks.append((x <= 5 and abs(y) <= 0.005, f"{api} through the shim, nothing "
                       f"waiting: {x:+.1f} instructions per call (limit +5: the hook's "
                       f"load, branch and jump), {y:+.3f} syscalls (limit +0)"))
    x = max(ir_op[f"w{c}_{v}"] - ir_op[f"w{c}_bare"] for c, v in READINESS_WAITING
            if v != "bare")
    y = max(abs(sc_op[f"w{c}_{v}"] - sc_op[f"w{c}_bare"]) for c, v in READINESS_WAITING)
    checks.append((x <= 400 and y <= 0.005, f"poll and epoll_wait with an fd waiting: "
                   f"at most {x:+.0f} instructions per call (limit +400: the copy, the "
                   f"table's look, the waker), {y:+.3f} syscalls (limit +0)"))
    # An unmatched connection and a socketpair carry no counted
    # connection; a matched one is counted, here without deadlines: the
    # hooks' look at its watch bits (sendmsg and recvmsg look at the
    # message's ancillary data first).
    io_limits = {"unmatched": 14, "shim": 14, "matched": 15}
    io_limits_msg = {"matched": 20}
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
        limit = (io_limits_msg if prefix == "ppmsg" else io_limits).get(v, io_limits[v])
        checks.append((x <= limit, f"{api} on {what} instructions per "
                       f"call: {x:+.1f} (limit +{limit})"))
    return checks
