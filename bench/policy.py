"""The bench's policy section: what policy adds to a matched connect+close,
measured with the cost section's method (callgrind, strace, marginal
between two run lengths): a member of a reserve that another member holds
whole falls through to the common pool. The cost section runs it and
reports it in its table and budget.
"""

import os
import subprocess
import sys

from plumbing import (CG_N, callgrind, env_for, new_namespace, note, record,
                      strace_calls, wait_ready, write_rules)

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
            wait_ready(holder, ready, "the reserve's holder")
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
