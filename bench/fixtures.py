"""What every section measures against: the loopback server (bench_server:
sink, echo, hold, control and watch ports) and the rules files, made once
per run, --only runs included (build/bench/rules10.ini and rules10000.ini
are copies of two of them).
"""

import os
import shutil
import types

import core
import cost
import handoff
from plumbing import (HOLD_MS, check_rules, new_namespace, start_bench_server,
                      write_rules, write_scale_rules, write_wide_rules)


def prepare(tmp, base, out_dir, quick, cfgp):
    """The loopback server and the rules files, as one object the sections
    read: ports sink, echo, hold, ctl, watch; rules files cfg_* (namespaces
    ns_*), scale_cfgs {rules: (path, namespace)}; cost_cases; tmp, base,
    quick and cfgp (rounds and run lengths)."""
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
    handoff.write_window_rules(cfg_w, ns_w, watch)
    scale_cfgs = {}
    for count in core.RULE_SCALE:
        ns = new_namespace(base, f"r{count}")
        path = os.path.join(tmp, f"rules{count}.ini")
        write_scale_rules(path, ns, count, f"127.0.0.1:{sink}", ours)
        scale_cfgs[count] = (path, ns)
    for path in [cfg_m, cfg_u, cfg_c, cfg_up, cfg_w, cfg_md, cfg_mt] + \
            [p for p, _ in scale_cfgs.values()]:
        check_rules(path)
    shutil.copy(scale_cfgs[10][0], os.path.join(out_dir, "rules10.ini"))
    shutil.copy(scale_cfgs[10000][0], os.path.join(out_dir, "rules10000.ini"))
    # Unmatched among 1,024 compartments and 10,000 rules: the rule index keeps it flat.
    ns_wide = new_namespace(base, "wide")
    cfg_wide = os.path.join(tmp, "wide.ini")
    write_wide_rules(cfg_wide, ns_wide, cost.WIDE_RULES, cost.WIDE_COMPARTMENTS, sink, ours)
    check_rules(cfg_wide)
    # Unmatched, the same rules with observe = yes: what recording adds.
    ns_uo = new_namespace(base, "uo")
    cfg_uo = os.path.join(tmp, "unmatched_observe.ini")
    with open(cfg_u) as f:
        text = f.read().replace(f"namespace = {ns_u}", f"namespace = {ns_uo}\nobserve = yes")
    with open(cfg_uo, "w") as f:
        f.write(text)
    check_rules(cfg_uo)
    cost_cases = cost.io_cost_cases(sink, echo, cfg_m, cfg_u, cfg_up, cfg_md, cfg_mt,
                                    cfg_wide, cfg_uo)
    return types.SimpleNamespace(
        tmp=tmp, base=base, quick=quick, cfgp=cfgp,
        sink=sink, echo=echo, hold=hold, ctl=ctl, watch=watch,
        ns_m=ns_m, ns_u=ns_u, ns_c=ns_c, cfg_m=cfg_m, cfg_u=cfg_u, cfg_c=cfg_c,
        cfg_w=cfg_w, scale_cfgs=scale_cfgs, cost_cases=cost_cases)
